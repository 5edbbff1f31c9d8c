package server

import (
	"net/http/httptest"
	"path/filepath"
	"testing"
)

// TestLimitsFor: the turns of one token name share its window; a name
// without a limit has none.
func TestLimitsFor(t *testing.T) {
	s := &Server{o: Options{TokenLimits: map[string]TokenLimit{"ci": {PerHour: 10}, "zero": {}}}}
	a, b := s.limitsFor("ci"), s.limitsFor("ci")
	if len(a) != 1 || len(b) != 1 || a[0] != b[0] {
		t.Fatalf("limits %v and %v, want one shared window", a, b)
	}
	a[0].Spend(10)
	if x := b[0].Allow(0, 0); x == nil || x.Budget != "token" || x.Window != "hour" {
		t.Errorf("after 10 tokens: %+v", x)
	}
	if l := s.limitsFor("other"); l != nil {
		t.Errorf("a name without a limit: %v", l)
	}
	if l := s.limitsFor("zero"); l != nil {
		t.Errorf("a zero limit: %v", l)
	}
}

// TestLimitsForToken: --token-limit NAME applies to the turns of the
// token named NAME (the peer was "token:NAME", which no limit matched).
func TestLimitsForToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	tok, err := AddToken(path, "ci")
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{o: Options{Tokens: tokens, TokenLimits: map[string]TokenLimit{"ci": {PerHour: 10}}}}
	r := httptest.NewRequest("POST", "/v1/turns", nil)
	r.Header.Set("Authorization", "Bearer "+tok)
	p, e := s.authenticate(r)
	if e != nil || p.owner != "token:ci" || p.operator || p.policy == nil {
		t.Fatalf("peer %+v, %v", p, e)
	}
	if l := s.limitsFor(p.token); len(l) != 1 {
		t.Errorf("the limits of token ci's turns: %v", l)
	}
}
