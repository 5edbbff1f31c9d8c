// fleet.js: this server's state: health, running and queued turns, the
// warm pool, event streams, spooled conversations and the turns so far,
// from /healthz, /metrics (Prometheus text) and GET /v1/turns.
import { h, table, fmtNum, fmtTime, every } from './dom.js';
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
      table('Running turns you can see', ['Turn', 'Agent', 'Sandbox', 'Started'],
        h('tbody', {}, turns.length ? turns.map((t) => h('tr', {}, h('td', {}, h('a', { href: '#/turns/' + encodeURIComponent(t.id) }, t.id)),
          h('td', {}, t.agent), h('td', {}, t.sandbox), h('td', {}, fmtTime(t.started)))) : h('tr', {}, h('td', { colspan: 4 }, 'None.')))),
      table('Turns so far, by agent, sandbox and result', ['Agent', 'Sandbox', 'Result', 'Turns'],
        h('tbody', {}, codes.map((x) => h('tr', {}, h('td', {}, x.labels.agent), h('td', {}, x.labels.sandbox), h('td', {}, x.labels.code), h('td', { class: 'num' }, fmtNum(x.value)))))),
      h('p', { class: 'hint' }, "This replica's view. The API does not list a fleet's other replicas or their heartbeats, nor what outpost gc would remove."));
  };
  await refresh();
  every(2000, signal, refresh);
}
