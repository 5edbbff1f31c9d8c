package gateway

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

// An allowlist entry may carry rules after its host, separated by
// spaces: "HOST [METHODS] [PATH...]".
//
//   - METHODS is a comma-separated list of upper-case method names
//     ("GET,POST"); without it, any method.
//   - Each PATH starts with "/" and matches a request path that begins
//     with its segments (whole segments: "/org/repo.git" matches
//     "/org/repo.git" and "/org/repo.git/info/refs", not
//     "/org/repo.gitx"); a segment may be a pattern of path.Match with
//     "*" and "[...]" ("*", "repo-*.git", "[a-c]*"), matching one
//     segment. Without a path, any. The query is not matched.
//
// A request to the host must pass one of the entries naming it: the
// method is one of the entry's and the path under one of its paths. An
// entry without rules for the same host lets everything through (its
// CONNECT is then a plain tunnel).

// pathRule is one PATH of an entry: its segments, each a path.Match
// pattern.
type pathRule []string

// parseRuleEntry parses one allowlist entry with its rules.
func parseRuleEntry(s string) (allowEntry, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return allowEntry{}, fmt.Errorf("allow entry %q is empty", s)
	}
	e, ok := parseAllowEntry(fields[0])
	if !ok {
		return e, fmt.Errorf("allow entry %q: %q is not host, *.domain, an IPv4 address or [IPv6], with an optional :port", s, fields[0])
	}
	e.text = strings.Join(fields, " ")
	rest := fields[1:]
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "/") {
		m, err := parseMethods(rest[0])
		if err != nil {
			return e, fmt.Errorf("allow entry %q: %v", s, err)
		}
		e.methods, rest = m, rest[1:]
	}
	for _, p := range rest {
		pr, err := parsePathRule(p)
		if err != nil {
			return e, fmt.Errorf("allow entry %q: %v", s, err)
		}
		e.paths = append(e.paths, pr)
	}
	return e, nil
}

// parseMethods parses "GET,POST".
func parseMethods(s string) ([]string, error) {
	var out []string
	for _, m := range strings.Split(s, ",") {
		if m == "" || strings.TrimLeft(m, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != "" {
			return nil, fmt.Errorf("%q is not a comma-separated list of upper-case method names (GET,POST) nor a path starting with /", s)
		}
		if m == "CONNECT" {
			return nil, fmt.Errorf("method CONNECT cannot be allowed by a rule (a CONNECT inside a tunnel is always refused)")
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out, nil
}

// parsePathRule parses "/org/*/info/refs".
func parsePathRule(s string) (pathRule, error) {
	if !strings.HasPrefix(s, "/") {
		return nil, fmt.Errorf("%q is not a path starting with / (the methods, if any, come once, before the paths)", s)
	}
	if strings.ContainsAny(s, "?#\\%") {
		return nil, fmt.Errorf("path %q: a path has no query, fragment, backslash or %%-escape (write it decoded)", s)
	}
	if s == "/" {
		return pathRule{}, nil
	}
	segs := strings.Split(s[1:], "/")
	for _, seg := range segs {
		if seg == "" || seg == "." || seg == ".." {
			return nil, fmt.Errorf("path %q: empty, . and .. segments are not allowed (no trailing /)", s)
		}
		if _, err := path.Match(seg, ""); err != nil {
			return nil, fmt.Errorf("path %q: segment %q is not a valid pattern", s, seg)
		}
	}
	return segs, nil
}

// requestSegments splits a request's path for matching: its decoded
// path, refused (ok false) when it is not in the one form rules are
// matched against: starting with "/", without empty, "." or ".."
// segments (also before a ";"), a backslash, or an encoded "/" or "\".
func requestSegments(decoded, escaped string) ([]string, bool) {
	if !strings.HasPrefix(decoded, "/") || strings.ContainsRune(decoded, '\\') {
		return nil, false
	}
	if l := strings.ToLower(escaped); strings.Contains(l, "%2f") || strings.Contains(l, "%5c") {
		return nil, false
	}
	if decoded == "/" {
		return nil, true
	}
	segs := strings.Split(strings.TrimSuffix(decoded[1:], "/"), "/")
	for _, seg := range segs {
		base, _, _ := strings.Cut(seg, ";")
		if seg == "" || base == "." || base == ".." {
			return nil, false
		}
	}
	return segs, true
}

// allows says whether the entry's rules let method on the path (its
// segments) through.
func (e allowEntry) allows(method string, segs []string) bool {
	if e.methods != nil && !slices.Contains(e.methods, method) {
		return false
	}
	if e.paths == nil {
		return true
	}
	return slices.ContainsFunc(e.paths, func(p pathRule) bool { return p.matches(segs) })
}

func (p pathRule) matches(segs []string) bool {
	if len(segs) < len(p) {
		return false
	}
	for i, pat := range p {
		if ok, _ := path.Match(pat, segs[i]); !ok {
			return false
		}
	}
	return true
}

// ruleCheck checks a request to a host whose entries have rules: "" when
// one lets it through, else the refusal's message, naming the rules.
func ruleCheck(rules []allowEntry, method, decoded, escaped string) string {
	segs, ok := requestSegments(decoded, escaped)
	if !ok {
		return fmt.Sprintf("the request path %q is not in normal form (empty, . or .. segments, a backslash or an encoded /), which the egress rules of this host need", escaped)
	}
	for _, e := range rules {
		if e.allows(method, segs) {
			return ""
		}
	}
	texts := make([]string, len(rules))
	for i, e := range rules {
		texts[i] = strconv.Quote(e.text)
	}
	return fmt.Sprintf("%s %s is not allowed by the egress rules for this host: %s", method, escaped, strings.Join(texts, ", "))
}

// Covers says whether the allowlist entry o lets through all that entry c
// does (outpost serve's client policy: a client's entry must narrow an
// operator's): c's host is o's, or o is "*.domain" and c's is a
// subdomain of it (or "*." of one); the same port; and o has no rules or
// exactly c's. An entry that does not parse covers nothing and is
// covered by nothing.
func Covers(o, c string) bool {
	oe, err1 := parseRuleEntry(o)
	ce, err2 := parseRuleEntry(c)
	if err1 != nil || err2 != nil || oe.port != ce.port {
		return false
	}
	switch {
	case oe.ip.IsValid() || ce.ip.IsValid():
		if oe.ip != ce.ip {
			return false
		}
	case oe.wildcard:
		if ce.name != oe.name && !strings.HasSuffix(ce.name, "."+oe.name) || ce.name == oe.name && !ce.wildcard {
			return false
		}
	case ce.wildcard || ce.name != oe.name:
		return false
	}
	if !oe.restricted() {
		return true
	}
	return slices.Equal(oe.methods, ce.methods) && slices.EqualFunc(oe.paths, ce.paths, func(a, b pathRule) bool { return slices.Equal(a, b) })
}
