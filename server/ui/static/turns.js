// turns.js: the turns page (running and recent turns, refreshed while
// shown) and a turn's page (its events as they arrive, steer, cancel, and
// its result).
import { h, add, table, fmtTime, fmtMS, fmtNum, tokens, every, errorBox } from './dom.js';
import * as api from './api.js';

function duration(t) {
  if (t.result && t.result.duration_ms) return t.result.duration_ms;
  if (!t.started) return null;
  const end = t.finished ? Date.parse(t.finished) : Date.now();
  return end - Date.parse(t.started);
}

function outcome(t) {
  if (t.state !== 'finished' || !t.result) return '';
  return t.result.error ? t.result.error.code : 'ok';
}

function turnRow(t) {
  const r = t.result || {};
  return h('tr', { 'data-turn': t.id },
    h('td', {}, h('a', { href: '#/turns/' + encodeURIComponent(t.id) }, t.id)),
    h('td', {}, h('span', { class: 'state state-' + t.state }, t.state)),
    h('td', {}, t.agent),
    h('td', {}, r.model || t.model || ''),
    h('td', {}, t.sandbox),
    h('td', {}, t.replica || ''),
    h('td', {}, fmtTime(t.created)),
    h('td', { class: 'num' }, fmtMS(duration(t))),
    h('td', { class: 'num' }, t.result || t.usage ? fmtNum(tokens(r.usage || t.usage)) : ''),
    h('td', {}, h('span', { class: 'code code-' + (outcome(t) || 'none') }, outcome(t))));
}

export async function turnsPage(main, { signal }) {
  const summary = h('p', { class: 'summary', role: 'status' });
  const body = h('tbody');
  main.append(
    h('div', { class: 'heading' }, h('h1', { tabindex: -1 }, 'Turns'), h('a', { class: 'button', href: '#/start' }, 'Start a turn')),
    summary,
    table('Running and recent turns of this server, newest first', ['Turn', 'State', 'Agent', 'Model', 'Sandbox', 'Replica', 'Created', 'Duration', 'Tokens', 'Result'], body));
  const refresh = async () => {
    const { turns } = await api.call('/v1/turns?limit=200', { signal });
    const running = turns.filter((t) => t.state === 'running').length;
    const queued = turns.filter((t) => t.state === 'queued').length;
    summary.textContent = `${running} running, ${queued} queued, ${turns.length - running - queued} finished (kept for the server's retention).`;
    body.replaceChildren(...(turns.length ? turns.map(turnRow) : [h('tr', {}, h('td', { colspan: 10 }, 'No turns yet.'))]));
  };
  await refresh();
  every(1000, signal, refresh);
}

// eventView renders a turn's events into a list, joining the deltas of
// one message.
class EventView {
  constructor(list) {
    this.list = list;
    this.open = new Map(); // message id -> its text node
  }

  item(kind, label, ...text) {
    const li = h('li', { class: 'ev ev-' + kind }, h('span', { class: 'ev-kind' }, label), h('span', { class: 'ev-text' }, text));
    this.list.append(li);
    return li;
  }

  add(seq, ev) {
    const key = ev.type + ':' + (ev.id || '');
    switch (ev.type) {
      case 'message':
      case 'reasoning': {
        const node = this.open.get(key);
        if (node && ev.delta) { node.textContent += ev.text || ''; return; }
        if (node && !ev.delta) { node.textContent = ev.text || ''; this.open.delete(key); return; }
        const li = this.item(ev.type, ev.type === 'message' ? 'text' : 'thinking', ev.text || '');
        if (ev.delta) this.open.set(key, li.querySelector('.ev-text'));
        return;
      }
      case 'tool_call':
        this.item('tool', 'tool call', (ev.tool && ev.tool.name) || '', ' ', h('code', {}, ev.tool && ev.tool.input ? JSON.stringify(ev.tool.input) : ''));
        return;
      case 'tool_result':
        this.item('tool', 'tool result', h('pre', {}, (ev.tool && ev.tool.output) || ''));
        return;
      case 'notice':
        this.item('notice', 'notice' + (ev.kind ? ' · ' + ev.kind : ''), ev.text || '');
        return;
      case 'failure':
        this.item('failure', 'failure' + (ev.kind ? ' · ' + ev.kind : ''), ev.text || '');
        return;
      case 'usage':
        this.item('usage', 'usage', `${fmtNum(tokens(ev.usage))} tokens`);
        return;
      case 'session':
        this.item('session', 'session', ev.conversation ? 'conversation ' + ev.conversation : '');
        return;
      case 'finished':
        this.item('session', 'finished', ev.stop || '');
        return;
      default:
        this.item('other', ev.type || 'event', ev.text || '');
    }
  }
}

function resultView(r) {
  const ok = !r.error;
  const rows = [
    ['Result', ok ? 'ok' : `${r.error.code}: ${r.error.message}`],
    ['Exit code', String(r.exit_code)],
    ['Model', r.model || ''],
    ['Duration', fmtMS(r.duration_ms)],
    ['Tokens (agent)', r.usage ? `${fmtNum(tokens(r.usage))} (${fmtNum(r.usage.input_tokens)} in, ${fmtNum(r.usage.output_tokens)} out)` : ''],
    ['Tokens (metered)', r.metered ? fmtNum(tokens(r.metered)) : ''],
  ];
  const dl = h('dl', { class: 'facts' }, rows.filter(([, v]) => v).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
  if (r.conversation) add(dl, [h('dt', {}, 'Conversation'), h('dd', {}, h('a', { href: '#/conversations/' + encodeURIComponent(r.conversation) }, r.conversation))]);
  const sec = h('section', { class: 'card result ' + (ok ? 'ok' : 'failed'), 'aria-labelledby': 'result-title' },
    h('h2', { id: 'result-title' }, 'Result'), dl);
  if (r.text) add(sec, [h('h3', {}, 'Answer'), h('pre', { class: 'answer' }, r.text)]);
  if (r.output) add(sec, [h('h3', {}, 'Structured answer'), h('pre', {}, JSON.stringify(r.output, null, 2))]);
  const files = r.changed_files && r.changed_files.files;
  if (files && files.length) add(sec, [h('h3', {}, 'Changed files'), h('ul', {}, files.map((f) => h('li', {}, `${f.operation} ${f.path}`)))]);
  if (r.check) add(sec, [h('h3', {}, 'Check'), h('p', {}, `${r.check.command}: ${r.check.passed ? 'passed' : 'failed'}`), h('pre', {}, r.check.output || '')]);
  return sec;
}

function controls(id, signal) {
  const text = h('textarea', { id: 'steer-text', rows: 2, required: true });
  const status = h('p', { class: 'hint', role: 'status', id: 'steer-status' });
  const send = h('button', { type: 'submit', id: 'steer' }, 'Send');
  const cancel = h('button', { type: 'button', class: 'danger', id: 'cancel' }, 'Cancel the turn');
  const form = h('form', { class: 'card steer', 'aria-label': 'Steer or cancel' },
    h('label', { for: 'steer-text' }, 'Message to the running agent (steer)'), text,
    h('div', { class: 'row' }, send, cancel), status);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      await api.call(`/v1/turns/${encodeURIComponent(id)}/messages`, { method: 'POST', body: { text: text.value }, signal });
      status.textContent = 'Message sent.';
      text.value = '';
    } catch (e) { status.textContent = e.message; }
  });
  cancel.addEventListener('click', async () => {
    try {
      await api.call(`/v1/turns/${encodeURIComponent(id)}/cancel`, { method: 'POST', signal });
      status.textContent = 'Cancel requested.';
    } catch (e) { status.textContent = e.message; }
  });
  const done = () => { for (const c of [text, send, cancel]) c.disabled = true; };
  return { form, done };
}

// historyView is a conversation's prompts and answers, oldest first
// (GET /v1/conversations/{id}/history), loaded once the turn has ended.
async function historyView(conv, signal) {
  const hist = await api.call(`/v1/conversations/${encodeURIComponent(conv)}/history`, { signal });
  const sec = h('section', { class: 'card', id: 'history', 'aria-labelledby': 'history-title' },
    h('h2', { id: 'history-title' }, 'The conversation so far'));
  if (!hist.exchanges.length) {
    add(sec, h('p', { class: 'hint' }, 'The agent keeps no transcript outpost can read, and this server no longer holds its turns.'));
    return sec;
  }
  add(sec, h('ol', { class: 'exchanges' }, hist.exchanges.map((x, i) => h('li', {},
    h('h3', {}, `Turn ${i + 1}`),
    h('p', { class: 'ev-kind' }, 'Prompt'), h('pre', { class: 'prompt' }, x.prompt),
    h('p', { class: 'ev-kind' }, 'Answer'), h('pre', { class: 'answer' }, x.answer)))));
  add(sec, h('p', { class: 'hint' }, hist.source === 'history' ? "Read from the conversation's stored files." : 'From the turns this server still holds.'));
  return sec;
}

export async function turnPage(main, { signal, params: [id] }) {
  const st = await api.call(`/v1/turns/${encodeURIComponent(id)}`, { signal });
  const state = h('span', { class: 'state state-' + st.state, id: 'turn-state' }, st.state);
  const used = h('dd', { id: 'turn-tokens' }, st.usage ? fmtNum(tokens(st.usage)) : '');
  const model = h('dd', { id: 'turn-model' }, st.model || '');
  main.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/turns' }, 'Turns'), ' / ', id),
    h('h1', { tabindex: -1 }, 'Turn ', h('code', {}, id)),
    h('dl', { class: 'facts' },
      h('dt', {}, 'State'), h('dd', {}, state),
      h('dt', {}, 'Agent'), h('dd', {}, st.agent),
      h('dt', {}, 'Model'), model,
      h('dt', {}, 'Sandbox'), h('dd', {}, st.sandbox),
      st.replica ? [h('dt', {}, 'Replica'), h('dd', { id: 'turn-replica' }, st.replica)] : [],
      h('dt', {}, 'Created'), h('dd', {}, fmtTime(st.created)),
      h('dt', {}, 'Tokens so far'), used));
  if (st.prompt) main.append(h('h2', {}, 'Prompt'), h('pre', { class: 'prompt', id: 'turn-prompt' }, st.prompt));
  const { form, done } = controls(id, signal);
  if (st.state !== 'finished') main.append(form);
  const list = h('ol', { class: 'events', id: 'events' });
  main.append(h('h2', { id: 'events-title' }, 'Events'), h('div', { role: 'log', 'aria-labelledby': 'events-title' }, list));
  const view = new EventView(list);
  const latency = (window.__outpostLatency = []); // [seq, ms from the event's time to its display] (the benchmark)
  const follow = api.events(id, (seq, ev) => {
    if (ev.type === 'result') {
      state.textContent = 'finished';
      state.className = 'state state-finished';
      done();
      form.remove();
      main.append(resultView(ev));
      if (ev.usage) used.textContent = fmtNum(tokens(ev.usage));
      if (ev.model) model.textContent = ev.model;
      if (ev.conversation) historyView(ev.conversation, signal).then((sec) => main.append(sec), (e) => { if (!signal.aborted) main.append(errorBox(e)); });
      return;
    }
    if (state.textContent === 'queued') { state.textContent = 'running'; state.className = 'state state-running'; }
    if ((ev.type === 'usage' || ev.type === 'finished') && ev.usage) used.textContent = fmtNum(tokens(ev.usage));
    if (ev.type === 'session' && ev.details && ev.details.model && !model.textContent) model.textContent = ev.details.model;
    view.add(seq, ev);
    if (ev.time) latency.push([seq, Date.now() - Date.parse(ev.time)]);
  }, signal);
  follow.catch((e) => { if (!signal.aborted) main.append(errorBox(e)); });
}
