// Tests of `outpost acp` with the official TypeScript SDK's client
// (@agentclientprotocol/sdk): an editor's session over stdio (initialize,
// session/new, prompts and their updates, session/cancel), then the same
// session loaded by a second `outpost acp` process, its history replayed.
// The binary is OUTPOST_BIN (integration's TestServeTypeScriptClient).
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const bin = process.env.OUTPOST_BIN;
if (!bin) throw new Error("OUTPOST_BIN must name the outpost binary");

const root = mkdtempSync(join(tmpdir(), "outpost-acp-ts-"));
const work = join(root, "work");
mkdirSync(work, { recursive: true });
const env: Record<string, string> = {
  PATH: process.env.PATH ?? "/usr/bin:/bin",
  OUTPOST_HOME: join(root, "home"),
  XDG_DATA_HOME: join(root, "data"),
  XDG_CONFIG_HOME: join(root, "config"),
};
const store = join(root, "store");

after(() => rmSync(root, { recursive: true, force: true }));

// start runs `outpost acp` and returns its process and the SDK's stream
// over its standard input and output.
function start(): { proc: ChildProcess; stream: acp.Stream; exited: Promise<number | null> } {
  const proc = spawn(bin!, ["--store", store, "acp", "--agent", "echo", "--sandbox", "local"], {
    env,
    cwd: work,
    stdio: ["pipe", "pipe", "inherit"],
  });
  const exited = new Promise<number | null>((r) => proc.once("exit", (code) => r(code)));
  const stream = acp.ndJsonStream(Writable.toWeb(proc.stdin!) as WritableStream<Uint8Array>, Readable.toWeb(proc.stdout!) as ReadableStream<Uint8Array>);
  return { proc, stream, exited };
}

// The client records every session/update; waiters are woken on each.
const updates: acp.SessionNotification[] = [];
let wake: (() => void) | undefined;
const app = acp
  .client({ name: "outpost-ts-test" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    updates.push(params);
    wake?.();
  })
  .onRequest(acp.methods.client.session.requestPermission, () => ({ outcome: { outcome: "cancelled" as const } }));

async function until(ok: (u: acp.SessionUpdate) => boolean) {
  while (!updates.some((n) => ok(n.update))) {
    await new Promise<void>((r) => {
      wake = r;
    });
  }
}

function agentText(): string {
  return updates.map((n) => (n.update.sessionUpdate === "agent_message_chunk" && n.update.content.type === "text" ? n.update.content.text : "")).join("");
}

function userText(): string {
  return updates.map((n) => (n.update.sessionUpdate === "user_message_chunk" && n.update.content.type === "text" ? n.update.content.text + "\n" : "")).join("");
}

const initialize: acp.InitializeRequest = { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} };

test("outpost acp with the official TypeScript ACP SDK: prompt, cancel, load in a new process", async () => {
  const first = start();
  const sessionId = await app.connectWith(first.stream, async (ctx) => {
    const init = await ctx.request(acp.methods.agent.initialize, initialize);
    assert.equal(init.agentCapabilities?.loadSession, true);
    assert.equal(init.agentInfo?.name, "outpost");
    const s = await ctx.request(acp.methods.agent.session.new, { cwd: work, mcpServers: [] });

    const r = await ctx.request(acp.methods.agent.session.prompt, { sessionId: s.sessionId, prompt: [{ type: "text", text: "hello from typescript #tool" }] });
    assert.equal(r.stopReason, "end_turn");
    assert.match(agentText(), /echo: hello from typescript #tool \(turn 1\)/);
    const kinds = updates.map((n) => n.update.sessionUpdate);
    for (const k of ["tool_call", "tool_call_update", "usage_update"]) assert.ok(kinds.includes(k as never), `no ${k} in ${kinds}`);

    // A long turn, cancelled once its first chunk arrived.
    updates.length = 0;
    const slow = ctx.request(acp.methods.agent.session.prompt, { sessionId: s.sessionId, prompt: [{ type: "text", text: "#slow=1000" }] });
    await until((u) => u.sessionUpdate === "agent_message_chunk");
    await ctx.notify(acp.methods.agent.session.cancel, { sessionId: s.sessionId });
    assert.equal((await slow).stopReason, "cancelled");

    // An unknown session: a JSON-RPC error with outpost's code in data.
    await assert.rejects(
      ctx.request(acp.methods.agent.session.prompt, { sessionId: "cnosuchsession", prompt: [{ type: "text", text: "hi" }] }),
      (e: acp.RequestError) => e.code === -32002 && (e.data as { code?: string }).code === "conversation",
    );
    return s.sessionId;
  });
  first.proc.stdin!.end();
  assert.equal(await first.exited, 0);

  updates.length = 0;
  const second = start();
  await app.connectWith(second.stream, async (ctx) => {
    await ctx.request(acp.methods.agent.initialize, initialize);
    await ctx.request(acp.methods.agent.session.load, { sessionId, cwd: work, mcpServers: [] });
    assert.equal(userText(), "hello from typescript #tool\n#slow=1000\n");
    assert.match(agentText(), /\(turn 1\)/);
    updates.length = 0;
    const r = await ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "after load" }] });
    assert.equal(r.stopReason, "end_turn");
    assert.match(agentText(), /echo: after load \(turn 3\)/);
  });
  second.proc.stdin!.end();
  assert.equal(await second.exited, 0);
});
