package credentials

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Redacted replaces every occurrence of a secret.
const Redacted = "[REDACTED]"

// MinSecretLen is the shortest value a Redactor accepts, in bytes. Shorter
// values ("1", "yes", "dev") are ignored, as are values made only of white
// space and values that occur inside Redacted itself.
//
// The trade-off: redacting every short value would shred ordinary output
// (a one-letter value matches everywhere) and reveal, by where the marks
// fall, more than it hides; a credential of fewer than four bytes protects
// nothing anyway. Real keys and tokens are far longer.
const MinSecretLen = 4

// maxRedactPasses bounds the passes String makes when a secret overlaps the
// replacement text itself (see secretSet.marker).
const maxRedactPasses = 4

// Redactor replaces secret values with Redacted in text, bytes, events,
// errors and streams. Every occurrence of every secret is covered, including
// overlapping ones: the union of all occurrences is replaced, one Redacted
// per contiguous run, so no byte of any secret's occurrence survives.
//
// The zero value and NewRedactor() redact nothing until Add is called. A nil
// *Redactor is valid and redacts nothing (and Add on it is a no-op). A
// Redactor is safe for concurrent use; Add takes effect for every later call,
// including later writes to writers made before it.
type Redactor struct {
	mu  sync.Mutex // serializes Add
	set atomic.Pointer[secretSet]
}

// NewRedactor returns a Redactor for secrets (see Add).
func NewRedactor(secrets ...string) *Redactor {
	r := &Redactor{}
	r.Add(secrets...)
	return r
}

// Add registers secret values. Values shorter than MinSecretLen bytes,
// values of white space only and values contained in Redacted are ignored.
// A value with leading or trailing white space is also registered trimmed,
// so both forms are redacted. Adding a known value again is harmless.
func (r *Redactor) Add(secrets ...string) {
	if r == nil || len(secrets) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.set.Load()
	seen := map[string]bool{}
	var all []string
	if old != nil {
		for _, s := range old.secrets {
			seen[s] = true
		}
		all = append(all, old.secrets...)
	}
	n := len(all)
	for _, s := range secrets {
		for _, v := range []string{s, strings.TrimSpace(s)} {
			if acceptSecret(v) && !seen[v] {
				seen[v] = true
				all = append(all, v)
			}
		}
	}
	if len(all) == n {
		return
	}
	r.set.Store(newSecretSet(all))
}

// Len reports how many distinct secret values the Redactor holds.
func (r *Redactor) Len() int {
	return len(r.load().secrets)
}

func acceptSecret(v string) bool {
	return len(v) >= MinSecretLen && strings.TrimSpace(v) != "" && !strings.Contains(Redacted, v)
}

var emptySet = &secretSet{}

func (r *Redactor) load() *secretSet {
	if r == nil {
		return emptySet
	}
	if s := r.set.Load(); s != nil {
		return s
	}
	return emptySet
}

// String returns s with every secret replaced by Redacted.
func (r *Redactor) String(s string) string {
	return r.load().str(s)
}

// Bytes returns b with every secret replaced by Redacted. When no secret
// occurs it returns b itself; otherwise a new slice (b is never modified).
func (r *Redactor) Bytes(b []byte) []byte {
	return r.load().bytes(b)
}

// secretSet is an immutable snapshot of a Redactor's secrets.
type secretSet struct {
	secrets []string  // accepted secrets, as added
	plain   []string  // secrets and their encoded forms (encodedForms), longest first
	bplain  [][]byte  // plain as bytes
	fail    [][]int32 // KMP prefix function of each plain secret (Writer)
	forms   []string  // plain plus the JSON-escaped forms, for checking Raw
	pm      *matcher  // finds plain
	fm      *matcher  // finds forms
	marker  bool      // some secret can re-form around a Redacted it produced
	maxLen  int       // longest plain secret
}

func newSecretSet(secrets []string) *secretSet {
	plain := slices.Clone(secrets)
	seen := map[string]bool{}
	for _, p := range secrets {
		seen[p] = true
	}
	for _, p := range secrets {
		for _, f := range encodedForms(p) {
			if !seen[f] && acceptSecret(f) {
				seen[f] = true
				plain = append(plain, f)
			}
		}
	}
	slices.SortStableFunc(plain, func(a, b string) int { return len(b) - len(a) })
	s := &secretSet{secrets: slices.Clone(secrets), plain: plain}
	forms := map[string]bool{}
	for _, p := range plain {
		s.bplain = append(s.bplain, []byte(p))
		s.fail = append(s.fail, prefixFunction(p))
		if len(p) > s.maxLen {
			s.maxLen = len(p)
		}
		if overlapsMarker(p) {
			s.marker = true
		}
		forms[p] = true
		for _, f := range jsonForms(p) {
			if len(f) >= MinSecretLen {
				forms[f] = true
			}
		}
	}
	for f := range forms {
		s.forms = append(s.forms, f)
	}
	slices.SortFunc(s.forms, func(a, b string) int {
		if d := len(b) - len(a); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	s.pm = newMatcher(s.plain)
	s.fm = newMatcher(s.forms)
	return s
}

func (s *secretSet) empty() bool { return len(s.plain) == 0 }

// overlapsMarker reports whether an occurrence of p could be formed by a
// Redacted mark and the bytes around it: p contains Redacted, or a prefix
// of p is a suffix of Redacted, or a suffix of p is a prefix of it.
func overlapsMarker(p string) bool {
	if strings.Contains(p, Redacted) {
		return true
	}
	for k := 1; k < len(Redacted) && k <= len(p); k++ {
		if strings.HasSuffix(Redacted, p[:k]) || strings.HasPrefix(Redacted, p[len(p)-k:]) {
			return true
		}
	}
	return false
}

// jsonForms returns p as encoding/json writes it inside a string (HTML
// characters escaped, as json.Marshal does), without HTML escaping (as an
// Encoder with SetEscapeHTML(false) does), and with every non-ASCII
// character as a \u escape (as ensure_ascii encoders do).
func jsonForms(p string) []string {
	var out []string
	if m, err := json.Marshal(p); err == nil {
		out = append(out, string(m[1:len(m)-1]))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(p) == nil {
		m := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		out = append(out, string(m[1:len(m)-1]))
		var a strings.Builder
		for _, r := range string(m[1 : len(m)-1]) {
			switch {
			case r < utf8.RuneSelf:
				a.WriteRune(r)
			case r > 0xFFFF:
				r -= 0x10000
				fmt.Fprintf(&a, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
			default:
				fmt.Fprintf(&a, `\u%04x`, r)
			}
		}
		out = append(out, a.String())
	}
	return out
}

// prefixFunction is the KMP prefix function of p: pi[i] is the length of
// the longest proper prefix of p[:i+1] that is also its suffix.
func prefixFunction(p string) []int32 {
	pi := make([]int32, len(p))
	var k int32
	for i := 1; i < len(p); i++ {
		for k > 0 && p[i] != p[k] {
			k = pi[k-1]
		}
		if p[i] == p[k] {
			k++
		}
		pi[i] = k
	}
	return pi
}

// span is a half-open byte range [start, end).
type span struct{ start, end int }

// mergeSpans sorts spans and merges overlapping and touching ones.
func mergeSpans(sp []span) []span {
	if len(sp) < 2 {
		return sp
	}
	slices.SortFunc(sp, func(a, b span) int { return a.start - b.start })
	out := sp[:1]
	for _, x := range sp[1:] {
		last := &out[len(out)-1]
		if x.start <= last.end {
			if x.end > last.end {
				last.end = x.end
			}
			continue
		}
		out = append(out, x)
	}
	return out
}

func replaceString(text string, sp []span) string {
	var b strings.Builder
	b.Grow(len(text) + len(sp)*len(Redacted))
	pos := 0
	for _, x := range sp {
		b.WriteString(text[pos:x.start])
		b.WriteString(Redacted)
		pos = x.end
	}
	b.WriteString(text[pos:])
	return b.String()
}

func replaceBytes(dst, text []byte, sp []span) []byte {
	pos := 0
	for _, x := range sp {
		dst = append(dst, text[pos:x.start]...)
		dst = append(dst, Redacted...)
		pos = x.end
	}
	return append(dst, text[pos:]...)
}

func (s *secretSet) str(text string) string {
	if s.empty() || len(text) < MinSecretLen {
		return text
	}
	sp := find(s.pm, text)
	if len(sp) == 0 {
		return text
	}
	out := replaceString(text, sp)
	if !s.marker {
		// An occurrence in out that does not overlap a mark lies inside
		// bytes that were contiguous in text, where it would have been
		// found: out is clean.
		return out
	}
	for range maxRedactPasses {
		sp = find(s.pm, out)
		if len(sp) == 0 {
			return out
		}
		out = replaceString(out, sp)
	}
	if len(find(s.pm, out)) == 0 {
		return out
	}
	return Redacted
}

func (s *secretSet) bytes(b []byte) []byte {
	if s.empty() || len(b) < MinSecretLen {
		return b
	}
	sp := find(s.pm, b)
	if len(sp) == 0 {
		return b
	}
	if s.marker {
		return []byte(s.str(string(b)))
	}
	return replaceBytes(make([]byte, 0, len(b)+len(sp)*len(Redacted)), b, sp)
}
