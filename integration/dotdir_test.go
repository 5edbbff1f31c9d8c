package integration

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/credentials"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// TestBindWorkspaceCannotPlantDotEnv: an agent in a docker workspace=bind
// sandbox cannot create /workspace/.outpost/.env when the directory has
// no .outpost/ (issue 43: a planted .env with a base URL of the agent's
// choosing got the real key on the next turn), cannot write the user's
// .outpost/ either, and the next turn reads the user's .env, not a
// planted one. Both turns record their checkpoints: the read-only mount
// over .outpost/ is left out of the workspace's archive (it broke the
// checkpoint's copy of the workspace once).
func TestBindWorkspaceCannotPlantDotEnv(t *testing.T) {
	t.Parallel()
	dockertest.Require(t)
	p, err := docker.New(&docker.Options{Binary: outpostBinary(t), Workspace: docker.Bind})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	dir := t.TempDir()
	if os.Getuid() == 0 { // the bind workspace's user is the directory's owner
		if err := os.Chown(dir, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	f := &turns{t: t, store: conversation.NewFS(t.TempDir()), workdir: dir}
	// One container for both turns, as a held lease keeps it.
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	env := filepath.Join(dir, ".outpost", ".env")

	first := f.ok2(l, engine.Turn{Prompt: "#write=.outpost/.env #write=work.txt"})
	if _, err := os.Stat(env); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the agent planted .outpost/.env on the host: %v", err)
	}
	wantRefusedWrite(t, f)
	if _, err := os.Stat(filepath.Join(dir, "work.txt")); err != nil {
		t.Errorf("the agent's other write did not reach the host: %v", err)
	}
	if first.Checkpoint == nil {
		t.Errorf("no checkpoint of the first turn: %s", f.notices())
	}

	// The user's own .outpost/.env: hidden from the agent, read by the
	// next turn as the user wrote it, and no mark of a change.
	if err := os.WriteFile(env, []byte("FOO_SETTING=abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	second := f.ok2(l, engine.Turn{Prompt: "#write=.outpost/.env #leak FOO_SETTING", Resume: first.Conversation})
	wantRefusedWrite(t, f)
	if !strings.Contains(second.Text, "FOO_SETTING=abc") {
		t.Errorf("the second turn did not get the user's .env: %q", second.Text)
	}
	if b, err := os.ReadFile(env); err != nil || string(b) != "FOO_SETTING=abc\n" {
		t.Errorf("the user's .outpost/.env after the turn: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, filepath.FromSlash(credentials.ChangedMark))); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a turn that could not write .outpost/ left the change mark: %v", err)
	}
	if second.Checkpoint == nil || second.Checkpoint.Turn != 2 {
		t.Errorf("checkpoint of the second turn: %+v; %s", second.Checkpoint, f.notices())
	}
}

// wantRefusedWrite checks that the last turn's first tool call (the
// agent's write of .outpost/.env) failed in the sandbox.
func wantRefusedWrite(t *testing.T, f *turns) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range f.events {
		if ev.Type == harness.EventToolResult {
			if ev.Tool == nil || !ev.Tool.Error {
				t.Errorf("the agent's write of .outpost/.env succeeded in the sandbox: %+v", ev)
			}
			return
		}
	}
	t.Errorf("no tool result in the turn's events")
}

// notices are the last turn's notices, for a failure's message.
func (f *turns) notices() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, ev := range f.events {
		if ev.Type == harness.EventNotice {
			out = append(out, ev.Kind+": "+ev.Text)
		}
	}
	return "notices " + strings.Join(out, "; ")
}
