// Tests of `outpost acp` with the official TypeScript SDK's client
// (@agentclientprotocol/sdk): an editor's session over stdio (initialize,
// session/new, prompts and their updates, session/cancel), then the same
// session loaded by a second `outpost acp` process, its history replayed;
// and an agent's permission requests answered by the editor. The binary
// is OUTPOST_BIN (integration's TestServeTypeScriptClient).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";
import { testRoot } from "./setup.js";

const { bin, root, work, env } = testRoot("outpost-acp-ts-");
const store = join(root, "store");

// start runs `outpost acp` with agent and returns its process and the
// SDK's stream over its standard input and output.
function start(agent = "echo"): { proc: ChildProcess; stream: acp.Stream; exited: Promise<number | null> } {
  const proc = spawn(bin, ["--store", store, "acp", "--agent", agent, "--sandbox", "local"], {
    env,
    cwd: work,
    stdio: ["pipe", "pipe", "inherit"],
  });
  const exited = new Promise<number | null>((r) => proc.once("exit", (code) => r(code)));
  const stream = acp.ndJsonStream(Writable.toWeb(proc.stdin!) as WritableStream<Uint8Array>, Readable.toWeb(proc.stdout!) as ReadableStream<Uint8Array>);
  return { proc, stream, exited };
}

// The client records every session/update (waiters are woken on each)
// and every permission request, which it answers with the agent's first
// option of the kind answer names (none: cancelled).
const updates: acp.SessionNotification[] = [];
const asked: acp.RequestPermissionRequest[] = [];
let answer: acp.PermissionOptionKind | undefined;
let wake: (() => void) | undefined;
const app = acp
  .client({ name: "outpost-ts-test" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    updates.push(params);
    wake?.();
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }): acp.RequestPermissionResponse => {
    asked.push(params);
    const o = params.options.find((o) => o.kind === answer);
    return { outcome: o ? { outcome: "selected", optionId: o.optionId } : { outcome: "cancelled" } };
  });

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

// The scripted ACP agent (harness/acp/acptest, in the integration test
// binary OUTPOST_ACP_AGENT) as a preset file: on "run TOOL" it starts a
// shell call and asks permission (allow_once "yes", reject_once "no"),
// then says what came of it.
test("outpost acp with the official TypeScript ACP SDK: the editor refuses one permission and allows another", async () => {
  const program = process.env.OUTPOST_ACP_AGENT;
  if (!program) throw new Error("OUTPOST_ACP_AGENT must name the scripted ACP agent (integration's test binary)");
  const preset = join(root, "acpt.json");
  writeFileSync(preset, JSON.stringify({ name: "acpt", kind: "cli", protocol: "acp", program, env: { OUTPOST_ACP_TEST_AGENT: "1" } }));
  const p = start(preset);
  await app.connectWith(p.stream, async (ctx) => {
    await ctx.request(acp.methods.agent.initialize, initialize);
    const s = await ctx.request(acp.methods.agent.session.new, { cwd: work, mcpServers: [] });
    for (const [kind, said] of [
      ["reject_once", "the tool was refused"],
      ["allow_once", "the tool said tool-ran"],
    ] as const) {
      answer = kind;
      asked.length = 0;
      updates.length = 0;
      const r = await ctx.request(acp.methods.agent.session.prompt, { sessionId: s.sessionId, prompt: [{ type: "text", text: "run TOOL" }] });
      assert.equal(r.stopReason, "end_turn", kind);
      assert.equal(asked.length, 1, kind);
      assert.equal(asked[0].sessionId, s.sessionId);
      assert.equal(asked[0].toolCall.kind, "execute");
      assert.match(agentText(), new RegExp(said), kind);
      const failed = updates.some((n) => n.update.sessionUpdate === "tool_call_update" && n.update.status === "failed");
      assert.equal(failed, kind === "reject_once", `${kind}: the tool call failed: ${failed}`);
    }
  });
  answer = undefined;
  p.proc.stdin!.end();
  assert.equal(await p.exited, 0);
});
