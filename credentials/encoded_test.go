package credentials

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/outposthq/outpost/harness"
)

// encodedKey has characters that percent-encoding changes, and a length
// (41) that is not a multiple of 3, so every base64 alignment differs.
const encodedKey = "sk-ant-api03-Zx9/q+w=Rt?u&v k~7LmN0pQrStU"

// TestRedactorEncodedForms: a secret printed base64-, hex- or
// percent-encoded is redacted in text, events and streams (issue 43: the
// base64 of the key passed through events).
func TestRedactorEncodedForms(t *testing.T) {
	r := NewRedactor(encodedKey)
	b := []byte(encodedKey)
	forms := map[string]string{
		"base64 std":           base64.StdEncoding.EncodeToString(b),
		"base64 std unpadded":  base64.RawStdEncoding.EncodeToString(b),
		"base64 url":           base64.URLEncoding.EncodeToString(b),
		"base64 url unpadded":  base64.RawURLEncoding.EncodeToString(b),
		"hex":                  hex.EncodeToString(b),
		"HEX":                  strings.ToUpper(hex.EncodeToString(b)),
		"query escape":         url.QueryEscape(encodedKey),
		"path escape":          url.PathEscape(encodedKey),
		"query escape lower":   lowerEscapes(url.QueryEscape(encodedKey)),
		"path escape lower":    lowerEscapes(url.PathEscape(encodedKey)),
		"basic auth header":    "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("user:"+encodedKey)),
		"base64 inside a blob": base64.StdEncoding.EncodeToString([]byte(`{"k":"` + encodedKey + `"}`)),
	}
	for name, f := range forms {
		t.Run(name, func(t *testing.T) {
			text := "before " + f + " after"
			got := r.String(text)
			if got == text || strings.Contains(got, f) {
				t.Fatalf("String(%q) = %q: the %s form passed", text, got, name)
			}
			e := &harness.Event{Text: text, Raw: mustJSON(t, map[string]string{"out": text})}
			r.Event(e)
			if e.Text != got {
				t.Errorf("event Text = %q, want %q", e.Text, got)
			}
			if strings.Contains(string(e.Raw), f) || !json.Valid(e.Raw) {
				t.Errorf("event Raw = %s", e.Raw)
			}
			if w := writeChunks(t, r, text, everyCut(len(text))); w != got {
				t.Errorf("writer byte by byte = %q, want %q", w, got)
			}
		})
	}
}

// TestRedactorBase64Alignments: inside a longer base64 text, every
// character that depends on the secret's bytes alone is redacted, whatever
// the secret's offset modulo 3 and whichever alphabet and padding.
func TestRedactorBase64Alignments(t *testing.T) {
	r := NewRedactor(encodedKey)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		for pre := range 6 {
			for post := range 4 {
				msg := strings.Repeat("p", pre) + encodedKey + strings.Repeat("q", post)
				text := enc.EncodeToString([]byte(msg))
				got := r.String(text)
				i := strings.Index(got, Redacted)
				if i < 0 {
					t.Fatalf("pre %d post %d: %q not redacted", pre, post, text)
				}
				j := len(text) - (len(got) - i - len(Redacted))
				// Characters c with 6c >= 8*pre and 6c+6 <= 8*(pre+len(key))
				// carry the key's bits alone.
				first := (8*pre + 5) / 6
				last := (8*(pre+len(encodedKey)))/6 - 1
				if got[:i] != text[:i] || got[i+len(Redacted):] != text[j:] || i > first || j < last+1 {
					t.Errorf("pre %d post %d: %q -> %q keeps key characters [%d,%d]", pre, post, text, got, first, last)
				}
			}
		}
	}
}

// TestRedactorEncodedFormsNoFalseHits: ordinary text and a short secret's
// short encodings are left alone.
func TestRedactorEncodedFormsNoFalseHits(t *testing.T) {
	r := NewRedactor("abcd")
	for _, text := range []string{"YWJj ZGVm bcd YmNk", "616263 abc", strings.Repeat("Zm9v", 20)} {
		if got := r.String(text); got != text {
			t.Errorf("String(%q) = %q", text, got)
		}
	}
	if n := r.Len(); n != 1 {
		t.Errorf("Len = %d, want 1 (forms are not secrets)", n)
	}
}

func everyCut(n int) []int {
	cuts := make([]int, n)
	for i := range cuts {
		cuts[i] = i
	}
	return cuts
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
