package integration

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/internal/isolate"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/providers/local"
	sshp "github.com/outposthq/outpost/providers/ssh"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
	"github.com/outposthq/outpost/sandbox/driver"
)

// keylessDocker is a docker provider for c's keyless turns, with the
// provider's defaults (egress gateway: network none, the gateway reached
// through the container's tunnel): claude from an image that has it,
// codex and copilot bootstrapped into the Debian test image.
func keylessDocker(t *testing.T, c keylessCLI) driver.Provider {
	t.Helper()
	image := debianTestImage
	if c.name == "claude" {
		image = claudeImage(t, testenv.RequireCLI(t, "claude"))
	} else {
		c.path(t) // the pinned CLI, which the bootstrap copies in
	}
	dockertest.Require(t, debianTestImage)
	return dockertest.Provider(t, image, func(o *docker.Options) { o.Binary = outpostBinary(t) })
}

// inSandbox drops the variables that name host paths (copilot's package
// cache) from a fake's environ, for a sandbox off the host.
func inSandbox(environ []string) []string {
	var out []string
	for _, kv := range environ {
		if !strings.HasPrefix(kv, "COPILOT_PKG_CACHE_HOME=") {
			out = append(out, kv)
		}
	}
	return out
}

// TestKeylessDocker: claude, codex and copilot in docker containers with
// the defaults (secrets gateway, egress gateway: network none). The fake
// on the host's loopback receives the real key on every request through
// the gateway, which the container reaches only through its tunnel; the
// tool call in the turn finds no key in the container (environment,
// home, every process's environment) while the token is there; the
// result says secrets gateway and egress gateway. Claude's turn, with an
// allowlist naming one host loopback server, also proves the egress
// gateway's proxy (egressCheck): its tool call cannot reach a server on
// the host's docker bridge address directly (network none); through the
// proxy (HTTP_PROXY and HTTPS_PROXY are set for the agent), by a
// plain-HTTP request and by CONNECT, the allowlisted server answers 200
// and a server off the list gets 403, and sees nothing.
func TestKeylessDocker(t *testing.T) {
	t.Parallel()
	for _, c := range keylessCLIs {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := keylessDocker(t, c)
			key, probe := testenv.KeylessProbe(t)
			var eg *egressCheck
			var mod func(*engine.RunOptions)
			if c.name == "claude" {
				eg = newEgressCheck(t, net.JoinHostPort(dockertest.BridgeGateway(t), "0"))
				probe, mod = probe+"; "+eg.probe, eg.allow
			}
			environ, fake := c.start(t, probe, key)
			r := runKeylessOn(t, p, c, inSandbox(environ), engine.Turn{Prompt: "Run a command FAKE_TOOL", Timeout: 3 * time.Minute}, mod)
			checkKeyless(t, r, fake, key, engine.SecretsGateway, engine.EgressGateway)
			if eg != nil {
				eg.check(t, fake)
			}
		})
	}
}

// TestKeylessSSH: claude, codex and copilot on the real sshd, bootstrapped there.
// The turn's base URL is the gateway's address at the end of the ssh
// connection's tunnel: no relay is needed for the model calls (the fake
// listens on the host's loopback only). In namespaces (the default where
// the host's bubblewrap works, as on the test host) egress is the
// gateway by default and enforced: the tunnel is a forwarded Unix socket
// bound into the lease's network namespace. With isolation=none egress is
// open by default and unenforced when gateway egress is asked for.
func TestKeylessSSH(t *testing.T) {
	t.Parallel()
	srv := sshtest.Shared(t)
	for _, tt := range []struct {
		cli       int // index in keylessCLIs
		isolation string
		egress    string
		want      string
	}{
		{0, isolate.Auto, "", engine.EgressGateway},
		{1, isolate.None, engine.EgressGateway, engine.EgressUnenforced},
		{2, isolate.None, "", engine.EgressOpen},
	} {
		c := keylessCLIs[tt.cli]
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.path(t)
			p := sshProvider(t, srv, func(o *sshp.Options) { o.Isolation = tt.isolation })
			key, probe := testenv.KeylessProbe(t)
			environ, fake := c.start(t, probe, key)
			environ = append(inSandbox(environ), "PATH=/usr/local/bin:/usr/bin:/bin")
			r := runKeylessOn(t, p, c, environ, engine.Turn{Prompt: "Run a command FAKE_TOOL", Timeout: 3 * time.Minute}, func(o *engine.RunOptions) { o.Egress = tt.egress })
			checkKeyless(t, r, fake, key, engine.SecretsGateway, tt.want)
		})
	}
}

// countingServer serves "reached" over HTTP on a new listener at addr
// until the test ends, and counts the requests.
func countingServer(t *testing.T, addr string) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	n := new(atomic.Int64)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.WriteString(w, "reached")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String(), n
}

// egressProbe is a bash command (the image has no curl) that tries
// direct, a TCP connection to direct, and through the agent's HTTP_PROXY
// plain-HTTP GETs of allowed and denied and CONNECTs to them (a GET of /
// through the CONNECT tunnel that opens), and prints what it got.
func egressProbe(direct, allowed, denied string) string {
	host, port, _ := net.SplitHostPort(direct)
	return fmt.Sprintf(`px=${HTTP_PROXY#http://}; hp=${px##*@}; auth=$(printf %%s "${px%%@*}" | base64 -w0)
popen() { exec 3<>/dev/tcp/${hp%%:*}/${hp##*:}; }
get() { popen || { echo fail; return; }; printf 'GET http://%%s/ HTTP/1.0\r\nHost: %%s\r\nProxy-Authorization: Basic %%s\r\n\r\n' "$1" "$1" "$auth" >&3; read -r _ code _ <&3; echo "$code"; exec 3<&-; }
conn() { popen || { echo fail; return; }; printf 'CONNECT %%s HTTP/1.1\r\nHost: %%s\r\nProxy-Authorization: Basic %%s\r\n\r\n' "$1" "$1" "$auth" >&3; read -r _ code _ <&3
  while read -r l <&3 && [ -n "${l%%$'\r'}" ]; do :; done
  if [ "$code" = 200 ]; then printf 'GET / HTTP/1.0\r\n\r\n' >&3; read -r _ code2 _ <&3; code="$code-$code2"; fi; echo "$code"; exec 3<&-; }
echo "EGRESS direct=$(timeout 5 bash -c 'exec 3<>/dev/tcp/%s/%s && echo open' 2>/dev/null || echo closed) allowed=$(get %s) denied=$(get %s) connect-allowed=$(conn %s) connect-denied=$(conn %s) proxy=${HTTPS_PROXY:+set}"`, host, port, allowed, denied, allowed, denied)
}

var egressOutput = regexp.MustCompile(`EGRESS direct=\w+ allowed=\w* denied=\w* connect-allowed=[\w-]* connect-denied=[\w-]* proxy=\w*`)

// TestKeylessLocalEgress: a claude turn on the local sandbox in
// bubblewrap's namespaces (issue 42) with egress gateway and an allowlist
// naming one host loopback server: its tool call cannot reach a server
// on the host's loopback directly (the lease's network namespace has its
// own loopback only), and through the gateway's proxy the allowlisted
// server answers and one off the list gets 403 (egressCheck). On docker,
// TestKeylessDocker's claude turn proves the same.
func TestKeylessLocalEgress(t *testing.T) {
	t.Parallel()
	c := keylessCLIs[0]
	p := local.New(&local.Options{BaseDir: t.TempDir(), Isolation: "namespaces", Environ: []string{"PATH=" + c.path(t) + ":/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}})
	if _, err := p.Isolation(); err != nil {
		testenv.Missing(t, "bubblewrap isolation ("+err.Error()+")", "apt-get install bubblewrap")
	}
	eg := newEgressCheck(t, "127.0.0.1:0")
	key := "sk-kl-" + randomHex(t, 16)
	environ, fake := c.start(t, eg.probe, key)
	r := runKeylessOn(t, p, c, environ, engine.Turn{Prompt: "Run a command FAKE_TOOL", Timeout: 3 * time.Minute}, eg.allow)
	if r.err != nil {
		t.Fatalf("turn: %v", r.err)
	}
	if r.res.Secrets != engine.SecretsGateway || r.res.Egress != engine.EgressGateway {
		t.Errorf("result secrets %q egress %q, want gateway and gateway", r.res.Secrets, r.res.Egress)
	}
	eg.check(t, fake)
}

// egressCheck is a check of the egress gateway in one FAKE_TOOL turn: a
// server the sandbox must not reach directly, an allowlisted and a denied
// server on the host's loopback, and the probe (the tool's command) that
// tries them.
type egressCheck struct {
	probe                               string
	allowed                             string
	directSeen, allowedSeen, deniedSeen *atomic.Int64
}

// newEgressCheck starts the servers, the direct one on a new listener at
// direct.
func newEgressCheck(t *testing.T, direct string) *egressCheck {
	t.Helper()
	e := &egressCheck{}
	direct, e.directSeen = countingServer(t, direct)
	var denied string
	e.allowed, e.allowedSeen = countingServer(t, "127.0.0.1:0")
	denied, e.deniedSeen = countingServer(t, "127.0.0.1:0")
	e.probe = egressProbe(direct, e.allowed, denied)
	return e
}

// allow sets the turn's egress allowlist to the allowed server.
func (e *egressCheck) allow(o *engine.RunOptions) { o.EgressAllow = []string{e.allowed} }

// check checks what the probe printed (in the fake's request bodies) and
// what the servers saw: the direct server nothing, the proxy let through
// only the allowlisted server.
func (e *egressCheck) check(t *testing.T, fake keylessFake) {
	t.Helper()
	got := egressOutput.FindString(fake.bodies())
	if want := "EGRESS direct=closed allowed=200 denied=403 connect-allowed=200-200 connect-denied=403 proxy=set"; got != want {
		t.Errorf("the tool's output %q, want %q", got, want)
	}
	if n := e.directSeen.Load(); n != 0 {
		t.Errorf("the server reached directly saw %d requests, want none", n)
	}
	if n := e.allowedSeen.Load(); n != 2 {
		t.Errorf("the allowlisted server saw %d requests, want 2", n)
	}
	if n := e.deniedSeen.Load(); n != 0 {
		t.Errorf("the server off the list saw %d requests, want none", n)
	}
}
