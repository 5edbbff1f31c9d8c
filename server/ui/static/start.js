// start.js: the start-a-turn page: agent, model, sandbox and its
// settings, prompt, timeout, structured-answer schema, workspace; the
// agents the server runs, with which are keyless and installed.
import { h, field, table } from './dom.js';
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

export async function startPage(main, { signal }) {
  const { agents } = await api.call('/v1/agents', { signal });
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
      field('Check command', f.check, 'Run in the sandbox after the turn (e.g. go test ./...).')),
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
  main.append(form, h('section', { class: 'card' }, agentsTable(agents),
    h('p', { class: 'hint' }, 'Keyless: the agent reaches its model API through the credential gateway, and its sandbox never holds the key. Installed: its pinned CLI is on the server and needs no download.')));
}
