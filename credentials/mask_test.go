package credentials

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestMask(t *testing.T) {
	r := NewRedactor("sk-secret-value", `quo"te\secret`, "ünïcode-key", "abc")
	for _, tc := range []struct{ in, want string }{
		{"no secret here", "no secret here"},
		{"key=sk-secret-value.", "key=***************."},
		{"sk-secret-valuesk-secret-value", "******************************"},
		{`{"t":"quo\"te\\secret"}`, `{"t":"***************"}`},
		{`{"t":"\u00fcn\u00efcode-key"}`, `{"t":"*********************"}`},
		{"ünïcode-key", "*************"},
		{"abc is too short to be a secret", "abc is too short to be a secret"},
	} {
		got := r.Mask([]byte(tc.in))
		if string(got) != tc.want {
			t.Errorf("Mask(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if len(got) != len(tc.in) {
			t.Errorf("Mask(%q) changed the length", tc.in)
		}
	}
	// A masked JSON line is still JSON.
	line, _ := json.Marshal(map[string]string{"text": `the key is quo"te\secret and sk-secret-value`})
	masked := r.Mask(line)
	var v map[string]string
	if err := json.Unmarshal(masked, &v); err != nil {
		t.Fatalf("masked JSON %s: %v", masked, err)
	}
	if bytes.Contains(masked, []byte("secret")) {
		t.Errorf("masked %s still holds a secret", masked)
	}
	// b is never modified, and returned as is when clean.
	in := []byte("x sk-secret-value")
	r.Mask(in)
	if string(in) != "x sk-secret-value" {
		t.Error("Mask modified its input")
	}
	var nilR *Redactor
	if got := nilR.Mask(in); &got[0] != &in[0] {
		t.Error("a nil Redactor copied")
	}
}
