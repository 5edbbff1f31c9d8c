// Package harnesstest is the conformance suite every agent preset passes:
// its hooks are consistent, it decodes the real CLI's recorded output into
// the expected events, it never panics on any input, and its quota and
// outage classifiers never take a retry notice for a terminal failure.
//
// A preset's test calls it with the directory of its golden recordings:
//
//	func TestConformance(t *testing.T) {
//		harnesstest.RunConformanceTests(t, claude.Harness(), "testdata/golden")
//	}
//
//	func FuzzEvents(f *testing.F) {
//		harnesstest.FuzzEvents(f, claude.Harness(), "testdata/golden")
//	}
//
// Golden layout: every file named <case>.stdout.jsonl in the directory is
// the standard output of one real CLI run, decoded line by line with a
// fresh decoder (Harness.NewDecoder, else Harness.Events). The events it
// must give are in <case>.events.golden beside it, one line per event
// (see EventLine); `go test -update` rewrites them. Packages that use this
// suite must not define their own -update flag: this package registers it
// (see Update).
package harnesstest

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/outposthq/outpost/harness"
)

func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite golden files")
	}
}

// Update reports whether the test binary runs with -update.
func Update() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// StdoutSuffix and EventsSuffix name the golden files of a case.
const (
	StdoutSuffix = ".stdout.jsonl"
	EventsSuffix = ".events.golden"
)

// Case is one recorded CLI run.
type Case struct {
	Name  string   // file name without StdoutSuffix
	Path  string   // the stdout file
	Lines [][]byte // its non-empty lines, without newlines
}

// Cases reads the golden cases of dir, sorted by name.
func Cases(dir string) ([]Case, error) {
	matches, err := filepath.Glob(filepath.Join(dir, "*"+StdoutSuffix))
	if err != nil {
		return nil, err
	}
	sort.Strings(matches)
	var out []Case
	for _, p := range matches {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		c := Case{Name: strings.TrimSuffix(filepath.Base(p), StdoutSuffix), Path: p}
		for _, l := range bytes.Split(b, []byte("\n")) {
			if len(bytes.TrimSpace(l)) > 0 {
				c.Lines = append(c.Lines, l)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// Decoder returns a fresh line decoder of h, as the turn engine uses it.
func Decoder(h *harness.Harness) func([]byte) []harness.Event {
	if h.NewDecoder != nil {
		return h.NewDecoder()
	}
	return h.Events
}

// EventLine is the golden form of one event: its type, then "/kind" when
// it has a kind, then " delta" for a delta, then " tool=<name>" for a tool
// call with a name.
func EventLine(ev harness.Event) string {
	s := string(ev.Type)
	if ev.Kind != "" {
		s += "/" + ev.Kind
	}
	if ev.Delta {
		s += " delta"
	}
	if ev.Type == harness.EventToolCall && ev.Tool != nil && ev.Tool.Name != "" {
		s += " tool=" + ev.Tool.Name
	}
	return s
}

// RunConformanceTests runs the suite on preset h with the golden cases of
// goldenDir (see the package comment). It needs at least one case.
func RunConformanceTests(t *testing.T, h *harness.Harness, goldenDir string) {
	t.Helper()
	if err := h.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	cases, err := Cases(goldenDir)
	if err != nil {
		t.Fatalf("reading golden cases: %v", err)
	}
	if len(cases) == 0 {
		t.Fatalf("no golden cases (*%s) in %s", StdoutSuffix, goldenDir)
	}
	t.Run("Validate", func(t *testing.T) {
		if err := h.Validate(); err != nil {
			t.Fatal(err)
		}
		if h.Name == "" || h.Request == nil {
			t.Fatal("a preset needs Name and Request")
		}
		cmd, err := h.Request(harness.Input{Prompt: "hello", Workdir: "/work", Home: "/home/agent"})
		if err != nil {
			t.Fatalf("Request of a plain prompt: %v", err)
		}
		if cmd.Path == "" {
			t.Fatal("Request built a command without a program")
		}
	})
	t.Run("Golden", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.Name, func(t *testing.T) { golden(t, h, c) })
		}
	})
	t.Run("RetryNotices", func(t *testing.T) { retryNotices(t, h, cases) })
	t.Run("Robust", func(t *testing.T) { robust(t, h, cases) })
	if h.LiveInput != nil {
		t.Run("LiveInput", func(t *testing.T) { liveInput(t, h, cases) })
	}
	if h.Storage != nil {
		t.Run("Storage", func(t *testing.T) { storage(t, h) })
	}
}

// decodeAll decodes lines with a fresh decoder and checks every event.
func decodeAll(t testing.TB, h *harness.Harness, lines [][]byte) []harness.Event {
	t.Helper()
	dec := Decoder(h)
	var all []harness.Event
	for i, l := range lines {
		evs, err := safeDecode(dec, l)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		for _, ev := range evs {
			if err := CheckEvent(ev); err != nil {
				t.Errorf("line %d: %v", i+1, err)
			}
		}
		all = append(all, evs...)
	}
	if h.DecodeEnd {
		evs, err := safeDecode(dec, nil)
		if err != nil {
			t.Fatalf("end of output: %v", err)
		}
		all = append(all, evs...)
	}
	return all
}

func safeDecode(dec func([]byte) []harness.Event, line []byte) (evs []harness.Event, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("decoding a %d-byte line panicked: %v", len(line), r)
		}
	}()
	return dec(line), nil
}

// CheckEvent reports an event a preset must never produce: an unknown
// type, one that does not serialize to JSON (a Tool.Input or Raw that is
// not valid JSON), or a notice of kind "decode_error", which is what a
// decoder that recovers from its own panic must report (as the turn engine
// does for any decoder), so the suite sees the panic.
func CheckEvent(ev harness.Event) error {
	if !slices.Contains(harness.EventTypes, ev.Type) {
		return fmt.Errorf("event of unknown type %q", ev.Type)
	}
	if ev.Kind == "decode_error" {
		return fmt.Errorf("the decoder panicked and recovered: %s", ev.Text)
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("%s event does not serialize: %w", ev.Type, err)
	}
	if !utf8.Valid(b) {
		return fmt.Errorf("%s event serializes to invalid UTF-8", ev.Type)
	}
	return nil
}

// GoldenText is the content of a case's events golden file: a comment
// line, then EventLine of each event.
func GoldenText(caseName, preset string, evs []harness.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# events of %s%s decoded by the %s preset (go test -update rewrites this file)\n", caseName, StdoutSuffix, preset)
	for _, ev := range evs {
		b.WriteString(EventLine(ev))
		b.WriteByte('\n')
	}
	return b.String()
}

func golden(t *testing.T, h *harness.Harness, c Case) {
	got := GoldenText(c.Name, h.Name, decodeAll(t, h, c.Lines))
	path := strings.TrimSuffix(c.Path, StdoutSuffix) + EventsSuffix
	if Update() {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no %s: run go test -update to write it from the current decoder, and review it", filepath.Base(path))
	}
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Errorf("events of %s differ from %s (-want +got):\n%s", c.Name, filepath.Base(path), lineDiff(string(want), got))
	}
}

// lineDiff is a small line diff for golden mismatches.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, c string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			c = g[i]
		}
		if a != c {
			fmt.Fprintf(&b, "line %d:\n-%s\n+%s\n", i+1, a, c)
		}
	}
	return b.String()
}

func retryNotices(t *testing.T, h *harness.Harness, cases []Case) {
	for _, c := range cases {
		dec := Decoder(h)
		for i, l := range c.Lines {
			evs, err := safeDecode(dec, l)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				if ev.Type != harness.EventNotice || ev.Kind != "retry" {
					continue
				}
				for what, text := range map[string]string{"notice text": ev.Text, "native line": string(l)} {
					if h.Quota != nil && h.Quota(text) {
						t.Errorf("%s line %d: Quota matches the %s of a retry notice: %q", c.Name, i+1, what, text)
					}
					if h.Unavailable != nil && h.Unavailable(text) {
						t.Errorf("%s line %d: Unavailable matches the %s of a retry notice: %q", c.Name, i+1, what, text)
					}
				}
			}
		}
	}
}

// Inputs returns hostile variants of a line for the robustness checks:
// plain holds truncations and invalid UTF-8; swaps holds the line with each
// of its JSON values (up to maxNodes of them) replaced by values of other
// types.
func Inputs(line []byte, maxNodes int) (plain, swaps [][]byte) {
	var out [][]byte
	// Truncations: every cut in the first 32 bytes, then 24 spread cuts.
	for i := 0; i < len(line) && i < 32; i++ {
		out = append(out, line[:i])
	}
	for k := 1; k <= 24 && len(line) > 32; k++ {
		out = append(out, line[:32+(len(line)-32)*k/25])
	}
	// Invalid UTF-8 at spread positions, and in place of each quote.
	for k := 0; k < 8 && len(line) > 0; k++ {
		i := len(line) * k / 8
		v := append(append(append([]byte{}, line[:i]...), 0xff, 0xfe, 0xc3), line[i:]...)
		out = append(out, v)
	}
	if j := bytes.IndexByte(line, '"'); j >= 0 {
		v := bytes.Clone(line)
		for i := j; i < len(v); i++ {
			if v[i] == '"' && i+1 < len(v) && v[i+1] != ':' && v[i+1] != ',' && v[i+1] != '}' && v[i+1] != ']' {
				v = append(v[:i+1], append([]byte{0xff}, v[i+1:]...)...)
				i++
			}
		}
		out = append(out, v)
	}
	// Type swaps of JSON values.
	plain, out = out, nil
	var v any
	d := json.NewDecoder(bytes.NewReader(line))
	d.UseNumber()
	if d.Decode(&v) == nil {
		n := 0
		replacements := []any{nil, json.Number("-1e308"), "x", true, []any{nil, "x"}, map[string]any{"type": "text"}}
		walk(v, func(set func(any)) bool {
			if n >= maxNodes {
				return false
			}
			n++
			for _, r := range replacements {
				set(r)
				if b, err := json.Marshal(v); err == nil {
					out = append(out, b)
				}
			}
			return true
		})
	}
	return plain, out
}

// walk calls f for every value inside v, depth first, with a setter that
// replaces the value in place; walk restores the original after f returns.
// f returns false to stop the walk.
func walk(v any, f func(set func(any)) bool) bool {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			orig := x[k]
			if !f(func(r any) { x[k] = r }) {
				x[k] = orig
				return false
			}
			x[k] = orig
			if !walk(orig, f) {
				return false
			}
		}
	case []any:
		for i := range x {
			orig := x[i]
			if !f(func(r any) { x[i] = r }) {
				x[i] = orig
				return false
			}
			x[i] = orig
			if !walk(orig, f) {
				return false
			}
		}
	}
	return true
}

// Oddities are fixed hostile lines every decoder must survive, among them
// lines of 16 MiB (2 MiB under the race detector, which slows decoding
// tenfold).
func Oddities() [][]byte {
	size := 16 << 20
	if raceEnabled {
		size = 2 << 20
	}
	deep := bytes.Repeat([]byte("["), 100_000)
	huge := make([]byte, 0, size+64)
	huge = append(huge, `{"type":"assistant","message":{"content":[{"type":"text","text":"`...)
	huge = append(huge, bytes.Repeat([]byte("x"), size)...)
	huge = append(huge, `"}]}}`...)
	return [][]byte{
		nil, {}, []byte(" "), []byte("null"), []byte("[]"), []byte("{}"), []byte(`""`), []byte("0"),
		[]byte(`{"type":null}`), []byte(`{"type":1}`), []byte(`{"type":{}}`), []byte(`{"type":"result"}`),
		[]byte(`{"type":"assistant"}`), []byte(`{"type":"user","message":"x"}`), []byte(`{"type":"system"}`),
		[]byte("\xff\xfe\xfd"), []byte(`{"type":"\xff"}`), []byte("not json at all"),
		bytes.Repeat([]byte("x"), size), deep, huge,
	}
}

func robust(t *testing.T, h *harness.Harness, cases []Case) {
	// Every line gets the truncations and invalid UTF-8; one line per
	// distinct shape (type, subtype) also gets the type swaps, which only
	// the decoders need.
	shapes := map[string]bool{}
	for _, in := range Oddities() {
		checkInput(t, h, in, true)
	}
	for _, c := range cases {
		for _, l := range c.Lines {
			var head struct {
				Type    any `json:"type"`
				Subtype any `json:"subtype"`
			}
			_ = json.Unmarshal(l, &head)
			shape := fmt.Sprint(head.Type, "/", head.Subtype)
			nodes := 0
			if !shapes[shape] {
				shapes[shape] = true
				nodes = 100
			}
			plain, swaps := Inputs(l, nodes)
			if raceEnabled || testing.Short() {
				plain, swaps = sample(plain, 4), sample(swaps, 8)
			}
			for _, in := range plain {
				checkInput(t, h, in, true)
			}
			for _, in := range swaps {
				checkInput(t, h, in, false)
			}
			if t.Failed() {
				return
			}
		}
	}
}

// sample keeps every nth input.
func sample(in [][]byte, n int) [][]byte {
	var out [][]byte
	for i := 0; i < len(in); i += n {
		out = append(out, in[i])
	}
	return out
}

// checkInput runs the decoders of h, and with classify its text hooks, on
// one input, and fails on a panic or a bad event.
func checkInput(t testing.TB, h *harness.Harness, in []byte, classify bool) {
	t.Helper()
	short := func() string {
		if len(in) > 200 {
			return fmt.Sprintf("%q… (%d bytes)", in[:200], len(in))
		}
		return fmt.Sprintf("%q", in)
	}
	if h.Events != nil {
		evs, err := safeDecode(h.Events, in)
		if err != nil {
			t.Fatalf("Events(%s): %v", short(), err)
		}
		for _, ev := range evs {
			if err := CheckEvent(ev); err != nil {
				t.Fatalf("Events(%s): %v", short(), err)
			}
		}
	}
	if h.NewDecoder != nil {
		dec := h.NewDecoder()
		for range 2 { // twice: the second call sees the state of the first
			evs, err := safeDecode(dec, in)
			if err != nil {
				t.Fatalf("decoder(%s): %v", short(), err)
			}
			for _, ev := range evs {
				if err := CheckEvent(ev); err != nil {
					t.Fatalf("decoder(%s): %v", short(), err)
				}
			}
		}
	}
	if !classify {
		return
	}
	// The classifiers see failure texts and stderr lines as the engine
	// gives them: clipped to harness.MaxClassifiedText.
	text := harness.ClipText(string(in))
	for name, f := range map[string]func(string) bool{"Quota": h.Quota, "Unavailable": h.Unavailable} {
		if f == nil {
			continue
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("%s(%s) panicked: %v", name, short(), r)
				}
			}()
			f(text)
		}()
	}
	if h.QuotaDetails != nil {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("QuotaDetails(%s) panicked: %v", short(), r)
				}
			}()
			h.QuotaDetails(text)
		}()
	}
}

func liveInput(t *testing.T, h *harness.Harness, cases []Case) {
	in := harness.Input{Prompt: "hello", Workdir: "/work", Home: "/home/agent"}
	l, err := h.LiveInput(in)
	if err != nil {
		t.Fatalf("LiveInput: %v", err)
	}
	if l.Command().Path == "" {
		t.Fatal("the live command has no program")
	}
	var w bytes.Buffer
	if err := l.Begin(&w); err != nil {
		t.Fatalf("Begin: %v", err)
	}
	checkJSONLines(t, "Begin", w.Bytes())
	for _, msg := range []string{"steer", "two\nlines\r\n", "\u2028\u2029", "\xff\xfe invalid", strings.Repeat("long ", 200_000), `{"type":"control_request"}`, ""} {
		w.Reset()
		if _, err := l.Send(&w, msg); err != nil {
			t.Fatalf("Send(%.40q): %v", msg, err)
		}
		checkJSONLines(t, "Send", w.Bytes())
		if n := bytes.Count(w.Bytes(), []byte("\n")); n > 1 {
			t.Errorf("Send(%.40q) wrote %d lines, want at most one", msg, n)
		}
	}
	w.Reset()
	if err := l.Interrupt(&w); err != nil {
		t.Fatalf("Interrupt: %v", err)
	}
	checkJSONLines(t, "Interrupt", w.Bytes())
	for _, c := range cases {
		for _, line := range c.Lines {
			w.Reset()
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("Live.Decode of a %s line panicked: %v", c.Name, r)
					}
				}()
				for _, ev := range l.Decode(line, &w) {
					if err := CheckEvent(ev); err != nil {
						t.Errorf("Live.Decode of a %s line: %v", c.Name, err)
					}
				}
				l.Done()
			}()
			checkJSONLines(t, "Decode", w.Bytes())
		}
	}
	for _, odd := range Oddities() {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("Live.Decode of an odd line panicked: %v", r)
				}
			}()
			l.Decode(odd, io.Discard)
		}()
	}
}

// checkJSONLines fails unless b is empty or complete lines that are each
// one valid JSON value in valid UTF-8.
func checkJSONLines(t *testing.T, what string, b []byte) {
	t.Helper()
	if len(b) == 0 {
		return
	}
	if b[len(b)-1] != '\n' {
		t.Errorf("%s wrote a partial line: %.80q", what, b)
		return
	}
	for _, l := range bytes.Split(b[:len(b)-1], []byte("\n")) {
		if !json.Valid(l) || !utf8.Valid(l) {
			t.Errorf("%s wrote a line that is not valid JSON: %.80q", what, l)
		}
	}
}

func storage(t *testing.T, h *harness.Harness) {
	st := h.Storage
	weird := []string{"", "/", "..", "../x", "a/../../b", "\x00", "\xff", "a/b/c/d", strings.Repeat("a/", 5000), "x.jsonl", "-p", "*", "a//b"}
	for _, rel := range weird {
		for _, native := range weird {
			func() {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("Storage hook panicked on rel=%.40q native=%.40q: %v", rel, native, r)
					}
				}()
				st.Match(rel, native)
				if st.Place != nil {
					for _, wd := range []string{"", "/", "relative", "/a b/ü", strings.Repeat("/long", 100)} {
						st.Place(rel, native, wd)
					}
				}
				if st.Ancestors != nil {
					st.Ancestors(rel, []byte(native))
				}
			}()
		}
	}
}

// FuzzEvents is the fuzz target of a preset's decoders: seeded with every
// line of its golden cases, it checks that Events, a fresh decoder (fed the
// input twice), the live decoder, Quota, Unavailable and QuotaDetails never
// panic and that every event is valid (CheckEvent).
func FuzzEvents(f *testing.F, h *harness.Harness, goldenDir string) {
	cases, err := Cases(goldenDir)
	if err != nil {
		f.Fatalf("reading golden cases: %v", err)
	}
	for _, c := range cases {
		for _, l := range c.Lines {
			f.Add(bytes.Clone(l))
		}
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		checkInput(t, h, line, true)
		if h.LiveInput != nil {
			l, err := h.LiveInput(harness.Input{Prompt: "hello", Workdir: "/work", Home: "/home/agent"})
			if err != nil {
				return
			}
			var w bytes.Buffer
			for _, ev := range l.Decode(line, &w) {
				if err := CheckEvent(ev); err != nil {
					t.Fatal(err)
				}
			}
			l.Done()
		}
	})
}
