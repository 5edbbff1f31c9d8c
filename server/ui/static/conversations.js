// conversations.js: stored conversations (searchable), and one
// conversation: its turns' checkpoints and diffs, its usage and budget,
// resume, fork, export and delete.
import { h, add, field, table, fmtTime, fmtNum, tokens } from './dom.js';
import * as api from './api.js';

const enc = encodeURIComponent;

function matches(c, q) {
  if (!q) return true;
  q = q.toLowerCase();
  return [c.id, c.agent, c.model, c.sandbox, c.owner, c.native].some((v) => v && String(v).toLowerCase().includes(q));
}

function convRow(c) {
  return h('tr', {},
    h('td', {}, h('a', { href: '#/conversations/' + enc(c.id) }, c.id)),
    h('td', {}, c.agent), h('td', {}, c.model || ''), h('td', { class: 'num' }, String(c.turns)),
    h('td', { class: 'num' }, fmtNum(tokens(c.usage))),
    h('td', { class: 'num' }, c.metered ? fmtNum(tokens(c.metered)) : ''),
    h('td', {}, fmtTime(c.updated)));
}

export async function conversationsPage(main, { signal }) {
  const { conversations } = await api.call('/v1/conversations', { signal });
  const q = h('input', { type: 'search', id: 'search', autocomplete: 'off' });
  const body = h('tbody');
  const count = h('p', { class: 'summary', role: 'status' });
  const show = () => {
    const list = conversations.filter((c) => matches(c, q.value.trim()));
    const shown = list.slice(0, 200); // the newest: a search finds the others
    count.textContent = `${list.length} of ${conversations.length} conversations` + (shown.length < list.length ? `, the newest ${shown.length} shown: search to find the others` : '');
    body.replaceChildren(...shown.map(convRow));
  };
  q.addEventListener('input', show);
  main.append(h('h1', { tabindex: -1 }, 'Conversations'),
    field('Search by id, agent, model, sandbox or owner', q), count,
    table('Stored conversations, newest first', ['Conversation', 'Agent', 'Model', 'Turns', 'Tokens (agent)', 'Tokens (metered)', 'Updated'], body));
  show();
}

function usageView(u) {
  const dl = h('dl', { class: 'facts' },
    h('dt', {}, 'Tokens (agent)'), h('dd', {}, `${fmtNum(tokens(u.usage))} (${fmtNum(u.usage.input_tokens)} in, ${fmtNum(u.usage.output_tokens)} out, ${fmtNum(u.usage.cache_read_tokens)} cache read)`));
  if (u.metered) add(dl, [h('dt', {}, 'Tokens (metered)'), h('dd', {}, `${fmtNum(tokens(u.metered))} in ${fmtNum(u.metered.requests)} requests`)]);
  if (u.budget) add(dl, [h('dt', {}, 'Budget'), h('dd', {}, `${fmtNum(u.budget)} tokens, ${fmtNum(u.budget_left)} left`)]);
  const sec = h('section', { class: 'card' }, h('h2', {}, 'Usage'), dl);
  const models = u.metered && u.metered.by_model ? Object.entries(u.metered.by_model) : [];
  if (models.length) {
    add(sec, table('Metered usage per model', ['Model', 'Requests', 'Input', 'Output', 'Total'],
      h('tbody', {}, models.map(([m, v]) => h('tr', {}, h('td', {}, m), h('td', { class: 'num' }, fmtNum(v.requests)),
        h('td', { class: 'num' }, fmtNum(v.input_tokens)), h('td', { class: 'num' }, fmtNum(v.output_tokens)), h('td', { class: 'num' }, fmtNum(tokens(v))))))));
  }
  return sec;
}

function checkpointsView(id, c, signal) {
  const sec = h('section', { class: 'card' }, h('h2', {}, 'Turns and their changes'));
  if (!c.checkpoints || !c.checkpoints.length) {
    add(sec, h('p', {}, `${c.turns} turn(s); no workspace checkpoints (start turns with a new workspace or checkpoints on to see their diffs).`));
    return sec;
  }
  for (const cp of c.checkpoints) {
    const pre = h('pre', { class: 'diff' });
    const details = h('details', {}, h('summary', {}, `Turn ${cp.turn}: ${cp.changed} file(s) changed, ${cp.files} in the workspace`), pre);
    details.addEventListener('toggle', async () => {
      if (!details.open || pre.dataset.loaded) return;
      pre.dataset.loaded = '1';
      try {
        const d = await api.call(`/v1/conversations/${enc(id)}/diff?turn=${cp.turn}&format=patch`, { signal });
        pre.textContent = d || '(no change)';
      } catch (e) { pre.textContent = e.message; }
    });
    add(sec, details);
  }
  return sec;
}

function continueForm(c, signal) {
  const prompt = h('textarea', { id: 'resume-prompt', rows: 3, required: true });
  const status = h('p', { role: 'alert', id: 'resume-status' });
  const resume = h('button', { type: 'submit', id: 'resume' }, 'Resume');
  const fork = h('button', { type: 'button', id: 'fork', class: 'quiet' }, 'Fork');
  const start = async (how) => {
    if (!prompt.value.trim()) { status.textContent = 'Write a prompt first.'; prompt.focus(); return; }
    try {
      const st = await api.call('/v1/turns', { method: 'POST', body: { prompt: prompt.value, [how]: c.id, agent: c.agent }, signal });
      location.hash = '#/turns/' + enc(st.id);
    } catch (e) { status.textContent = e.message; }
  };
  const form = h('form', { class: 'card', 'aria-labelledby': 'continue-title' },
    h('h2', { id: 'continue-title' }, 'Continue'),
    field('Next prompt', prompt, 'Resume adds a turn to this conversation; fork starts a new conversation from it.'),
    h('div', { class: 'row' }, resume, c.forkable === false ? null : fork), status);
  form.addEventListener('submit', (ev) => { ev.preventDefault(); start('resume'); });
  fork.addEventListener('click', () => start('fork'));
  return form;
}

async function exportIt(id, status) {
  try {
    const r = await api.call(`/v1/conversations/${enc(id)}/export`, { raw: true });
    const url = URL.createObjectURL(await r.blob());
    const a = h('a', { href: url, download: `outpost-${id}.tar.gz` });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    status.textContent = 'Exported.';
  } catch (e) { status.textContent = e.message; }
}

function manageView(id) {
  const status = h('p', { role: 'status', id: 'manage-status' });
  const confirmBox = h('div', { class: 'confirm', hidden: true },
    h('p', {}, `Delete conversation ${id} and its checkpoints? This cannot be undone.`));
  const yes = h('button', { type: 'button', class: 'danger', id: 'delete-yes' }, 'Delete for good');
  const no = h('button', { type: 'button', class: 'quiet', id: 'delete-no' }, 'Keep it');
  add(confirmBox, h('div', { class: 'row' }, yes, no));
  const del = h('button', { type: 'button', class: 'danger', id: 'delete' }, 'Delete…');
  const exp = h('button', { type: 'button', class: 'quiet', id: 'export' }, 'Export');
  del.addEventListener('click', () => { confirmBox.hidden = false; no.focus(); });
  no.addEventListener('click', () => { confirmBox.hidden = true; del.focus(); });
  yes.addEventListener('click', async () => {
    try {
      await api.call(`/v1/conversations/${enc(id)}`, { method: 'DELETE' });
      location.hash = '#/conversations';
    } catch (e) { status.textContent = e.message; }
  });
  exp.addEventListener('click', () => exportIt(id, status));
  return h('section', { class: 'card' }, h('h2', {}, 'Manage'), h('div', { class: 'row' }, exp, del), confirmBox, status);
}

export async function conversationPage(main, { signal, params: [ref] }) {
  const c = await api.call(`/v1/conversations/${enc(ref)}`, { signal });
  const u = await api.call(`/v1/conversations/${enc(c.id)}/usage`, { signal });
  main.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/conversations' }, 'Conversations'), ' / ', c.id),
    h('h1', { tabindex: -1 }, 'Conversation ', h('code', {}, c.id)),
    h('dl', { class: 'facts' },
      [['Agent', c.agent], ['Model', c.model], ['Sandbox', c.sandbox], ['Turns', String(c.turns)], ['Parent', c.parent],
        ['Owner', c.owner], ['Created', fmtTime(c.created)], ['Updated', fmtTime(c.updated)]]
        .filter(([, v]) => v).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
    usageView(u), continueForm(c, signal), checkpointsView(c.id, c, signal), manageView(c.id));
}
