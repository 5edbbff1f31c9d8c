package bootstrap_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/internal/testenv"
)

// TestEmbeddedPins: the pin file parses, pins every built-in agent, and
// pins the versions the presets and the test suite's npm installs use.
func TestEmbeddedPins(t *testing.T) {
	p, err := bootstrap.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"claude", "codex", "copilot", "antigravity", "echo"} {
		if _, ok := p.Lookup(name); !ok {
			t.Errorf("no pin for %s", name)
		}
		if !bootstrap.Known(name) {
			t.Errorf("%s is not Known", name)
		}
	}
	for _, name := range []string{"claude", "codex", "copilot"} {
		pin, _ := p.Lookup(name)
		if pin.Version != testenv.CLIVersion(name) {
			t.Errorf("%s: pinned %s, scripts/install-clis.sh installs %s", name, pin.Version, testenv.CLIVersion(name))
		}
		if pin.Kind != bootstrap.KindNPM || pin.Integrity == "" || pin.Tarball == "" {
			t.Errorf("%s: the main package is not pinned: %+v", name, pin)
		}
		for _, key := range []string{"linux-x64", "linux-arm64", "darwin-arm64"} {
			a := pin.Platforms[key]
			if a == nil {
				t.Errorf("%s: no %s artifact", name, key)
				continue
			}
			if !strings.HasPrefix(a.URL, bootstrap.DefaultRegistry+"/") || !strings.HasPrefix(a.Integrity, "sha512-") {
				t.Errorf("%s %s: %+v", name, key, a)
			}
		}
	}
	if pin, _ := p.Lookup("antigravity"); pin.Kind != bootstrap.KindArchive || pin.Program != "agy" || pin.Platforms["linux-x64"].SHA512 == "" {
		t.Errorf("antigravity: %+v", pin)
	}
	// The file is in canonical form: what regeneration writes.
	raw, err := os.ReadFile("pins.json")
	if err != nil {
		t.Fatal(err)
	}
	canon, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(canon), string(raw)); d != "" {
		t.Errorf("pins.json is not canonical (-want +got):\n%s", d)
	}
}

// TestPinnedPlatforms: every npm pin covers the same platforms —
// linux-x64, linux-arm64, darwin-arm64 and darwin-x64, with musl variants
// beside them where a CLI ships them — each artifact from the npm
// registry with its SHA-512 integrity. The one exception is written here,
// so that it cannot spread unnoticed or outlive its cause: OpenCode's,
// whose other platform packages of 1.18.33 the registry the pins are made
// from does not serve (opencode-linux-arm64 stops at 1.18.18, no darwin
// package at all); its note says so. A pin that gains a platform listed
// as missing fails too: drop it from the list.
func TestPinnedPlatforms(t *testing.T) {
	want := []string{"darwin-arm64", "darwin-x64", "linux-arm64", "linux-x64"}
	missing := map[string][]string{"opencode": {"darwin-arm64", "darwin-x64", "linux-arm64"}}
	p, err := bootstrap.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	var npm []string
	for _, name := range p.Names() {
		pin, _ := p.Lookup(name)
		if pin.Kind != bootstrap.KindNPM {
			continue
		}
		npm = append(npm, name)
		var got []string
		for key, a := range pin.Platforms {
			if !strings.HasPrefix(a.URL, bootstrap.DefaultRegistry+"/") || !strings.HasPrefix(a.Integrity, "sha512-") {
				t.Errorf("%s %s: not an npm artifact with its SHA-512: %+v", name, key, a)
			}
			if !strings.HasSuffix(key, "-musl") {
				got = append(got, key)
			}
		}
		slices.Sort(got)
		expect := slices.DeleteFunc(slices.Clone(want), func(k string) bool { return slices.Contains(missing[name], k) })
		if d := cmp.Diff(expect, got); d != "" {
			t.Errorf("%s: pinned platforms (-want +got):\n%s", name, d)
		}
		if len(missing[name]) > 0 && !strings.Contains(pin.Note, "linux-x64") {
			t.Errorf("%s: the note does not say which platform is pinned: %q", name, pin.Note)
		}
	}
	if d := cmp.Diff([]string{"claude", "claude-acp", "codex", "codex-acp", "copilot", "gemini", "opencode", "qwen"}, npm); d != "" {
		t.Errorf("npm pins (-want +got):\n%s", d)
	}
}

func TestParsePinsRefusesBadPins(t *testing.T) {
	good := `{"schema":1,"agents":{"x":{"kind":"archive","version":"1","program":"x","platforms":{"linux-x64":{"url":"https://h/x.tgz","sha512":"` + digestOf(nil).Hex() + `","bin":"x"}}}}}`
	if _, err := bootstrap.ParsePins([]byte(good)); err != nil {
		t.Fatalf("good pins: %v", err)
	}
	for name, bad := range map[string]string{
		"schema":    strings.Replace(good, `"schema":1`, `"schema":2`, 1),
		"kind":      strings.Replace(good, `"archive"`, `"zip"`, 1),
		"program":   strings.Replace(good, `"program":"x"`, `"program":"../x"`, 1),
		"url":       strings.Replace(good, `https://h/x.tgz`, `file:///x.tgz`, 1),
		"digest":    strings.Replace(good, digestOf(nil).Hex(), "abc", 1),
		"bin":       strings.Replace(good, `"bin":"x"`, `"bin":"../x"`, 1),
		"absbin":    strings.Replace(good, `"bin":"x"`, `"bin":"/x"`, 1),
		"platform":  strings.Replace(good, `linux-x64`, `linux`, 1),
		"unknown":   strings.Replace(good, `"bin":"x"`, `"bin":"x","extra":1`, 1),
		"twodigest": strings.Replace(good, `"bin":"x"`, `"bin":"x","integrity":"`+digestOf(nil).SRI()+`"`, 1),
		"libc":      strings.Replace(good, `"bin":"x"`, `"bin":"x","libc":"bionic"`, 1),
	} {
		if _, err := bootstrap.ParsePins([]byte(bad)); err == nil {
			t.Errorf("%s: accepted %s", name, bad)
		}
	}
}

// TestPinsOverride: $OUTPOST_PINS replaces an agent's pin (the
// antigravity archive a user points at) and can add one.
func TestPinsOverride(t *testing.T) {
	file := t.TempDir() + "/pins.json"
	over := `{"schema":1,"agents":{
	  "antigravity":{"kind":"archive","version":"1.3.0","program":"agy","platforms":{"linux-x64":{"url":"https://mirror.example/agy.tgz","sha512":"` + digestOf([]byte("a")).Hex() + `","bin":"antigravity"}}},
	  "mycli":{"kind":"archive","version":"1","program":"mycli","platforms":{"linux-x64":{"url":"https://mirror.example/mycli.tgz","sha512":"` + digestOf([]byte("b")).Hex() + `","bin":"mycli"}}}}}`
	if err := os.WriteFile(file, []byte(over), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(bootstrap.PinsVariable, file)
	p, err := bootstrap.DefaultPins()
	if err != nil {
		t.Fatal(err)
	}
	if pin, _ := p.Lookup("antigravity"); pin.Version != "1.3.0" || pin.Platforms["linux-x64"].URL != "https://mirror.example/agy.tgz" {
		t.Errorf("antigravity not overridden: %+v", pin)
	}
	if pin, _ := p.Lookup("claude"); pin == nil || pin.Version != testenv.CLIVersion("claude") {
		t.Error("claude lost")
	}
	if !bootstrap.Known("mycli") {
		t.Error("an added pin is not Known")
	}
	os.WriteFile(file, []byte(`{"schema":1,"agents":{"x":{}}}`), 0o644)
	if _, err := bootstrap.DefaultPins(); err == nil || !strings.Contains(err.Error(), bootstrap.PinsVariable) {
		t.Errorf("a broken override file gave %v", err)
	}
}

// TestResolveNPM regenerates a pin from a fake registry, npm: aliases
// (Codex's platform packages) included, and refuses a platform package
// that is not for its platform.
func TestResolveNPM(t *testing.T) {
	docs := map[string]any{}
	integ := func(s string) string { return digestOf([]byte(s)).SRI() }
	add := func(name, version string, extra map[string]any) {
		doc := map[string]any{"name": name, "version": version, "dist": map[string]any{"integrity": integ(name + version), "tarball": "https://registry.npmjs.org/" + name + "/-/x-" + version + ".tgz"}}
		for k, v := range extra {
			doc[k] = v
		}
		docs["/"+strings.Replace(name, "/", "%2f", 1)+"/"+version] = doc
	}
	add("@openai/codex", "1.2.3", map[string]any{"optionalDependencies": map[string]string{
		"@openai/codex-linux-x64": "npm:@openai/codex@1.2.3-linux-x64", "@openai/codex-linux-arm64": "npm:@openai/codex@1.2.3-linux-arm64",
		"@openai/codex-darwin-x64": "npm:@openai/codex@1.2.3-darwin-x64", "@openai/codex-darwin-arm64": "npm:@openai/codex@1.2.3-darwin-arm64"}})
	add("@openai/codex", "1.2.3-linux-x64", map[string]any{"os": []string{"linux"}, "cpu": []string{"x64"}})
	add("@openai/codex", "1.2.3-linux-arm64", map[string]any{"os": []string{"linux"}, "cpu": []string{"arm64"}})
	add("@openai/codex", "1.2.3-darwin-x64", map[string]any{"os": []string{"darwin"}, "cpu": []string{"x64"}})
	add("@openai/codex", "1.2.3-darwin-arm64", map[string]any{"os": []string{"darwin"}, "cpu": []string{"x64"}}) // wrong cpu
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		doc, ok := docs[r.URL.EscapedPath()]
		if !ok {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(doc)
	}))
	defer reg.Close()
	ctx := context.Background()
	_, err := bootstrap.ResolveNPM(ctx, nil, reg.URL, "codex", "1.2.3")
	if err == nil || !strings.Contains(err.Error(), "darwin-arm64") {
		t.Fatalf("a platform package for the wrong cpu gave %v", err)
	}
	add("@openai/codex", "1.2.3-darwin-arm64", map[string]any{"os": []string{"darwin"}, "cpu": []string{"arm64"}})
	pin, err := bootstrap.ResolveNPM(ctx, nil, reg.URL, "codex", "1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	want := &bootstrap.Artifact{Package: "@openai/codex", Version: "1.2.3-linux-x64", URL: "https://registry.npmjs.org/@openai/codex/-/x-1.2.3-linux-x64.tgz",
		Integrity: integ("@openai/codex1.2.3-linux-x64"), Bin: "vendor/x86_64-unknown-linux-musl/bin/codex"}
	if d := cmp.Diff(want, pin.Platforms["linux-x64"]); d != "" {
		t.Errorf("linux-x64 (-want +got):\n%s", d)
	}
	if pin.Version != "1.2.3" || pin.Integrity != integ("@openai/codex1.2.3") || pin.Program != "codex" || len(pin.Platforms) != 4 {
		t.Errorf("pin = %+v", pin)
	}
	if _, err := bootstrap.ResolveNPM(ctx, nil, reg.URL, "codex", "^1.2.3"); err == nil {
		t.Error("a version range was accepted")
	}
	if _, err := bootstrap.ResolveNPM(ctx, nil, reg.URL, "codex", "9.9.9"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("a missing version gave %v", err)
	}
}

func TestProgressEventRoundTrip(t *testing.T) {
	p := bootstrap.Progress{Agent: "claude", Version: "2.1.332", Phase: bootstrap.PhaseDownload, Artifact: "@anthropic-ai/claude-code-linux-x64@2.1.332", Bytes: 5 << 20, Total: 186 << 20}
	ev := p.Event()
	if ev.Type != "notice" || ev.Kind != bootstrap.NoticeKind || !strings.Contains(ev.Text, "2%") {
		t.Errorf("event = %+v", ev)
	}
	// Through JSON, as `outpost run --json` prints it.
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Type, Kind string
		Details    map[string]any
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	ev.Details = back.Details
	got, ok := bootstrap.ProgressFromEvent(ev)
	if !ok || got != p {
		t.Errorf("round trip: %+v, want %+v", got, p)
	}
	if bootstrap.Size(186_117_258) != "186.1 MB" || bootstrap.Size(999) != "999 B" {
		t.Errorf("Size: %s %s", bootstrap.Size(186_117_258), bootstrap.Size(999))
	}
}
