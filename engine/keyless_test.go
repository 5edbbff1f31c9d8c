package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/gateway"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/memsandbox"
)

const (
	keyVar     = "KEYAGENT_API_KEY"
	keyBaseVar = "KEYAGENT_BASE_URL"
	realKey    = "sk-keyagent-REAL-0123456789abcdefghij"
)

// keyEnv is the environment of each keyagent process.
type keyEnv struct {
	mu   sync.Mutex
	envs []map[string]string
}

func (k *keyEnv) last() map[string]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.envs) == 0 {
		return nil
	}
	return k.envs[len(k.envs)-1]
}

// keyHarness is a preset with one endpoint: its program calls
// $KEYAGENT_BASE_URL/v1/ping with $KEYAGENT_API_KEY as x-api-key and
// answers with the status and body. Its configuration writes the base
// URL into a file too.
func keyHarness(def string) *harness.Harness {
	return &harness.Harness{
		Name: "keyagent",
		Request: func(in harness.Input) (harness.Command, error) {
			return harness.Command{Path: "keyagent", Args: []string{in.Prompt}}, nil
		},
		Events: echo.Events,
		Credentials: func(vars harness.Vars) (harness.Plan, error) {
			var p harness.Plan
			if v, ok := vars.Lookup(keyVar); ok {
				p.Variables = map[string]string{keyVar: v}
				p.Files = []harness.File{{Path: ".keyagent/key", Content: []byte(v), Mode: 0o600}}
			}
			return p, nil
		},
		Configuration: func(vars harness.Vars) (harness.Configuration, error) {
			var c harness.Configuration
			if v, ok := vars.Lookup(keyBaseVar); ok {
				c.Variables = map[string]string{keyBaseVar: v}
				c.Files = []harness.File{{Path: ".keyagent/config", Content: []byte("base_url = " + v + "\n"), Mode: 0o600}}
			}
			return c, nil
		},
		Endpoints: []harness.Endpoint{{
			API:     "anthropic",
			Secrets: []harness.EndpointSecret{{Variable: keyVar, Credential: "x-api-key"}},
			BaseURL: keyBaseVar,
			Default: def,
		}},
	}
}

// keyProgram is the keyagent program.
func keyProgram(seen *keyEnv) memsandbox.Program {
	return func(ctx context.Context, p *memsandbox.Proc) int {
		seen.mu.Lock()
		seen.envs = append(seen.envs, p.Env)
		seen.mu.Unlock()
		answer := "no base url"
		if base := p.Env[keyBaseVar]; base != "" {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/ping", nil)
			req.Header.Set("x-api-key", p.Env[keyVar])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answer = err.Error()
			} else {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				answer = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
			}
		}
		if len(p.Args) > 0 && p.Args[0] == "leak" {
			answer += " token " + p.Env[keyVar]
		}
		line, _ := json.Marshal(map[string]string{"type": "done", "text": answer})
		fmt.Fprintf(p.Stdout, "%s\n", line)
		return 0
	}
}

// tunneling wraps the memory provider so that its sandboxes have a
// Tunneler (a loopback listener, which the in-process programs reach).
type tunneling struct {
	driver.Provider
	mu      sync.Mutex
	tunnels int
	enforce bool          // Capabilities.Egress
	opened  driver.Egress // the last Options.Egress
}

func (p *tunneling) Capabilities() driver.Capabilities {
	c := p.Provider.Capabilities()
	c.Egress = p.enforce
	return c
}

func (p *tunneling) Open(ctx context.Context, o driver.Options) (driver.Sandbox, error) {
	p.mu.Lock()
	p.opened = o.Egress
	p.mu.Unlock()
	sb, err := p.Provider.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	return &tunnelSandbox{Sandbox: sb, p: p}, nil
}

type tunnelSandbox struct {
	driver.Sandbox
	p *tunneling
}

func (s *tunnelSandbox) LookPath(ctx context.Context, name, pathEnv string) (string, error) {
	return s.Sandbox.(driver.PathLooker).LookPath(ctx, name, pathEnv)
}

func (s *tunnelSandbox) Tunnel(context.Context) (string, net.Listener, error) {
	s.p.mu.Lock()
	s.p.tunnels++
	s.p.mu.Unlock()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	return l.Addr().String(), l, nil
}

// upstream is a fake model API recording the credentials it receives.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	keys []string
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.keys = append(u.keys, r.Header.Get("x-api-key"))
		u.mu.Unlock()
		fmt.Fprint(w, "pong "+r.URL.Path)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) received() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.keys...)
}

type keyRun struct {
	res    *engine.Result
	err    error
	events []harness.Event
	env    map[string]string
	files  map[string]string
}

// runKeyAgent runs one keyagent turn with environ on p.
func runKeyAgent(t *testing.T, p driver.Provider, h *harness.Harness, seen *keyEnv, environ []string, mod func(*engine.RunOptions)) keyRun {
	t.Helper()
	if tn, ok := p.(*tunneling); ok && tn.enforce {
		// The engine opens the sandbox, with the turn's egress.
		own := func(o *engine.RunOptions) {
			if mod != nil {
				mod(o)
			}
			o.Lease, o.Provider = nil, p
		}
		return runOnLease(t, nil, h, seen, environ, own)
	}
	lease, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Close(context.Background()) })
	return runOnLease(t, lease, h, seen, environ, mod)
}

// runOnLease runs one keyagent turn on lease.
func runOnLease(t *testing.T, lease *sandbox.Lease, h *harness.Harness, seen *keyEnv, environ []string, mod func(*engine.RunOptions)) keyRun {
	var out keyRun
	var mu sync.Mutex
	o := &engine.RunOptions{Lease: lease, Environ: environ, OnEvent: func(ev harness.Event) {
		mu.Lock()
		out.events = append(out.events, ev)
		mu.Unlock()
	}}
	if mod != nil {
		mod(o)
	}
	prompt := "hi"
	if o.Raw { // the tests' way of asking the agent to print its key
		prompt = "leak"
	}
	out.res, out.err = engine.Run(t.Context(), engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: h}, Prompt: prompt, Workdir: t.TempDir()}, o)
	out.env = seen.last()
	out.files = map[string]string{}
	if lease == nil {
		return out
	}
	sb := lease.Sandbox()
	if ts, ok := sb.(*tunnelSandbox); ok {
		sb = ts.Sandbox
	}
	if fs, ok := sb.(*memsandbox.Sandbox); ok {
		for _, name := range []string{"config", "key"} {
			if b, err := fs.FS().ReadFile(memsandbox.Home + "/.keyagent/" + name); err == nil {
				out.files[name] = string(b)
			}
		}
	}
	return out
}

func memProvider(seen *keyEnv) *memsandbox.Provider {
	return memsandbox.New(&memsandbox.Options{Programs: map[string]memsandbox.Program{"keyagent": keyProgram(seen)}})
}

// TestKeylessGateway: with an endpoint whose secret is set, the sandbox
// gets the gateway's base URL (through the sandbox's tunnel) and a token
// in place of the secret, in its environment and in the files the plans
// write; the upstream receives the real key; the result says secrets
// gateway; the token gets 401 once the turn is over, and the upstream
// sees nothing of it.
func TestKeylessGateway(t *testing.T) {
	up := newUpstream(t)
	seen := &keyEnv{}
	p := &tunneling{Provider: memProvider(seen)}
	gw := gateway.New(gateway.Options{})
	t.Cleanup(func() { gw.Close() })
	lease, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Close(context.Background()) })
	r := runOnLease(t, lease, keyHarness(""), seen, []string{keyVar + "=" + realKey, keyBaseVar + "=" + up.URL}, func(o *engine.RunOptions) { o.Gateway = gw })
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.res.Text != "200 pong /v1/ping" {
		t.Errorf("answer %q, want the upstream's through the gateway", r.res.Text)
	}
	if diff := cmp.Diff([]string{realKey}, up.received()); diff != "" {
		t.Errorf("keys the upstream received (-want +got):\n%s", diff)
	}
	if got := [2]string{r.res.Secrets, r.res.Egress}; got != [2]string{engine.SecretsGateway, engine.EgressOpen} {
		t.Errorf("secrets, egress = %v", got)
	}
	token := r.env[keyVar]
	if !strings.HasPrefix(token, "outpost-") || !strings.Contains(r.env[keyBaseVar], gateway.PathPrefix+"0") {
		t.Errorf("agent env %s=%q %s=%q, want a token and the gateway's base URL", keyVar, token, keyBaseVar, r.env[keyBaseVar])
	}
	for name, v := range r.env {
		if strings.Contains(v, realKey) || strings.Contains(v, up.URL) {
			t.Errorf("the agent's %s holds the real key or upstream", name)
		}
	}
	if r.files["key"] != token {
		t.Errorf("the credential file holds %q, want the token", r.files["key"])
	}
	if !strings.Contains(r.files["config"], gateway.PathPrefix) {
		t.Errorf("configuration file %q, want the gateway's base URL", r.files["config"])
	}
	if p.tunnels != 1 {
		t.Errorf("%d tunnels, want 1", p.tunnels)
	}
	// The turn is over: its token is refused, the upstream not contacted.
	addr, err := gw.Listen()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+gateway.PathPrefix+"0/v1/ping", nil)
	req.Header.Set("x-api-key", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || len(up.received()) != 1 {
		t.Errorf("after the turn: status %d, upstream saw %d requests; want 401 and 1", resp.StatusCode, len(up.received()))
	}
	// The token is redacted like the key: an agent that prints it shows
	// nothing of it.
	r3 := runOnLease(t, lease, keyHarness(""), seen, []string{keyVar + "=" + realKey, keyBaseVar + "=" + up.URL}, func(o *engine.RunOptions) { o.Gateway, o.Raw = gw, true })
	if tok := seen.last()[keyVar]; r3.err != nil || strings.Contains(r3.res.Text, tok) || !strings.Contains(r3.res.Text, "token [REDACTED]") {
		t.Errorf("an agent printing its token: %v, answer %q", r3.err, r3.res.Text)
	}
	// A second turn on the same lease gets a new token, and the plans
	// again.
	r2 := runOnLease(t, lease, keyHarness(""), seen, []string{keyVar + "=" + realKey, keyBaseVar + "=" + up.URL}, func(o *engine.RunOptions) { o.Gateway = gw })
	if r2.err != nil || r2.env[keyVar] == token || r2.res.Text != "200 pong /v1/ping" {
		t.Errorf("second turn: %v, token renewed %v, answer %q", r2.err, r2.env[keyVar] != token, r2.res.Text)
	}
	if r2.files["key"] != r2.env[keyVar] {
		t.Error("second turn: the credential file does not hold its token")
	}
	if p.tunnels != 1 {
		t.Errorf("%d tunnels after two turns on one gateway, want 1 (kept by the lease)", p.tunnels)
	}
}

// TestKeylessModes: which secrets mode a turn runs with, the notice of a
// fallback to env, and the egress proxy variables.
func TestKeylessModes(t *testing.T) {
	up := newUpstream(t)
	withKey := []string{keyVar + "=" + realKey, keyBaseVar + "=" + up.URL}
	for _, tt := range []struct {
		name     string
		h        *harness.Harness
		tunnel   bool
		environ  []string
		mod      func(*engine.RunOptions)
		enforce  bool // the provider enforces egress
		secrets  string
		egress   string
		notice   bool
		agentKey string // the agent's KEYAGENT_API_KEY: "real", "token" or ""
	}{
		{name: "asked env", h: keyHarness(""), tunnel: true, environ: withKey, mod: func(o *engine.RunOptions) { o.Secrets = engine.SecretsEnv },
			secrets: engine.SecretsEnv, egress: engine.EgressOpen, agentKey: "real"},
		{name: "no base URL and no default", h: keyHarness(""), tunnel: true, environ: []string{keyVar + "=" + realKey},
			secrets: engine.SecretsEnv, egress: engine.EgressOpen, notice: true, agentKey: "real"},
		{name: "the default upstream", h: keyHarness(up.URL), tunnel: true, environ: []string{keyVar + "=" + realKey},
			secrets: engine.SecretsGateway, egress: engine.EgressOpen, agentKey: "token"},
		{name: "no tunnel", h: keyHarness(""), environ: withKey,
			secrets: engine.SecretsEnv, egress: engine.EgressOpen, notice: true, agentKey: "real"},
		{name: "no secret", h: keyHarness(""), tunnel: true, environ: []string{keyBaseVar + "=" + up.URL},
			secrets: engine.SecretsNone, egress: engine.EgressOpen},
		{name: "gateway on a provider that enforces egress", h: keyHarness(up.URL), tunnel: true, enforce: true, environ: []string{keyVar + "=" + realKey},
			secrets: engine.SecretsGateway, egress: engine.EgressGateway, agentKey: "token"},
		// The secrets enter the sandbox: its model calls go out directly,
		// so the default egress leaves the network open.
		{name: "env fallback on a provider that enforces egress", h: keyHarness(""), tunnel: true, enforce: true, environ: []string{keyVar + "=" + realKey},
			secrets: engine.SecretsEnv, egress: engine.EgressOpen, notice: true, agentKey: "real"},
		{name: "asked env on a provider that enforces egress", h: keyHarness(""), tunnel: true, enforce: true, environ: withKey,
			mod: func(o *engine.RunOptions) { o.Secrets = engine.SecretsEnv }, secrets: engine.SecretsEnv, egress: engine.EgressOpen, agentKey: "real"},
		{name: "env fallback with gateway egress asked", h: keyHarness(""), tunnel: true, enforce: true, environ: []string{keyVar + "=" + realKey},
			mod: func(o *engine.RunOptions) { o.Egress = engine.EgressGateway }, secrets: engine.SecretsEnv, egress: engine.EgressGateway, notice: true, agentKey: "real"},
		{name: "allowlist on a provider that cannot enforce it", h: keyHarness(""), tunnel: true, environ: withKey,
			mod:     func(o *engine.RunOptions) { o.EgressAllow = []string{"docs.example.com", "*.example.org:443"} },
			secrets: engine.SecretsGateway, egress: engine.EgressUnenforced, agentKey: "token"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			seen := &keyEnv{}
			var p driver.Provider = memProvider(seen)
			var tn *tunneling
			if tt.tunnel {
				tn = &tunneling{Provider: p, enforce: tt.enforce}
				p = tn
			}
			r := runKeyAgent(t, p, tt.h, seen, tt.environ, tt.mod)
			if r.err != nil {
				t.Fatal(r.err)
			}
			if got := [2]string{r.res.Secrets, r.res.Egress}; got != [2]string{tt.secrets, tt.egress} {
				t.Errorf("secrets, egress = %v, want %s %s", got, tt.secrets, tt.egress)
			}
			if tt.enforce && string(tn.opened) != tt.egress {
				t.Errorf("the sandbox was opened with egress %q, want %q", tn.opened, tt.egress)
			}
			var notices []string
			for _, ev := range r.events {
				if ev.Type == harness.EventNotice && ev.Kind == "secrets" {
					notices = append(notices, ev.Text)
				}
			}
			if (len(notices) > 0) != tt.notice {
				t.Errorf("notices %q, want one: %v", notices, tt.notice)
			}
			key := r.env[keyVar]
			switch {
			case tt.agentKey == "real" && key != realKey,
				tt.agentKey == "token" && !strings.HasPrefix(key, "outpost-"),
				tt.agentKey == "" && key != "":
				t.Errorf("the agent's key %q, want %s", key, tt.agentKey)
			}
			if tt.egress == engine.EgressUnenforced {
				proxy := r.env["HTTPS_PROXY"]
				if proxy != "http://outpost:"+key+"@"+strings.TrimPrefix(strings.Split(r.env[keyBaseVar], gateway.PathPrefix)[0], "http://") ||
					r.env["http_proxy"] != proxy || r.env["NO_PROXY"] != "127.0.0.1,localhost" {
					t.Errorf("proxy variables %q %q %q", proxy, r.env["http_proxy"], r.env["NO_PROXY"])
				}
				if r.env["SSL_CERT_FILE"] != "" {
					t.Errorf("a CA without rules: SSL_CERT_FILE %q", r.env["SSL_CERT_FILE"])
				}
			} else if r.env["HTTPS_PROXY"] != "" {
				t.Errorf("HTTPS_PROXY %q without an allowlist", r.env["HTTPS_PROXY"])
			}
		})
	}
}

// TestKeylessEgressRules: an allowlist entry with method or path rules
// puts the grant's CA in the lease's home, alone and as a bundle, and the
// variables that make Node, Python, curl, git and Go trust it in the
// agent's environment; the CA's key is not there.
func TestKeylessEgressRules(t *testing.T) {
	up := newUpstream(t)
	seen := &keyEnv{}
	p := &tunneling{Provider: memProvider(seen)}
	lease, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Close(context.Background()) })
	r := runOnLease(t, lease, keyHarness(up.URL), seen, []string{keyVar + "=" + realKey}, func(o *engine.RunOptions) {
		o.EgressAllow = []string{"github.com GET,POST /org/repo.git/info/refs /org/repo.git/git-upload-pack"}
	})
	if r.err != nil {
		t.Fatal(r.err)
	}
	ca, bundle := memsandbox.Home+"/.outpost/egress-ca.pem", memsandbox.Home+"/.outpost/egress-ca-bundle.pem"
	want := gateway.TrustVariables(ca, bundle)
	for k, v := range want {
		if r.env[k] != v {
			t.Errorf("%s=%q, want %q", k, r.env[k], v)
		}
	}
	fs := lease.Sandbox().(*tunnelSandbox).Sandbox.(*memsandbox.Sandbox).FS()
	caPEM, err1 := fs.ReadFile(ca)
	bundlePEM, err2 := fs.ReadFile(bundle)
	if err1 != nil || err2 != nil || !strings.HasPrefix(string(caPEM), "-----BEGIN CERTIFICATE-----") || !strings.HasPrefix(string(bundlePEM), string(caPEM)) {
		t.Fatalf("the CA files: %v %v %q", err1, err2, caPEM)
	}
	if strings.Contains(string(caPEM)+string(bundlePEM), "PRIVATE KEY") {
		t.Error("a private key in the sandbox")
	}
}

// TestKeylessExplicitEnv: a variable of the endpoint given with --env is
// passed as it is, and the endpoint falls back to env.
func TestKeylessExplicitEnv(t *testing.T) {
	up := newUpstream(t)
	seen := &keyEnv{}
	lease, err := sandbox.Acquire(t.Context(), &tunneling{Provider: memProvider(seen)}, driver.Options{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Close(context.Background()) })
	var notices []string
	res, err := engine.Run(t.Context(), engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: keyHarness(up.URL)}, Prompt: "hi",
		Workdir: t.TempDir(), Env: map[string]string{keyVar: realKey}}, &engine.RunOptions{Lease: lease, Environ: []string{keyVar + "=" + realKey},
		OnEvent: func(ev harness.Event) {
			if ev.Type == harness.EventNotice && ev.Kind == "secrets" {
				notices = append(notices, ev.Text)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Secrets != engine.SecretsEnv || seen.last()[keyVar] != realKey {
		t.Errorf("secrets %q, agent key real: %v", res.Secrets, seen.last()[keyVar] == realKey)
	}
	if len(notices) != 1 || !strings.Contains(notices[0], "--env") {
		t.Errorf("notices %q, want one naming --env", notices)
	}
}

// TestKeylessRefusals: bad modes and allowlist entries are configuration
// errors before any sandbox; a plan that would carry the real secret
// even so is refused.
func TestKeylessRefusals(t *testing.T) {
	for name, mod := range map[string]func(*engine.RunOptions){
		"secrets":         func(o *engine.RunOptions) { o.Secrets = "vault" },
		"egress":          func(o *engine.RunOptions) { o.Egress = "closed" },
		"allow":           func(o *engine.RunOptions) { o.EgressAllow = []string{"http://x.example"} },
		"allow with open": func(o *engine.RunOptions) { o.Egress, o.EgressAllow = engine.EgressOpen, []string{"x.example"} },
		"allow rule":      func(o *engine.RunOptions) { o.EgressAllow = []string{"x.example get /a"} },
	} {
		t.Run(name, func(t *testing.T) {
			seen := &keyEnv{}
			p := memProvider(seen)
			o := &engine.RunOptions{Provider: p, Environ: []string{keyVar + "=" + realKey}}
			mod(o)
			_, err := engine.Run(t.Context(), engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: keyHarness("http://127.0.0.1:1")}, Prompt: "hi", Workdir: t.TempDir()}, o)
			if outpost.CodeOf(err) != outpost.Configuration || p.Opens() != 0 {
				t.Errorf("error %v (opens %d), want configuration before any sandbox", err, p.Opens())
			}
		})
	}
	t.Run("leaking plan", func(t *testing.T) {
		seen := &keyEnv{}
		h := keyHarness("http://127.0.0.1:1")
		conf := h.Configuration
		h.Configuration = func(vars harness.Vars) (harness.Configuration, error) {
			c, err := conf(vars)
			c.Files = append(c.Files, harness.File{Path: ".keyagent/copy", Content: []byte(vars["KEYAGENT_COPY"])})
			return c, err
		}
		r := runKeyAgent(t, &tunneling{Provider: memProvider(seen)}, h, seen, []string{keyVar + "=" + realKey, "KEYAGENT_COPY=" + realKey}, nil)
		if outpost.CodeOf(r.err) != outpost.Configuration || seen.last() != nil || strings.Contains(fmt.Sprint(r.err), realKey) {
			t.Errorf("error %v, want configuration before the agent ran", r.err)
		}
	})
}

// TestGatewayOnly: a turn under RunOptions.GatewayOnly whose secrets
// would enter the sandbox (here by the fallback of an explicit endpoint
// variable) fails with code refused before the agent runs, the key never
// in the sandbox (outpost serve's client policy, issue #43).
func TestGatewayOnly(t *testing.T) {
	up := newUpstream(t)
	seen := &keyEnv{}
	lease, err := sandbox.Acquire(t.Context(), &tunneling{Provider: memProvider(seen)}, driver.Options{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lease.Close(context.Background()) })
	_, err = engine.Run(t.Context(), engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: keyHarness(up.URL)}, Prompt: "hi",
		Workdir: t.TempDir(), Env: map[string]string{keyVar: realKey}}, &engine.RunOptions{Lease: lease, Environ: []string{keyVar + "=" + realKey}, GatewayOnly: true})
	if outpost.CodeOf(err) != outpost.Refused || !strings.Contains(fmt.Sprint(err), "only the credential gateway") {
		t.Errorf("err %v, want refused", err)
	}
	if seen.last()[keyVar] == realKey {
		t.Error("the real key entered the sandbox")
	}
}
