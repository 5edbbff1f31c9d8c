package ui_test

// The console in a real headless Chromium (Debian's chromium), driven
// with chromedp: one browser and one server for the whole package, a new
// tab per test (docs/console.md).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness/echo"
	_ "github.com/outposthq/outpost/providers/local" // registers "local"
	"github.com/outposthq/outpost/server"
	"github.com/outposthq/outpost/turnstore"
)

var (
	browser     context.Context // the package's one browser; each test opens a tab
	browserSkip string          // why there is none
)

func TestMain(m *testing.M) {
	echo.MaybeRun()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	path, err := chromium()
	if err != nil {
		browserSkip = err.Error()
		return m.Run()
	}
	profile, err := os.MkdirTemp("", "outpost-console-chromium-")
	if err != nil {
		browserSkip = err.Error()
		return m.Run()
	}
	defer os.RemoveAll(profile)
	alloc, stop := chromedp.NewExecAllocator(context.Background(), browserFlags(path, profile)...)
	defer stop()
	ctx, cancel := chromedp.NewContext(alloc)
	defer cancel()
	if err := chromedp.Do(ctx); err != nil {
		browserSkip = "starting " + path + ": " + err.Error()
		return m.Run()
	}
	browser = ctx
	defer shutdown()
	return m.Run()
}

// chromium is the browser the tests drive: $OUTPOST_CHROMIUM, else
// Debian's chromium (scripts/test.sh installs it).
func chromium() (string, error) {
	if p := os.Getenv("OUTPOST_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("no chromium on this machine (apt-get install chromium, as scripts/test.sh does)")
}

// browserFlags: headless, no sandbox (the tests run as root), nothing
// that reaches the network on its own, a fresh profile.
func browserFlags(path, profile string) []chromedp.ExecAllocatorOption {
	return []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.UserDataDir(profile), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.WindowSize(1280, 860),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true), chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("metrics-recording-only", true), chromedp.Flag("password-store", "basic"),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter"),
	}
}

// needBrowser skips a test without a browser, loudly; under CI=true a
// missing browser is a failure.
func needBrowser(t testing.TB) {
	t.Helper()
	if browser != nil {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("no browser for the console tests: %s", browserSkip)
	}
	t.Skipf("SKIPPING the console's browser tests: %s", browserSkip)
}

// fixture is the package's one server: TCP with tokens, a store, echo;
// a token limit for alice; a fleet of one replica ("console-1") on an
// in-process turn store that a second replica ("console-2") beats in
// too; local leases under a directory of its own (root), where a test
// plants what a dead process left (deadHome), for garbage collection.
type fixture struct {
	srv    *server.Server
	url    string
	alice  string // a client's token
	admin  string // an operator's token
	store  conversation.Store
	root   string
	closer func()
}

var (
	fixOnce sync.Once
	fix     *fixture
	fixErr  error
)

func shared(t testing.TB) *fixture {
	t.Helper()
	fixOnce.Do(func() { fix, fixErr = newFixture(nil) })
	if fixErr != nil {
		t.Fatal(fixErr)
	}
	return fix
}

func shutdown() {
	if fix != nil {
		fix.closer()
	}
}

func newFixture(mod func(*server.Options)) (*fixture, error) {
	dir, err := os.MkdirTemp("", "outpost-console-")
	if err != nil {
		return nil, err
	}
	wd := filepath.Join(dir, "work")
	os.MkdirAll(wd, 0o700)
	f := &fixture{store: conversation.NewFS(filepath.Join(dir, "store"))}
	tokFile := filepath.Join(dir, "tokens")
	if f.alice, err = server.AddToken(tokFile, "alice"); err != nil {
		return nil, err
	}
	if f.admin, err = server.AddToken(tokFile, "admin", "operator"); err != nil {
		return nil, err
	}
	tokens, err := server.LoadTokens(tokFile)
	if err != nil {
		return nil, err
	}
	turns := turnstore.NewMemory()
	if err := turns.Beat(context.Background(), "console-2"); err != nil {
		return nil, err
	}
	f.root = filepath.Join(dir, "local")
	opts := &server.Options{Store: f.store, Workdir: wd, Environ: []string{"PATH=" + os.Getenv("PATH")}, Tokens: tokens,
		PoolSize: 1, Policy: server.Policy{Secrets: []string{"gateway", "env"}},
		TokenLimits: map[string]server.TokenLimit{"alice": {PerHour: 50000, PerDay: 400000}},
		Turns:       turns, Replica: "console-1", Heartbeat: time.Hour,
		Settings: map[string]map[string]string{"local": {"root": f.root}}}
	if mod != nil {
		mod(opts)
	}
	if f.srv, err = server.New(opts); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go f.srv.Serve(ln, nil)
	f.url = "http://" + ln.Addr().String()
	f.closer = func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		f.srv.Shutdown(ctx)
		os.RemoveAll(dir)
	}
	return f, nil
}

// deadHome plants a lease home that a dead process left under the local
// provider's directory (no owner record, over a minute old), once the
// provider has made its first lease (and with it its one sweep of such
// homes): garbage collection finds it.
func (f *fixture) deadHome(t testing.TB, name string) string {
	t.Helper()
	finished()
	dead := filepath.Join(f.root, "local-"+name)
	if err := os.MkdirAll(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(dead, old, old); err != nil {
		t.Fatal(err)
	}
	return dead
}

// api sends an API request with tok and decodes the JSON answer into out.
func (f *fixture) api(t testing.TB, tok, method, path string, body, out any) int {
	t.Helper()
	var rd *strings.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	} else {
		rd = strings.NewReader("")
	}
	req, _ := http.NewRequest(method, f.url+path, rd)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		json.NewDecoder(resp.Body).Decode(out)
	}
	return resp.StatusCode
}

// startTurn starts a turn as alice.
func (f *fixture) startTurn(t testing.TB, req map[string]any) server.TurnStatus {
	t.Helper()
	var st server.TurnStatus
	if code := f.api(t, f.alice, "POST", "/v1/turns", req, &st); code != 202 {
		t.Fatalf("POST /v1/turns %v: %d", req, code)
	}
	return st
}

// result follows a turn's events to its result line.
func (f *fixture) result(t testing.TB, id string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest("GET", f.url+"/v1/turns/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+f.alice)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var last map[string]any
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			last = nil
			json.Unmarshal([]byte(data), &last)
		}
	}
	if last == nil || last["type"] != "result" {
		t.Fatalf("turn %s: no result line", id)
	}
	return last
}

// finished is a finished echo turn of alice's and its conversation, made
// once for the tests that need one.
var finished = sync.OnceValues(func() (string, string) {
	st := fix.startTurn(onceT{}, map[string]any{"prompt": "first words #tool"})
	res := fix.result(onceT{}, st.ID)
	conv, _ := res["conversation"].(string)
	return st.ID, conv
})

// onceT is the testing.TB of work done once for several tests: a failure
// panics (the first test that asked fails).
type onceT struct{ testing.TB }

func (onceT) Helper()                      {}
func (onceT) Fatal(args ...any)            { panic(fmt.Sprint(args...)) }
func (onceT) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

// tab is a browser tab of one test.
type tab struct {
	t   testing.TB
	ctx context.Context
	f   *fixture
}

func newTab(t testing.TB) *tab {
	t.Helper()
	needBrowser(t)
	if tt, ok := t.(*testing.T); ok {
		tt.Parallel() // tabs of one browser, on one server: independent
	}
	return openTab(t, shared(t))
}

// openTab opens a tab on the console of f.
func openTab(t testing.TB, f *fixture) *tab {
	ctx, closeTab := chromedp.NewContext(browser)
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute) // wall time on a loaded shared machine
	t.Cleanup(func() { cancel(); closeTab() })
	return &tab{t: t, ctx: ctx, f: f}
}

func (b *tab) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v\npage: %s", what, err, b.pageText())
	}
}

func (b *tab) pageText() string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), 5*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.hash + "\n" + document.body.innerText`))
	return s
}

func eval[T any](b *tab, js string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("evaluating %.80q: %v\npage: %s", js, err, b.pageText())
	}
	return v
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// until evaluates a promise of the condition of what, for at most a
// minute. (The console's CSP forbids eval, so chromedp.Poll, which makes
// its predicate with new Function, cannot run in its pages: conditions are
// awaited with a MutationObserver in an evaluated expression instead.)
func (b *tab) until(what, ok string, target string) {
	b.t.Helper()
	js := `new Promise((resolve) => {
		const ok = () => (` + ok + `);
		if (ok()) { resolve(true); return; }
		const o = new MutationObserver(() => { if (ok()) { o.disconnect(); resolve(true); } });
		o.observe(` + target + `, { subtree: true, childList: true, characterData: true, attributes: true });
	})`
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js, chromedp.EvalAwaitPromise)); err != nil {
		b.t.Fatalf("waiting for %s: %v\npage: %s", what, err, b.pageText())
	}
}

// waitText waits until the first element sel matches holds text.
func (b *tab) waitText(sel, text string) {
	b.t.Helper()
	b.until(fmt.Sprintf("%q in %s", text, sel), `(() => { const el = document.querySelector(`+jsString(sel)+`); return !!el && el.textContent.includes(`+jsString(text)+`); })()`, "document")
}

// open shows a page of the console (a fragment: #/turns, ...) and waits
// until it is ready (the router sets main's data-ready to the count of
// pages shown).
func (b *tab) open(hash string) {
	b.t.Helper()
	if eval[string](b, `location.hash`) == hash {
		b.waitReady("") // shown already
		return
	}
	before := eval[string](b, `document.getElementById('main').dataset.ready || ''`)
	eval[bool](b, `(location.hash = `+jsString(hash)+`, true)`)
	b.waitReady(before)
}

// waitReady waits until a page other than the one counted before is ready.
func (b *tab) waitReady(before string) {
	b.t.Helper()
	b.until("the page", `(() => { const r = document.getElementById('main').dataset.ready; return !!r && r !== `+jsString(before)+`; })()`, "document.getElementById('main')")
}

// signIn signs in on the sign-in page with tok.
func (b *tab) signIn(tok string) {
	b.t.Helper()
	b.do("the sign-in page", chromedp.Navigate(b.f.url+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	b.do("signing in", chromedp.SendKeys(chromedp.CSS("#token"), tok),
		chromedp.Click(chromedp.CSS("form.signin button[type=submit]")))
}
