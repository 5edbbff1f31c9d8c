package server

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/credentials"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/gateway"
	"github.com/outposthq/outpost/harness/presets"
)

// Policy is what a client may ask of a turn (docs/serve.md, Policy and
// tenancy): Options.Policy for every token, a token's own fields in the
// tokens file over it. A nil field is its default; an empty one allows
// nothing. An operator (a token marked operator, the server's own user on
// the Unix socket, or any caller when the server has no tokens) is not
// bound by it.
type Policy struct {
	// Secrets are the secrets modes a client may ask for (default:
	// gateway). Without env, a turn whose secrets would enter the
	// sandbox (the fallback when the gateway cannot serve the agent)
	// fails with code refused (engine.RunOptions.GatewayOnly).
	Secrets []string
	// Egress are the egress modes a client may ask for (default:
	// gateway). Without open, a turn that asks for none runs with the
	// provider's default, but never opened for secrets in the sandbox.
	Egress []string
	// EgressAllow is the operator's allowlist: every entry of a
	// request's egress_allow must be covered by one ("a.com:443" by
	// itself, "x.a.com" and "*.x.a.com" by "*.a.com"; ports equal).
	// Default: none.
	EgressAllow []string
	// Env are the variables a client may set: NAME, PREFIX* or * (the
	// default). Never, whatever this says: a preset's base-URL variable
	// (or any NAME ending in BASE_URL), a proxy variable (*_PROXY), a
	// preset's credential variable when the operator's environment holds
	// one of the same endpoint, or a variable the operator's environment
	// or .outpost/.env holds as a secret.
	Env []string
}

// ReasonPolicy is the reason of a request the client policy refuses
// (403, code refused).
const ReasonPolicy = "policy"

func (p Policy) secrets() []string {
	if p.Secrets == nil {
		return []string{engine.SecretsGateway}
	}
	return p.Secrets
}

func (p Policy) egress() []string {
	if p.Egress == nil {
		return []string{engine.EgressGateway}
	}
	return p.Egress
}

func (p Policy) env() []string {
	if p.Env == nil {
		return []string{"*"}
	}
	return p.Env
}

// check refuses a policy that names unknown modes or bad entries.
func (p Policy) check() error {
	for _, m := range p.Secrets {
		if m != engine.SecretsGateway && m != engine.SecretsEnv {
			return fmt.Errorf("secrets mode %q: want gateway or env", m)
		}
	}
	for _, m := range p.Egress {
		if m != engine.EgressGateway && m != engine.EgressOpen {
			return fmt.Errorf("egress mode %q: want gateway or open", m)
		}
	}
	if err := engine.CheckModes("", "", p.EgressAllow); err != nil {
		return err
	}
	for _, n := range p.Env {
		if n != "*" && !tokenName.MatchString(strings.TrimSuffix(n, "*")) {
			return fmt.Errorf("env entry %q: want NAME, PREFIX* or *", n)
		}
	}
	return nil
}

// CheckPolicy refuses a policy that names an unknown mode, a malformed
// allowlist entry or variable pattern (New refuses it too).
func CheckPolicy(p Policy) error { return p.check() }

// over is p with the fields o sets replacing its own.
func (p Policy) over(o Policy) Policy {
	if o.Secrets != nil {
		p.Secrets = o.Secrets
	}
	if o.Egress != nil {
		p.Egress = o.Egress
	}
	if o.EgressAllow != nil {
		p.EgressAllow = o.EgressAllow
	}
	if o.Env != nil {
		p.Env = o.Env
	}
	return p
}

// principal is who made a request: the owner of what it creates, and
// what it may see and ask.
type principal struct {
	owner    string  // "token:NAME", "uid:N"; "" for a server without tokens
	token    string  // the token's name (Options.TokenLimits)
	operator bool    // sees every client's turns and conversations
	policy   *Policy // nil: not bound (an operator)
}

// operatorPrincipal is an in-process caller (`outpost mcp` over stdio):
// the operator.
var operatorPrincipal = principal{operator: true}

type principalKey struct{}

// withPrincipal notes the authenticated peer in the request's context.
func withPrincipal(r *http.Request, p principal) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
}

// bindMCP gives the MCP SDK the authenticated peer as its token info,
// so that an MCP session is bound to the peer that opened it (the SDK
// refuses another's requests on it) and every tool call knows its peer
// (principalOfInfo). The SDK reads token info only through its bearer
// middleware: the request it sees carries a placeholder token (the real
// one was checked by the middleware, and stays out of the SDK's hands).
func bindMCP(h http.Handler) http.Handler {
	verify := func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		p := principalOf(ctx)
		return &auth.TokenInfo{UserID: p.owner, Extra: map[string]any{principalExtra: p}}, nil
	}
	bound := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer peer")
		bound.ServeHTTP(w, r)
	})
}

const principalExtra = "outpost.principal"

// principalOf is the request's peer; a context without one (an
// in-process caller) is the operator's.
func principalOf(ctx context.Context) principal {
	if p, ok := ctx.Value(principalKey{}).(principal); ok {
		return p
	}
	return operatorPrincipal
}

// principalOfInfo is the peer of an MCP call from its token info, else
// of ctx.
func principalOfInfo(ctx context.Context, ti *auth.TokenInfo) principal {
	if ti != nil {
		if p, ok := ti.Extra[principalExtra].(principal); ok {
			return p
		}
	}
	return principalOf(ctx)
}

// gatewayOnly: the peer's turns may not put secrets in the sandbox.
func (p principal) gatewayOnly() bool {
	return p.policy != nil && !slices.Contains(p.policy.secrets(), engine.SecretsEnv)
}

// sees says whether the principal may see what owner made. Something
// without an owner (made outside the server, or before owners were
// kept) is an operator's only.
func (p principal) sees(owner string) bool {
	return p.operator || (owner != "" && owner == p.owner)
}

// policyError is the 403 of a request the policy refuses.
func policyError(format string, args ...any) *apiError {
	return fail(outpost.Refused, ReasonPolicy, fmt.Sprintf(format, args...)+" (the server's client policy, docs/serve.md)")
}

// request is what a turn or race asks of the gateway and the sandbox.
type request struct {
	secrets, egress string
	allow           []string
	env             map[string]string
}

// checkPolicy refuses (403, reason policy) what the principal may not
// ask, and returns the egress the turn runs with.
func (s *Server) checkPolicy(p principal, r request) (string, error) {
	if p.policy == nil {
		return r.egress, nil
	}
	pol := *p.policy
	secrets := r.secrets
	if secrets == "" {
		secrets = engine.SecretsGateway
	}
	if !slices.Contains(pol.secrets(), secrets) {
		return "", policyError("secrets mode %q may not be asked for (allowed: %v)", secrets, pol.secrets())
	}
	if r.egress != "" && !slices.Contains(pol.egress(), r.egress) {
		return "", policyError("egress mode %q may not be asked for (allowed: %v)", r.egress, pol.egress())
	}
	for _, a := range r.allow {
		if !slices.ContainsFunc(pol.EgressAllow, func(o string) bool { return covers(o, a) }) {
			return "", policyError("egress allowlist entry %q is not covered by the operator's allowlist %v", a, pol.EgressAllow)
		}
	}
	if err := s.checkEnv(pol, r.env); err != nil {
		return "", err
	}
	egress := r.egress
	if egress == "" && secrets == engine.SecretsEnv && !slices.Contains(pol.egress(), engine.EgressOpen) {
		egress = engine.EgressGateway // the engine would open it for the secrets
	}
	return egress, nil
}

// checkEnv refuses a variable the policy does not let a client set.
func (s *Server) checkEnv(pol Policy, env map[string]string) error {
	if len(env) == 0 {
		return nil
	}
	operator, _ := credentials.Resolve(s.o.Environ, s.o.Workdir) // a broken .env fails the turn later
	names := endpointVariables()
	for _, k := range slices.Sorted(maps.Keys(env)) {
		u := strings.ToUpper(k)
		switch {
		case names.baseURL[k] || strings.HasSuffix(u, "BASE_URL") || strings.HasSuffix(u, "_PROXY"):
			return policyError("variable %s may not be set by a client: it points an agent (or its traffic) elsewhere", k)
		case slices.ContainsFunc(names.secret[k], func(f string) bool { _, ok := operator.Vars[f]; return ok }):
			// The client's own key would take the turn off the gateway,
			// the operator's other credentials of the endpoint with it.
			return policyError("variable %s may not be set by a client: the operator's environment holds a credential of the same model API", k)
		}
		if v, ok := operator.Vars[k]; ok && credentials.IsSecret(k, v) {
			return policyError("variable %s may not be set by a client: the operator's environment holds it as a secret", k)
		}
		if !slices.ContainsFunc(pol.env(), func(e string) bool { return envMatch(e, k) }) {
			return policyError("variable %s may not be set by a client (allowed: %v)", k, pol.env())
		}
	}
	return nil
}

// envMatch: NAME, PREFIX* or *.
func envMatch(pattern, name string) bool {
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(name, p)
	}
	return pattern == name
}

// endpointNames are the presets' base-URL variables, and each credential
// variable's fellows: the credential variables of its endpoint.
type endpointNames struct {
	baseURL map[string]bool
	secret  map[string][]string
}

// endpointVariables reads every registered preset's endpoints (once: the
// registry only grows at init).
var endpointVariables = sync.OnceValue(func() endpointNames {
	n := endpointNames{baseURL: map[string]bool{}, secret: map[string][]string{}}
	for _, name := range presets.Names() {
		h, ok := presets.Lookup(name)
		if !ok {
			continue
		}
		for _, ep := range h.Endpoints {
			if ep.BaseURL != "" {
				n.baseURL[ep.BaseURL] = true
			}
			for _, sec := range ep.Secrets {
				for _, f := range ep.Secrets {
					n.secret[sec.Variable] = append(n.secret[sec.Variable], f.Variable)
				}
			}
		}
	}
	return n
})

// covers says whether the operator's allowlist entry o covers a
// client's entry c (gateway.Covers): the same host, or a subdomain of a
// "*." entry, the same port, and the operator's rules, if any.
func covers(o, c string) bool { return gateway.Covers(o, c) }
