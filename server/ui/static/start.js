// start.js: the start-a-turn page: agent, model, sandbox and its
// settings, prompt, timeout, token budgets, structured-answer schema,
// workspace; the caller's token limits and what is left of them; the
// agents the server runs, with which are keyless and installed.
import { h, field, table, fmtNum, fmtTime } from './dom.js';
import * as api from './api.js';

// parseSettings reads KEY=VALUE lines.
function parseSettings(text) {
  const out = {};
  for (const line of text.split('\n')) {
    const s = line.trim();
    if (!s) continue;
    const i = s.indexOf('=');
    if (i <= 0) throw new Error(`settings: "${s}" is not KEY=VALUE`);
    out[s.slice(0, i).trim()] = s.slice(i + 1).trim();
  }
  return out;
}

// request is the POST /v1/turns body of the form's values.
export function request(f) {
  const req = { prompt: f.prompt.value };
  for (const k of ['agent', 'model', 'sandbox', 'workspace', 'check']) if (f[k].value.trim()) req[k] = f[k].value.trim();
  const settings = parseSettings(f.settings.value);
  if (Object.keys(settings).length) req.settings = settings;
  if (f.timeout.value) req.timeout_ms = Math.round(Number(f.timeout.value) * 1000);
  if (f.max_tokens.value) req.max_tokens = Math.round(Number(f.max_tokens.value));
  if (f.budget.value) req.budget = Math.round(Number(f.budget.value));
  if (f.schema.value.trim()) {
    try { req.schema = JSON.parse(f.schema.value); } catch (e) { throw new Error('schema: not JSON: ' + e.message); }
  }
  return req;
}

function agentsTable(agents) {
  const yes = (b) => (b ? 'yes' : 'no');
  return table('Agents this server runs', ['Agent', 'Version', 'Keyless', 'Installed', 'Steerable', 'Resumable'],
    h('tbody', {}, agents.map((a) => h('tr', {},
      h('td', {}, a.name), h('td', {}, a.version), h('td', {}, a.keyless), h('td', {}, yes(a.installed)),
      h('td', {}, yes(a.live_input)), h('td', {}, yes(a.resumable))))));
}

// limitsTable is the caller's token limits (--token-limit; an operator:
// every token's): each window's use, what is left and when it resets.
function limitsTable(limits) {
  const rows = [];
  for (const l of limits) {
    for (const [name, w] of [['hour', l.hour], ['day', l.day]]) {
      if (!w) continue;
      rows.push(h('tr', {}, h('td', {}, l.token), h('td', {}, 'per ' + name), h('td', { class: 'num' }, fmtNum(w.used)),
        h('td', { class: 'num' }, fmtNum(w.limit)), h('td', { class: 'num' }, fmtNum(w.left)),
        h('td', {}, h('meter', { min: 0, max: w.limit, value: w.used, 'aria-label': `${l.token}: ${w.used} of ${w.limit} tokens this ${name}` })),
        h('td', {}, fmtTime(w.resets))));
    }
  }
  return table('Token limits: model-API tokens counted at the credential gateway, per UTC hour and day', ['Token', 'Window', 'Used', 'Limit', 'Left', 'Use', 'Resets'],
    h('tbody', { id: 'limits' }, rows.length ? rows : h('tr', {}, h('td', { colspan: 7 }, 'No token limit applies to you.'))));
}

export async function startPage(main, { signal }) {
  const [{ agents }, { limits }] = await Promise.all([api.call('/v1/agents', { signal }), api.call('/v1/limits', { signal })]);
  const f = {
    agent: h('select', { id: 'agent', name: 'agent' }, h('option', { value: '' }, "the server's default"),
      agents.map((a) => h('option', { value: a.name }, `${a.name}${a.keyless === 'yes' ? ' (keyless)' : ''}${a.installed ? '' : ' (not installed)'}`))),
    model: h('input', { id: 'model', name: 'model', type: 'text', autocomplete: 'off' }),
    sandbox: h('input', { id: 'sandbox', name: 'sandbox', type: 'text', autocomplete: 'off' }),
    settings: h('textarea', { id: 'settings', name: 'settings', rows: 2 }),
    workspace: h('select', { id: 'workspace', name: 'workspace' }, h('option', { value: '' }, "the server's directory"), h('option', { value: 'new' }, 'a new directory')),
    prompt: h('textarea', { id: 'prompt', name: 'prompt', rows: 6, required: true }),
    timeout: h('input', { id: 'timeout', name: 'timeout', type: 'number', min: 1, step: 1 }),
    check: h('input', { id: 'check', name: 'check', type: 'text', autocomplete: 'off' }),
    schema: h('textarea', { id: 'schema', name: 'schema', rows: 3, spellcheck: 'false' }),
    max_tokens: h('input', { id: 'max_tokens', name: 'max_tokens', type: 'number', min: 1, step: 1 }),
    budget: h('input', { id: 'budget', name: 'budget', type: 'number', min: 1, step: 1 }),
  };
  const status = h('p', { role: 'alert', id: 'start-status' });
  const form = h('form', { class: 'card', 'aria-labelledby': 'start-title' },
    h('h1', { id: 'start-title', tabindex: -1 }, 'Start a turn'),
    field('Prompt', f.prompt),
    h('div', { class: 'grid' },
      field('Agent', f.agent),
      field('Model', f.model, "Empty: the agent's default."),
      field('Sandbox', f.sandbox, "A provider the operator allows (empty: the server's default)."),
      field('Workspace', f.workspace),
      field('Timeout (seconds)', f.timeout, "Empty: the server's ceiling."),
      field('Check command', f.check, 'Run in the sandbox after the turn (e.g. go test ./...).'),
      field('Turn budget (tokens)', f.max_tokens, 'Empty: none. Counted at the credential gateway; the turn ends with code budget beyond it.'),
      field('Conversation budget (tokens)', f.budget, 'Over all its turns, kept with it. Empty: none (a resume keeps the stored one).')),
    field('Sandbox settings', f.settings, 'One KEY=VALUE a line, within what the operator allows (e.g. image=...).'),
    field('Structured answer schema (JSON Schema)', f.schema, 'Optional: the answer must match it.'),
    h('button', { type: 'submit', id: 'start' }, 'Start'), status);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    status.className = '';
    try {
      const st = await api.call('/v1/turns', { method: 'POST', body: request(f), signal });
      location.hash = '#/turns/' + encodeURIComponent(st.id);
    } catch (e) {
      status.className = 'error';
      status.textContent = e.message;
    }
  });
  main.append(form, h('section', { class: 'card' }, limitsTable(limits)), h('section', { class: 'card' }, agentsTable(agents),
    h('p', { class: 'hint' }, 'Keyless: the agent reaches its model API through the credential gateway, and its sandbox never holds the key. Installed: its pinned CLI is on the server and needs no download.')));
}
