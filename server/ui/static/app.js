// app.js: the console's shell: sign-in, the navigation and the router.
// Pages are named by the URL's fragment (#/turns, #/turns/ID, ...), so the
// server serves one page and nothing about a page reaches its logs.
import { h, field, errorBox } from './dom.js';
import * as api from './api.js';
import { turnsPage, turnPage } from './turns.js';
import { startPage } from './start.js';
import { conversationsPage, conversationPage } from './conversations.js';
import { usagePage } from './usage.js';
import { fleetPage } from './fleet.js';

const routes = [
  [/^#\/turns\/([^/]+)$/, turnPage, 'Turn'],
  [/^#\/turns$/, turnsPage, 'Turns'],
  [/^#\/start$/, startPage, 'Start a turn'],
  [/^#\/conversations\/([^/]+)$/, conversationPage, 'Conversation'],
  [/^#\/conversations$/, conversationsPage, 'Conversations'],
  [/^#\/usage$/, usagePage, 'Usage'],
  [/^#\/server$/, fleetPage, 'Server'],
];

let open = false; // the server needs no token (a library's server)
let shown = null; // the AbortController of the page shown
let refusal = '';
let renders = 0; // pages shown so far: main's data-ready once a page is ready

async function signedIn() {
  if (api.token() || open) return true;
  try {
    open = await api.check('');
  } catch {
    open = false;
  }
  return open;
}

function signinPage(main) {
  const input = h('input', { type: 'password', id: 'token', name: 'token', autocomplete: 'off', required: true, spellcheck: 'false' });
  const stay = h('input', { type: 'checkbox', id: 'stay' });
  const status = h('p', { id: 'signin-status', role: 'alert', class: refusal ? 'error' : '' }, refusal);
  refusal = '';
  const form = h('form', { class: 'card signin', 'aria-labelledby': 'signin-title' },
    h('h1', { id: 'signin-title', tabindex: -1 }, 'Sign in'),
    h('p', {}, 'Use an API token of this server (', h('code', {}, 'outpost serve token add NAME'), '). It is kept in this tab only, unless you choose to stay signed in, and sent only as an Authorization header.'),
    field('API token', input),
    h('div', { class: 'check' }, stay, h('label', { for: 'stay' }, 'Stay signed in on this browser')),
    h('button', { type: 'submit' }, 'Sign in'),
    status);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    status.className = '';
    status.textContent = 'Checking…';
    try {
      if (await api.check(input.value.trim())) {
        api.keep(input.value.trim(), stay.checked);
        location.hash = '#/turns';
        return;
      }
      status.className = 'error';
      status.textContent = 'The server refused this token (401). Check it, or make a new one with outpost serve token add NAME.';
    } catch (e) {
      status.className = 'error';
      status.textContent = e.message;
    }
    input.focus();
  });
  main.append(form);
  input.focus();
}

function markNav(hash) {
  for (const a of document.querySelectorAll('#nav a')) {
    const here = hash === a.getAttribute('href') || hash.startsWith(a.getAttribute('href') + '/');
    if (here) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

async function render() {
  let hash = location.hash;
  if (hash === '' || hash === '#/') hash = '#/turns';
  if (!hash.startsWith('#/')) return; // the skip link's #main
  shown?.abort();
  const ctl = new AbortController();
  shown = ctl;
  const started = performance.now();
  const main = document.getElementById('main');
  main.replaceChildren();
  delete main.dataset.ready;
  const signin = hash === '#/signin';
  if (!signin && !(await signedIn())) {
    location.replace('#/signin');
    return;
  }
  if (ctl.signal.aborted) return;
  document.getElementById('signout').hidden = signin || open;
  document.getElementById('nav').hidden = signin;
  markNav(hash);
  const found = signin ? [/^#\/signin$/, signinPage, 'Sign in'] : routes.find(([re]) => re.test(hash));
  if (!found) {
    document.title = 'Not found · outpost';
    main.append(h('h1', {}, 'Not found'), h('p', {}, 'No such page. ', h('a', { href: '#/turns' }, 'See the turns.')));
    return;
  }
  const [re, page, title] = found;
  document.title = title + ' · outpost';
  const params = hash.match(re).slice(1).map(decodeURIComponent);
  try {
    await page(main, { signal: ctl.signal, params });
  } catch (e) {
    if (!ctl.signal.aborted) main.append(errorBox(e));
  }
  if (ctl.signal.aborted) return;
  main.dataset.ready = String(++renders);
  window.__outpostRenderMS = performance.now() - started; // read by the benchmark
  const h1 = main.querySelector('h1');
  // Keyboard and screen-reader users land on the new page's heading.
  if (h1 && !signin && !main.contains(document.activeElement)) h1.focus();
}

api.onUnauthorized(() => {
  api.forget();
  refusal = 'The server refused the token (401): sign in again.';
  if (location.hash !== '#/signin') location.hash = '#/signin';
});

document.getElementById('signout').addEventListener('click', () => {
  api.forget();
  location.hash = '#/signin';
});
window.addEventListener('hashchange', render);
render();
