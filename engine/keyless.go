package engine

import (
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/gateway"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// Secrets modes (RunOptions.Secrets, Result.Secrets).
const (
	// SecretsGateway: the sandbox receives the credential gateway's
	// address and a per-turn token in place of each endpoint secret.
	SecretsGateway = "gateway"
	// SecretsEnv: the secrets enter the sandbox as before (variables,
	// or a login file).
	SecretsEnv = "env"
	// SecretsNone: the turn gave the sandbox no secret at all.
	SecretsNone = "none"
)

// Egress modes (RunOptions.Egress, Result.Egress).
const (
	EgressGateway = string(driver.EgressGateway)
	EgressOpen    = string(driver.EgressOpen)
	// EgressUnenforced is Result.Egress of a turn that asked for gateway
	// egress from a provider that cannot enforce it (local, ssh): the
	// sandbox's network is open.
	EgressUnenforced = "unenforced"
)

// Keyless says whether a preset's secrets can stay out of the sandbox
// (`outpost agents`, column KEYLESS): "yes" when an endpoint has a
// default upstream, "base-url" when one applies once its base-URL
// variable is set on the host, "no" without endpoints.
func Keyless(h *harness.Harness) string {
	v := "no"
	for _, ep := range h.Endpoints {
		switch {
		case ep.BaseURL != "" && ep.Default != "":
			return "yes"
		case ep.BaseURL != "":
			v = "base-url"
		}
	}
	return v
}

// keyless is a turn's use of the credential gateway (docs/security.md).
type keyless struct {
	eps     []harness.Endpoint // the applicable endpoints, parallel to routes
	routes  []gateway.Route
	secrets string        // Result.Secrets
	egress  driver.Egress // the egress the turn asked for, or its default
	why     string        // why the turn falls back to env, for the notice

	grant  *gateway.Grant
	addr   string // where the sandbox reaches the gateway
	home   string // the lease's home, where the grant's CA goes
	shared bool   // an inner turn's: its outer turn ends it
}

// checkKeyless refuses unknown modes and malformed allowlist entries.
func (e *turnRun) checkKeyless() error {
	return CheckModes(e.o.Secrets, e.o.Egress, e.o.EgressAllow)
}

// CheckModes checks a secrets mode, an egress mode and an egress
// allowlist as RunOptions take them (errors have code configuration): a
// server refuses a request with them before it queues the turn.
func CheckModes(secrets, egress string, allow []string) error {
	switch secrets {
	case "", SecretsGateway, SecretsEnv:
	default:
		return refuse(outpost.Configuration, "secrets mode %q: want %q or %q", secrets, SecretsGateway, SecretsEnv)
	}
	switch egress {
	case "", EgressGateway, EgressOpen:
	default:
		return refuse(outpost.Configuration, "egress mode %q: want %q or %q", egress, EgressGateway, EgressOpen)
	}
	if err := gateway.CheckAllow(allow); err != nil {
		return refuse(outpost.Configuration, "egress %v", err)
	}
	if len(allow) > 0 && egress == EgressOpen {
		return refuse(outpost.Configuration, "an egress allowlist needs egress mode %q, not %q", EgressGateway, EgressOpen)
	}
	return nil
}

// egressMode is the egress the turn asks of its sandbox (EgressFor).
func (e *turnRun) egressMode() driver.Egress {
	return EgressFor(e.caps(), e.o.Egress, e.o.EgressAllow)
}

// EgressFor is the egress a turn asks of a sandbox of a provider with
// caps: egress (RunOptions.Egress) when set; else gateway with an
// allowlist or where the provider enforces it, open elsewhere.
func EgressFor(caps driver.Capabilities, egress string, allow []string) driver.Egress {
	switch {
	case egress != "":
		return driver.Egress(egress)
	case len(allow) > 0, caps.Egress:
		return driver.EgressGateway
	}
	return driver.EgressOpen
}

// planKeyless picks, after the plans were made from the host's variables,
// the endpoints the gateway serves: those whose secret is set and whose
// upstream is known (the host's base URL, or the endpoint's default), and
// whose variables the caller did not set explicitly (--env is passed as
// it is).
func (e *turnRun) planKeyless() {
	k := &e.kl
	k.egress = e.egressMode()
	defer e.openForEnv()
	if e.o.Secrets == SecretsEnv {
		k.secrets = e.secretsInSandbox()
		return
	}
	for _, ep := range e.h.Endpoints {
		r, ok := e.route(ep)
		if ok {
			k.eps, k.routes = append(k.eps, ep), append(k.routes, r)
		}
	}
	if len(k.routes) > 0 {
		k.secrets = SecretsGateway
		return
	}
	k.secrets = e.secretsInSandbox()
	if k.secrets == SecretsNone {
		return
	}
	switch {
	case len(e.h.Endpoints) == 0:
		k.why = "the preset's CLI cannot be pointed at the credential gateway (no base URL setting)"
	case e.explicitEndpointVar():
		k.why = "a variable of the preset's endpoint is given explicitly (--env), and is passed as it is"
	default:
		k.why = "the credential in use is not one the gateway can hold (set the preset's API key, and the base URL where it has no default)"
	}
}

// openForEnv leaves the sandbox's network open, unless the caller asked
// for gateway egress, when the agent's secrets enter the sandbox: its
// model calls then go straight to the model API, which a sandbox cut off
// from every network but the gateway could not reach.
func (e *turnRun) openForEnv() {
	k := &e.kl
	if k.secrets != SecretsEnv || e.o.Egress != "" || len(e.o.EgressAllow) > 0 || k.egress != driver.EgressGateway {
		return
	}
	k.egress = driver.EgressOpen
	if k.why != "" {
		k.why += "; the sandbox's network stays open (egress open) for the agent's own model calls"
	}
}

// explicitEndpointVar reports whether the caller's explicit variables
// set one of an endpoint's.
func (e *turnRun) explicitEndpointVar() bool {
	for _, ep := range e.h.Endpoints {
		if _, ok := e.t.Env[ep.BaseURL]; ok {
			return true
		}
		for _, s := range ep.Secrets {
			if _, ok := e.t.Env[s.Variable]; ok {
				return true
			}
		}
	}
	return false
}

// route is the gateway route of an endpoint, when it applies.
func (e *turnRun) route(ep harness.Endpoint) (gateway.Route, bool) {
	if ep.BaseURL == "" {
		return gateway.Route{}, false
	}
	if _, ok := e.t.Env[ep.BaseURL]; ok {
		return gateway.Route{}, false
	}
	upstream, ok := e.vars.Lookup(ep.BaseURL)
	if !ok {
		upstream = ep.Default
	}
	if upstream == "" {
		return gateway.Route{}, false
	}
	for _, s := range ep.Secrets {
		if _, ok := e.t.Env[s.Variable]; ok {
			return gateway.Route{}, false
		}
	}
	for _, s := range ep.Secrets {
		if v, ok := e.vars.Lookup(s.Variable); ok {
			return gateway.Route{Upstream: strings.TrimSpace(upstream), Secret: v, Credential: gateway.Credential(s.Credential)}, true
		}
	}
	return gateway.Route{}, false
}

// secretsInSandbox is the secrets mode of a turn without the gateway: env
// when its credential plan puts anything in this sandbox, none otherwise.
func (e *turnRun) secretsInSandbox() string {
	p := e.plan
	if len(p.Variables) > 0 {
		return SecretsEnv
	}
	if e.caps().HostFiles && (len(p.Files) > 0 || len(p.Login) > 0 || len(p.HostFiles) > 0) {
		return SecretsEnv
	}
	return SecretsNone
}

// grantOptions is what the turn's grant is given: its routes and egress
// allowlist. The one place a grant's options are made.
func (e *turnRun) grantOptions() gateway.GrantOptions {
	o := gateway.GrantOptions{Routes: e.kl.routes, Logger: e.o.Logger}
	if e.kl.egress == driver.EgressGateway {
		o.Allow = e.o.EgressAllow
	}
	if len(e.kl.eps) > 0 {
		apis := make([]string, len(e.kl.eps))
		for i, ep := range e.kl.eps {
			apis[i] = ep.API
		}
		o.Meter = e.turnMeter(apis)
	}
	return o
}

// openGateway is the part of step 3 that follows the lease: the turn's
// grant on the gateway, reached from the sandbox through its Tunneler or,
// for a sandbox on the host (local), the host's loopback; then the
// variables rewritten and the plans made again from them. A sandbox that
// can reach neither falls back to env, with a notice.
func (e *turnRun) openGateway(ctx context.Context, lease *sandbox.Lease, outer *keyless) error {
	k := &e.kl
	k.home = lease.Home()
	if outer != nil {
		// A steered resume or a repair: the outer turn's grant, if any
		// (its notice was given once, by the outer turn).
		k.grant, k.addr, k.shared = outer.grant, outer.addr, true
		k.eps, k.routes, k.secrets = outer.eps, outer.routes, outer.secrets
		if k.grant == nil {
			return nil
		}
		return e.rekey()
	}
	proxy := k.egress == driver.EgressGateway && len(e.o.EgressAllow) > 0
	if len(k.routes) == 0 && !proxy {
		e.fallbackNotice()
		return nil
	}
	gw := e.o.Gateway
	if gw == nil {
		gw = defaultGateway()
	}
	addr, err := gatewayAddr(ctx, lease, gw)
	if err != nil {
		return outpost.Wrap(outpost.Sandbox, "gateway", err)
	}
	if addr == "" {
		k.eps, k.routes = nil, nil
		k.secrets = e.secretsInSandbox()
		if k.secrets != SecretsNone {
			k.why = "the " + lease.Provider().Name() + " sandbox cannot reach the credential gateway (no tunnel to the host)"
		}
		if err := e.gatewayOnly(); err != nil {
			return err
		}
		e.fallbackNotice()
		return nil
	}
	if k.grant, err = gw.Grant(e.grantOptions()); err != nil {
		return outpost.Wrap(outpost.Configuration, "gateway", err)
	}
	k.addr = addr
	e.red.Add(k.grant.Token())
	// The token changed: the plans go in again with it.
	unplan(lease, e.h.Name)
	return e.rekey()
}

// gatewayOnly refuses, under RunOptions.GatewayOnly, a turn whose
// secrets would enter the sandbox.
func (e *turnRun) gatewayOnly() error {
	if !e.o.GatewayOnly || e.kl.secrets != SecretsEnv {
		return nil
	}
	why := e.kl.why
	if why == "" {
		why = "secrets mode env"
	}
	return &outpost.Error{Code: outpost.Refused, Op: "gateway", Agent: e.h.Name,
		Msg: "the agent's secrets would enter the sandbox (" + why + "), and this turn may use only the credential gateway"}
}

// fallbackNotice says why a turn that could have used the gateway puts
// its secrets in the sandbox.
func (e *turnRun) fallbackNotice() {
	if e.kl.why == "" || e.o.Secrets == SecretsEnv {
		return
	}
	e.notice("secrets", "secrets mode env: "+e.kl.why, map[string]any{"secrets": SecretsEnv})
}

// rekey rewrites the variables for the grant (each set endpoint secret
// becomes the token, each base URL the gateway's) and makes the plans
// again from them, before they are applied. The proxy variables of an
// egress allowlist go into the configuration's. It fails, rather than
// run, when a plan would still carry a real secret.
func (e *turnRun) rekey() error {
	k := &e.kl
	vars := maps.Clone(e.vars)
	token := k.grant.Token()
	for i, ep := range k.eps {
		for _, s := range ep.Secrets {
			if _, ok := vars.Lookup(s.Variable); ok {
				vars[s.Variable] = token
			}
		}
		vars[ep.BaseURL] = k.grant.BaseURL(k.addr, i)
	}
	h := e.h
	var err error
	if len(k.eps) > 0 && h.Credentials != nil {
		if e.plan, err = h.Credentials(vars); err != nil {
			return e.planErr("credentials", err)
		}
	}
	if len(k.eps) > 0 && h.Configuration != nil {
		if e.config, err = h.Configuration(vars); err != nil {
			return e.planErr("configuration", err)
		}
	}
	if k.egress == driver.EgressGateway && len(e.o.EgressAllow) > 0 {
		e.config.Variables = maps.Clone(e.config.Variables)
		if e.config.Variables == nil {
			e.config.Variables = map[string]string{}
		}
		proxy := k.grant.ProxyURL(k.addr)
		for _, name := range []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"} {
			e.config.Variables[name] = proxy
		}
		e.config.Variables["NO_PROXY"] = "127.0.0.1,localhost"
		e.config.Variables["no_proxy"] = "127.0.0.1,localhost"
		e.trustGrantCA()
	}
	return e.checkKeyed()
}

// Where the grant's certificate authority goes in the lease's home.
const (
	egressCAFile     = ".outpost/egress-ca.pem"
	egressBundleFile = ".outpost/egress-ca-bundle.pem"
)

// trustGrantCA puts the grant's certificate authority (an allowlist with
// method or path rules: the gateway terminates TLS for those hosts) in
// the lease's home, alone and as a bundle with the host's roots, and the
// variables that make the sandbox's clients trust it among the
// configuration's (gateway.TrustVariables).
func (e *turnRun) trustGrantCA() {
	k := &e.kl
	ca := k.grant.CACert()
	if ca == nil {
		return
	}
	files := slices.DeleteFunc(slices.Clone(e.config.Files), func(f harness.File) bool {
		return f.Path == egressCAFile || f.Path == egressBundleFile
	})
	e.config.Files = append(files,
		harness.File{Path: egressCAFile, Content: ca, Mode: 0o644},
		harness.File{Path: egressBundleFile, Content: k.grant.CABundle(), Mode: 0o644})
	maps.Copy(e.config.Variables, gateway.TrustVariables(path.Join(k.home, egressCAFile), path.Join(k.home, egressBundleFile)))
}

// checkKeyed refuses plans that would put a route's real secret in the
// sandbox (a variable or a file's content), whatever the preset's hooks
// did with the rewritten variables.
func (e *turnRun) checkKeyed() error {
	for _, r := range e.kl.routes {
		leak := func(what string) error {
			return &outpost.Error{Code: outpost.Configuration, Op: "gateway", Agent: e.h.Name,
				Msg: fmt.Sprintf("the preset's %s would put the secret held by the credential gateway in the sandbox; run with secrets mode env", what)}
		}
		for _, m := range []map[string]string{e.plan.Variables, e.config.Variables, e.h.Variables} {
			for _, v := range m {
				if strings.Contains(v, r.Secret) {
					return leak("variables")
				}
			}
		}
		for _, f := range append(append([]harness.File(nil), e.plan.Files...), e.config.Files...) {
			if strings.Contains(string(f.Content), r.Secret) {
				return leak("files")
			}
		}
		for _, c := range e.plan.Login {
			if strings.Contains(strings.Join(c.Args, "\x00"), r.Secret) || slices.ContainsFunc(slices.Collect(maps.Values(c.Env)), func(v string) bool { return strings.Contains(v, r.Secret) }) {
				return leak("login commands")
			}
		}
	}
	return nil
}

// closeGateway ends the turn's grant: its token gets 401 from now on.
func (e *turnRun) closeGateway() {
	k := &e.kl
	if k.shared {
		return
	}
	if k.grant != nil {
		k.grant.Revoke()
	}
}

// defaultGateway is the gateway of the turns whose caller gives none
// (RunOptions.Gateway): one for the process, so that a lease's tunnel,
// and the gateway address its applied plans hold (Codex's config.toml),
// stay the same from one turn to the next on a held lease. Each turn's
// grant is still its own.
var defaultGateway = sync.OnceValue(func() *gateway.Gateway { return gateway.New(gateway.Options{}) })

// egressResult is Result.Egress: what the turn asked for, and whether the
// sandbox enforces it.
func (e *turnRun) egressResult(lease *sandbox.Lease) string {
	if e.kl.egress != driver.EgressGateway {
		return EgressOpen
	}
	if lease.Capabilities().Egress && lease.Egress() == driver.EgressGateway {
		return EgressGateway
	}
	return EgressUnenforced
}
