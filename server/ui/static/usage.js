// usage.js: tokens by agent, model and token name over time, budgets and
// what is left, with a bar chart drawn as SVG through DOM calls. Built
// from the stored conversations (GET /v1/conversations): each
// conversation's usage counts at its last update.
import { h, add, field, table, fmtNum, tokens } from './dom.js';
import * as api from './api.js';

const SVG = 'http://www.w3.org/2000/svg';

function svg(tag, attrs, ...kids) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const k of kids) el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  return el;
}

// bucket is the start of the hour or the UTC day of time t, as a label.
function bucket(t, period) {
  const d = new Date(t);
  return period === 'hour' ? d.toISOString().slice(0, 13) + ':00Z' : d.toISOString().slice(0, 10);
}

const keyOf = {
  agent: (c) => c.agent || '(none)',
  model: (c) => c.model || '(unknown)',
  owner: (c) => (c.owner || '(operator)').replace(/^token:/, ''),
};

// totals groups conversations by key: conversations, agent tokens,
// metered tokens and requests.
export function totals(convs, key) {
  const m = new Map();
  for (const c of convs) {
    const k = keyOf[key](c);
    const t = m.get(k) || { key: k, conversations: 0, agent: 0, metered: 0, requests: 0 };
    t.conversations++;
    t.agent += tokens(c.usage);
    t.metered += c.metered ? tokens(c.metered) : 0;
    t.requests += c.metered ? c.metered.requests || 0 : 0;
    m.set(k, t);
  }
  return [...m.values()].sort((a, b) => b.agent + b.metered - a.agent - a.metered);
}

// chart is a bar chart of tokens per period (the last 24 buckets).
function chart(convs, period) {
  const by = new Map();
  for (const c of convs) {
    const b = bucket(c.updated, period);
    by.set(b, (by.get(b) || 0) + Math.max(tokens(c.usage), c.metered ? tokens(c.metered) : 0));
  }
  const rows = [...by.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1)).slice(-24);
  const W = 720;
  const H = 220;
  const pad = 40;
  const max = Math.max(1, ...rows.map(([, v]) => v));
  const bw = rows.length ? Math.min((W - pad * 2) / rows.length, 64) : 0;
  const label = `Tokens per ${period}: ` + (rows.length ? rows.map(([k, v]) => `${k} ${v}`).join(', ') : 'none yet');
  const g = svg('svg', { viewBox: `0 0 ${W} ${H}`, width: '100%', role: 'img', 'aria-label': label, class: 'chart', id: 'usage-chart' },
    svg('line', { x1: pad, y1: H - pad, x2: W - pad, y2: H - pad, class: 'axis' }),
    svg('text', { x: pad, y: 14, class: 'tick' }, fmtNum(max) + ' tokens'));
  rows.forEach(([k, v], i) => {
    const bh = ((H - pad * 2) * v) / max;
    const x = pad + i * bw + bw * 0.15;
    g.append(svg('rect', { x, y: H - pad - bh, width: bw * 0.7, height: bh, class: 'bar' }, svg('title', {}, `${k}: ${fmtNum(v)} tokens`)));
    if (rows.length <= 12 || i % Math.ceil(rows.length / 12) === 0) {
      g.append(svg('text', { x: x + bw * 0.35, y: H - pad + 16, class: 'tick', 'text-anchor': 'middle' }, period === 'hour' ? k.slice(11, 16) : k.slice(5)));
    }
  });
  return g;
}

function budgets(convs) {
  const list = convs.filter((c) => c.budget > 0);
  if (!list.length) return h('p', {}, 'No conversation has a token budget.');
  return table('Conversations with a token budget', ['Conversation', 'Budget', 'Spent (metered)', 'Left'],
    h('tbody', {}, list.map((c) => {
      const spent = c.metered ? tokens(c.metered) : 0;
      return h('tr', {}, h('td', {}, h('a', { href: '#/conversations/' + encodeURIComponent(c.id) }, c.id)),
        h('td', { class: 'num' }, fmtNum(c.budget)), h('td', { class: 'num' }, fmtNum(spent)), h('td', { class: 'num' }, fmtNum(Math.max(c.budget - spent, 0))));
    })));
}

export async function usagePage(main, { signal }) {
  const { conversations } = await api.call('/v1/conversations', { signal });
  const group = h('select', { id: 'usage-group' }, h('option', { value: 'agent' }, 'agent'), h('option', { value: 'model' }, 'model'), h('option', { value: 'owner' }, 'token name'));
  const period = h('select', { id: 'usage-period' }, h('option', { value: 'day' }, 'day (UTC)'), h('option', { value: 'hour' }, 'hour (UTC)'));
  const out = h('div');
  const show = () => {
    const rows = totals(conversations, group.value);
    const all = totals(conversations, 'agent').reduce((s, r) => ({ agent: s.agent + r.agent, metered: s.metered + r.metered }), { agent: 0, metered: 0 });
    out.replaceChildren(
      h('dl', { class: 'facts' }, h('dt', {}, 'Tokens (agent)'), h('dd', { id: 'usage-agent' }, fmtNum(all.agent)),
        h('dt', {}, 'Tokens (metered at the gateway)'), h('dd', { id: 'usage-metered' }, fmtNum(all.metered))),
      h('section', { class: 'card', 'aria-labelledby': 'chart-title' }, h('h2', { id: 'chart-title' }, `Tokens per ${period.value}`), chart(conversations, period.value)),
      table(`Tokens by ${group.options[group.selectedIndex].text}`, [group.options[group.selectedIndex].text, 'Conversations', 'Tokens (agent)', 'Tokens (metered)', 'Model requests'],
        h('tbody', { id: 'usage-rows' }, rows.map((r) => h('tr', {}, h('td', {}, r.key), h('td', { class: 'num' }, fmtNum(r.conversations)),
          h('td', { class: 'num' }, fmtNum(r.agent)), h('td', { class: 'num' }, fmtNum(r.metered)), h('td', { class: 'num' }, fmtNum(r.requests)))))),
      h('section', { class: 'card' }, h('h2', {}, 'Budgets'), budgets(conversations)));
  };
  group.addEventListener('change', show);
  period.addEventListener('change', show);
  main.append(h('h1', { tabindex: -1 }, 'Usage'),
    h('p', { class: 'hint' }, "From the stored conversations you can see: each one's tokens count at its last update. Metered tokens are the credential gateway's own count (keyless agents)."),
    h('div', { class: 'row filters' }, field('Group by', group), field('Period', period)), out);
  show();
}
