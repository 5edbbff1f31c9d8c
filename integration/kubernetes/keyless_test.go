package kubernetes

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/kubernetes"
	"github.com/outposthq/outpost/providers/kubernetes/kubetest"
)

// TestKeylessInPod: the real Claude Code, Codex and Copilot CLI in pods with the
// defaults (secrets gateway, egress gateway: the lease's NetworkPolicy),
// bootstrapped from the host's cache. The fake listens on the host's
// loopback only, with no forward to the pods' gateway: the turn's model
// calls reach it through the gateway, which the pod reaches through its
// tunnel, and carry the real key; the tool call in the turn finds no key
// in the pod (environment, home, every process's environment) while the
// token is there; the result says secrets gateway and egress gateway.
func TestKeylessInPod(t *testing.T) {
	c := kubetest.Parallel(t)
	for _, tt := range []struct {
		name    string
		model   string
		options map[string]string
		// start starts the fake with probe as its tool call's command and
		// returns the variables pointing the CLI at it with key, and what
		// the fake saw: each model request's credential, and the bodies.
		start func(t *testing.T, probe, key string) ([]string, func() ([]string, []byte))
	}{
		{name: "claude", options: map[string]string{"max-retries": "0", "permission-mode": "bypassPermissions"},
			start: func(t *testing.T, probe, key string) ([]string, func() ([]string, []byte)) {
				api := anthropic.New(t, anthropic.Options{ToolCommand: probe})
				return []string{"ANTHROPIC_API_KEY=" + key, "ANTHROPIC_BASE_URL=" + api.URL()}, func() (creds []string, bodies []byte) {
					for _, r := range api.MessageRequests() {
						creds = append(creds, r.APIKey)
					}
					for _, r := range api.Requests() {
						bodies = append(bodies, r.Body...)
					}
					return creds, bodies
				}
			}},
		{name: "codex", model: "gpt-5.5", options: map[string]string{"sandbox": "danger-full-access", "request-max-retries": "0", "stream-max-retries": "0"},
			start: func(t *testing.T, probe, key string) ([]string, func() ([]string, []byte)) {
				api := openai.Start(t, openai.Config{Command: probe})
				return []string{"OPENAI_API_KEY=" + key, "OPENAI_BASE_URL=" + api.URL()}, openaiSeen(api)
			}},
		{name: "copilot", options: map[string]string{"permissions": "all"},
			start: func(t *testing.T, probe, key string) ([]string, func() ([]string, []byte)) {
				api := openai.Start(t, openai.Config{Command: probe})
				return []string{"COPILOT_OFFLINE=true", "COPILOT_PROVIDER_BASE_URL=" + api.URL(), "COPILOT_PROVIDER_API_KEY=" + key, "COPILOT_MODEL=gpt-4.1"}, openaiSeen(api)
			}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			testenv.RequireCLI(t, tt.name)
			h, ok := presets.Lookup(tt.name)
			if !ok {
				testenv.Missing(t, "the "+tt.name+" preset", "land the preset")
			}
			key, probe := testenv.KeylessProbe(t)
			environ, seen := tt.start(t, probe, key)
			p := c.Provider(t, func(o *kubernetes.Options) { o.Image = kubetest.Debian; o.NodeCache = true })
			f := &turns{t: t, store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
			// Timeout bounds the whole turn, the bootstrap included: on a
			// fresh machine the node cache is empty and the CLI's package
			// (codex: 172 MB) is unpacked into it first, which took over
			// 3 minutes once on a loaded two-core machine.
			turn := engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: h, Model: tt.model}, Prompt: "Run a command FAKE_TOOL", Timeout: 10 * time.Minute, Options: tt.options}
			res, err := f.run(context.Background(), p, nil, turn, func(o *engine.RunOptions) {
				o.Environ = append(environ, "PATH="+os.Getenv("PATH"), "HOME="+t.TempDir())
			})
			if err != nil {
				t.Fatalf("%v\nevents: %+v", err, f.events)
			}
			if res.Secrets != engine.SecretsGateway || res.Egress != engine.EgressGateway || res.Sandbox != "kubernetes" {
				t.Errorf("result secrets %q egress %q sandbox %q, want gateway, gateway, kubernetes", res.Secrets, res.Egress, res.Sandbox)
			}
			creds, bodies := seen()
			if len(creds) < 2 {
				t.Fatalf("the fake got %d model requests, want the turn and the tool's follow-up", len(creds))
			}
			for i, got := range creds {
				if got != key {
					t.Errorf("request %d carried %q, want the real key", i+1, got)
				}
			}
			if got := testenv.KeylessProbeOutput.Find(bodies); !testenv.KeylessNoKey.Match(got) {
				t.Errorf("the tool's output %q, want %s", got, testenv.KeylessNoKey)
				for _, ev := range f.events {
					if ev.Tool != nil {
						t.Logf("%s %+v", ev.Type, *ev.Tool)
					}
				}
			}
		})
	}
}

// openaiSeen is what api saw: each model request's credential, and the
// bodies.
func openaiSeen(api *openai.Server) func() ([]string, []byte) {
	return func() (creds []string, bodies []byte) {
		for _, r := range api.Requests() {
			if r.Method == http.MethodPost {
				creds = append(creds, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
			}
			bodies = append(bodies, r.RawBody...)
		}
		return creds, bodies
	}
}
