package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// testResolver answers each name with the next of its answers (the last
// one again once they run out) and counts the lookups.
type testResolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	lookups map[string]int
}

func newResolver(answers map[string][]string) *testResolver {
	r := &testResolver{answers: map[string][][]netip.Addr{}, lookups: map[string]int{}}
	for name, seq := range answers {
		for _, a := range seq {
			var one []netip.Addr
			for _, s := range strings.Split(a, ",") {
				one = append(one, netip.MustParseAddr(s))
			}
			r.answers[name] = append(r.answers[name], one)
		}
	}
	return r
}

func (r *testResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seq, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	n := r.lookups[host]
	r.lookups[host]++
	return seq[min(n, len(seq)-1)], nil
}

func (r *testResolver) count(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups[host]
}

// absolute sends an absolute-URI GET for host through the proxy.
func absolute(t *testing.T, addr, hostport, auth string) got {
	t.Helper()
	return raw(t, addr, "GET http://"+hostport+"/p HTTP/1.1\r\nHost: "+hostport+"\r\nProxy-Authorization: "+auth+"\r\nConnection: close\r\n\r\n")
}

// TestEgressRefusesInternal: an allowlisted name that resolves to
// loopback, the cloud metadata address, a private, carrier-grade NAT,
// link-local, unspecified or the host's own address gets 403, by CONNECT
// and by absolute URI alike, and nothing is dialled; an IP literal the
// list names is reached as named.
func TestEgressRefusesInternal(t *testing.T) {
	target := newTCPTarget(t, echoUntilEOF)
	_, port, _ := net.SplitHostPort(target.addr())
	names := map[string][]string{
		"loopback.test": {"127.0.0.1"}, "metadata.test": {"169.254.169.254"}, "rfc1918.test": {"10.1.2.3"},
		"v6loop.test": {"::1"}, "mapped.test": {"::ffff:127.0.0.1"}, "linklocal6.test": {"fe80::1"},
		"ula.test": {"fd00::1"}, "cgnat.test": {"100.64.0.1"}, "zero.test": {"0.0.0.0"}, "this.test": {"0.1.2.3"},
		"mixed.test": {"127.0.0.1,::1,192.168.1.1"},
	}
	if own := ownPublic(); own.IsValid() {
		names["own.test"] = []string{own.String()}
	}
	res := newResolver(names)
	f := newFixture(t, Options{Resolver: res})
	var allow []string
	for name := range names {
		allow = append(allow, name+":"+port, name+":80", name)
	}
	gr := f.grant(GrantOptions{Allow: append(allow, "127.0.0.1:"+port)})
	auth := basic("outpost", gr.Token())
	for name := range names {
		t.Run(name, func(t *testing.T) {
			for _, hp := range []string{name + ":" + port, name + ":80"} {
				if _, _, g := dialConnect(t, f.addr, hp, auth); g.code != http.StatusForbidden || !strings.Contains(g.body, "resolves to") {
					t.Errorf("CONNECT %s: %d %q, want 403", hp, g.code, g.body)
				}
				if g := absolute(t, f.addr, hp, auth); g.code != http.StatusForbidden || !strings.Contains(g.body, "resolves to") {
					t.Errorf("GET http://%s/: %d %q, want 403", hp, g.code, g.body)
				}
			}
			if g := absolute(t, f.addr, name, auth); g.code != http.StatusForbidden {
				t.Errorf("GET http://%s/: %d %q, want 403", name, g.code, g.body)
			}
		})
	}
	if target.dialedBefore(t) {
		t.Fatal("a name resolving to loopback reached the loopback target")
	}
	// The literal the list names is reached.
	c, br, g := dialConnect(t, f.addr, target.addr(), auth)
	if g.code != 200 {
		t.Fatalf("CONNECT to the listed literal %s: %d %q", target.addr(), g.code, g.body)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	if b, _ := io.ReadAll(br); string(b) != "got 0 bytes: " {
		t.Errorf("through the tunnel: %q", b)
	}
}

// ownPublic is an address of one of the host's interfaces that is none
// of the classes refused anyway, if it has one.
func ownPublic() netip.Addr {
	for a := range ownAddrs() {
		if !internalAddr(a, nil) {
			return a
		}
	}
	return netip.Addr{}
}

// TestEgressNoRebinding: a name whose answer changes from a public
// address to loopback (DNS rebinding) never reaches loopback: each dial
// resolves once and dials the address it checked.
func TestEgressNoRebinding(t *testing.T) {
	target := newTCPTarget(t, echoUntilEOF)
	_, port, _ := net.SplitHostPort(target.addr())
	res := newResolver(map[string][]string{"rebind.test": {"192.0.2.1", "127.0.0.1"}})
	// 192.0.2.1 (TEST-NET-1) is routed nowhere: its dial fails or times
	// out, which is all the first answer is for.
	f := newFixture(t, Options{Resolver: res, DialTimeout: time.Second})
	gr := f.grant(GrantOptions{Allow: []string{"rebind.test:" + port}})
	auth := basic("outpost", gr.Token())
	if _, _, g := dialConnect(t, f.addr, "rebind.test:"+port, auth); g.code != http.StatusBadGateway {
		t.Errorf("first CONNECT (public answer): %d %q, want 502", g.code, g.body)
	}
	if _, _, g := dialConnect(t, f.addr, "rebind.test:"+port, auth); g.code != http.StatusForbidden {
		t.Errorf("second CONNECT (rebound to loopback): %d %q, want 403", g.code, g.body)
	}
	if g := absolute(t, f.addr, "rebind.test:"+port, auth); g.code != http.StatusForbidden {
		t.Errorf("GET (rebound to loopback): %d %q, want 403", g.code, g.body)
	}
	if n := res.count("rebind.test"); n != 3 {
		t.Errorf("%d lookups for 3 dials, want one each", n)
	}
	if target.dialedBefore(t) {
		t.Error("a rebound name reached the loopback target")
	}
}

// TestEgressOneDialer: CONNECT and absolute URIs dial the same way: the
// name as the list matched it (normalised), resolved once per dial, at
// the address resolved. (Internal addresses are let through here only to
// reach a loopback server by name.)
func TestEgressOneDialer(t *testing.T) {
	up := newUpstream(t, nil)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "http://"))
	res := newResolver(map[string][]string{"svc.test": {"127.0.0.1"}})
	f := newFixture(t, Options{Resolver: res})
	f.g.reachInternal = true
	gr := f.grant(GrantOptions{Allow: []string{"svc.test:" + port}})
	auth := basic("outpost", gr.Token())
	if g := absolute(t, f.addr, "SVC.Test.:"+port, auth); g.code != 200 || g.body != "ok" {
		t.Errorf("GET by name: %d %q", g.code, g.body)
	}
	c, br, g := dialConnect(t, f.addr, "svc.TEST:"+port, auth)
	if g.code != 200 {
		t.Fatalf("CONNECT by name: %d %q", g.code, g.body)
	}
	_, _ = io.WriteString(c, "GET /x HTTP/1.0\r\nHost: svc.test\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("through the tunnel: %v %v", resp, err)
	}
	resp.Body.Close()
	if n := res.count("svc.test"); n != 2 {
		t.Errorf("the normalised name was looked up %d times for two dials, want 2 (lookups %v)", n, res.lookups)
	}
	if r := up.last(t); r.Host != "svc.test" || r.URL.Path != "/x" {
		t.Errorf("the upstream got host %q path %q", r.Host, r.URL.Path)
	}
}

// TestInternalAddr: the classes refused by name, and some that are not.
func TestInternalAddr(t *testing.T) {
	for _, tc := range []struct {
		ip   string
		want bool
	}{
		{"127.0.0.1", true}, {"127.255.0.9", true}, {"::1", true}, {"169.254.169.254", true}, {"fe80::1", true},
		{"fe80::1%eth0", true}, {"10.0.0.1", true}, {"172.16.0.1", true}, {"192.168.0.1", true}, {"fc00::1", true},
		{"fd12::1", true}, {"100.64.0.1", true}, {"100.127.255.254", true}, {"0.0.0.0", true}, {"::", true},
		{"0.1.2.3", true}, {"::ffff:127.0.0.1", true}, {"::ffff:169.254.169.254", true}, {"224.0.0.1", true},
		{"ff02::1", true}, {"255.255.255.255", true},
		{"1.1.1.1", false}, {"100.128.0.1", false}, {"172.32.0.1", false}, {"2606:4700::1111", false}, {"192.0.2.1", false},
	} {
		if got := internalAddr(netip.MustParseAddr(tc.ip), nil); got != tc.want {
			t.Errorf("%s: internal %v, want %v", tc.ip, got, tc.want)
		}
	}
	own := netip.MustParseAddr("203.0.113.5")
	if !internalAddr(own, map[netip.Addr]bool{own: true}) {
		t.Error("the host's own address is not internal")
	}
	if _, err := (&Gateway{}).dialAddr(context.Background(), "tcp", "a b"); !errors.Is(err, errInternal) {
		t.Errorf("a malformed dial address: %v", err)
	}
}
