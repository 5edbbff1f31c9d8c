// Tests of the client against a real `outpost serve` started here, from
// the binary in OUTPOST_BIN (integration/typescript_test.go builds it and
// runs `node --test`).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { mkdtempSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as http from "node:http";
import { Outpost, OutpostError, type Diff, type RaceEvent, type RaceProgress, type Result, type Sequenced } from "../src/index.js";

const bin = process.env.OUTPOST_BIN;
if (!bin) throw new Error("OUTPOST_BIN must name the outpost binary");

const root = mkdtempSync(join(tmpdir(), "outpost-ts-"));
const servers: ChildProcess[] = [];

function serve(args: string[]): Promise<string> {
  const work = join(root, "work");
  mkdirSync(work, { recursive: true });
  const child = spawn(bin!, ["serve", "--workdir", work, "--log-format", "text", ...args], {
    env: { ...process.env, XDG_DATA_HOME: join(root, "data"), XDG_CONFIG_HOME: join(root, "config") },
    stdio: ["ignore", "pipe", "pipe"],
  });
  servers.push(child);
  let logs = "";
  child.stderr!.on("data", (b: Buffer) => { logs += b.toString(); });
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (b: Buffer) => {
      out += b.toString();
      const m = /listening on (\S+)/.exec(out);
      if (m) resolve(m[1]);
    });
    child.on("exit", (code) => reject(new Error(`outpost serve exited with ${code}:\n${logs}`)));
  });
}

let client: Outpost;
let socket: string;

before(async () => {
  const sockDir = join(root, "run");
  mkdirSync(sockDir, { mode: 0o700 });
  socket = join(sockDir, "serve.sock");
  const where = await serve(["--socket", socket]);
  assert.equal(where, "unix:" + socket);
  client = new Outpost({ socketPath: socket });
});

after(async () => {
  for (const s of servers) {
    const exited = new Promise((r) => s.once("exit", r));
    s.kill("SIGTERM");
    await exited;
  }
  rmSync(root, { recursive: true, force: true });
});

function contiguous(evs: Sequenced[]) {
  evs.forEach((ev, i) => assert.equal(ev.seq, i + 1, `event ${i + 1} has sequence number ${ev.seq}`));
}

test("health and agents", async () => {
  const h = await client.health();
  assert.equal(h.status, "ok");
  const agents = await client.agents();
  // One list everywhere (`outpost agents`, the API, MCP): every preset has
  // its pinned version; echo is outpost's own binary, installed.
  assert.ok(agents.every((a) => a.version !== "" && a.source === "built-in"), JSON.stringify(agents));
  const echo = agents.find((a) => a.name === "echo");
  assert.ok(echo && echo.installed && echo.kind === "self", JSON.stringify(echo));
  assert.equal(agents.find((a) => a.name === "claude")?.kind, "npm");
});

test("a turn: start, events in order, result", async () => {
  const t = await client.startTurn({ prompt: "hello #tool" });
  assert.match(t.id, /^t[0-9a-f]{24}$/);
  const evs: Sequenced[] = [];
  for await (const ev of client.events(t.id)) evs.push(ev);
  contiguous(evs);
  const types = evs.map((e) => (e.item as { type: string }).type);
  assert.deepEqual(types, ["session", "tool_call", "tool_result", "message", "finished", "result"]);
  const res = evs[evs.length - 1].item as Result;
  assert.equal(res.error, null);
  assert.equal(res.exit_code, 0);
  assert.equal(res.text, "echo: hello #tool (turn 1)");
  const st = await client.turn(t.id);
  assert.equal(st.state, "finished");
  assert.deepEqual(st.result, res);
});

test("events resume from the last sequence number after a dropped connection", async () => {
  const agent = new http.Agent({ keepAlive: false });
  const c = new Outpost({ socketPath: socket, agent });
  const t = await c.startTurn({ prompt: "#slow=30" });
  const evs: Sequenced[] = [];
  let drops = 0;
  for await (const ev of c.events(t.id)) {
    evs.push(ev);
    if (ev.seq % 5 === 0 && (ev.item as { type: string }).type !== "result") {
      // Cut every live connection of the client's agent.
      for (const list of Object.values(agent.sockets)) for (const s of list ?? []) s.destroy();
      drops++;
    }
  }
  assert.ok(drops >= 3, `only ${drops} drops`);
  contiguous(evs);
  assert.equal((evs[evs.length - 1].item as Result).type, "result");
  // The whole stream, read again, is the same.
  const again: Sequenced[] = [];
  for await (const ev of client.events(t.id)) again.push(ev);
  assert.deepEqual(again, evs);
  // And from a given point.
  const tail: Sequenced[] = [];
  for await (const ev of client.events(t.id, { after: evs.length - 2 })) tail.push(ev);
  assert.deepEqual(tail, evs.slice(-2));
});

test("steer a running turn", async () => {
  const t = await client.startTurn({ prompt: "#slow=2000" });
  let steered = false;
  let result: Result | undefined;
  for await (const ev of client.events(t.id)) {
    const item = ev.item as { type: string };
    if (!steered && item.type === "message") {
      await client.steer(t.id, "wrap up");
      steered = true;
    }
    if (item.type === "result") result = ev.item as Result;
  }
  assert.ok(result);
  assert.match(result.text ?? "", /steered: wrap up/);
  await assert.rejects(client.steer(t.id, "too late"), (e: unknown) => e instanceof OutpostError && e.status === 409 && e.code === "refused");
});

test("cancel a running turn", async () => {
  const t = await client.startTurn({ prompt: "#slow=2000" });
  for await (const ev of client.events(t.id)) {
    void ev;
    break; // it runs
  }
  const st = await client.cancel(t.id);
  assert.equal(st.id, t.id);
  const res = await client.result(t.id);
  assert.equal(res.error?.code, "cancelled");
  assert.equal((res.error?.details as Record<string, unknown>).cancelled_by, "client");
});

test("conversations: list, get, usage, resume, delete", async () => {
  const first = await client.run({ prompt: "remember me" });
  const conv = first.conversation;
  assert.ok(conv);
  const seen: string[] = [];
  const second = await client.run({ prompt: "again", resume: conv }, (ev) => seen.push(ev.type));
  assert.equal(second.conversation, conv);
  assert.ok(seen.includes("finished"));
  assert.ok((await client.conversations()).some((c) => c.id === conv));
  const got = await client.conversation(conv.slice(0, 12));
  assert.equal(got.id, conv);
  assert.equal(got.turns, 2);
  const u = await client.usage(conv);
  assert.equal(u.turns, 2);
  assert.ok(u.usage.output_tokens > 0);
  const hist = await client.history(conv);
  assert.equal(hist.source, "history");
  assert.deepEqual(hist.exchanges.map((x) => x.prompt), ["remember me", "again"]);
  assert.equal(hist.exchanges[1].answer, "echo: again (turn 2)");
  const finished = await client.turns({ state: "finished", limit: 1000 });
  const t2 = finished.find((t) => t.result?.text === "echo: again (turn 2)");
  assert.ok(t2 && t2.prompt === "again" && (t2.usage?.output_tokens ?? 0) > 0, JSON.stringify(t2));
  assert.ok(finished.every((t) => t.state === "finished"));
  assert.equal((await client.turns({ limit: 1 })).length, 1);
  await client.deleteConversation(conv);
  await assert.rejects(client.conversation(conv), (e: unknown) => e instanceof OutpostError && e.status === 404 && e.code === "conversation");
});

test("workspaces: a turn in a new workspace with a check, its diff, a race", async () => {
  const first = await client.run({ prompt: "#write=out.txt go", workspace: "new", check: "test -f out.txt" });
  assert.equal(first.error, null);
  assert.equal(first.checkpoint?.turn, 1);
  assert.equal(first.check?.passed, true);
  assert.ok(first.workdir);
  const conv = first.conversation;
  const seen: string[] = [];
  const second = await client.run({ prompt: "#write=two.txt more", resume: conv, workspace: "new" }, (ev) => { if (ev.type === "notice") seen.push(ev.kind ?? ""); });
  assert.equal(second.checkpoint?.turn, 2);
  assert.ok(seen.includes("checkpoint"), `notices ${seen}`);

  const patch = await client.diff(conv);
  assert.match(patch, /\+\+\+ b\/two\.txt/);
  assert.doesNotMatch(patch, /out\.txt/);
  const stat = await client.diff(`${conv}@1`, { format: "stat" });
  assert.match(stat, /out\.txt/);
  assert.match(stat, / 1 file\(s\) changed, 1 insertion/);
  const d: Diff = await client.diff(`${conv}@1`, { to: `${conv}@2`, format: "json" });
  assert.deepEqual(d.files.map((f) => [f.path, f.action]), [["two.txt", "added"]]);
  await assert.rejects(client.diff(`${conv}@9`), (e: unknown) =>
    e instanceof OutpostError && e.status === 404 && e.code === "conversation" && e.details?.checkpoint === "not_found");
  await assert.rejects(client.diff(`${conv}@0`), (e: unknown) => e instanceof OutpostError && e.status === 400 && e.reason === "bad_request");

  const items: (RaceProgress | RaceEvent)[] = [];
  const check = 'test -f out.txt && case "$PWD" in *-race-1-*) exit 0;; *) exit 1;; esac';
  const r = await client.race({ prompt: "#write=out.txt solve it", agents: ["echo"], count: 3, check }, (it) => items.push(it));
  assert.equal(r.race.winner, 1);
  assert.equal(r.race.conversation, r.results[1].conversation);
  assert.deepEqual(r.results.map((l) => [l.contestant, l.check?.passed]), [[0, false], [1, true], [2, false]]);
  for (const i of [0, 1, 2]) {
    const states = items.filter((it) => it.type === "progress" && it.contestant === i).map((it) => (it as RaceProgress).state);
    assert.deepEqual(states, ["started", "finished", "checked"]);
  }
  assert.ok(items.some((it) => it.type === "message"));
  await assert.rejects(client.race({ prompt: "x", agents: ["echo"], count: 17 }), (e: unknown) =>
    e instanceof OutpostError && e.status === 400 && e.code === "configuration" && e.reason === "bad_request");
});

test("errors carry the status, code and reason", async () => {
  await assert.rejects(client.startTurn({ prompt: "x", agent: "nope" }), (e: unknown) =>
    e instanceof OutpostError && e.status === 400 && e.code === "configuration" && e.reason === "bad_request");
  await assert.rejects(client.turn("t000000000000000000000000"), (e: unknown) => e instanceof OutpostError && e.status === 404);
});

test("TCP with a bearer token", async () => {
  const tokens = join(root, "tokens");
  const token = execFileSync(bin, ["serve", "token", "add", "ts-test", "--tokens", tokens], { encoding: "utf8" }).trim();
  assert.match(token, /^opt_/);
  const where = await serve(["--listen", "127.0.0.1:0", "--tokens", tokens]);
  const tcp = new Outpost({ baseUrl: where, token });
  const res = await tcp.run({ prompt: "over tcp" });
  assert.equal(res.error, null);
  // A client token asks only what the client policy allows (403, reason
  // policy), and another token's conversation is not found (404).
  await assert.rejects(tcp.startTurn({ prompt: "x", secrets: "env" }), (e: unknown) =>
    e instanceof OutpostError && e.status === 403 && e.code === "refused" && e.reason === "policy");
  assert.equal((await tcp.conversation(res.conversation)).owner, "token:ts-test");
  const other = execFileSync(bin, ["serve", "token", "add", "ts-other", "--tokens", tokens], { encoding: "utf8" }).trim();
  const bob = new Outpost({ baseUrl: where, token: other });
  await assert.rejects(bob.conversation(res.conversation), (e: unknown) => e instanceof OutpostError && e.status === 404 && e.reason === "not_found");
  assert.ok(!(await bob.conversations()).some((c) => c.id === res.conversation));
  // The console's routes: no limit for this token; the fleet and gc are
  // an operator's (the socket's owner here).
  assert.deepEqual(await tcp.limits(), []);
  for (const call of [() => tcp.fleet(), () => tcp.gc(), () => tcp.runGC()]) {
    await assert.rejects(call(), (e: unknown) => e instanceof OutpostError && e.status === 403 && e.reason === "forbidden");
  }
  assert.deepEqual(await client.fleet(), { fleet: false, replicas: [] });
  const gc = await client.gc();
  assert.ok(gc.pending.dry_run && gc.pending.sandboxes.some((s) => s.sandbox === "local") && gc.last === undefined, JSON.stringify(gc));
  const bad = new Outpost({ baseUrl: where, token: "opt_wrong" });
  await assert.rejects(bad.agents(), (e: unknown) => e instanceof OutpostError && e.status === 401 && e.reason === "unauthorized");
  const none = new Outpost({ baseUrl: where });
  await assert.rejects(none.startTurn({ prompt: "x" }), (e: unknown) => e instanceof OutpostError && e.status === 401);
});

test("startTurn sends the caller's traceparent when it has one", async () => {
  const seen: (string | undefined)[] = [];
  const srv = http.createServer((req, res) => {
    seen.push(req.headers["traceparent"] as string | undefined);
    res.writeHead(202, { "Content-Type": "application/json" });
    res.end(JSON.stringify({ id: "t1", state: "queued", agent: "echo", sandbox: "local", created: new Date().toISOString() }));
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const base = `http://127.0.0.1:${(srv.address() as { port: number }).port}`;
  try {
    const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    await new Outpost({ baseUrl: base, traceparent: () => tp }).startTurn({ prompt: "x" });
    await new Outpost({ baseUrl: base, traceparent: () => undefined }).startTurn({ prompt: "x" });
    await new Outpost({ baseUrl: base }).startTurn({ prompt: "x" });
    assert.deepEqual(seen, [tp, undefined, undefined]);
  } finally {
    srv.close();
  }
});
