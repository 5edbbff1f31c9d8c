package credentials

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
)

func TestRedactorString(t *testing.T) {
	tests := []struct {
		name    string
		secrets []string
		in      string
		want    string
	}{
		{"no secrets", nil, "token abcd", "token abcd"},
		{"one", []string{"sk-abc123"}, "key=sk-abc123 end", "key=[REDACTED] end"},
		{"every occurrence", []string{"sk-abc123"}, "sk-abc123sk-abc123 x sk-abc123", "[REDACTED] x [REDACTED]"},
		{"nested: longest wins", []string{"abcd", "xxabcdxx"}, "1 xxabcdxx 2 abcd", "1 [REDACTED] 2 [REDACTED]"},
		{"overlapping: union covered", []string{"abcdef", "defghi"}, "<abcdefghi>", "<[REDACTED]>"},
		{"self-overlapping", []string{"aaaa"}, "baaaaaab", "b[REDACTED]b"},
		{"adjacent runs merge", []string{"abcd", "efgh"}, "abcdefgh", "[REDACTED]"},
		{"too short ignored", []string{"abc", "1"}, "abc 1", "abc 1"},
		{"whitespace ignored", []string{"    ", "\t\n  "}, "a    b", "a    b"},
		{"trimmed form too", []string{"  tok-9876\n"}, "x tok-9876 y", "x [REDACTED] y"},
		{"inside marker ignored", []string{"DACT", "REDACTED"}, "REDACTED DACT", "REDACTED DACT"},
		{"multi-line secret", []string{"line1\nline2"}, "a line1\nline2 b", "a [REDACTED] b"},
		{"binary", []string{"\x00\xff\xfe\x01"}, "a\x00\xff\xfe\x01b", "a[REDACTED]b"},
		{"marker re-forming", []string{"ED]x", "p-secret"}, "p-secretx", "[REDACT[REDACTED]"},
		{"marker re-forming prefix", []string{"q[RE", "p-secret"}, "qp-secret", "[REDACTED]DACTED]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRedactor(tt.secrets...)
			got := r.String(tt.in)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("String (-want +got):\n%s", d)
			}
			if got := string(r.Bytes([]byte(tt.in))); got != tt.want {
				t.Errorf("Bytes = %q, want %q", got, tt.want)
			}
			for _, s := range tt.secrets {
				if acceptSecret(s) && strings.Contains(got, s) {
					t.Errorf("output %q contains secret %q", got, s)
				}
			}
		})
	}
}

func TestRedactorZeroAndNil(t *testing.T) {
	var nilR *Redactor
	nilR.Add("abcdef")
	if got := nilR.String("abcdef"); got != "abcdef" {
		t.Errorf("nil String = %q", got)
	}
	var zero Redactor
	if got := zero.String("abcdef"); got != "abcdef" {
		t.Errorf("zero String = %q", got)
	}
	zero.Add("abcdef")
	if got := zero.String("xabcdefx"); got != "x[REDACTED]x" {
		t.Errorf("zero after Add = %q", got)
	}
	if zero.Len() != 1 {
		t.Errorf("Len = %d, want 1", zero.Len())
	}
	nilR.Event(&harness.Event{Text: "abcdef"})
	if err := nilR.Error(errors.New("abcdef")); err.Error() != "abcdef" {
		t.Errorf("nil Error = %v", err)
	}
}

func TestRedactorBytesUnchangedIsSame(t *testing.T) {
	r := NewRedactor("secret-1")
	in := []byte("nothing to see here")
	if got := r.Bytes(in); &got[0] != &in[0] {
		t.Error("Bytes copied an unchanged slice")
	}
	in = []byte("a secret-1 b")
	orig := bytes.Clone(in)
	_ = r.Bytes(in)
	if !bytes.Equal(in, orig) {
		t.Error("Bytes modified its input")
	}
}

// writeChunks writes in through a redacting writer split at cuts and
// returns what reached the underlying writer.
func writeChunks(t *testing.T, r *Redactor, in string, cuts []int) string {
	t.Helper()
	var out bytes.Buffer
	w := r.Writer(&out)
	prev := 0
	for _, c := range append(cuts, len(in)) {
		if n, err := w.Write([]byte(in[prev:c])); err != nil || n != c-prev {
			t.Fatalf("Write = %d, %v", n, err)
		}
		prev = c
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestRedactorWriter(t *testing.T) {
	tests := []struct {
		name    string
		secrets []string
		in      string
	}{
		{"one secret", []string{"sk-abc123"}, "key=sk-abc123\nnext line sk-abc123"},
		{"overlapping", []string{"abcdef", "defghi", "ghij"}, "xx abcdefghij yy abcdef zz defghij"},
		{"self-overlapping", []string{"aaaa"}, "baaaaaaaab aaa aaaa"},
		{"adjacent", []string{"abcd", "efgh"}, "abcdefgh-abcd-efgh"},
		{"multi-line", []string{"-----BEGIN KEY-----\nMIIE\n-----END KEY-----"}, "a\n-----BEGIN KEY-----\nMIIE\n-----END KEY-----\nb"},
		{"prefix that is not a secret", []string{"token-secret"}, "token-secre token-secret token-"},
		{"nested", []string{"abcd", "zzabcdzz"}, "zzabcdzz abcd zzabcd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewRedactor(tt.secrets...)
			want := r.String(tt.in)
			// Every single cut, and every pair of cuts.
			for i := 0; i <= len(tt.in); i++ {
				if got := writeChunks(t, r, tt.in, []int{i}); got != want {
					t.Fatalf("cut at %d: got %q, want %q", i, got, want)
				}
				for j := i; j <= len(tt.in); j++ {
					if got := writeChunks(t, r, tt.in, []int{i, j}); got != want {
						t.Fatalf("cuts at %d,%d: got %q, want %q", i, j, got, want)
					}
				}
			}
			// Byte by byte.
			cuts := make([]int, len(tt.in))
			for i := range cuts {
				cuts[i] = i
			}
			if got := writeChunks(t, r, tt.in, cuts); got != want {
				t.Fatalf("byte by byte: got %q, want %q", got, want)
			}
		})
	}
}

func TestRedactorWriterPrompt(t *testing.T) {
	// Text that cannot start a secret is written at once, not held.
	r := NewRedactor("sk-abc123")
	var out bytes.Buffer
	w := r.Writer(&out)
	if _, err := w.Write([]byte("error: something failed\n")); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "error: something failed\n" {
		t.Errorf("written before Close = %q", got)
	}
	if _, err := w.Write([]byte("then sk-ab")); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "error: something failed\nthen " {
		t.Errorf("held = %q", got)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "error: something failed\nthen sk-ab" {
		t.Errorf("after Close = %q", got)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, ErrWriterClosed) {
		t.Errorf("Write after Close = %v, want ErrWriterClosed", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func TestRedactorWriterAddLater(t *testing.T) {
	r := NewRedactor()
	var out bytes.Buffer
	w := r.Writer(&out)
	fmt.Fprint(w, "before late-secret ")
	r.Add("late-secret")
	fmt.Fprint(w, "after late-secret")
	w.Close()
	if got, want := out.String(), "before late-secret after [REDACTED]"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	f.n++
	return 0, fs.ErrClosed
}

func TestRedactorWriterError(t *testing.T) {
	fw := &failWriter{}
	w := NewRedactor("abcdef").Writer(fw)
	if _, err := w.Write([]byte("hello\n")); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("Write = %v, want the underlying error", err)
	}
	if _, err := w.Write([]byte("again\n")); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("second Write = %v, want the sticky error", err)
	}
	if err := w.Close(); !errors.Is(err, fs.ErrClosed) {
		t.Fatalf("Close = %v, want the sticky error", err)
	}
	if fw.n != 1 {
		t.Errorf("underlying writer called %d times, want 1", fw.n)
	}
}

func TestRedactorEvent(t *testing.T) {
	secrets := []string{
		"sk-plain-1234",
		`quo"te\back<html>&`, // escaped by json.Marshal as \" \\ \u003c \u003e \u0026
		"ünïcødé-sëcret",
		"9876543210",
		"tab\there\nnewline",
	}
	r := NewRedactor(secrets...)
	rawIn := map[string]any{
		"plain":   "x sk-plain-1234 y",
		"quoted":  `a quo"te\back<html>& b`,
		"unicode": "ünïcødé-sëcret",
		"number":  98765432101,
		"ctrl":    "tab\there\nnewline!",
		"sk-plain-1234": []any{
			"keys too", true, nil, 1.5,
		},
		"nested": map[string]any{"deep": []any{"sk-plain-1234"}},
	}
	raw, err := json.Marshal(rawIn)
	if err != nil {
		t.Fatal(err)
	}
	// The same content as a Python-style ASCII encoder writes it.
	asciiRaw := []byte(`{"u":"\u00fcn\u00efc\u00f8d\u00e9-s\u00ebcret","s":"sk-plain-\u0031234"}`)

	tool := &harness.Tool{ID: "t-sk-plain-1234", Name: "bash", Input: json.RawMessage(`{"cmd":"echo sk-plain-1234", "n": 9876543210}`), Output: "out sk-plain-1234"}
	details := map[string]any{
		"s":      "sk-plain-1234",
		"list":   []any{"a", "sk-plain-1234", 3},
		"strs":   []string{"sk-plain-1234"},
		"m":      map[string]string{"k": "sk-plain-1234"},
		"raw":    json.RawMessage(`"sk-plain-1234"`),
		"num":    9876543210,
		"ok":     42,
		"err":    fmt.Errorf("wrap: %w", errors.New("sk-plain-1234")),
		"struct": struct{ A string }{"sk-plain-1234"},
	}
	e := &harness.Event{
		Type:         harness.EventToolCall,
		Agent:        "agent",
		Conversation: "c-sk-plain-1234",
		Session:      "sess sk-plain-1234",
		Text:         "text sk-plain-1234 and ünïcødé-sëcret",
		ID:           "id sk-plain-1234",
		Stop:         "stop sk-plain-1234",
		Kind:         "kind sk-plain-1234",
		Tool:         tool,
		Details:      details,
		Raw:          raw,
		Time:         time.Unix(0, 0).UTC(),
	}
	origTool := *tool
	r.Event(e)

	if d := cmp.Diff(origTool, *tool); d != "" {
		t.Error("Event wrote through the shared Tool")
	}
	if details["s"] != "sk-plain-1234" {
		t.Error("Event wrote through the shared Details map")
	}
	for _, f := range []string{e.Conversation, e.Session, e.Text, e.ID, e.Stop, e.Kind, e.Tool.ID, e.Tool.Output} {
		if !strings.Contains(f, Redacted) {
			t.Errorf("field %q not redacted", f)
		}
	}
	if e.Agent != "agent" || e.Tool.Name != "bash" {
		t.Errorf("unrelated fields changed: %q %q", e.Agent, e.Tool.Name)
	}
	wantDetails := map[string]any{
		"s":      Redacted,
		"list":   []any{"a", Redacted, 3},
		"strs":   []string{Redacted},
		"m":      map[string]string{"k": Redacted},
		"raw":    json.RawMessage(`"[REDACTED]"`),
		"num":    Redacted,
		"ok":     42,
		"struct": "{" + Redacted + "}",
	}
	gotErr := e.Details["err"].(error)
	delete(e.Details, "err")
	if d := cmp.Diff(wantDetails, e.Details); d != "" {
		t.Errorf("Details (-want +got):\n%s", d)
	}
	if gotErr.Error() != "wrap: "+Redacted {
		t.Errorf("Details error = %q", gotErr)
	}

	checkJSON := func(name string, got []byte) {
		t.Helper()
		if !json.Valid(got) {
			t.Fatalf("%s not valid JSON: %s", name, got)
		}
		for _, s := range secrets {
			for _, f := range append(jsonForms(s), s) {
				if bytes.Contains(got, []byte(f)) {
					t.Errorf("%s %s contains secret form %q", name, got, f)
				}
			}
		}
		var v any
		if err := json.Unmarshal(got, &v); err != nil {
			t.Fatal(err)
		}
		if flat := fmt.Sprint(v); containsAny([]byte(flat), secrets) {
			t.Errorf("%s decodes to %s, which holds a secret", name, flat)
		}
	}
	checkJSON("Raw", e.Raw)
	checkJSON("Tool.Input", e.Tool.Input)
	var got map[string]any
	if err := json.Unmarshal(e.Raw, &got); err != nil {
		t.Fatal(err)
	}
	wantRaw := map[string]any{
		"plain":      "x [REDACTED] y",
		"quoted":     "a [REDACTED] b",
		"unicode":    Redacted,
		"number":     Redacted,
		"ctrl":       "[REDACTED]!",
		"[REDACTED]": []any{"keys too", true, nil, 1.5},
		"nested":     map[string]any{"deep": []any{Redacted}},
	}
	if d := cmp.Diff(wantRaw, got); d != "" {
		t.Errorf("Raw (-want +got):\n%s", d)
	}

	e2 := &harness.Event{Raw: asciiRaw}
	r.Event(e2)
	checkJSON("ASCII Raw", e2.Raw)

	// Formatting outside the redacted strings is kept.
	e3 := &harness.Event{Raw: json.RawMessage("{ \"a\" : [1, 2,\n\t\"sk-plain-1234\"] }")}
	r.Event(e3)
	if got, want := string(e3.Raw), "{ \"a\" : [1, 2,\n\t\"[REDACTED]\"] }"; got != want {
		t.Errorf("Raw = %q, want %q", got, want)
	}

	// The whole event serializes, and holds no secret.
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	checkJSON("event", b)
}

func TestRedactorRawEdgeCases(t *testing.T) {
	tests := []struct {
		name    string
		secrets []string
		raw     string
		want    string
	}{
		{"no secret", []string{"abcdef"}, `{"a":1}`, `{"a":1}`},
		{"secret spanning tokens", []string{`a","b`}, `["a","b"]`, `"[REDACTED]"`},
		{"digits in number", []string{"1234"}, `{"n":12345}`, `{"n":"[REDACTED]"}`},
		{"literal", []string{"true"}, `[true,false]`, `["[REDACTED]",false]`},
		{"invalid JSON", []string{"abcdef"}, `not json abcdef`, `"not json [REDACTED]"`},
		{"invalid JSON without secret", []string{"abcdef"}, `not json`, `not json`},
		{"escaped unicode", []string{"ABCD"}, `"\u0041BCD"`, `"[REDACTED]"`},
		{"escaped slash", []string{"a/b/c/d"}, `"a\/b\/c\/d"`, `"[REDACTED]"`},
		{"fallback avoids marker", []string{`ED]"`, "abcdef"}, `{"x":"abcdef"}`, `""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := &harness.Event{Raw: json.RawMessage(tt.raw)}
			NewRedactor(tt.secrets...).Event(e)
			if got := string(e.Raw); got != tt.want {
				t.Errorf("Raw = %s, want %s", got, tt.want)
			}
		})
	}
}

var errSentinel = errors.New("sentinel")

type customErr struct{ msg string }

func (e *customErr) Error() string { return e.msg }

func TestRedactorError(t *testing.T) {
	r := NewRedactor("sk-err-5555")

	t.Run("nil", func(t *testing.T) {
		if r.Error(nil) != nil {
			t.Error("nil error not nil")
		}
	})
	t.Run("unchanged is same", func(t *testing.T) {
		err := fmt.Errorf("plain: %w", errSentinel)
		if got := r.Error(err); got != err {
			t.Errorf("got %v, want the same error", got)
		}
	})
	t.Run("plain chain", func(t *testing.T) {
		inner := &customErr{"custom sk-err-5555"}
		err := fmt.Errorf("outer sk-err-5555: %w", errors.Join(errSentinel, inner))
		got := r.Error(err)
		if strings.Contains(got.Error(), "sk-err-5555") {
			t.Errorf("text %q holds the secret", got)
		}
		if !errors.Is(got, errSentinel) {
			t.Error("errors.Is lost the sentinel")
		}
		var ce *customErr
		if !errors.As(got, &ce) || ce != inner {
			t.Error("errors.As lost the custom error")
		}
	})
	t.Run("coded", func(t *testing.T) {
		err := &outpost.Error{
			Code: outpost.Quota, Op: "run", Agent: "codex",
			Msg:     "limit for key sk-err-5555",
			Details: map[string]any{"resets_at": "soon", "key": "sk-err-5555"},
			Err:     fmt.Errorf("cause sk-err-5555: %w", errSentinel),
		}
		got, oe := redactCoded(t, r, err, "sk-err-5555")
		if oe == err {
			t.Fatal("the original was returned, not a copy")
		}
		if oe.Code != outpost.Quota || oe.Op != "run" || oe.Agent != "codex" {
			t.Errorf("copy = %#v", oe)
		}
		if d := cmp.Diff(map[string]any{"resets_at": "soon", "key": Redacted}, oe.Details); d != "" {
			t.Errorf("Details (-want +got):\n%s", d)
		}
		if !errors.Is(got, outpost.ErrQuota) || !errors.Is(got, errSentinel) {
			t.Error("errors.Is lost the code or the cause")
		}
		if outpost.CodeOf(got) != outpost.Quota || outpost.ExitCode(got) != outpost.ExitCode(err) {
			t.Error("CodeOf/ExitCode changed")
		}
		if err.Msg != "limit for key sk-err-5555" || err.Details["key"] != "sk-err-5555" {
			t.Error("the original was modified")
		}
	})
	t.Run("coded inside a wrapper", func(t *testing.T) {
		inner := &outpost.Error{Code: outpost.Process, Op: "start", Msg: "bad sk-err-5555"}
		err := fmt.Errorf("turn: %w", inner)
		got, oe := redactCoded(t, r, err, "sk-err-5555")
		if oe == inner || strings.Contains(oe.Msg, "sk-err-5555") {
			t.Errorf("errors.As gave the unredacted original: %q", oe.Msg)
		}
		if !errors.Is(got, outpost.ErrProcess) {
			t.Error("errors.Is lost the code")
		}
	})
	t.Run("coded with clean text but secret details", func(t *testing.T) {
		err := (&outpost.Error{Code: outpost.Process, Msg: "clean"}).Detail("k", "sk-err-5555")
		var oe *outpost.Error
		if !errors.As(r.Error(err), &oe) || oe.Details["k"] != Redacted {
			t.Errorf("details not redacted: %v", oe)
		}
	})
}

// redactCoded redacts err and returns the result and the *outpost.Error
// errors.As finds in it, failing the test when its text holds secret.
func redactCoded(t *testing.T, r *Redactor, err error, secret string) (error, *outpost.Error) {
	t.Helper()
	got := r.Error(err)
	if strings.Contains(got.Error(), secret) {
		t.Errorf("text %q holds the secret", got)
	}
	var oe *outpost.Error
	if !errors.As(got, &oe) {
		t.Fatal("errors.As found no *outpost.Error")
	}
	return got, oe
}

func TestRedactorConcurrent(t *testing.T) {
	r := NewRedactor()
	var out bytes.Buffer
	w := r.Writer(&out)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(3)
		go func() {
			defer wg.Done()
			r.Add(fmt.Sprintf("secret-%04d", i))
		}()
		go func() {
			defer wg.Done()
			_ = r.String(fmt.Sprintf("x secret-%04d y", i))
			e := &harness.Event{Text: "secret-0001", Raw: json.RawMessage(`"secret-0002"`)}
			r.Event(e)
			_ = r.Error(errors.New("secret-0003"))
		}()
		go func() {
			defer wg.Done()
			fmt.Fprintf(w, "line secret-%04d\n", i)
		}()
	}
	wg.Wait()
	w.Close()
	if got := r.String("secret-0000 secret-0007"); got != "[REDACTED] [REDACTED]" {
		t.Errorf("after concurrent Add: %q", got)
	}
}

func BenchmarkRedactorString(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n{}\":,"
	randText := func(n int) string {
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(buf)
	}
	var secrets []string
	for i := range 10 {
		secrets = append(secrets, fmt.Sprintf("sk-%02d-%s", i, randText(40)))
	}
	r := NewRedactor(secrets...)
	clean := randText(64 << 10)
	// The same text with each secret in it twice.
	dirty := []byte(clean)
	for i, s := range secrets {
		copy(dirty[(2*i+1)*3000:], s)
		copy(dirty[(2*i+2)*3000:], s)
	}
	for _, bc := range []struct {
		name, text string
	}{{"clean", clean}, {"20-occurrences", string(dirty)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.text)))
			b.ReportAllocs()
			for b.Loop() {
				_ = r.String(bc.text)
			}
		})
		// The stream form: the text in 4 KiB writes, as a CLI's stderr.
		b.Run("writer-"+bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.text)))
			b.ReportAllocs()
			for b.Loop() {
				w := r.Writer(io.Discard)
				for i := 0; i < len(bc.text); i += 4 << 10 {
					io.WriteString(w, bc.text[i:min(i+4<<10, len(bc.text))])
				}
				w.Close()
			}
		})
	}
}

func FuzzRedactor(f *testing.F) {
	f.Add("key=sk-abc123 and sk-abc123", "sk-abc123", "abc1", uint16(5))
	f.Add("abcdefghi", "abcdef", "defghi", uint16(4))
	f.Add("[REDACTED]x", "ED]x", "q[RE", uint16(1))
	f.Add(`{"a":"quo\"te"}`, `quo"te`, "\\back", uint16(7))
	f.Add("aaaaaaaaaa", "aaaa", "aaaaa", uint16(3))
	f.Fuzz(func(t *testing.T, text, s1, s2 string, cut uint16) {
		r := NewRedactor(s1, s2)
		var secrets []string
		for _, s := range []string{s1, s2, strings.TrimSpace(s1), strings.TrimSpace(s2)} {
			if acceptSecret(s) {
				secrets = append(secrets, s)
			}
		}
		got := r.String(text)
		for _, s := range secrets {
			if strings.Contains(got, s) {
				t.Fatalf("String(%q) = %q contains secret %q", text, got, s)
			}
		}
		if b := r.Bytes([]byte(text)); string(b) != got {
			t.Fatalf("Bytes = %q, String = %q", b, got)
		}
		// The writer matches String when no secret overlaps the marker.
		if !r.load().marker {
			c := int(cut) % (len(text) + 1)
			var out bytes.Buffer
			w := r.Writer(&out)
			io.WriteString(w, text[:c])
			io.WriteString(w, text[c:])
			w.Close()
			if out.String() != got {
				t.Fatalf("Writer split at %d = %q, String = %q", c, out.String(), got)
			}
		}
		// Raw stays valid JSON and holds no secret in any form.
		raw, _ := json.Marshal(map[string]string{"t": text, text: "k"})
		e := &harness.Event{Raw: raw}
		r.Event(e)
		if !json.Valid(e.Raw) {
			t.Fatalf("Raw %s is not valid JSON", e.Raw)
		}
		var v map[string]string
		if err := json.Unmarshal(e.Raw, &v); err == nil {
			for k, val := range v {
				for _, s := range secrets {
					if utf8.ValidString(s) && (strings.Contains(k, s) || strings.Contains(val, s)) {
						t.Fatalf("Raw %s decodes to a secret %q", e.Raw, s)
					}
				}
			}
		}
	})
}
