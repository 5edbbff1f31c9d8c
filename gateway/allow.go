package gateway

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// allowEntry is one parsed entry of GrantOptions.Allow.
type allowEntry struct {
	name     string     // a host name, lower case, no trailing dot; "" for an IP
	wildcard bool       // "*.name": any subdomain of name, not name itself
	ip       netip.Addr // an IP literal
	port     int        // 0: the scheme's default
	// methods and paths are the entry's rules (rule.go): nil, any.
	methods []string
	paths   []pathRule
	text    string // the entry as written, for a refusal's message
}

// restricted says whether the entry has method or path rules.
func (e allowEntry) restricted() bool { return e.methods != nil || e.paths != nil }

// CheckAllow checks an egress allowlist as GrantOptions.Allow takes it
// (the CLI's --egress-allow): a bad entry is an error naming it.
func CheckAllow(list []string) error {
	_, err := parseAllow(list)
	return err
}

// parseAllow parses an allowlist; a bad entry is an error naming it.
func parseAllow(list []string) ([]allowEntry, error) {
	out := make([]allowEntry, 0, len(list))
	for _, s := range list {
		e, err := parseRuleEntry(s)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// parseAllowEntry parses the host field of an entry.
func parseAllowEntry(s string) (allowEntry, bool) {
	var e allowEntry
	host, port, ok := splitHostPort(strings.TrimSpace(s))
	if !ok {
		return e, false
	}
	if port != "" {
		p, ok := parsePort(port)
		if !ok {
			return e, false
		}
		e.port = p
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Zone() == "" {
		e.ip = ip.Unmap()
		return e, true
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		e.wildcard, host = true, rest
	}
	e.name = normalName(host)
	return e, validName(e.name)
}

// splitHostPort splits "host", "host:port", "[v6]", "[v6]:port" and a
// bare IPv6 literal.
func splitHostPort(s string) (host, port string, ok bool) {
	switch {
	case s == "":
		return "", "", false
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", false
		}
		host, rest := s[1:end], s[end+1:]
		if rest == "" {
			return host, "", true
		}
		port, ok := strings.CutPrefix(rest, ":")
		return host, port, ok && port != ""
	case strings.Count(s, ":") > 1:
		return s, "", true // a bare IPv6 literal
	}
	host, port, found := strings.Cut(s, ":")
	return host, port, !found || port != ""
}

func parsePort(s string) (int, bool) {
	p, err := strconv.Atoi(s)
	return p, err == nil && p > 0 && p < 65536 && s == strconv.Itoa(p)
}

// normalName lower-cases a host name and drops one trailing dot.
func normalName(s string) string {
	return strings.TrimSuffix(strings.ToLower(s), ".")
}

// validName accepts letters, digits, '-', '_' and dots between non-empty
// labels.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// target is an egress destination, parsed from a request.
type target struct {
	name string     // normalised host name, or "" for an IP
	ip   netip.Addr // an IP literal
	port int
}

// parseTarget parses "host:port" or "host" (the port then def).
func parseTarget(hostport string, def int) (target, bool) {
	var t target
	host, port, ok := splitHostPort(hostport)
	if !ok {
		return t, false
	}
	t.port = def
	if port != "" {
		if t.port, ok = parsePort(port); !ok {
			return t, false
		}
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		t.ip = ip.Unmap()
		return t, ip.Zone() == ""
	}
	t.name = normalName(host)
	return t, validName(t.name)
}

// addr is the dial address of t.
func (t target) addr() string {
	if t.name != "" {
		return net.JoinHostPort(t.name, strconv.Itoa(t.port))
	}
	return netip.AddrPortFrom(t.ip, uint16(t.port)).String()
}

// allowed says whether t is on the list; def is the port an entry
// without one stands for.
func allowed(list []allowEntry, t target, def int) bool {
	ok, _ := match(list, t, def)
	return ok
}

// match says whether t is on the list and, when every entry naming it
// has method or path rules, returns those entries: a request to t must
// then pass one of them. An entry without rules lets every request to t
// through (rules is nil).
func match(list []allowEntry, t target, def int) (ok bool, rules []allowEntry) {
	for _, e := range list {
		if !e.names(t, def) {
			continue
		}
		if !e.restricted() {
			return true, nil
		}
		rules = append(rules, e)
	}
	return len(rules) > 0, rules
}

// names says whether the entry's host and port are t's.
func (e allowEntry) names(t target, def int) bool {
	port := e.port
	if port == 0 {
		port = def
	}
	if port != t.port {
		return false
	}
	switch {
	case e.ip.IsValid() || t.ip.IsValid():
		return e.ip.IsValid() && t.ip.IsValid() && e.ip == t.ip
	case e.wildcard:
		return strings.HasSuffix(t.name, "."+e.name)
	}
	return e.name == t.name
}
