// fleet.js: this server's state: health, running and queued turns, the
// warm pool, event streams, spooled conversations and the turns so far,
// from /healthz, /metrics (Prometheus text) and GET /v1/turns; for an
// operator, the fleet's replicas (GET /v1/fleet) and garbage collection
// (GET and POST /v1/gc).
import { h, add, table, fmtNum, fmtTime, fmtMS, tokens, every } from './dom.js';
import * as api from './api.js';

// metrics parses Prometheus text: name -> [{labels, value}].
export function metrics(text) {
  const out = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    for (const l of (m[3] || '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    if (!out.has(m[1])) out.set(m[1], []);
    out.get(m[1]).push({ labels, value: Number(m[4]) });
  }
  return out;
}

const one = (m, name) => (m.get(name) || []).reduce((s, x) => s + x.value, 0);

export async function fleetPage(main, { signal }) {
  const body = h('div');
  main.append(h('h1', { tabindex: -1 }, 'Server'), body);
  const refresh = async () => {
    const health = await (await fetch('/healthz', { cache: 'no-store', credentials: 'omit', signal })).json();
    const m = metrics(await api.call('/metrics', { signal }));
    const { turns } = await api.call('/v1/turns?state=running', { signal });
    const fleetNow = fleet;
    const pool = (m.get('outpost_pool_sandboxes') || []).filter((x) => x.value > 0);
    const codes = m.get('outpost_turns_total') || [];
    body.replaceChildren(
      h('dl', { class: 'facts', id: 'server-facts' },
        [['Status', health.status], ['Version', health.version || ''], ['Running turns', fmtNum(one(m, 'outpost_turns_running'))],
          ['Queued turns', fmtNum(one(m, 'outpost_turns_queued'))], ['Open event streams', fmtNum(one(m, 'outpost_event_streams'))],
          ['Events kept for replay', fmtNum(one(m, 'outpost_events_retained_bytes')) + ' bytes'],
          ['Conversations spooled (not yet stored)', fmtNum(one(m, 'outpost_spool_files'))]].map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
      table('The warm pool: sandboxes by kind and state', ['Sandbox', 'State', 'Sandboxes'],
        h('tbody', {}, pool.length ? pool.map((x) => h('tr', {}, h('td', {}, x.labels.sandbox), h('td', {}, x.labels.state), h('td', { class: 'num' }, fmtNum(x.value))))
          : h('tr', {}, h('td', { colspan: 3 }, 'No pooled sandbox.')))),
      table('Running turns you can see', ['Turn', 'Agent', 'Model', 'Sandbox', 'Replica', 'Started', 'Tokens so far'],
        h('tbody', {}, turns.length ? turns.map((t) => h('tr', {}, h('td', {}, h('a', { href: '#/turns/' + encodeURIComponent(t.id) }, t.id)),
          h('td', {}, t.agent), h('td', {}, t.model || ''), h('td', {}, t.sandbox), h('td', {}, t.replica || ''), h('td', {}, fmtTime(t.started)),
          h('td', { class: 'num' }, t.usage ? fmtNum(tokens(t.usage)) : ''))) : h('tr', {}, h('td', { colspan: 7 }, 'None.')))),
      table('Turns so far, by agent, sandbox and result', ['Agent', 'Sandbox', 'Result', 'Turns'],
        h('tbody', {}, codes.map((x) => h('tr', {}, h('td', {}, x.labels.agent), h('td', {}, x.labels.sandbox), h('td', {}, x.labels.code), h('td', { class: 'num' }, fmtNum(x.value)))))),
      fleetView(fleetNow));
  };
  const gc = h('section', { class: 'card', id: 'gc', 'aria-labelledby': 'gc-title' });
  main.append(gc);
  let fleet = await operators(api.call('/v1/fleet', { signal }));
  await Promise.all([refresh(), gcView(gc, signal)]);
  every(2000, signal, async () => {
    fleet = await operators(api.call('/v1/fleet', { signal }));
    await refresh();
  });
}

// operators is an operator's answer, or null for a client token (403).
async function operators(p) {
  try {
    return await p;
  } catch (e) {
    if (e.status === 403) return null;
    throw e;
  }
}

// fleetView is the fleet's replicas (GET /v1/fleet): their heartbeats,
// whether they are lost and their unfinished turns.
function fleetView(f) {
  if (!f) return h('p', { class: 'hint', id: 'fleet' }, "The fleet's replicas are shown to an operator's token only.");
  if (!f.fleet) return h('p', { class: 'hint', id: 'fleet' }, 'This server is alone: it shares no turn store (a fleet runs on PostgreSQL).');
  return table(`The fleet: replicas on this turn store (this one is ${f.replica}; a heartbeat every ${fmtMS(f.heartbeat_ms)}, lost after 3 missed)`,
    ['Replica', 'Last heartbeat', 'Ago', 'State', 'Unfinished turns'],
    h('tbody', { id: 'fleet' }, f.replicas.map((r) => h('tr', {},
      h('td', {}, r.id, r.self ? ' (this one)' : ''), h('td', {}, fmtTime(r.heartbeat)), h('td', { class: 'num' }, r.heartbeat ? fmtMS(r.age_ms) : ''),
      h('td', {}, h('span', { class: 'state state-' + (r.lost ? 'lost' : 'running') }, r.lost ? 'lost' : 'alive')),
      h('td', { class: 'num' }, fmtNum(r.turns))))));
}

function orphansTable(caption, run) {
  const rows = run.sandboxes.flatMap((s) => (s.error ? [h('tr', {}, h('td', {}, s.sandbox), h('td', { colspan: 5 }, s.error))]
    : s.orphans.map((o) => h('tr', {}, h('td', {}, s.sandbox), h('td', {}, o.kind), h('td', {}, h('code', {}, o.name)),
      h('td', {}, o.owner || ''), h('td', {}, o.state || ''), h('td', {}, o.error ? 'failed: ' + o.error : (o.removed ? 'removed' : 'would remove'))))));
  const kept = run.sandboxes.map((s) => `${s.sandbox}${s.where ? ' (' + s.where + ')' : ''}: ${s.kept} kept`).join('; ');
  return table(`${caption}. ${kept}`, ['Sandbox', 'Kind', 'Name', 'Owner', 'Owner state', 'Result'],
    h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: 6 }, 'Nothing left behind by dead processes.'))));
}

// gcView is garbage collection (outpost gc): what it would remove now,
// its last run through the API, and a button that runs it.
async function gcView(sec, signal) {
  const g = await operators(api.call('/v1/gc', { signal }));
  sec.replaceChildren(h('h2', { id: 'gc-title' }, 'Sandboxes left by dead processes (gc)'));
  if (!g) {
    add(sec, h('p', { class: 'hint' }, "Garbage collection is shown to an operator's token only."));
    return;
  }
  const status = h('p', { role: 'status', id: 'gc-status' });
  const run = h('button', { type: 'button', id: 'gc-run' }, 'Remove them now');
  run.addEventListener('click', async () => {
    run.disabled = true;
    try {
      await api.call('/v1/gc', { method: 'POST', signal });
      await gcView(sec, signal);
      sec.querySelector('#gc-status').textContent = 'Collected.';
    } catch (e) { status.textContent = e.message; run.disabled = false; }
  });
  add(sec, [orphansTable('What a collection would remove now', g.pending),
    g.last ? orphansTable(`The last collection, ${fmtTime(g.last.time)}`, g.last) : h('p', { class: 'hint', id: 'gc-last' }, 'No collection was run from here since the server started (each provider also sweeps on its own).'),
    h('div', { class: 'row' }, run), status]);
}
