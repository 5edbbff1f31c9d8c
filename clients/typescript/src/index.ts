// A client of the outpost serve HTTP API (docs/serve.md). Its types are
// generated from the server's OpenAPI document (src/schema.d.ts, made by
// `npm run generate`), so they are the server's.
import * as http from "node:http";
import * as https from "node:https";
import type { components } from "./schema.js";

type Schemas = components["schemas"];
export type TurnRequest = Schemas["TurnRequest"];
export type TurnStatus = Schemas["TurnStatus"];
export type Event = Schemas["Event"];
export type Result = Schemas["Result"];
export type StreamItem = Schemas["StreamItem"];
export type Usage = Schemas["Usage"];
export type Conversation = Schemas["Conversation"];
export type ConversationUsage = Schemas["ConversationUsage"];
export type Agent = Schemas["Agent"];
export type Health = Schemas["Health"];
export type ErrorBody = Schemas["Error"];
export type Checkpoint = Schemas["Checkpoint"];
export type CheckResult = Schemas["CheckResult"];
export type Diff = Schemas["Diff"];
export type DiffFile = Schemas["DiffFile"];
export type RaceRequest = Schemas["RaceRequest"];
export type RaceItem = Schemas["RaceItem"];
export type RaceProgress = Schemas["RaceProgress"];
export type RaceEvent = Schemas["RaceEvent"];
export type RaceResultLine = Schemas["RaceResultLine"];
export type RaceLine = Schemas["RaceLine"];
export type RaceResponse = Schemas["RaceResponse"];
export type Contestant = Schemas["Contestant"];
export type History = Schemas["History"];
export type Exchange = Schemas["Exchange"];
export type TokenLimit = Schemas["TokenLimit"];
export type LimitWindow = Schemas["LimitWindow"];
export type Fleet = Schemas["Fleet"];
export type FleetReplica = Schemas["FleetReplica"];
export type GC = Schemas["GC"];
export type GCRun = Schemas["GCRun"];
export type TurnState = "queued" | "running" | "finished";

/** A diff's format: a unified diff, a line a file, or the files as JSON. */
export type DiffFormat = "patch" | "stat" | "json";

/** An item of a race's stream with its sequence number (from 1). */
export interface RaceSequenced {
  seq: number;
  item: RaceItem;
}

/** An event of a turn's stream with its sequence number (from 1). */
export interface Sequenced {
  seq: number;
  item: StreamItem;
}

/** How to reach the server: a Unix socket, or a URL with a token. */
export interface ClientOptions {
  /** Unix socket of `outpost serve` (its default listener). */
  socketPath?: string;
  /** Base URL of a TCP listener, e.g. http://127.0.0.1:7070. */
  baseUrl?: string;
  /** Bearer token (`outpost serve token add NAME`), for TCP. */
  token?: string;
  /** An http.Agent of the caller's (keep-alive, limits). */
  agent?: http.Agent;
  /** Reconnection of event streams: attempts without progress (default 10). */
  maxReconnects?: number;
  /**
   * The caller's W3C trace context, when it has one: startTurn and run send
   * it as the traceparent header, and the server runs the turn in that trace
   * (e.g. with @opentelemetry/api, the traceparent that
   * propagation.inject writes for the active context).
   */
  traceparent?: () => string | undefined;
}

/** An error the API returned: its HTTP status and outpost error. */
export class OutpostError extends Error {
  readonly status: number;
  readonly code: ErrorBody["code"] | "transport";
  readonly reason?: string;
  readonly details?: Record<string, unknown>;
  readonly retryAfter?: number;

  constructor(status: number, body: ErrorBody | undefined, message: string, retryAfter?: number) {
    super(body ? `${body.code}: ${body.message}` : message);
    this.name = "OutpostError";
    this.status = status;
    this.code = body?.code ?? "transport";
    this.details = body?.details as Record<string, unknown> | undefined;
    this.reason = typeof this.details?.reason === "string" ? (this.details.reason as string) : undefined;
    this.retryAfter = retryAfter;
  }
}

interface Response {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
  });

/** The outpost serve API. */
export class Outpost {
  private readonly opts: ClientOptions;
  private readonly url: URL;

  constructor(opts: ClientOptions) {
    if (!opts.socketPath && !opts.baseUrl) throw new Error("outpost: socketPath or baseUrl is required");
    this.opts = opts;
    this.url = new URL(opts.baseUrl ?? "http://outpost");
  }

  private request(method: string, path: string, body?: unknown, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<http.IncomingMessage> {
    const data = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const h: Record<string, string> = { Accept: "application/json", ...headers };
    if (data) {
      h["Content-Type"] = "application/json";
      h["Content-Length"] = String(data.length);
    }
    if (this.opts.token) h["Authorization"] = `Bearer ${this.opts.token}`;
    const mod = this.url.protocol === "https:" ? https : http;
    return new Promise((resolve, reject) => {
      const req = mod.request({
        method,
        path,
        headers: h,
        agent: this.opts.agent,
        signal,
        ...(this.opts.socketPath
          ? { socketPath: this.opts.socketPath, host: "outpost" }
          : { host: this.url.hostname, port: this.url.port }),
      }, resolve);
      req.on("error", reject);
      req.end(data);
    });
  }

  private async call<T>(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<T> {
    const res = await this.request(method, path, body, headers);
    const r = await collect(res);
    if (r.status >= 400) throw toError(r);
    return (r.body === "" ? undefined : JSON.parse(r.body)) as T;
  }

  private async text(path: string, accept: string): Promise<string> {
    const r = await collect(await this.request("GET", path, undefined, { Accept: accept }));
    if (r.status >= 400) throw toError(r);
    return r.body;
  }

  /** Start a turn; resolves at once with its id and state. */
  startTurn(req: TurnRequest): Promise<TurnStatus> {
    const tp = this.opts.traceparent?.();
    return this.call("POST", "/v1/turns", req, tp ? { traceparent: tp } : {});
  }

  /** A turn's state, and its result once finished. */
  turn(id: string): Promise<TurnStatus> {
    return this.call("GET", `/v1/turns/${encodeURIComponent(id)}`);
  }

  /**
   * This replica's turns the caller sees (an operator: all), newest
   * first: queued, running, and finished ones still retained. A running
   * turn reports its replica, model and tokens so far.
   */
  async turns(opts: { state?: TurnState; limit?: number } = {}): Promise<TurnStatus[]> {
    const q = new URLSearchParams();
    if (opts.state) q.set("state", opts.state);
    if (opts.limit !== undefined) q.set("limit", String(opts.limit));
    const r = await this.call<Schemas["TurnList"]>("GET", `/v1/turns${q.size ? "?" + q : ""}`);
    return r.turns;
  }

  /** Send a message to a running turn. */
  async steer(id: string, text: string): Promise<void> {
    await this.call("POST", `/v1/turns/${encodeURIComponent(id)}/messages`, { text });
  }

  /** Cancel a turn; its result gets code cancelled. */
  cancel(id: string): Promise<TurnStatus> {
    return this.call("POST", `/v1/turns/${encodeURIComponent(id)}/cancel`);
  }

  /**
   * A turn's events, the result line last. A dropped connection is
   * resumed from the last sequence number received (Last-Event-ID), so
   * nothing is lost or repeated. `after` starts after that number.
   */
  async *events(id: string, opts: { after?: number; signal?: AbortSignal } = {}): AsyncGenerator<Sequenced> {
    let last = opts.after ?? 0;
    let failures = 0;
    const max = this.opts.maxReconnects ?? 10;
    for (;;) {
      let progressed = false;
      try {
        const headers: Record<string, string> = { Accept: "text/event-stream" };
        if (last > 0) headers["Last-Event-ID"] = String(last);
        const res = await this.request("GET", `/v1/turns/${encodeURIComponent(id)}/events`, undefined, headers, opts.signal);
        if (res.statusCode !== 200) throw toError(await collect(res));
        for await (const ev of parseSSE(res)) {
          if (ev.seq <= last) continue;
          last = ev.seq;
          progressed = true;
          failures = 0;
          yield ev;
          if ((ev.item as { type?: string }).type === "result") {
            res.destroy();
            return;
          }
        }
      } catch (err) {
        if (opts.signal?.aborted) return;
        if (err instanceof OutpostError && err.status !== 503) throw err;
      }
      if (opts.signal?.aborted) return;
      if (!progressed && ++failures > max) {
        throw new OutpostError(0, undefined, `outpost: the event stream of ${id} dropped ${failures} times without progress`);
      }
      await sleep(Math.min(100 * 2 ** failures, 2000), opts.signal);
    }
  }

  /** Follow a turn to its result line. */
  async result(id: string, opts: { signal?: AbortSignal } = {}): Promise<Result> {
    for await (const ev of this.events(id, opts)) {
      if ((ev.item as { type?: string }).type === "result") return ev.item as Result;
    }
    throw new OutpostError(0, undefined, `outpost: the stream of ${id} ended without a result`);
  }

  /** Run a turn to its end: start it, deliver its events, return its result. */
  async run(req: TurnRequest, onEvent?: (ev: Event) => void): Promise<Result> {
    const t = await this.startTurn(req);
    for await (const ev of this.events(t.id)) {
      const item = ev.item as { type?: string };
      if (item.type === "result") return ev.item as Result;
      onEvent?.(ev.item as Event);
    }
    throw new OutpostError(0, undefined, `outpost: the stream of ${t.id} ended without a result`);
  }

  /** Stored conversations, newest first. */
  async conversations(): Promise<Conversation[]> {
    const r = await this.call<Schemas["ConversationList"]>("GET", "/v1/conversations");
    return r.conversations;
  }

  /** A conversation (an id, a unique prefix or a native id). */
  conversation(id: string): Promise<Conversation> {
    return this.call("GET", `/v1/conversations/${encodeURIComponent(id)}`);
  }

  /** A conversation's token usage over the turns outpost ran. */
  usage(id: string): Promise<ConversationUsage> {
    return this.call("GET", `/v1/conversations/${encodeURIComponent(id)}/usage`);
  }

  /**
   * A conversation's prompts and answers, oldest first: read from its
   * stored files by its preset (source "history"), else from the turns
   * of it the server still holds (source "turns").
   */
  history(id: string): Promise<History> {
    return this.call("GET", `/v1/conversations/${encodeURIComponent(id)}/history`);
  }

  /** The caller's token limit (--token-limit) with this hour's and day's use; an operator gets every token's. */
  async limits(): Promise<TokenLimit[]> {
    const r = await this.call<Schemas["Limits"]>("GET", "/v1/limits");
    return r.limits;
  }

  /** The fleet's replicas and their heartbeats (an operator's; a client token gets 403). */
  fleet(): Promise<Fleet> {
    return this.call("GET", "/v1/fleet");
  }

  /** What garbage collection (`outpost gc`) would remove now, and its last run (an operator's). */
  gc(): Promise<GC> {
    return this.call("GET", "/v1/gc");
  }

  /** Run garbage collection on every served sandbox kind, never --all (an operator's). */
  runGC(): Promise<GCRun> {
    return this.call("POST", "/v1/gc");
  }

  /** Delete a conversation. */
  async deleteConversation(id: string): Promise<void> {
    await this.call("DELETE", `/v1/conversations/${encodeURIComponent(id)}`);
  }

  /**
   * What a turn changed in its workspace (`outpost diff`): `ref` is a
   * conversation id (or unique prefix) with `@TURN` for a turn other than
   * the last. With `to` (another `ID[@TURN]`), ref's workspace against
   * to's. Format patch (the default) and stat resolve with the text, json
   * with the files.
   */
  diff(ref: string, opts?: { to?: string; format?: "patch" | "stat" }): Promise<string>;
  diff(ref: string, opts: { to?: string; format: "json" }): Promise<Diff>;
  diff(ref: string, opts: { to?: string; format?: DiffFormat } = {}): Promise<string | Diff> {
    const at = ref.lastIndexOf("@");
    const id = at < 0 ? ref : ref.slice(0, at);
    const q = new URLSearchParams();
    if (at >= 0) q.set("turn", ref.slice(at + 1));
    if (opts.to) q.set("to", opts.to);
    const format = opts.format ?? "patch";
    q.set("format", format);
    const path = `/v1/conversations/${encodeURIComponent(id)}/diff?${q}`;
    if (format === "json") return this.call<Diff>("GET", path);
    return this.text(path, format === "patch" ? "text/x-diff" : "text/plain");
  }

  /**
   * A race's stream (`outpost race`): each contestant's progress and
   * events, then each one's result line, the race line last. A race
   * lives as long as its stream: aborting `signal` (or dropping the
   * connection) cancels it; there is no reconnection.
   */
  async *raceEvents(spec: RaceRequest, opts: { signal?: AbortSignal } = {}): AsyncGenerator<RaceSequenced> {
    const res = await this.request("POST", "/v1/races", spec, { Accept: "text/event-stream" }, opts.signal);
    if (res.statusCode !== 200) throw toError(await collect(res));
    let done = false;
    try {
      for await (const ev of parseSSE(res)) {
        const item = ev.item as unknown as RaceItem;
        yield { seq: ev.seq, item };
        if ((item as { type?: string }).type === "race") {
          done = true;
          return;
        }
      }
    } finally {
      res.destroy();
    }
    if (!done) throw new OutpostError(0, undefined, "outpost: the race's stream ended without its race line");
  }

  /**
   * Run a race to its end: `onItem` sees its progress and its
   * contestants' events (each tagged with `contestant`) as they come;
   * resolves with every contestant's result line and the race (winner -1:
   * none passed).
   */
  async race(spec: RaceRequest, onItem?: (item: RaceProgress | RaceEvent) => void, opts: { signal?: AbortSignal } = {}): Promise<RaceResponse> {
    const results: RaceResultLine[] = [];
    for await (const { item } of this.raceEvents(spec, opts)) {
      const type = (item as { type?: string }).type;
      if (type === "race") return { results, race: item as RaceLine };
      if (type === "result") results.push(item as RaceResultLine);
      else onItem?.(item as RaceProgress | RaceEvent);
    }
    throw new OutpostError(0, undefined, "outpost: the race's stream ended without its race line");
  }

  /** The agent presets. */
  async agents(): Promise<Agent[]> {
    const r = await this.call<Schemas["AgentList"]>("GET", "/v1/agents");
    return r.agents;
  }

  /** Liveness (no credentials needed); status "draining" while shutting down. */
  async health(): Promise<Health> {
    const r = await collect(await this.request("GET", "/healthz"));
    return JSON.parse(r.body) as Health;
  }
}

async function collect(res: http.IncomingMessage): Promise<Response> {
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  return { status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString("utf8") };
}

function toError(r: Response): OutpostError {
  let body: ErrorBody | undefined;
  try {
    body = (JSON.parse(r.body) as { error?: ErrorBody }).error;
  } catch {
    body = undefined;
  }
  const ra = r.headers["retry-after"];
  return new OutpostError(r.status, body, `outpost: HTTP ${r.status}`, ra ? Number(ra) : undefined);
}

/** Parses a text/event-stream into sequenced items. */
async function* parseSSE(res: AsyncIterable<Buffer | string>): AsyncGenerator<Sequenced> {
  let buf = "";
  let id = 0;
  let data: string[] = [];
  for await (const chunk of res) {
    buf += typeof chunk === "string" ? chunk : chunk.toString("utf8");
    let nl: number;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, "");
      buf = buf.slice(nl + 1);
      if (line === "") {
        if (data.length > 0) {
          yield { seq: id, item: JSON.parse(data.join("\n")) as StreamItem };
        }
        data = [];
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "id") id = Number(value);
      else if (field === "data") data.push(value);
    }
  }
}
