package declarative_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/providers/local"
)

// TestAiderThroughEngine runs the aider preset, with the stand-in on the
// PATH, through the real turn engine on the local provider: the prompt
// file, the plain-text output and its end, capture, resume with
// --restore-chat-history, the fork command (the engine's Fork hook), and
// the failure classes.
func TestAiderThroughEngine(t *testing.T) {
	bin := aiderStandIn(t)
	store := conversation.NewFS(t.TempDir())
	wd := t.TempDir()
	path := "PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH")
	prov := local.New(&local.Options{BaseDir: t.TempDir(), Environ: []string{path}})
	environ := []string{path, "OPENAI_API_KEY=sk-engine-test-1234"}
	run := func(turn engine.Turn) (*engine.Result, []harness.Event, error) {
		var evs []harness.Event
		turn.Agent = harness.Agent{Kind: harness.KindCLI, Harness: declarative.Aider()}
		turn.Workdir = wd
		res, err := engine.Run(context.Background(), turn, &engine.RunOptions{Provider: prov, Store: store, Environ: environ,
			OnEvent: func(ev harness.Event) { evs = append(evs, ev) }})
		return res, evs, err
	}
	first, evs, err := run(engine.Turn{Prompt: "write hello.py AIDER_EDIT"})
	if err != nil {
		t.Fatal(err)
	}
	if first.Text != "aider: write hello.py AIDER_EDIT (turn 1)\nDone." || first.Conversation == "" || first.Session == "" {
		t.Fatalf("first turn: %+v", first)
	}
	if first.Usage.InputTokens != 2100 || first.Usage.Complete {
		t.Errorf("usage %+v, want 2100 input tokens, incomplete (rounded)", first.Usage)
	}
	var deltas, notices, secrets int
	for _, ev := range evs {
		if ev.Type == harness.EventMessage && ev.Delta {
			deltas++
		}
		switch {
		case ev.Type == harness.EventNotice && ev.Kind == "secrets":
			secrets++ // aider is not keyless: its key enters the sandbox
		case ev.Type == harness.EventNotice:
			notices++
		}
	}
	if deltas != 2 || notices != 2 || secrets != 1 || first.Secrets != engine.SecretsEnv {
		t.Errorf("%d deltas, %d notices, %d secrets notices, secrets %q; want 2, 2, 1 and env", deltas, notices, secrets, first.Secrets)
	}
	again, _, err := run(engine.Turn{Prompt: "more", Resume: first.Conversation})
	if err != nil || !strings.Contains(again.Text, "(turn 2)") || again.Session != first.Session {
		t.Fatalf("resume: %+v %v", again, err)
	}
	child, _, err := run(engine.Turn{Prompt: "branch", Fork: first.Conversation})
	if err != nil || !strings.Contains(child.Text, "(turn 3)") || child.Session == first.Session || child.Parent != first.Conversation {
		t.Fatalf("fork: %+v %v", child, err)
	}
	for _, c := range []struct {
		prompt  string
		code    outpost.Code
		unavail bool
	}{
		// The stand-in exits 0 after its quota line: the quota hook
		// applies only when the process fails, so this is a reported
		// failure.
		{"x AIDER_QUOTA", outpost.Process, false},
		{"x AIDER_OUTAGE", outpost.Process, true},
		{"x AIDER_AUTH", outpost.Configuration, false},
	} {
		_, _, err := run(engine.Turn{Prompt: c.prompt})
		if outpost.CodeOf(err) != c.code || outpost.UnavailableFault(err) != c.unavail {
			t.Errorf("%s: %v, want %s (unavailable %v)", c.prompt, err, c.code, c.unavail)
		}
		if err != nil && strings.Contains(err.Error(), "sk-engine-test-1234") {
			t.Errorf("the error shows the key: %v", err)
		}
	}
	_, _, err = run(engine.Turn{Prompt: "x AIDER_RETRY_FOREVER", RetryBound: 200 * time.Millisecond, Timeout: time.Minute})
	if outpost.CodeOf(err) != outpost.Process || !outpost.UnavailableFault(err) {
		t.Errorf("retrying forever: %v, want process with details.unavailable", err)
	}
}
