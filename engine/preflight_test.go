package engine_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/harness/presets"
)

// preflightKeys is, for each built-in preset, the variable its preflight
// names when nothing gives it a credential, and "" for a preset that runs
// without one.
var preflightKeys = map[string]string{
	"aider":        "", // a local model needs no key
	"antigravity":  "GEMINI_API_KEY",
	"claude":       "ANTHROPIC_API_KEY",
	"claude-acp":   "ANTHROPIC_API_KEY",
	"codex":        "OPENAI_API_KEY",
	"codex-acp":    "OPENAI_API_KEY",
	"copilot":      "COPILOT_GITHUB_TOKEN",
	"copilot-acp":  "COPILOT_GITHUB_TOKEN",
	"echo":         "",
	"gemini":       "GEMINI_API_KEY",
	"gemini-acp":   "GEMINI_API_KEY",
	"opencode":     "OPENAI_API_KEY",
	"opencode-acp": "OPENAI_API_KEY",
	"qwen":         "OPENAI_API_KEY",
	"qwen-acp":     "OPENAI_API_KEY",
}

// TestPreflightPresets: every built-in preset that needs a credential is
// refused with code configuration, naming the variable to set, when the
// environment gives none; with that variable set (never quoted) it
// passes, and says so by name.
func TestPreflightPresets(t *testing.T) {
	if diff := cmp.Diff(presets.Names(), sortedKeys(preflightKeys)); diff != "" {
		t.Fatalf("presets (-registered +listed here):\n%s", diff)
	}
	home := t.TempDir() // holds no login file
	for name, key := range preflightKeys {
		t.Run(name, func(t *testing.T) {
			h, _ := presets.Lookup(name)
			for _, hostFiles := range []bool{false, true} {
				c, err := engine.Preflight(h, &engine.PreflightOptions{Environ: []string{"HOME=" + home}, Workdir: t.TempDir(), HostFiles: hostFiles})
				if key == "" {
					if err != nil {
						t.Errorf("host files %v: %v, want no refusal", hostFiles, err)
					}
					continue
				}
				var oe *outpost.Error
				if outpost.CodeOf(err) != outpost.Configuration || !errorsAs(err, &oe) || oe.Agent != name || !strings.Contains(err.Error(), key) {
					t.Errorf("host files %v: %v (credential %+v), want configuration naming %s", hostFiles, err, c, key)
				}
			}
			if key == "" {
				return
			}
			secret := "sk-preflight-" + name + "-0123456789"
			c, err := engine.Preflight(h, &engine.PreflightOptions{Environ: []string{"HOME=" + home, key + "=" + secret}, Workdir: t.TempDir()})
			if err != nil || !strings.Contains(fmt.Sprint(c.Variables), key) {
				t.Errorf("with %s: %+v %v", key, c, err)
			}
			if strings.Contains(fmt.Sprintf("%+v", c), secret) {
				t.Errorf("the credential quotes the secret: %+v", c)
			}
		})
	}
}

// TestPreflightSources: the credential sources besides the environment:
// .outpost/.env, the explicit variables (--env), a host login file on a
// sandbox that takes host files, and not on one that does not (local),
// whose refusal then says why the file did not count.
func TestPreflightSources(t *testing.T) {
	claude, _ := presets.Lookup("claude")
	home := t.TempDir()
	env := []string{"HOME=" + home}

	wd := t.TempDir()
	os.MkdirAll(filepath.Join(wd, ".outpost"), 0o700)
	os.WriteFile(filepath.Join(wd, ".outpost", ".env"), []byte("ANTHROPIC_AUTH_TOKEN=tok-dotenv\n"), 0o600)
	if c, err := engine.Preflight(claude, &engine.PreflightOptions{Environ: env, Workdir: wd}); err != nil || cmp.Diff([]string{"ANTHROPIC_AUTH_TOKEN"}, c.Variables) != "" {
		t.Errorf(".outpost/.env: %+v %v", c, err)
	}

	if c, err := engine.Preflight(claude, &engine.PreflightOptions{Environ: env, Workdir: t.TempDir(), Env: map[string]string{"ANTHROPIC_API_KEY": "sk-explicit"}}); err != nil || cmp.Diff([]string{"ANTHROPIC_API_KEY"}, c.Variables) != "" {
		t.Errorf("explicit variable: %+v %v", c, err)
	}
	// A required variable (a preset file's credentials.required) given
	// explicitly, and a copilot BYOK base URL that needs no key.
	qwen, _ := presets.Lookup("qwen")
	if _, err := engine.Preflight(qwen, &engine.PreflightOptions{Environ: env, Workdir: t.TempDir(), Env: map[string]string{"OPENAI_API_KEY": "sk-explicit"}}); err != nil {
		t.Errorf("qwen, explicit key: %v", err)
	}
	copilot, _ := presets.Lookup("copilot")
	if _, err := engine.Preflight(copilot, &engine.PreflightOptions{Environ: env, Workdir: t.TempDir(), Env: map[string]string{"COPILOT_PROVIDER_BASE_URL": "http://127.0.0.1:1/v1"}}); err != nil {
		t.Errorf("copilot, explicit BYOK base URL: %v", err)
	}
	// An explicit variable the preset does not take is no credential.
	if _, err := engine.Preflight(claude, &engine.PreflightOptions{Environ: env, Workdir: t.TempDir(), Env: map[string]string{"OPENAI_API_KEY": "sk-other"}}); outpost.CodeOf(err) != outpost.Configuration {
		t.Errorf("claude with another preset's key: %v, want configuration", err)
	}

	login := filepath.Join(home, ".claude", ".credentials.json")
	os.MkdirAll(filepath.Dir(login), 0o700)
	os.WriteFile(login, []byte(`{"claudeAiOauth":{}}`), 0o600)
	if c, err := engine.Preflight(claude, &engine.PreflightOptions{Environ: env, Workdir: t.TempDir(), HostFiles: true}); err != nil || cmp.Diff([]string{login}, c.HostFiles) != "" {
		t.Errorf("host login file on a sandbox that takes it: %+v %v", c, err)
	}
	_, err := engine.Preflight(claude, &engine.PreflightOptions{Environ: env, Workdir: t.TempDir()})
	if outpost.CodeOf(err) != outpost.Configuration || !strings.Contains(err.Error(), "ANTHROPIC_API_KEY") || !strings.Contains(err.Error(), login+" is not copied") {
		t.Errorf("host login file on local: %v, want configuration naming the key and why the file does not count", err)
	}
}

// A claude turn without a credential fails before any sandbox is
// allocated, and stores nothing; with the key, in the default secrets
// mode (the credential gateway), it is not refused: its sandbox is
// allocated and the agent started (here a program that does not exist).
func TestPreflightTurn(t *testing.T) {
	f := newFixture(t)
	claude, _ := presets.Lookup("claude")
	agent := harness.Agent{Kind: harness.KindCLI, Harness: claude}
	home := t.TempDir()
	_, err := f.run(engine.Turn{Prompt: "hello", Agent: agent, Command: "/nonexistent/claude"},
		func(o *engine.RunOptions) { o.Environ = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home} })
	if outpost.CodeOf(err) != outpost.Configuration || !strings.Contains(fmt.Sprint(err), "ANTHROPIC_API_KEY") {
		t.Fatalf("%v, want configuration naming ANTHROPIC_API_KEY", err)
	}
	if n := f.provider.opens.Load(); n != 0 {
		t.Errorf("%d sandboxes allocated", n)
	}
	if l, _ := f.store.List(t.Context()); len(l) != 0 {
		t.Errorf("%d conversations stored", len(l))
	}
	res, err := f.run(engine.Turn{Prompt: "hello", Agent: agent, Command: "/nonexistent/claude"},
		func(o *engine.RunOptions) {
			o.Environ = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "ANTHROPIC_API_KEY=sk-ant-fake-0123456789"}
		})
	if outpost.CodeOf(err) == outpost.Configuration || f.provider.opens.Load() != 1 {
		t.Fatalf("with the key: %v (%d sandboxes), want the turn to start", err, f.provider.opens.Load())
	}
	if res != nil && res.Secrets != engine.SecretsGateway {
		t.Errorf("secrets mode %q, want gateway", res.Secrets)
	}
}

// A race one of whose agents (here the judge) has no credential is
// refused before any workspace is made, naming the variable.
func TestPreflightRace(t *testing.T) {
	f := newFixture(t)
	echoAgent := harness.Agent{Kind: harness.KindCLI, Harness: echo.Harness()}
	copilot, _ := presets.Lookup("copilot")
	_, err := engine.Race(t.Context(), engine.RaceSpec{Prompt: "x", Workdir: f.workdir, Contestants: []harness.Agent{echoAgent},
		Judge: &harness.Agent{Kind: harness.KindCLI, Harness: copilot}},
		&engine.RaceOptions{Run: engine.RunOptions{Provider: f.provider, Store: f.store, Environ: []string{"HOME=" + t.TempDir()}}})
	if outpost.CodeOf(err) != outpost.Configuration || !strings.Contains(fmt.Sprint(err), "COPILOT_GITHUB_TOKEN") {
		t.Fatalf("%v, want configuration naming COPILOT_GITHUB_TOKEN", err)
	}
	if n := f.provider.opens.Load(); n != 0 {
		t.Errorf("%d sandboxes allocated", n)
	}
}

func sortedKeys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
