package engine_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
)

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// threeTurns runs a conversation of three turns that write a.txt, then
// b.txt, then append to a.txt, and returns its id.
func threeTurns(t *testing.T, f *fixture) string {
	t.Helper()
	res, err := f.run(engine.Turn{Prompt: "#write=a.txt one"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoint == nil || res.Checkpoint.Turn != 1 || res.Checkpoint.Changed != 1 {
		t.Fatalf("turn 1 checkpoint: %+v", res.Checkpoint)
	}
	id := res.Conversation
	for i, p := range []string{"#write=b.txt two", "#append=a.txt three"} {
		res, err := f.run(engine.Turn{Prompt: p, Resume: id})
		if err != nil {
			t.Fatal(err)
		}
		if res.Checkpoint == nil || res.Checkpoint.Turn != i+2 {
			t.Fatalf("turn %d checkpoint: %+v", i+2, res.Checkpoint)
		}
	}
	return id
}

func TestCheckpointEveryTurn(t *testing.T) {
	f := newFixture(t)
	id := threeTurns(t, f)
	m, err := f.store.Meta(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Checkpoints) != 3 {
		t.Fatalf("checkpoints: %+v", m.Checkpoints)
	}
	objs := f.store.(conversation.ObjectStorer).Objects()
	ctx := context.Background()
	for i, cp := range m.Checkpoints {
		c, err := checkpoint.ReadCommit(ctx, objs, plumbing.NewHash(cp.Commit))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(c.Message, "Outpost-Turn: "+string(rune('1'+i))) || !strings.Contains(c.Message, "Outpost-Agent: echo") {
			t.Fatalf("turn %d message: %s", i+1, c.Message)
		}
		if i > 0 && cp.Base != m.Checkpoints[i-1].Commit {
			t.Fatalf("turn %d is not parented on turn %d: base %s", i+1, i, cp.Base)
		}
		if len(c.ParentHashes) != 1 || c.ParentHashes[0].String() != cp.Base {
			t.Fatalf("turn %d parents %v, base %s", i+1, c.ParentHashes, cp.Base)
		}
	}
	// Turn 1 started from an empty workspace: its base is a commit of its own.
	first, _ := checkpoint.ReadCommit(ctx, objs, plumbing.NewHash(m.Checkpoints[0].Base))
	if !strings.Contains(first.Message, "before turn 1") {
		t.Fatalf("base of turn 1: %s", first.Message)
	}
}

func TestForkAtTurnWithItsFiles(t *testing.T) {
	f := newFixture(t)
	id := threeTurns(t, f)
	dir := filepath.Join(t.TempDir(), "fork")
	res, err := f.run(engine.Turn{Prompt: "#write=c.txt fork", Fork: id + "@1", Workspace: dir})
	if err != nil {
		t.Fatal(err)
	}
	if res.Workdir != dir || res.Parent != id {
		t.Fatalf("workdir %q parent %q", res.Workdir, res.Parent)
	}
	if got := readFile(t, filepath.Join(dir, "a.txt")); got != "written by echo\n" {
		t.Fatalf("a.txt of turn 1: %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.txt")); !os.IsNotExist(err) {
		t.Fatalf("b.txt of turn 2 is in a fork at turn 1: %v", err)
	}
	if res.Checkpoint == nil || res.Checkpoint.Turn != 2 {
		t.Fatalf("fork checkpoint %+v", res.Checkpoint)
	}
	parent, _ := f.store.Meta(context.Background(), id)
	if res.Checkpoint.Base != parent.Checkpoints[0].Commit {
		t.Fatalf("the fork's turn starts from turn 1's checkpoint %s, not %s", parent.Checkpoints[0].Commit, res.Checkpoint.Base)
	}
	// The fork's memory is turn 1's: the echo agent counts its turns.
	if !strings.Contains(res.Text, "turn 2") {
		t.Fatalf("the fork's agent does not continue turn 1: %q", res.Text)
	}
	// The caller's directory was not touched by the fork.
	if _, err := os.Stat(filepath.Join(f.workdir, "c.txt")); !os.IsNotExist(err) {
		t.Fatal("the fork wrote into the caller's directory")
	}
}

func TestForksSideBySide(t *testing.T) {
	f := newFixture(t)
	id := threeTurns(t, f)
	t.Setenv("OUTPOST_HOME", t.TempDir())
	var wg sync.WaitGroup
	results := make([]*engine.Result, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = f.run(engine.Turn{Prompt: "#write=fork" + string(rune('0'+i)) + ".txt", Fork: id, Workspace: engine.WorkspaceNew})
		}()
	}
	wg.Wait()
	for i := range 2 {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
	}
	a, b := results[0], results[1]
	if a.Workdir == b.Workdir || a.Workdir == "" {
		t.Fatalf("two forks share a directory: %q %q", a.Workdir, b.Workdir)
	}
	for i, r := range results {
		if got := readFile(t, filepath.Join(r.Workdir, "b.txt")); got != "written by echo\n" {
			t.Fatalf("fork %d lacks turn 2's file: %q", i, got)
		}
		other := filepath.Join(r.Workdir, "fork"+string(rune('0'+1-i))+".txt")
		if _, err := os.Stat(other); !os.IsNotExist(err) {
			t.Fatalf("fork %d sees the other fork's file", i)
		}
		m, err := f.store.Meta(context.Background(), r.Conversation)
		if err != nil || len(m.Checkpoints) != 4 || m.Checkpoints[3].Commit != r.Checkpoint.Commit {
			t.Fatalf("fork %d stored checkpoints %+v (%v)", i, m.Checkpoints, err)
		}
	}
}

func TestCheckpointErrors(t *testing.T) {
	f := newFixture(t)
	id := threeTurns(t, f)
	cases := []struct {
		name string
		turn engine.Turn
		kind string
	}{
		{"unknown turn", engine.Turn{Prompt: "x", Fork: id + "@9"}, "not_found"},
		{"bad turn", engine.Turn{Prompt: "x", Fork: id + "@zero"}, ""},
		{"resume at a turn", engine.Turn{Prompt: "x", Resume: id + "@1"}, ""},
		{"workspace not empty", engine.Turn{Prompt: "x", Fork: id, Workspace: f.workdir}, "unsafe"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := f.run(c.turn)
			var oe *outpost.Error
			if err == nil || !asError(err, &oe) {
				t.Fatalf("err %v", err)
			}
			if c.kind == "" {
				if oe.Code != outpost.Configuration {
					t.Fatalf("code %s: %v", oe.Code, err)
				}
				return
			}
			if oe.Code != outpost.Conversation || oe.Details["checkpoint"] != c.kind {
				t.Fatalf("code %s details %v: %v", oe.Code, oe.Details, err)
			}
		})
	}
}

func TestCheckpointTooLarge(t *testing.T) {
	f := newFixture(t)
	big := filepath.Join(f.workdir, "huge.bin")
	fh, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	fh.Truncate(checkpoint.DefaultMaxFile + 1) // sparse
	fh.Close()
	_, err = f.run(engine.Turn{Prompt: "hello"})
	var oe *outpost.Error
	if !asError(err, &oe) || oe.Code != outpost.Conversation || oe.Details["checkpoint"] != "too_large" || !strings.Contains(err.Error(), "huge.bin") {
		t.Fatalf("%v", err)
	}
	if f.provider.opens.Load() != 0 {
		t.Fatal("a workspace over the limit was refused after a sandbox was allocated")
	}
	// Ignored, it is no longer in the way.
	os.WriteFile(filepath.Join(f.workdir, ".gitignore"), []byte("*.bin\n"), 0o644)
	if _, err := f.run(engine.Turn{Prompt: "hello"}); err != nil {
		t.Fatal(err)
	}
}

func TestCheckpointOff(t *testing.T) {
	f := newFixture(t)
	res, err := f.run(engine.Turn{Prompt: "#write=a.txt"}, func(o *engine.RunOptions) { o.Checkpoint = engine.CheckpointOff })
	if err != nil {
		t.Fatal(err)
	}
	if res.Checkpoint != nil {
		t.Fatalf("checkpoint with checkpoints off: %+v", res.Checkpoint)
	}
	m, _ := f.store.Meta(context.Background(), res.Conversation)
	if len(m.Checkpoints) != 0 {
		t.Fatalf("stored %+v", m.Checkpoints)
	}
	// A fork at a turn without a checkpoint says so.
	_, err = f.run(engine.Turn{Prompt: "x", Fork: res.Conversation + "@1"})
	var oe *outpost.Error
	if !asError(err, &oe) || oe.Details["checkpoint"] != "missing" {
		t.Fatalf("%v", err)
	}
}

// TestWorkspaceVanished: a workspace removed during the turn fails the
// checkpoint with its code, and the conversation is stored all the same.
func TestWorkspaceVanished(t *testing.T) {
	f := newFixture(t)
	var once sync.Once
	res, err := f.run(engine.Turn{Prompt: "hello"}, func(o *engine.RunOptions) {
		inner := o.OnEvent
		o.OnEvent = func(ev harness.Event) {
			inner(ev)
			if ev.Type == harness.EventMessage {
				once.Do(func() { os.RemoveAll(f.workdir) })
			}
		}
	})
	var oe *outpost.Error
	if !asError(err, &oe) || oe.Code != outpost.Conversation || oe.Details["checkpoint"] == nil {
		t.Fatalf("%v", err)
	}
	if res == nil || res.Conversation == "" {
		t.Fatalf("the conversation was lost: %+v", res)
	}
	if _, err := f.store.Meta(context.Background(), res.Conversation); err != nil {
		t.Fatal(err)
	}
}
