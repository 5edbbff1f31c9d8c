// Tests of outpost's MCP server with the official TypeScript SDK's
// client (@modelcontextprotocol/sdk): `outpost mcp` over stdio, and
// /mcp of `outpost serve` over streamable HTTP with a bearer token. The
// binary is OUTPOST_BIN (integration's TestServeTypeScriptClient).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import { testRoot } from "./setup.js";

const servers: ChildProcess[] = [];
const { bin, root, work, env } = testRoot("outpost-mcp-ts-", async () => {
  for (const s of servers) {
    const exited = new Promise((r) => s.once("exit", r));
    s.kill("SIGTERM");
    await exited;
  }
});

async function connect(transport: Transport): Promise<Client> {
  const client = new Client({ name: "outpost-ts-test", version: "0.0.0" });
  await client.connect(transport);
  return client;
}

type Event = { type: string };

// runTurn calls run_turn and collects the events progress carried.
async function runTurn(client: Client, args: Record<string, unknown>, signal?: AbortSignal, onEvent?: (e: Event) => void) {
  const events: Event[] = [];
  const res = await client.callTool({ name: "run_turn", arguments: args }, undefined, {
    signal,
    onprogress: (p) => {
      const e = JSON.parse(p.message ?? "{}") as Event;
      events.push(e);
      onEvent?.(e);
    },
  });
  return { res, events, sc: res.structuredContent as Record<string, any> };
}

function text(res: Awaited<ReturnType<Client["callTool"]>>): string {
  return (res.content as { type: string; text?: string }[]).map((c) => c.text ?? "").join("");
}

async function exercise(client: Client, cancelled?: () => Promise<void>) {
  const tools = await client.listTools();
  assert.deepEqual(tools.tools.map((t) => t.name).sort(), ["diff", "get_conversation", "list_agents", "list_conversations", "race", "run_turn"]);

  const { res, events, sc } = await runTurn(client, { prompt: "hello from typescript #tool", agent: "echo" });
  assert.equal(res.isError, undefined);
  assert.match(text(res), /echo: hello from typescript #tool \(turn 1\)/);
  // The SDK's client handles a notification in a later microtask but a
  // response at once, and drops a progress notification whose call has
  // already been answered: the notifications that arrive in the same read
  // as the answer are lost, the last ones first ("finished" most often;
  // under load all but "session", CI run 43). The server sends them all
  // (server/mcp_test.go checks the whole sequence with the Go SDK); here
  // what arrived must be the sequence's beginning, in order. The answer
  // carries the outcome.
  const types = [...new Set(events.map((e) => e.type))];
  const sequence = ["session", "tool_call", "tool_result", "message", "finished"];
  assert.ok(types.length > 0, "no progress notification arrived");
  assert.deepEqual(types, sequence.slice(0, types.length));
  assert.match(sc.conversation, /^c/);

  const schema = { type: "object", properties: { n: { type: "integer" } }, required: ["n"] };
  const structured = await runTurn(client, { prompt: 'count #json={"n":4}', schema, resume: sc.conversation });
  assert.deepEqual(structured.sc.output, { n: 4 });
  assert.equal(structured.sc.conversation, sc.conversation);

  const conv = await client.callTool({ name: "get_conversation", arguments: { id: sc.conversation } });
  assert.equal((conv.structuredContent as any).turns, 2);

  const refused = await runTurn(client, { prompt: "x", agent: "nope" });
  assert.equal(refused.res.isError, true);
  assert.equal(refused.sc.error.code, "configuration");

  // Cancelling the call cancels the turn: the server then runs the next.
  const abort = new AbortController();
  await assert.rejects(runTurn(client, { prompt: "#slow=100000" }, abort.signal, (e) => { if (e.type === "message") abort.abort(); }));
  await cancelled?.();
  const next = await runTurn(client, { prompt: "after the cancel" });
  assert.match(text(next.res), /after the cancel/);
}

test("stdio: outpost mcp", async () => {
  const client = await connect(new StdioClientTransport({ command: bin, args: ["mcp", "--workdir", work, "--log-format", "text"], env, stderr: "ignore" }));
  try {
    await exercise(client);
  } finally {
    await client.close();
  }
});

test("streamable HTTP: /mcp of outpost serve, with a bearer token", async () => {
  const tokens = join(root, "tokens");
  const token = execFileSync(bin, ["serve", "token", "add", "mcp-ts", "--tokens", tokens], { encoding: "utf8", env }).trim();
  const child = spawn(bin, ["serve", "--workdir", work, "--log-format", "text", "--listen", "127.0.0.1:0", "--tokens", tokens], { env, stdio: ["ignore", "pipe", "ignore"] });
  servers.push(child);
  const where = await new Promise<string>((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (b: Buffer) => {
      out += b.toString();
      const m = /listening on (\S+)/.exec(out);
      if (m) resolve(m[1]);
    });
    child.on("exit", (code) => reject(new Error(`outpost serve exited with ${code}`)));
  });
  await assert.rejects(connect(new StreamableHTTPClientTransport(new URL(where + "/mcp"))), /401|nauthorized/);
  const headers = { Authorization: "Bearer " + token };
  const client = await connect(new StreamableHTTPClientTransport(new URL(where + "/mcp"), { requestInit: { headers } }));
  // The server counts the cancelled turn once it has ended (its sandbox
  // destroyed): wait for it.
  const cancelled = async () => {
    for (let i = 0; i < 600; i++) {
      const metrics = await (await fetch(where + "/metrics", { headers })).text();
      if (metrics.includes('outpost_turns_total{agent="echo",code="cancelled",sandbox="local"} 1') && metrics.includes("outpost_turns_running 0")) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.fail("the cancelled call's turn did not end cancelled");
  };
  try {
    await exercise(client, cancelled);
  } finally {
    await client.close();
  }
});
