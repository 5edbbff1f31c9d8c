package ui_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/outposthq/outpost/harness/claude"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/server"
	"github.com/outposthq/outpost/server/ui"
)

// TestHeaders: the console's files are served without a token, with the
// strict CSP and the other security headers; the API behind them still
// wants one; --ui=false (Options.DisableUI) leaves no /ui/ route.
func TestHeaders(t *testing.T) {
	f := shared(t)
	for _, p := range []string{"/ui", "/ui/", "/ui/app.js", "/ui/style.css", "/ui/no-such-file"} {
		resp, err := http.Get(f.url + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := resp.Header
		if resp.StatusCode != 200 || h.Get("Content-Security-Policy") != ui.CSP || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: %d, headers %v", p, resp.StatusCode, h)
		}
		if p == "/ui/app.js" && !strings.HasPrefix(h.Get("Content-Type"), "text/javascript") {
			t.Errorf("GET %s: Content-Type %q", p, h.Get("Content-Type"))
		}
	}
	for _, d := range []string{"default-src 'self'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
		if !strings.Contains(ui.CSP, d) || strings.Contains(ui.CSP, "unsafe-") {
			t.Errorf("CSP %q: want %s and nothing unsafe", ui.CSP, d)
		}
	}
	if code := f.api(t, "", "GET", "/v1/turns", nil, nil); code != 401 {
		t.Errorf("GET /v1/turns without a token: %d, want 401", code)
	}
	off, err := newFixture(func(o *server.Options) { o.DisableUI = true; o.PoolSize = -1 })
	if err != nil {
		t.Fatal(err)
	}
	defer off.closer()
	if code := off.api(t, off.alice, "GET", "/ui/", nil, nil); code != 404 {
		t.Errorf("GET /ui/ with DisableUI: %d, want 404", code)
	}
}

// TestSignIn: a wrong token is refused and stored nowhere; the right one
// signs in, is kept in sessionStorage only (not in localStorage, not in
// the URL), and signing out forgets it.
func TestSignIn(t *testing.T) {
	b := newTab(t)
	b.signIn("opt_wrong")
	b.waitText("#signin-status", "refused this token (401)")
	if got := eval[string](b, `(sessionStorage.getItem('outpost.token') || '') + (localStorage.getItem('outpost.token') || '')`); got != "" {
		t.Errorf("a refused token was stored: %q", got)
	}
	eval[bool](b, `(document.getElementById('token').value = '', true)`)
	// From the keyboard: the token, then Enter.
	b.do("the right token", chromedp.SendKeys(chromedp.CSS("#token"), b.f.alice+"\r"))
	b.waitText("main h1", "Turns")
	if got := eval[string](b, `sessionStorage.getItem('outpost.token') + '|' + localStorage.getItem('outpost.token') + '|' + location.href`); got != b.f.alice+"|null|"+b.f.url+"/ui/#/turns" {
		t.Errorf("after sign-in: session|local|URL = %q", got)
	}
	b.do("signing out", chromedp.Click(chromedp.CSS("#signout")))
	b.waitText("main h1", "Sign in")
	if got := eval[string](b, `String(sessionStorage.getItem('outpost.token'))`); got != "null" {
		t.Errorf("after sign-out the token is still kept: %q", got)
	}
}

// TestTurnLive: a turn started from the start page (which shows alice's
// token limit, and takes a conversation budget) streams its events into
// its page as they come, which names its replica, model and prompt; a
// steer message from the page reaches the agent, and the result is
// shown, then the conversation's prompts and answers.
func TestTurnLive(t *testing.T) {
	b := newTab(t)
	b.signIn(b.f.alice)
	b.waitText("main h1", "Turns")
	b.open("#/start")
	b.waitText("#limits", "per hour")
	if got := eval[string](b, `document.getElementById('limits').innerText`); !strings.Contains(got, "alice") || !strings.Contains(got, "50,000") || !strings.Contains(got, "400,000") || strings.Contains(got, "admin") {
		t.Errorf("alice's token limits: %q", got)
	}
	before := eval[string](b, `document.getElementById('main').dataset.ready`)
	b.do("starting a turn", chromedp.SendKeys(chromedp.CSS("#prompt"), "hello #tool #slow=2000"), chromedp.SendKeys(chromedp.CSS("#model"), "echo-large"),
		chromedp.SendKeys(chromedp.CSS("#budget"), "90000"), chromedp.Click(chromedp.CSS("#start")))
	b.waitReady(before)
	b.waitText("#events", "step 3") // live: the turn is still running
	if state := eval[string](b, `document.getElementById('turn-state').textContent`); state != "running" {
		t.Errorf("turn state %q while its deltas arrive, want running", state)
	}
	if got := eval[string](b, `['turn-replica', 'turn-model', 'turn-prompt'].map((id) => document.getElementById(id).textContent).join('|')`); got != "console-1|echo-large|hello #tool #slow=2000" {
		t.Errorf("the running turn's replica|model|prompt: %q", got)
	}
	b.waitText("#events", "shell") // its tool call
	b.do("steering", chromedp.SendKeys(chromedp.CSS("#steer-text"), "wrap up now"), chromedp.Click(chromedp.CSS("#steer")))
	b.waitText(".result", "steered: wrap up now")
	b.waitText("#turn-state", "finished")
	if got := eval[string](b, `document.querySelector('.result dd').textContent`); got != "ok" {
		t.Errorf("result %q, want ok", got)
	}
	b.waitText("#history", "echo: hello #tool #slow=2000")
	if got := eval[string](b, `document.querySelector('#history .prompt').textContent + '|' + (document.getElementById('turn-tokens').textContent !== '')`); got != "hello #tool #slow=2000|true" {
		t.Errorf("the conversation's first prompt|tokens shown: %q", got)
	}
	conv := eval[string](b, `document.querySelector('.result a[href^="#/conversations/"]').textContent`)
	var u server.Usage
	if code := b.f.api(t, b.f.alice, "GET", "/v1/conversations/"+conv+"/usage", nil, &u); code != 200 || u.Budget != 90000 {
		t.Errorf("the budget given on the start page: %d %+v", code, u)
	}
}

// TestServerPage: an operator's server page lists the fleet's replicas
// with their heartbeats, and what garbage collection would remove (a home
// a dead process left); its button removes it, and the page shows the
// run. A client's page shows neither.
func TestServerPage(t *testing.T) {
	b := newTab(t)
	b.signIn(b.f.alice)
	b.waitText("main h1", "Turns")
	b.open("#/server")
	b.waitText("#gc", "operator's token only")
	b.waitText("#fleet", "operator's token only")
	b.do("signing out", chromedp.Click(chromedp.CSS("#signout")))
	b.waitText("main h1", "Sign in")
	dead := b.f.deadHome(t, "dead-page")
	b.signIn(b.f.admin)
	b.waitText("main h1", "Turns")
	b.open("#/server")
	b.waitText("#fleet", "console-1 (this one)")
	b.waitText("#fleet", "console-2")
	if got := eval[string](b, `document.getElementById('fleet').innerText`); strings.Contains(got, "lost") {
		t.Errorf("a live replica is shown lost: %q", got)
	}
	b.waitText("#gc", "local-dead-page")
	b.do("running gc", chromedp.Click(chromedp.CSS("#gc-run")))
	b.waitText("#gc-status", "Collected.")
	b.waitText("#gc", "The last collection")
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Errorf("the dead home after gc from the page: %v", err)
	}
}

// TestCancel: a running turn is listed on the turns page; its page's
// cancel button ends it with code cancelled.
func TestCancel(t *testing.T) {
	b := newTab(t)
	st := b.f.startTurn(t, map[string]any{"prompt": "#slow=2000 long"})
	b.signIn(b.f.alice)
	b.waitText("main h1", "Turns")
	b.waitText(`tr[data-turn="`+st.ID+`"]`, "running")
	before := eval[string](b, `document.getElementById('main').dataset.ready`)
	b.do("opening the turn", chromedp.Click(chromedp.CSS(`a[href="#/turns/`+st.ID+`"]`)))
	b.waitReady(before)
	b.waitText("#events", "step 2")
	b.do("cancelling", chromedp.Click(chromedp.CSS("#cancel")))
	b.waitText(".result", "cancelled")
	b.open("#/turns")
	b.waitText(`tr[data-turn="`+st.ID+`"]`, "cancelled")
}

// TestHostileOutput: an agent's output that holds markup and script is
// shown as text and runs nothing; and the CSP alone stops an inline
// script that got into the page anyway.
func TestHostileOutput(t *testing.T) {
	const hostile = `<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2"><b id=bold>bold</b>`
	b := newTab(t)
	st := b.f.startTurn(t, map[string]any{"prompt": hostile})
	b.f.result(t, st.ID)
	b.signIn(b.f.alice)
	b.waitText("main h1", "Turns")
	b.open("#/turns/" + st.ID)
	b.waitText(".result .answer", hostile)
	b.waitText("#events", hostile)
	if got := eval[string](b, `typeof window.__pwned + ' ' + document.querySelectorAll('main img, main script, #bold').length`); got != "undefined 0" {
		t.Errorf("the agent's markup became elements or ran: %q", got)
	}
	// Escaping aside, an inline script added to the page does not run.
	got := eval[string](b, `(() => { const s = document.createElement('script'); s.textContent = 'window.__inline = 1'; document.body.append(s); return typeof window.__inline; })()`)
	if got != "undefined" {
		t.Errorf("an inline script ran despite the CSP: window.__inline is %s", got)
	}
}

// TestConversationResume: the conversations page finds a conversation by
// search, its page shows it, and resuming it from there runs its next
// turn.
func TestConversationResume(t *testing.T) {
	b := newTab(t)
	_, conv := finished()
	b.signIn(b.f.alice)
	b.waitText("main h1", "Turns")
	b.open("#/conversations")
	b.do("searching", chromedp.SendKeys(chromedp.CSS("#search"), conv[:10]))
	b.waitText("table.list tbody", conv)
	before := eval[string](b, `document.getElementById('main').dataset.ready`)
	b.do("opening it", chromedp.Click(chromedp.CSS(`a[href="#/conversations/`+conv+`"]`)))
	b.waitReady(before)
	b.waitText("main h1", conv)
	before = eval[string](b, `document.getElementById('main').dataset.ready`)
	b.do("resuming", chromedp.SendKeys(chromedp.CSS("#resume-prompt"), "second words"), chromedp.Click(chromedp.CSS("#resume")))
	b.waitReady(before)
	b.waitText(".result .answer", "echo: second words (turn 2)")
	b.waitText(".result", conv)
}

// TestAccessibility: axe-core finds no serious or critical violation on
// any page, signed out and in. With $OUTPOST_CONSOLE_SCREENSHOTS set to a
// directory (scripts/screenshots.sh), each page's screenshot is written
// there as console-PAGE.png.
func TestAccessibility(t *testing.T) {
	b := newTab(t)
	turn, conv := finished()
	if os.Getenv("OUTPOST_CONSOLE_SCREENSHOTS") != "" {
		// A fuller turns page for the pictures: one turn running, one
		// cancelled.
		for _, p := range []string{"#slow=50 stopped midway", "#slow=2000 refactor the parser"} {
			st := b.f.startTurn(t, map[string]any{"prompt": p})
			t.Cleanup(func() { b.f.api(t, b.f.alice, "POST", "/v1/turns/"+st.ID+"/cancel", nil, nil) })
			if strings.Contains(p, "midway") {
				b.f.api(t, b.f.alice, "POST", "/v1/turns/"+st.ID+"/cancel", nil, nil)
				b.f.result(t, st.ID)
			}
		}
		b.f.deadHome(t, "dead-shot") // the server page's gc lists it
	}
	b.do("the sign-in page", chromedp.Navigate(b.f.url+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.audit("signin")
	b.signIn(b.f.admin) // an operator's console shows every page in full (the fleet, gc, every limit)
	b.waitText("main h1", "Turns")
	for _, p := range []struct{ name, hash, wait string }{
		{"turns", "#/turns", turn},
		{"turn", "#/turns/" + turn, "The conversation so far"},
		{"start", "#/start", "per hour"},
		{"conversations", "#/conversations", conv},
		{"conversation", "#/conversations/" + conv, "Turns and their changes"},
		{"usage", "#/usage", "Tokens per day"},
		{"server", "#/server", "console-2"},
	} {
		b.open(p.hash)
		b.waitText("main", p.wait)
		b.audit(p.name)
	}
	// From the keyboard: Enter on a page's link shows the page, and the
	// focus moves to its heading.
	eval[bool](b, `(document.querySelector('#nav a[href="#/turns"]').focus(), true)`)
	before := eval[string](b, `document.getElementById('main').dataset.ready`)
	b.do("Enter on the Turns link", chromedp.KeyEvent("\r"))
	b.waitReady(before)
	if got := eval[string](b, `document.activeElement.tagName + ' ' + document.activeElement.textContent`); got != "H1 Turns" {
		t.Errorf("focus after a page change from the keyboard: %q, want the heading", got)
	}
}

// audit runs axe-core on the page shown and fails on serious and
// critical violations; it also takes the page's screenshot when asked.
func (b *tab) audit(page string) {
	b.t.Helper()
	if eval[bool](b, `typeof axe === 'undefined'`) {
		axe, err := os.ReadFile(filepath.Join("testdata", "axe-core", "axe.min.js"))
		if err != nil {
			b.t.Fatal(err)
		}
		// Injected through the DevTools protocol, which the page's CSP
		// does not govern; axe itself needs no eval.
		eval[bool](b, string(axe)+"\n;true")
	}
	found := eval[[]string](b, `axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice'] } })
		.then((r) => r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
		.map((v) => v.impact + ' ' + v.id + ': ' + v.help + ' at ' + v.nodes.map((n) => n.target.join(' ')).join(', ')))`)
	for _, v := range found {
		b.t.Errorf("page %s: %s", page, v)
	}
	dir := os.Getenv("OUTPOST_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "console-"+page+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// TestUsageClaude: the usage page's totals grow by what a real claude
// turn against the fake Anthropic API spent, metered at the credential
// gateway, under claude's row and the token's name.
func TestUsageClaude(t *testing.T) {
	needBrowser(t)
	bin := testenv.RequireCLI(t, "claude")
	fake := anthropic.New(t, anthropic.Options{})
	f, err := newFixture(func(o *server.Options) {
		o.Environ = []string{"PATH=" + filepath.Dir(bin) + ":" + os.Getenv("PATH"), "ANTHROPIC_BASE_URL=" + fake.URL(), "ANTHROPIC_API_KEY=sk-ant-console"}
		o.PoolSize = -1
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.closer()
	b := openTab(t, f)
	b.signIn(f.alice)
	b.waitText("main h1", "Turns")
	b.open("#/usage")
	if got := eval[string](b, `document.getElementById('usage-metered').textContent`); got != "0" {
		t.Fatalf("metered tokens before any turn: %q", got)
	}
	st := f.startTurn(t, map[string]any{"agent": "claude", "prompt": "say hi",
		"options": map[string]string{claude.OptionMaxRetries: "0", claude.OptionPermissionMode: "bypassPermissions"}})
	res := f.result(t, st.ID)
	if res["error"] != nil {
		t.Fatalf("the claude turn failed: %v", res["error"])
	}
	var u server.Usage
	if code := f.api(t, f.alice, "GET", "/v1/conversations/"+res["conversation"].(string)+"/usage", nil, &u); code != 200 || u.Metered == nil || u.Metered.Tokens() == 0 {
		t.Fatalf("the conversation's usage: %d %+v", code, u)
	}
	want := fmt.Sprintf("%d", u.Metered.Tokens())
	b.open("#/turns")
	b.open("#/usage")
	b.waitText("#usage-metered", localeNum(u.Metered.Tokens()))
	b.waitText("#usage-rows", "claude")
	b.do("grouping by token name", chromedp.SetValue(chromedp.CSS("#usage-group"), "owner"))
	b.waitText("#usage-rows", "alice")
	if n := len(fake.MessageRequests()); n == 0 {
		t.Errorf("the fake API received no call (metered %s)", want)
	}
}

// localeNum is n as the console prints it (en-US grouping).
func localeNum(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// TestConversationDelete: deleting a conversation from its page asks
// first; "Keep it" keeps it, "Delete for good" deletes it.
func TestConversationDelete(t *testing.T) {
	b := newTab(t)
	res := b.f.result(t, b.f.startTurn(t, map[string]any{"prompt": "short-lived"}).ID)
	conv := res["conversation"].(string)
	b.signIn(b.f.alice)
	b.waitText("main h1", "Turns")
	b.open("#/conversations/" + conv)
	b.do("asking to delete", chromedp.Click(chromedp.CSS("#delete")), chromedp.WaitVisible(chromedp.CSS("#delete-yes")))
	b.do("keeping it", chromedp.Click(chromedp.CSS("#delete-no")), chromedp.WaitNotVisible(chromedp.CSS("#delete-yes")))
	if code := b.f.api(t, b.f.alice, "GET", "/v1/conversations/"+conv, nil, nil); code != 200 {
		t.Fatalf("after keep it: GET the conversation: %d", code)
	}
	before := eval[string](b, `document.getElementById('main').dataset.ready`)
	b.do("deleting it", chromedp.Click(chromedp.CSS("#delete")), chromedp.Click(chromedp.CSS("#delete-yes")))
	b.waitReady(before)
	b.waitText("main h1", "Conversations")
	if code := b.f.api(t, b.f.alice, "GET", "/v1/conversations/"+conv, nil, nil); code != 404 {
		t.Errorf("after delete: GET the conversation: %d, want 404", code)
	}
}
