package kubernetes

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/kubernetes"
	"github.com/outposthq/outpost/providers/kubernetes/kubetest"
	"github.com/outposthq/outpost/sandbox"
)

// TestKeylessClaudeInPod: the real Claude Code in a pod with the
// defaults (secrets gateway, egress gateway: the lease's NetworkPolicy).
// The fake listens on the host's loopback only, with no forward to the
// pods' gateway: the turn's model calls reach it through the gateway,
// which the pod reaches through its tunnel, and carry the real key; the
// tool call in the turn finds no key in the pod (environment, home,
// every process's environment) while the token is there; the result says
// secrets gateway and egress gateway.
func TestKeylessClaudeInPod(t *testing.T) {
	c := kubetest.Require(t)
	testenv.RequireCLI(t, "claude")
	h, ok := presets.Lookup("claude")
	if !ok {
		testenv.Missing(t, "the claude preset", "land the Claude Code preset")
	}
	key, probe := testenv.KeylessProbe(t)
	api := anthropic.New(t, anthropic.Options{ToolCommand: probe})
	p := c.Provider(t, func(o *kubernetes.Options) { o.Image = kubetest.Debian; o.NodeCache = true })
	f := &turns{t: t, store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
	turn := sandbox.Turn{Agent: harness.Agent{Kind: "cli", Harness: h}, Prompt: "Run a command FAKE_TOOL", Timeout: 3 * time.Minute,
		Options: map[string]string{"max-retries": "0", "permission-mode": "bypassPermissions"}}
	res, err := f.run(context.Background(), p, nil, turn, func(o *sandbox.RunOptions) {
		o.Environ = []string{"PATH=" + os.Getenv("PATH"), "ANTHROPIC_API_KEY=" + key, "ANTHROPIC_BASE_URL=" + api.URL(), "HOME=" + t.TempDir()}
	})
	if err != nil {
		t.Fatalf("%v\nevents: %+v", err, f.events)
	}
	if res.Secrets != sandbox.SecretsGateway || res.Egress != sandbox.EgressGateway || res.Sandbox != "kubernetes" {
		t.Errorf("result secrets %q egress %q sandbox %q, want gateway, gateway, kubernetes", res.Secrets, res.Egress, res.Sandbox)
	}
	reqs := api.MessageRequests()
	if len(reqs) < 2 {
		t.Fatalf("the fake got %d model requests, want the turn and the tool's follow-up", len(reqs))
	}
	var bodies []byte
	for i, r := range reqs {
		if r.APIKey != key {
			t.Errorf("request %d carried %q, want the real key", i+1, r.APIKey)
		}
	}
	for _, r := range api.Requests() {
		bodies = append(bodies, r.Body...)
	}
	if got := testenv.KeylessProbeOutput.Find(bodies); !testenv.KeylessNoKey.Match(got) {
		t.Errorf("the tool's output %q, want %s", got, testenv.KeylessNoKey)
	}
	for _, ev := range f.events {
		if t.Failed() && ev.Tool != nil {
			t.Logf("%s %+v", ev.Type, *ev.Tool)
		}
	}
}
