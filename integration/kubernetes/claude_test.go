package kubernetes

import (
	"context"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/kubernetes"
	"github.com/outposthq/outpost/providers/kubernetes/kubetest"
)

// forward serves the loopback address to on the address at (the pods'
// gateway to the host): the pods reach the fake API there, and nothing
// else of the host's loopback.
func forward(t *testing.T, at, to string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(at, "0"))
	if err != nil {
		t.Fatalf("listening on the pods' gateway %s: %v", at, err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				u, err := net.Dial("tcp", to)
				if err != nil {
					return
				}
				defer u.Close()
				done := make(chan struct{}, 2)
				go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				go func() { io.Copy(c, u); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
				<-done
				<-done
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// TestClaudeInPod runs the real pinned Claude Code in a pod of the Debian
// test image, which has no claude: outpost bootstraps it from the host's
// verified cache (the npm registry on a cold cache), mounted read-only
// into the pod through a hostPath volume (node_cache), and the turn talks
// to the fake Anthropic API through the pods' gateway. A second turn
// resumes the conversation in a fresh pod, bootstrapped from the cache.
func TestClaudeInPod(t *testing.T) {
	c := kubetest.Parallel(t)
	testenv.RequireCLI(t, "claude")
	h, ok := presets.Lookup("claude")
	if !ok {
		testenv.Missing(t, "the claude preset", "land the Claude Code preset")
	}
	api := anthropic.New(t, anthropic.Options{})
	url := forward(t, c.Gateway, api.Addr())
	p := c.Provider(t, func(o *kubernetes.Options) { o.Image = kubetest.Debian; o.NodeCache = true })
	key := "sk-ant-fake-kubernetes-test-key"
	f := &turns{t: t, store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
	env := func(o *engine.RunOptions) {
		o.Environ = []string{"PATH=" + os.Getenv("PATH"), "ANTHROPIC_API_KEY=" + key, "ANTHROPIC_BASE_URL=" + url}
	}
	turn := engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: h}, Prompt: "say hi", Options: map[string]string{"max-retries": "0"}}
	res, err := f.run(context.Background(), p, nil, turn, env)
	if err != nil {
		t.Fatalf("%v\nevents: %+v", err, f.events)
	}
	if res.Text != anthropic.DefaultText || res.Usage.InputTokens != anthropic.DefaultInputTokens || res.Sandbox != "kubernetes" {
		t.Errorf("result %+v", res)
	}
	var done *bootstrap.Progress
	for _, ev := range f.events {
		if pr, ok := bootstrap.ProgressFromEvent(ev); ok && pr.Phase == bootstrap.PhaseDone {
			done = &pr
		}
		if strings.Contains(ev.Text, key) || strings.Contains(string(ev.Raw), key) {
			t.Errorf("the API key shows in an event: %+v", ev)
		}
	}
	if done == nil || !strings.HasPrefix(done.Path, bootstrap.MountPath+"/") || done.Version != testenv.CLIVersion("claude") {
		t.Errorf("bootstrap %+v: want the pinned claude run from the mounted cache", done)
	}
	turn.Prompt, turn.Resume = "again", res.Conversation
	res2, err := f.run(context.Background(), p, nil, turn, env)
	if err != nil {
		t.Fatalf("resumed turn: %v", err)
	}
	if res2.Conversation != res.Conversation || res2.Text != anthropic.DefaultText {
		t.Errorf("resumed result %+v", res2)
	}
	if n := len(api.Requests()); n < 2 {
		t.Errorf("the fake API saw %d requests", n)
	}
}
