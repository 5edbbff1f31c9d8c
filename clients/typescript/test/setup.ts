// The set-up the tests of outpost's stdio servers share (mcp.test.ts,
// acp.test.ts): the binary in OUTPOST_BIN (integration's
// TestServeTypeScriptClient builds it) and a private temporary root with
// a working directory and outpost's own home and XDG directories. It
// exports only functions (node --test given the directory would load it
// as a test file too).
import { after } from "node:test";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface TestRoot {
  bin: string;
  root: string;
  work: string;
  env: Record<string, string>;
}

// testRoot makes the root (prefix names it) and removes it after the
// file's tests, once cleanup (which stops the file's servers) is done.
export function testRoot(prefix: string, cleanup?: () => Promise<void> | void): TestRoot {
  const bin = process.env.OUTPOST_BIN;
  if (!bin) throw new Error("OUTPOST_BIN must name the outpost binary");
  const root = mkdtempSync(join(tmpdir(), prefix));
  const work = join(root, "work");
  mkdirSync(work, { recursive: true });
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    OUTPOST_HOME: join(root, "home"),
    XDG_DATA_HOME: join(root, "data"),
    XDG_CONFIG_HOME: join(root, "config"),
  };
  after(async () => {
    await cleanup?.();
    rmSync(root, { recursive: true, force: true });
  });
  return { bin, root, work, env };
}
