// api.js: the console's only way to the server, the public HTTP API
// (/v1/..., docs/serve.md) with the bearer token the user signed in with.
// No cookie is ever used (credentials: 'omit'): a request carries
// authority only through its Authorization header, which another site's
// page cannot make the browser send, so the console is CSRF-proof by
// construction.

const KEY = 'outpost.token';

export function token() {
  return sessionStorage.getItem(KEY) ?? localStorage.getItem(KEY) ?? '';
}

// keep stores the token for this tab's session, or in localStorage when
// the user asked to stay signed in.
export function keep(tok, stay) {
  forget();
  (stay ? localStorage : sessionStorage).setItem(KEY, tok);
}

export function forget() {
  sessionStorage.removeItem(KEY);
  localStorage.removeItem(KEY);
}

export class ApiError extends Error {
  constructor(status, body) {
    const e = body && body.error;
    super(e && e.message ? `${e.message} (${status}${e.code ? ', ' + e.code : ''})` : `the server answered ${status}`);
    this.status = status;
    this.code = e && e.code;
    this.reason = e && e.details && e.details.reason;
  }
}

let unauthorized = () => {};
// onUnauthorized sets what a 401 does (back to the sign-in page).
export function onUnauthorized(f) { unauthorized = f; }

function headers(extra, tok) {
  const hd = new Headers(extra || {});
  const t = tok ?? token();
  if (t) hd.set('Authorization', 'Bearer ' + t);
  return hd;
}

async function fail(r) {
  let body = null;
  try { body = await r.json(); } catch { /* not JSON */ }
  const e = new ApiError(r.status, body);
  if (r.status === 401) unauthorized(e);
  return e;
}

// call sends one request; the answer is its JSON (null for 204), its text
// when not JSON, or the Response itself with raw.
export async function call(path, { method = 'GET', body, signal, tok, raw } = {}) {
  const init = { method, signal, cache: 'no-store', credentials: 'omit', redirect: 'error' };
  init.headers = headers(body !== undefined ? { 'Content-Type': 'application/json' } : {}, tok);
  if (body !== undefined) init.body = JSON.stringify(body);
  const r = await fetch(path, init);
  if (!r.ok) throw await fail(r);
  if (raw) return r;
  if (r.status === 204) return null;
  return (r.headers.get('Content-Type') || '').includes('json') ? r.json() : r.text();
}

// check says whether tok is accepted (an empty one: whether the server
// needs none), with a request that reads a little.
export async function check(tok) {
  const r = await fetch('/v1/turns?limit=1', { headers: headers({}, tok), cache: 'no-store', credentials: 'omit' });
  if (r.ok) return true;
  if (r.status === 401) return false;
  throw await fail(r);
}

const wait = (ms, signal) => new Promise((res) => {
  const t = setTimeout(res, ms);
  signal.addEventListener('abort', () => { clearTimeout(t); res(); }, { once: true });
});

// events follows a turn's Server-Sent Events with fetch and a stream
// reader (EventSource cannot send the Authorization header, and the token
// must not go in a URL): each event is given to onItem(seq, value); a
// broken stream is resumed after the last sequence number (Last-Event-ID)
// until the result line has arrived or signal aborts.
export async function events(id, onItem, signal) {
  let last = 0;
  while (!signal.aborted) {
    let r;
    try {
      r = await fetch(`/v1/turns/${encodeURIComponent(id)}/events`, {
        headers: headers(last ? { 'Last-Event-ID': String(last) } : {}),
        signal, cache: 'no-store', credentials: 'omit',
      });
    } catch {
      await wait(1000, signal);
      continue;
    }
    if (r.status === 429) { await wait(1000, signal); continue; }
    if (!r.ok) throw await fail(r);
    const done = await readSSE(r.body, (seq, v) => { last = seq; onItem(seq, v); });
    if (done) return;
    await wait(500, signal);
  }
}

// readSSE reads one stream; true once a result line was read.
async function readSSE(body, emit) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  let id = 0;
  let data = [];
  let finished = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return finished;
      buf += value;
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        let line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line.endsWith('\r')) line = line.slice(0, -1);
        if (line === '') {
          if (data.length) {
            const v = JSON.parse(data.join('\n'));
            emit(id, v);
            if (v.type === 'result') finished = true;
          }
          data = [];
          continue;
        }
        if (line.startsWith(':')) continue;
        const c = line.indexOf(':');
        const name = c < 0 ? line : line.slice(0, c);
        let v = c < 0 ? '' : line.slice(c + 1);
        if (v.startsWith(' ')) v = v.slice(1);
        if (name === 'id') id = Number(v);
        else if (name === 'data') data.push(v);
      }
    }
  } catch {
    return finished; // aborted or cut: the caller resumes
  }
}
