package engine_test

import (
	"testing"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
)

// TestCommandSession: a preset that chooses the native id (Command.Session)
// gets a session event when the process starts, the id on every event and
// the result, and its conversation captured even when the CLI dies before
// printing anything.
func TestCommandSession(t *testing.T) {
	const id = "0b0b0b0b-0000-4000-8000-000000000001"
	h := &harness.Harness{
		Name: "minted",
		Request: func(in harness.Input) (harness.Command, error) {
			return harness.Command{Path: "sh", Args: []string{"-c", `mkdir -p "$HOME/.minted" && echo state > "$HOME/.minted/$1.txt" && echo '{"x":1}' && exit 3`, "sh", id}, Session: id}, nil
		},
		Events: func(line []byte) []harness.Event {
			return []harness.Event{{Type: harness.EventNotice, Kind: "line", Text: string(line)}}
		},
		Storage: &harness.Storage{Roots: []string{".minted"}, Match: func(rel, native string) bool { return rel == native+".txt" }},
		Capture: harness.True,
	}
	f := newFixture(t)
	res, err := f.run(engine.Turn{Prompt: "go", Agent: harness.Agent{Kind: "cli", Harness: h}})
	if outpost.CodeOf(err) != outpost.Process {
		t.Fatalf("err %v, want code process", err)
	}
	if res == nil || res.Session != id || res.Conversation == "" {
		t.Fatalf("result %+v: want the chosen session and a stored conversation", res)
	}
	if len(f.events) != 2 || f.events[0].Type != harness.EventSession || f.events[0].Session != id || f.events[1].Session != id {
		t.Errorf("events %+v", f.events)
	}
	m, files, gerr := f.store.Get(t.Context(), res.Conversation)
	if gerr != nil || m.Native != id || len(files) != 1 {
		t.Errorf("stored %+v %d files: %v", m, len(files), gerr)
	}
}
