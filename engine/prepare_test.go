package engine_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
)

// TestCommandPrepare: a command's Prepare commands run in the sandbox
// before it, in order; one that fails ends the turn with code
// conversation and the agent never starts.
func TestCommandPrepare(t *testing.T) {
	f := newFixture(t)
	mark := filepath.Join(f.workdir, "prepared") // the workspace: writable in namespaces too
	with := func(prep ...harness.Command) harness.Agent {
		return echoAgent(func(h *harness.Harness) {
			req := h.Request
			h.Request = func(in harness.Input) (harness.Command, error) {
				c, err := req(in)
				c.Prepare = prep
				return c, err
			}
		})
	}
	res := f.ok(engine.Turn{Prompt: "hello", Agent: with(
		harness.Command{Path: "sh", Args: []string{"-c", "echo one > " + mark}},
		harness.Command{Path: "sh", Args: []string{"-c", "echo two >> " + mark}},
	)})
	if b, err := os.ReadFile(mark); err != nil || string(b) != "one\ntwo\n" {
		t.Fatalf("prepare commands: %q, %v", b, err)
	}
	if res.Text == "" {
		t.Fatal("the agent did not run after its prepare commands")
	}
	os.Remove(mark)
	_, err := f.run(engine.Turn{Prompt: "hello", Agent: with(
		harness.Command{Path: "sh", Args: []string{"-c", "echo broken database >&2; exit 3"}},
		harness.Command{Path: "sh", Args: []string{"-c", "echo never > " + mark}},
	)})
	var oe *outpost.Error
	if !errors.As(err, &oe) || oe.Code != outpost.Conversation {
		t.Fatalf("failed prepare: %v, want code conversation", err)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Error("a prepare command ran after one failed")
	}
	for _, ty := range f.types() {
		if ty == harness.EventMessage {
			t.Error("the agent ran after a failed prepare command")
		}
	}
}
