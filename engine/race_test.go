package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
)

// crashing is the echo agent whose every turn crashes.
func crashing() harness.Agent {
	h := *echo.Harness()
	req := h.Request
	h.Request = func(in harness.Input) (harness.Command, error) {
		in.Prompt += " #crash"
		return req(in)
	}
	return harness.Agent{Kind: harness.KindCLI, Harness: &h}
}

// TestRace: three contestants from the caller's files, a check that
// passes for exactly one (the second), and a crashing contestant that is
// reported, not fatal.
func TestRace(t *testing.T) {
	f := newFixture(t)
	t.Setenv("OUTPOST_HOME", t.TempDir())
	os.WriteFile(filepath.Join(f.workdir, "start.txt"), []byte("from the caller\n"), 0o644)
	var mu sync.Mutex
	states := map[int][]string{}
	res, err := engine.Race(context.Background(), engine.RaceSpec{
		Prompt:      "#write=out.txt solve it",
		Contestants: []harness.Agent{echoAgent(func(*harness.Harness) {}), echoAgent(func(*harness.Harness) {}), crashing()},
		Workdir:     f.workdir,
		Check:       `test -f start.txt && test -f out.txt && case "$PWD" in *-race-1-*) exit 0;; *) echo "not this one"; exit 3;; esac`,
	}, &engine.RaceOptions{
		Run: engine.RunOptions{Provider: f.provider, Store: f.store, Environ: []string{"PATH=" + os.Getenv("PATH")}},
		OnProgress: func(p engine.RaceProgress) {
			mu.Lock()
			states[p.Contestant] = append(states[p.Contestant], p.State)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Winner != 1 || res.Conversation == "" || res.Conversation != res.Contestants[1].Conversation {
		t.Fatalf("winner %d %q: %+v", res.Winner, res.Conversation, res.Contestants)
	}
	for i, c := range res.Contestants {
		if i < 2 {
			if c.Result == nil || c.Result.Check == nil || c.Result.Check.Passed != (i == 1) || c.Conversation == "" || c.Files != 1 {
				t.Fatalf("contestant %d: %+v check %+v", i, c, c.Result.Check)
			}
			continue
		}
		if c.Passed || c.Code != string(outpost.Process) {
			t.Fatalf("the crashing contestant: %+v", c)
		}
	}
	if res.Contestants[0].Result.Check.Output != "not this one\n" || res.Contestants[0].Result.Check.ExitCode != 3 {
		t.Fatalf("check output %+v", res.Contestants[0].Result.Check)
	}
	for i := range 3 {
		if got := states[i]; len(got) != 3 || got[0] != "started" || got[2] != "checked" {
			t.Fatalf("progress of %d: %v", i, got)
		}
	}
	// The caller's directory is untouched; every contestant is a
	// conversation with a checkpoint, and resumes.
	if _, err := os.Stat(filepath.Join(f.workdir, "out.txt")); !os.IsNotExist(err) {
		t.Fatal("a contestant wrote into the caller's directory")
	}
	again, err := f.run(engine.Turn{Prompt: "and then?", Resume: res.Conversation, Workdir: res.Contestants[1].Workdir})
	if err != nil || again.Checkpoint == nil || again.Checkpoint.Turn != 2 {
		t.Fatalf("resume of the winner: %+v %v", again, err)
	}
}

// TestRaceJudge: the judge's pick wins over the fewest tokens.
func TestRaceJudge(t *testing.T) {
	f := newFixture(t)
	t.Setenv("OUTPOST_HOME", t.TempDir())
	judge := echoAgent(func(*harness.Harness) {})
	res, err := engine.Race(context.Background(), engine.RaceSpec{
		Prompt:      "#write=a.txt solve it\n#json={\"winner\": 1, \"reason\": \"tidier\"}",
		Contestants: []harness.Agent{echoAgent(func(*harness.Harness) {}), echoAgent(func(*harness.Harness) {})},
		Workdir:     f.workdir,
		Judge:       &judge,
	}, &engine.RaceOptions{Run: engine.RunOptions{Provider: f.provider, Store: f.store, Environ: []string{"PATH=" + os.Getenv("PATH")}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Judge == nil || res.Judge.Error != "" || res.Winner != 1 || res.Judge.Reason != "tidier" {
		t.Fatalf("judge %+v winner %d", res.Judge, res.Winner)
	}
}
