package credentials

import "strings"

// matcher finds every occurrence (overlapping ones included) of a fixed
// set of patterns in one pass over the text, so the cost of redaction
// grows with the text, not with the number of patterns times the text:
// each secret brings a dozen encoded forms (encodedForms), and searching
// for each one by one made redaction twenty times slower.
//
// A position is looked at only when its first two bytes may begin some
// pattern (a bit in lead); then the patterns sharing its first four bytes
// are compared. Patterns shorter than four bytes (none in practice:
// MinSecretLen is 4) are searched one by one.
//
// lead has one bit per 2-byte lead (65,536: 8 KiB) or, for at most
// smallMatcher patterns, one bit per hash of it to 12 bits (4,096: 512
// bytes), which a position passes by chance less than once in 64: a
// turn's redactor of a few secrets (each running turn holds its own,
// docs/benchmarks.md "Scale") keeps the small one; a larger set keeps the
// exact one, as a smaller filter for it made redaction of clean text
// 1.4× slower (BenchmarkRedactorString).
type matcher struct {
	pats  []string
	lead  []uint64           // bits by leadBit
	small bool               // lead is the small one
	by4   map[uint32][]int32 // indices into pats by their first four bytes
	short []string
}

// smallMatcher is the most patterns a matcher with the small lead keeps
// (eight secrets: a secret brings eight forms).
const smallMatcher = 64

// leadBit is the bit of lead for a 2-byte lead k: k itself, or in the
// small lead a hash of it (Fibonacci hashing to 12 bits).
func (m *matcher) leadBit(k uint32) uint32 {
	if m.small {
		return (k * 0x9E3779B1) >> 20
	}
	return k
}

func newMatcher(pats []string) *matcher {
	m := &matcher{pats: pats, small: len(pats) <= smallMatcher, by4: map[uint32][]int32{}}
	if m.small {
		m.lead = make([]uint64, 1<<12/64)
	} else {
		m.lead = make([]uint64, 1<<16/64)
	}
	for i, p := range pats {
		if len(p) < 4 {
			m.short = append(m.short, p)
			continue
		}
		k := uint32(p[0])<<8 | uint32(p[1])
		b := m.leadBit(k)
		m.lead[b>>6] |= 1 << (b & 63)
		key := k<<16 | uint32(p[2])<<8 | uint32(p[3])
		m.by4[key] = append(m.by4[key], int32(i))
	}
	return m
}

// matchFrom appends to sp the span of each occurrence found starting at
// or after from; with first it stops at the first one.
func matchFrom[T string | []byte](m *matcher, text T, sp []span, first bool) []span {
	for _, p := range m.short {
		for i := 0; i+len(p) <= len(text); i++ {
			if string(text[i:i+len(p)]) == p {
				sp = append(sp, span{i, i + len(p)})
				if first {
					return sp
				}
			}
		}
	}
	if len(m.by4) == 0 {
		return sp
	}
	for i := 0; i+4 <= len(text); i++ {
		k := uint32(text[i])<<8 | uint32(text[i+1])
		if b := m.leadBit(k); m.lead[b>>6]&(1<<(b&63)) == 0 {
			continue
		}
		key := k<<16 | uint32(text[i+2])<<8 | uint32(text[i+3])
		for _, pi := range m.by4[key] {
			p := m.pats[pi]
			if len(text)-i >= len(p) && string(text[i:i+len(p)]) == p {
				sp = append(sp, span{i, i + len(p)})
				if first {
					return sp
				}
			}
		}
	}
	return sp
}

// find returns the merged spans of every occurrence in text.
func find[T string | []byte](m *matcher, text T) []span {
	if m == nil {
		return nil
	}
	return mergeSpans(matchFrom(m, text, nil, false))
}

// contains reports whether any pattern occurs in text.
func contains[T string | []byte](m *matcher, text T) bool {
	return m != nil && len(matchFrom(m, text, nil, true)) > 0
}

// containsAny reports whether text contains any of secrets (for tests and
// one-off checks; the Redactor uses a matcher).
func containsAny(text []byte, secrets []string) bool {
	for _, sec := range secrets {
		if strings.Contains(string(text), sec) {
			return true
		}
	}
	return false
}
