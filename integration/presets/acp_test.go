package presets

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/acp"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/harness/gemini"
	fakegemini "github.com/outposthq/outpost/internal/fakeapi/gemini"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
)

// TestGeminiACP: Gemini CLI in its ACP mode (gemini-acp) against the fake
// Gemini API on the local provider: a shell call and text; a 429 the CLI
// gives up on is quota although the agent keeps running; the same
// conversation resumed on a fresh sandbox through session/load (its
// history reaches the model, the turn's text ends with its own answer)
// with permissions=read, so that the shell call it makes is refused (one
// turn for what were two subtests, ResumeOnAFreshSandbox and
// RefusedPermission); then once more in a docker container.
func TestGeminiACP(t *testing.T) {
	t.Parallel()
	e := newGeminiEnv(t, "")
	agent := func() harness.Agent { return harness.Agent{Harness: gemini.ACP(), Model: geminiModel} }
	// The shared test machine runs at load 20 to 40: the CLI's start-up
	// alone took 2.5 min there, and its exit after the turn more than the
	// 3 min runGemini allows by default.
	const slow = 10 * time.Minute
	first := e.run(engine.Turn{Prompt: "run it FAKE_TOOL", Agent: agent(), Timeout: slow})
	if first.err != nil {
		t.Fatalf("first turn: %v", first.err)
	}
	calls, results := first.of(harness.EventToolCall), first.of(harness.EventToolResult)
	if len(calls) != 1 || calls[0].Tool.Name != "execute" || len(results) != 1 || results[0].Tool.ID != calls[0].Tool.ID || results[0].Tool.Error {
		t.Errorf("tool events %+v %+v", calls, results)
	}
	if !strings.HasPrefix(first.res.Text, "Tool output was:") || !strings.Contains(first.res.Text, "tool-ran") {
		t.Errorf("text %q", first.res.Text)
	}
	for _, ev := range first.events {
		if ev.Kind == "permission" || ev.Kind == "permission_denied" {
			t.Errorf("with --approval-mode yolo the agent asked: %+v", ev)
		}
	}
	// Gemini CLI's ACP usage (_meta.quota) has input with the cache reads
	// and output without the thoughts: incomplete, unlike its JSONL's.
	if n := len(e.fake.Turns()); n != 2 || first.res.Usage.InputTokens != 2400 || first.res.Usage.OutputTokens != 18 || first.res.Usage.Complete {
		t.Errorf("%d model calls, usage %+v", n, first.res.Usage)
	}

	t.Run("429IsQuota", func(t *testing.T) {
		e.fake.Reset()
		tr := e.run(engine.Turn{Prompt: "x FAKE_QUOTA", Agent: agent(), Timeout: slow})
		if outpost.CodeOf(tr.err) != outpost.Quota {
			t.Errorf("err %v, want quota", tr.err)
		}
	})

	t.Run("ResumeOnAFreshSandboxRefused", func(t *testing.T) {
		// echo runs unasked in Gemini CLI's default mode; touch is asked.
		e.fresh()
		e.fake.Reset()
		e.fake.Enqueue(fakegemini.Shell("touch made-by-tool"), fakegemini.Text("done"))
		dir := t.TempDir()
		tr := e.run(engine.Turn{Prompt: "again, make a file", Resume: first.res.Conversation, Workdir: dir, Agent: agent(), Timeout: slow,
			Options: map[string]string{acp.OptionPermissions: "read,search"}})
		if tr.err != nil {
			t.Fatalf("resumed turn: %v", tr.err)
		}
		// The turn's text ends with its own answer. (Measured 2026-12-07:
		// the replayed first answer came before it, an open finding.)
		if tr.res.Session != first.res.Session || !strings.HasSuffix(tr.res.Text, "done") {
			t.Errorf("resumed turn %+v", tr.res)
		}
		if reqs := e.fake.Turns(); len(reqs) != 2 || reqs[0].NumContents < 5 {
			t.Errorf("the history did not reach the model: %+v", reqs)
		}
		denied := 0
		for _, ev := range tr.events {
			if ev.Kind == "permission_denied" {
				denied++
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "made-by-tool")); err == nil || denied != 1 {
			t.Errorf("the refused tool ran (or %d refusals): %s", denied, eventSummary(tr.events))
		}
	})

	t.Run("ResumeOnDocker", func(t *testing.T) {
		// The conversation's third turn goes on in a container where
		// bootstrap installs the pinned CLI (SHA-512): session/load there
		// finds the session files the capture carried, and the model gets
		// the whole history with the new prompt. (A third turn on a fresh
		// sandbox found its history deleted by the CLI's session cleanup
		// before the preset turned it off: docs/presets/gemini.md.)
		dockertest.Require(t, dockertest.Debian)
		dock := dockertest.Provider(t, nodeImage(t), func(o *docker.Options) { o.Network = "host" })
		tr := e.on(t, dock, e.environ, engine.Turn{Prompt: "again FAKE_ECHO", Resume: first.res.Conversation, Agent: agent()})
		if tr.err != nil {
			t.Fatalf("resumed turn: %v", tr.err)
		}
		if tr.res.Sandbox != "docker" || tr.res.Session != first.res.Session || !strings.Contains(tr.res.Text, "ECHO ncontents=") {
			t.Errorf("resumed turn %+v", tr.res)
		}
		if reqs := e.fake.Turns(); len(reqs) != 1 || reqs[0].NumContents < 5 {
			t.Errorf("the history did not reach the model in the container: %+v", reqs)
		}
	})
}

// TestOpenCodeACP: `opencode acp` (opencode-acp) against the fake Chat
// Completions API: a bash call and text on the local provider, with the
// usage ACP's prompt response carries (OpenCode counts cache reads and
// reasoning apart, which the preset adds up as outpost counts them); the
// conversation resumed in a docker sandbox through session/resume (the
// database travels, the resume step points it at the new working
// directory); a 429 on every request is quota.
func TestOpenCodeACP(t *testing.T) {
	t.Parallel()
	bin := testenv.RequireCLI(t, "opencode")
	e := newOAIEnv(t, declarative.OpenCodeACP(), filepath.Dir(bin), openai.Config{})
	first := e.run("local", engine.Turn{Prompt: "FAKE_TOOL list the files"})
	e.mustSucceed(first)
	checkShellTool(t, first, "execute")
	if !strings.HasPrefix(first.res.Text, "Tool output was: ") || !strings.HasPrefix(first.res.Session, "ses_") {
		t.Errorf("result %+v", first.res)
	}
	u := openai.DefaultUsage
	per := harness.Usage{InputTokens: int64(u.InputTokens - u.CachedTokens), OutputTokens: int64(u.OutputTokens), CacheReadTokens: int64(u.CachedTokens), Complete: true}
	if got := first.res.Usage; got.InputTokens%per.InputTokens != 0 || got.OutputTokens == 0 || !got.Complete {
		t.Errorf("usage %+v, want multiples of %+v", got, per)
	}

	t.Run("ResumeOnDocker", func(t *testing.T) {
		again := e.run("docker", engine.Turn{Prompt: "FAKE_ECHO again", Resume: first.res.Conversation})
		e.mustSucceed(again)
		if !strings.HasPrefix(again.res.Text, "ECHO nmsg=") || again.res.Session != first.res.Session || again.res.Sandbox != "docker" {
			t.Errorf("resume: %+v", again.res)
		}
	})

	t.Run("429IsQuota", func(t *testing.T) {
		o := e.run("local", engine.Turn{Prompt: "FAKE_429 say hi"})
		if outpost.CodeOf(o.err) != outpost.Quota {
			t.Errorf("error %v, want quota; events %s", o.err, eventSummary(o.events))
		}
	})
}

// TestQwenACP: `qwen --acp` (qwen-acp) against the fake Chat Completions
// API on the local provider: a shell call and text, with the usage Qwen
// Code puts in each model call's _meta.usage (the fake's counts per
// call, cache reads split out); then the conversation resumed
// (session/resume) on a fresh sandbox, and once more in docker.
func TestQwenACP(t *testing.T) {
	t.Parallel()
	bin := testenv.RequireCLI(t, "qwen")
	e := newOAIEnv(t, declarative.QwenACP(), strings.TrimSuffix(bin, "/qwen"), openai.Config{})
	first := e.run("local", engine.Turn{Prompt: "FAKE_TOOL list the files"})
	e.mustSucceed(first)
	checkShellTool(t, first, "execute")
	u := openai.DefaultUsage
	call := harness.Usage{InputTokens: int64(u.InputTokens - u.CachedTokens), OutputTokens: int64(u.OutputTokens), CacheReadTokens: int64(u.CachedTokens), Complete: true}
	if got := first.res.Usage; got != times(call, 2) {
		t.Errorf("usage %+v, want %+v", got, times(call, 2))
	}
	again := e.run("local", engine.Turn{Prompt: "FAKE_ECHO again", Resume: first.res.Conversation})
	e.mustSucceed(again)
	if again.res.Session != first.res.Session || !strings.Contains(again.res.Text, "ECHO") {
		t.Errorf("resume: %+v", again.res)
	}
	// The third turn in a docker container, the CLI installed there by
	// bootstrap: the session travels again.
	third := e.run("docker", engine.Turn{Prompt: "FAKE_ECHO a third time", Resume: first.res.Conversation})
	e.mustSucceed(third)
	if third.res.Session != first.res.Session || third.res.Sandbox != "docker" || !strings.Contains(third.res.Text, "ECHO") {
		t.Errorf("resume on docker: %+v", third.res)
	}
}

// TestGeminiACPSteerAndCancel: Gemini CLI in ACP mode, its model call
// hanging: with steer=interrupt a steering message cancels the running
// prompt (session/cancel) and is the next prompt on the same live
// session (the CLI drops the cancelled prompt from the history: the model
// sees the steering message as the first user text); a cancelled turn sends session/cancel, the agent ends the
// prompt "cancelled" and exits, and the turn is cancelled.
func TestGeminiACPSteerAndCancel(t *testing.T) {
	t.Parallel()
	hung := make(chan struct{}, 4)
	e := newGeminiEnvConfig(t, "", fakegemini.Config{Choose: func(r *fakegemini.Request) fakegemini.Scenario {
		if strings.Contains(r.LastUserText, "HANGME") {
			hung <- struct{}{}
			return fakegemini.Hang()
		}
		return fakegemini.Scenario{}
	}})
	run := func(ctx context.Context, turn engine.Turn, steer chan string) (*engine.Result, error, []harness.Event) {
		var mu sync.Mutex
		var evs []harness.Event
		turn.Agent = harness.Agent{Kind: harness.KindCLI, Harness: gemini.ACP(), Model: geminiModel}
		turn.Workdir, turn.Timeout = t.TempDir(), 10*time.Minute
		o := &engine.RunOptions{Provider: e.prov, Store: e.store, Environ: e.environ, Grace: 10 * time.Second,
			OnEvent: func(ev harness.Event) { mu.Lock(); evs = append(evs, ev); mu.Unlock() }}
		if steer != nil {
			o.Steer = steer
		}
		res, err := engine.Run(ctx, turn, o)
		mu.Lock()
		defer mu.Unlock()
		return res, err, evs
	}
	steer := make(chan string, 1)
	go func() { <-hung; steer <- "instead FAKE_ECHO" }()
	res, err, evs := run(context.Background(), engine.Turn{Prompt: "wait HANGME", Options: map[string]string{acp.OptionSteer: "interrupt"}}, steer)
	if err != nil || !strings.HasSuffix(res.Text, "instead FAKE_ECHO") || res.Steered != 1 {
		t.Errorf("steered turn: %v %+v; events %s", err, res, eventSummary(evs))
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-hung; cancel() }()
	_, err, evs = run(ctx, engine.Turn{Prompt: "wait HANGME"}, nil)
	interrupted := false
	for _, ev := range evs {
		interrupted = interrupted || ev.Kind == "interrupted"
	}
	if outpost.CodeOf(err) != outpost.Cancelled || !interrupted {
		t.Errorf("cancelled turn: %v; events %s", err, eventSummary(evs))
	}
}
