// dom.js: building the page. Every text goes in as a text node
// (textContent), never as HTML: an agent's output is hostile input.

// h makes an element: attrs are attributes (functions under on* are
// event listeners; a string handler is refused), kids are nodes or text.
export function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v == null || v === false) continue;
    if (k.startsWith('on')) {
      if (typeof v !== 'function') throw new Error('event handlers must be functions');
      el.addEventListener(k.slice(2), v);
    } else if (k === 'class') {
      el.className = v;
    } else {
      el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  add(el, kids);
  return el;
}

// add appends nodes or text (as text nodes) to el.
export function add(el, kids) {
  for (const k of [kids].flat(Infinity)) {
    if (k == null || k === false) continue;
    el.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return el;
}

// field is a labelled form control: the label names the control by its id.
export function field(label, control, hint) {
  const id = control.id || (control.id = 'f-' + Math.random().toString(36).slice(2, 9));
  const kids = [h('label', { for: id }, label), control];
  if (hint) {
    const hid = id + '-hint';
    control.setAttribute('aria-describedby', hid);
    kids.push(h('p', { class: 'hint', id: hid }, hint));
  }
  return h('div', { class: 'field' }, kids);
}

// table is a table with a caption, column headers and a tbody to fill.
export function table(caption, columns, body) {
  return h('table', { class: 'list' },
    h('caption', {}, caption),
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col' }, c)))),
    body);
}

export function errorBox(err) {
  const msg = err && err.message ? err.message : String(err);
  return h('p', { class: 'error', role: 'alert' }, msg);
}

export function fmtTime(s) {
  if (!s) return '';
  const d = new Date(s);
  return isNaN(d) ? '' : d.toLocaleString();
}

export function fmtMS(ms) {
  if (ms == null || isNaN(ms)) return '';
  if (ms < 1000) return Math.round(ms) + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
  return Math.floor(ms / 60000) + ' min ' + Math.round((ms % 60000) / 1000) + ' s';
}

export function fmtNum(n) {
  return n == null ? '' : Number(n).toLocaleString();
}

// tokens is every token of a usage object.
export function tokens(u) {
  if (!u) return 0;
  return (u.input_tokens || 0) + (u.output_tokens || 0) + (u.cache_read_tokens || 0) + (u.cache_write_tokens || 0);
}

// sleep waits ms, or less when signal aborts.
export function sleep(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });
}

// every runs f every ms while the page is shown (not while the tab is
// hidden), until signal aborts.
export async function every(ms, signal, f) {
  while (!signal.aborted) {
    await sleep(ms, signal);
    if (signal.aborted || document.hidden) continue;
    try { await f(); } catch (e) { if (!signal.aborted) console.warn(e); }
  }
}
