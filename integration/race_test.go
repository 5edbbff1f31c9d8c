package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/claude"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/local"
)

// raceWorld is a race's world on the local sandbox: the real claude
// against the fake Messages API (through the credential gateway, which
// meters it), the echo agent, a store.
type raceWorld struct {
	t     *testing.T
	srv   *anthropic.Server
	store *conversation.FS
	opts  engine.RaceOptions
	mu    sync.Mutex
	evs   map[int][]harness.Event
	steps map[int][]string
}

// newRaceWorld makes the world; settings, when set, is
// OUTPOST_CLAUDE_SETTINGS (a race's contestants take no preset options,
// so it is how a claude contestant is allowed its tools).
func newRaceWorld(t *testing.T, settings string) *raceWorld {
	t.Helper()
	bin := testenv.RequireCLI(t, "claude")
	workspacesHome(t)
	w := &raceWorld{t: t, srv: anthropic.New(t, anthropic.Options{Usage: fakeUsage}), store: conversation.NewFS(t.TempDir()),
		evs: map[int][]harness.Event{}, steps: map[int][]string{}}
	path := filepath.Dir(bin) + ":/usr/local/bin:/usr/bin:/bin"
	environ := []string{"PATH=" + path, "HOME=" + t.TempDir(), "ANTHROPIC_BASE_URL=" + w.srv.URL(), "ANTHROPIC_API_KEY=sk-ant-race-" + randomHex(t, 8)}
	if settings != "" {
		environ = append(environ, claude.SettingsVariable+"="+settings)
	}
	w.opts = engine.RaceOptions{
		Run: engine.RunOptions{Provider: local.New(&local.Options{BaseDir: t.TempDir(), Environ: []string{"PATH=" + path, "LANG=C.UTF-8"}}),
			Store: w.store, Environ: environ, Grace: 2 * time.Second, Logger: testenv.FailureLog(t)},
		OnEvent: func(i int, ev harness.Event) {
			w.mu.Lock()
			w.evs[i] = append(w.evs[i], ev)
			w.mu.Unlock()
		},
		OnProgress: func(p engine.RaceProgress) {
			w.mu.Lock()
			w.steps[p.Contestant] = append(w.steps[p.Contestant], p.State)
			w.mu.Unlock()
		},
	}
	return w
}

// race runs one race and resets the recorded events and progress.
func (w *raceWorld) race(spec engine.RaceSpec) *engine.RaceResult {
	w.t.Helper()
	w.mu.Lock()
	w.evs, w.steps = map[int][]harness.Event{}, map[int][]string{}
	w.mu.Unlock()
	if spec.Timeout == 0 {
		spec.Timeout = 2 * time.Minute
	}
	res, err := engine.Race(context.Background(), spec, &w.opts)
	if err != nil {
		w.t.Fatalf("race: %v", err)
	}
	for _, c := range res.Contestants {
		if c.Workdir != "" {
			dir := c.Workdir
			w.t.Cleanup(func() { os.RemoveAll(dir) })
		}
	}
	return res
}

// events is a contestant's events in short, for failure messages.
func (w *raceWorld) events(i int) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return eventSummary(w.evs[i])
}

// treeOf is a commit's tree in the world's store.
func (w *raceWorld) treeOf(commit string) string {
	w.t.Helper()
	c, err := checkpoint.ReadCommit(context.Background(), w.store.Objects(), plumbing.NewHash(commit))
	if err != nil {
		w.t.Fatal(err)
	}
	return c.TreeHash.String()
}

func echoContestant() harness.Agent {
	return harness.Agent{Kind: harness.KindCLI, Harness: echo.Harness()}
}

func claudeContestant() harness.Agent {
	return harness.Agent{Kind: harness.KindCLI, Harness: claude.Harness()}
}

// crashingEcho is the echo agent whose turn crashes (exit status 3).
func crashingEcho() harness.Agent {
	h := *echo.Harness()
	req := h.Request
	h.Request = func(in harness.Input) (harness.Command, error) {
		in.Prompt += " #crash"
		return req(in)
	}
	return harness.Agent{Kind: harness.KindCLI, Harness: &h}
}

// raceTask works for both agents: the echo agent writes echo.txt (its
// #write directive), the fake has Claude Code run the command after
// FAKE_TOOL: with its Bash tool.
const raceTask = `#write=echo.txt FAKE_TOOL:printf 'fixed\n' > claude.txt`

// TestRaceRealClaude: a race of the echo agent, the real Claude Code and
// a crashing echo agent from the caller's files, with a check only
// Claude's work passes: Claude wins, with its metered tokens and its
// diff; the echo agent is checked and fails; the crash is reported with
// code process, not fatal. Then a race from the winner's checkpoint
// (--from) with a turn budget of one token: Claude's contestant forks
// the winner's conversation and is stopped by the gateway before any
// call (code budget, its conversation stored), and the echo agent,
// starting from the winner's files, passes and wins.
func TestRaceRealClaude(t *testing.T) {
	t.Parallel()
	w := newRaceWorld(t, `{"permissions":{"allow":["Bash"]}}`)
	workdir := t.TempDir()
	writeFiles(t, workdir, map[string]string{"start.txt": "from the caller\n"})

	res := w.race(engine.RaceSpec{
		Prompt:      raceTask,
		Contestants: []harness.Agent{echoContestant(), claudeContestant(), crashingEcho()},
		Workdir:     workdir,
		Check:       `test -f start.txt && grep -qx fixed claude.txt`,
	})
	if res.Winner != 1 || res.Conversation == "" || res.Conversation != res.Contestants[1].Conversation {
		for i := range res.Contestants {
			t.Logf("contestant %d: %+v events: %s", i, res.Contestants[i], w.events(i))
		}
		t.Fatalf("winner %d (%s), want claude's, contestant 1", res.Winner, res.Conversation)
	}
	echoC, claudeC, crash := res.Contestants[0], res.Contestants[1], res.Contestants[2]
	if echoC.Passed || echoC.Code != "" || echoC.Result == nil || echoC.Result.Check == nil || echoC.Result.Check.ExitCode == 0 || echoC.Files != 1 {
		t.Errorf("the echo contestant: %+v (its turn succeeded, its check failed, echo.txt added)", echoC)
	}
	calls := len(w.srv.MessageRequests())
	if !claudeC.Passed || claudeC.Agent != "claude" || claudeC.Cost == nil || claudeC.Tokens != claudeC.Cost.Tokens() ||
		claudeC.Tokens != int64(calls)*int64(fakeUsage.InputTokens+fakeUsage.OutputTokens) || claudeC.Files != 1 || claudeC.Added != 1 {
		t.Errorf("the claude contestant: %+v metered %+v; the fake had %d calls", claudeC, claudeC.Cost, calls)
	}
	if crash.Passed || crash.Code != string(outpost.Process) || crash.Err == nil {
		t.Errorf("the crashing contestant: %+v, want code process", crash)
	}
	if res.Tokens != echoC.Tokens+claudeC.Tokens+crash.Tokens {
		t.Errorf("race tokens %d, contestants %d %d %d", res.Tokens, echoC.Tokens, claudeC.Tokens, crash.Tokens)
	}
	for i := range 3 {
		if got := w.steps[i]; len(got) != 3 || got[0] != "started" || got[2] != "checked" {
			t.Errorf("progress of contestant %d: %v", i, got)
		}
	}
	wantFile(t, claudeC.Workdir, "claude.txt", "fixed\n", false)
	wantFile(t, claudeC.Workdir, "start.txt", "from the caller\n", false)
	wantFile(t, workdir, "claude.txt", "", true) // the caller's directory is untouched
	wantFile(t, workdir, "echo.txt", "", true)
	d, err := conversation.DiffTurns(context.Background(), w.store, res.Conversation, "")
	if err != nil || len(d.Files) != 1 || d.Files[0] != (checkpoint.Change{Path: "claude.txt", Action: "added", Added: 1}) {
		t.Errorf("the winner's diff %+v %v", d.Files, err)
	}

	// From the winner's checkpoint, with a budget of one token a turn.
	winnerTree := w.treeOf(claudeC.Result.Checkpoint.Commit)
	res2 := w.race(engine.RaceSpec{
		Prompt:      strings.Replace(raceTask, "echo.txt", "second.txt", 1),
		Contestants: []harness.Agent{claudeContestant(), echoContestant()},
		From:        res.Conversation,
		Check:       `grep -qx fixed claude.txt && test -f second.txt`,
		MaxTokens:   1,
	})
	if res2.Start != winnerTree {
		t.Errorf("the race from %s started from %s, not its checkpoint's tree %s", res.Conversation, res2.Start, winnerTree)
	}
	spent, echo2 := res2.Contestants[0], res2.Contestants[1]
	// Every call of the claude contestant was refused: a turn like that
	// is neither stored nor counted (docs/metering.md), so its fork of the
	// conversation is not stored either.
	if spent.Passed || spent.Code != string(outpost.Budget) || spent.Conversation != "" {
		t.Errorf("the claude contestant over budget: %+v result %+v events: %s", spent, spent.Result, w.events(0))
	}
	if n := len(w.srv.MessageRequests()); n != calls {
		t.Errorf("the fake had %d more calls: the budget of one token let a call through", n-calls)
	}
	if res2.Winner != 1 || !echo2.Passed || res2.Conversation != echo2.Conversation {
		t.Errorf("winner %d, want the echo contestant: %+v events: %s", res2.Winner, echo2, w.events(1))
	}
	wantFile(t, echo2.Workdir, "claude.txt", "fixed\n", false)
}

// TestRaceClaudeContestantEdits: a race's claude contestant edits its
// own workspace when the race gives it a permission mode that allows
// edits (RaceSpec.Options by preset, `outpost race --option
// claude:permission-mode=acceptEdits`); Claude Code's default mode denies
// every write in print mode.
func TestRaceClaudeContestantEdits(t *testing.T) {
	t.Parallel()
	w := newRaceWorld(t, "")
	res := w.race(engine.RaceSpec{
		Prompt:      "FAKE_TOOL:printf 'fixed\\n' > claude.txt",
		Contestants: []harness.Agent{claudeContestant()},
		Workdir:     t.TempDir(),
		Check:       `grep -qx fixed claude.txt`,
		Options:     map[string]map[string]string{"claude": {"permission-mode": "acceptEdits"}},
	})
	if c := res.Contestants[0]; res.Winner != 0 {
		t.Errorf("the claude contestant could not edit its workspace: %+v\nevents: %s", c, w.events(0))
	}
}
