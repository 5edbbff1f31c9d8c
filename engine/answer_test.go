package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/output"
)

const nameSchema = `{"type":"object","properties":{"name":{"type":"string"}},"required":["name"],"additionalProperties":false}`

func intp(n int) *int { return &n }

func (f *fixture) notices(kind string) []harness.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []harness.Event
	for _, e := range f.events {
		if e.Type == harness.EventNotice && e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func outputErr(t *testing.T, err error) *outpost.Error {
	t.Helper()
	var oe *outpost.Error
	if !errors.As(err, &oe) || oe.Code != outpost.Output {
		t.Fatalf("err = %v, want code output", err)
	}
	if outpost.ExitCode(err) != 10 || !errors.Is(err, outpost.ErrOutput) {
		t.Errorf("exit %d", outpost.ExitCode(err))
	}
	return oe
}

func TestSchemaAnswer(t *testing.T) {
	f := newFixture(t)
	res := f.ok(engine.Turn{Prompt: `name it #json={"name": "x"}`, Output: json.RawMessage(nameSchema)})
	if string(res.Output) != `{"name":"x"}` {
		t.Errorf("output %s", res.Output)
	}
	// Echo cannot enforce a schema: the instruction reached it.
	if !strings.Contains(res.Text, "matches this JSON Schema") || !strings.Contains(res.Text, `"required":["name"]`) {
		t.Errorf("the instruction did not reach the agent: %q", res.Text)
	}
	if len(res.Attempts) != 1 || res.Attempts[0].Usage != res.Usage || len(f.notices("repair")) != 0 {
		t.Errorf("attempts %+v", res.Attempts)
	}
}

func TestRepairSucceeds(t *testing.T) {
	f := newFixture(t)
	res := f.ok(engine.Turn{Prompt: `#json-after=1 #json={"name": "fixed"}`, Output: json.RawMessage(nameSchema)})
	if string(res.Output) != `{"name":"fixed"}` {
		t.Fatalf("output %s", res.Output)
	}
	// The second turn's prompt was the repair message, naming the error.
	if !strings.Contains(res.Text, "(turn 2)") || !strings.Contains(res.Text, "Your last answer does not match the required JSON Schema") ||
		!strings.Contains(res.Text, "not valid JSON") {
		t.Errorf("the repair message did not reach the agent: %q", res.Text)
	}
	reps := f.notices("repair")
	if len(reps) != 1 || reps[0].Details["attempt"] != 2 {
		t.Fatalf("repair notices %+v", reps)
	}
	if errs, ok := reps[0].Details["errors"].([]output.Problem); !ok || len(errs) != 1 || errs[0].Pointer != "" {
		t.Errorf("repair notice errors %#v", reps[0].Details["errors"])
	}
	if len(res.Attempts) != 2 || len(res.Attempts[0].Errors) == 0 || len(res.Attempts[1].Errors) != 0 {
		t.Fatalf("attempts %+v", res.Attempts)
	}
	if sum := res.Attempts[0].Usage.Add(res.Attempts[1].Usage); sum != res.Usage || res.Attempts[1].Usage.InputTokens == 0 {
		t.Errorf("usage %+v is not the sum of %+v", res.Usage, res.Attempts)
	}
	// One conversation, two turns.
	m, err := f.store.Meta(context.Background(), res.Conversation)
	if err != nil || m.Turns != 2 {
		t.Errorf("stored %+v, %v", m, err)
	}
	// The repair let go of the conversation: it can be resumed at once.
	if next, err := f.run(engine.Turn{Prompt: "and then?", Resume: res.Conversation}); err != nil || !strings.Contains(next.Text, "(turn 3)") {
		t.Errorf("resume after the repair: %v", err)
	}
}

func TestRepairExhausted(t *testing.T) {
	f := newFixture(t)
	res, err := f.run(engine.Turn{Prompt: "#badjson", Output: json.RawMessage(nameSchema), Repairs: intp(1)})
	oe := outputErr(t, err)
	if oe.Details["attempts"] != 2 || !strings.Contains(oe.Details["raw"].(string), `{"broken": `) || oe.Details["repair"] != nil {
		t.Errorf("details %v", oe.Details)
	}
	if errs := oe.Details["errors"].([]output.Problem); len(errs) != 1 || !strings.Contains(errs[0].Message, "not valid JSON") {
		t.Errorf("errors %v", errs)
	}
	if res == nil || res.Conversation == "" || len(res.Attempts) != 2 || len(f.notices("repair")) != 1 {
		t.Errorf("result %+v", res)
	}
}

func TestNoRepair(t *testing.T) {
	notResumable := *echo.Harness()
	notResumable.Resumable, notResumable.Forkable = harness.False, harness.False
	tests := []struct {
		name string
		turn engine.Turn
		mod  func(*engine.RunOptions)
		why  string
	}{
		{"disabled", engine.Turn{Repairs: intp(0)}, nil, "disabled"},
		{"no store", engine.Turn{}, func(o *engine.RunOptions) { o.Store = nil }, "no conversation store"},
		{"not resumable", engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: &notResumable}}, nil, "cannot resume"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			turn := tt.turn
			turn.Prompt, turn.Output = "#json={}", json.RawMessage(nameSchema)
			var mods []func(*engine.RunOptions)
			if tt.mod != nil {
				mods = append(mods, tt.mod)
			}
			_, err := f.run(turn, mods...)
			oe := outputErr(t, err)
			if why, _ := oe.Details["repair"].(string); !strings.Contains(why, tt.why) || oe.Details["attempts"] != 1 {
				t.Errorf("details %v", oe.Details)
			}
			if errs := oe.Details["errors"].([]output.Problem); len(errs) != 1 || !strings.Contains(errs[0].Message, "name") {
				t.Errorf("errors %v", errs)
			}
			if len(f.notices("repair")) != 0 {
				t.Error("a repair was attempted")
			}
		})
	}
}

func TestAnswerRefusedBeforeAllocation(t *testing.T) {
	dir := t.TempDir()
	broken := filepath.Join(dir, "broken.json")
	os.WriteFile(broken, []byte(`{"type": "object",`), 0o600)
	b, _ := os.ReadFile(broken)
	tests := []struct {
		name string
		turn engine.Turn
		want string
	}{
		{"broken schema file", engine.Turn{Output: b}, "not JSON"},
		{"invalid schema", engine.Turn{Output: json.RawMessage(`{"type":"nope"}`)}, "invalid schema"},
		{"schema over 1 MiB", engine.Turn{Output: json.RawMessage(`{"description":"` + strings.Repeat("x", 1<<20) + `"}`)}, "limit"},
		{"schema and protocol", engine.Turn{Output: json.RawMessage(nameSchema), Protocol: "handoff"}, "exclusive"},
		{"unknown protocol", engine.Turn{Protocol: "teams"}, "unknown protocol"},
		{"negative repairs", engine.Turn{Output: json.RawMessage(nameSchema), Repairs: intp(-1)}, "repairs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			turn := tt.turn
			turn.Prompt = "hi"
			_, err := f.run(turn)
			if outpost.CodeOf(err) != outpost.Configuration || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want configuration mentioning %q", err, tt.want)
			}
			if f.provider.opens.Load() != 0 {
				t.Error("a sandbox was allocated")
			}
		})
	}
}

func TestProtocol(t *testing.T) {
	f := newFixture(t)
	res := f.ok(engine.Turn{Prompt: `#write=notes.md #json={"result": {"summary": "wrote notes", "changedFiles": ["claimed.txt"]}}`, Protocol: "handoff"})
	want := &output.Outcome{Kind: "result", Summary: "wrote notes", ChangedFiles: []string{"notes.md"}, ClaimedChangedFiles: []string{"claimed.txt"}}
	if d := cmp.Diff(want, res.Protocol); d != "" {
		t.Errorf("protocol (-want +got):\n%s", d)
	}
	if !strings.Contains(res.Text, "fenced ```json block") {
		t.Errorf("the protocol instruction did not reach the agent: %q", res.Text)
	}
	res = f.ok(engine.Turn{Prompt: `#json={"handoff": {"to": "reviewer", "task": "review notes.md", "context": "first draft"}}`, Protocol: "handoff"})
	if d := cmp.Diff(&output.Outcome{Kind: "handoff", To: "reviewer", Task: "review notes.md", Context: "first draft"}, res.Protocol); d != "" {
		t.Errorf("handoff (-want +got):\n%s", d)
	}
	res = f.ok(engine.Turn{Prompt: "just answer, see docs/notes.md", Protocol: "handoff"})
	if res.Protocol == nil || !res.Protocol.Fallback || res.Protocol.Kind != "result" || !strings.HasPrefix(res.Protocol.Summary, "echo: just answer") {
		t.Errorf("fallback %+v", res.Protocol)
	}
	if d := cmp.Diff([]string{"docs/notes.md"}, res.Protocol.ClaimedChangedFiles); d != "" {
		t.Errorf("fallback's claimed files (-want +got):\n%s", d)
	}
	if len(f.notices("protocol_fallback")) != 1 {
		t.Error("no protocol_fallback notice")
	}
	res = f.ok(engine.Turn{Prompt: `#json-after=1 #json={"result": {"summary": "ok"}}`, Protocol: "handoff"})
	if res.Protocol == nil || res.Protocol.Summary != "ok" || len(res.Attempts) != 2 || len(f.notices("repair")) != 1 {
		t.Errorf("malformed block repaired: %+v %+v", res.Protocol, res.Attempts)
	}
}

func TestChangedFilesLocal(t *testing.T) {
	f := newFixture(t)
	for _, n := range []string{"old.txt", "edit.txt", "keep.txt"} {
		os.WriteFile(filepath.Join(f.workdir, n), []byte("x"), 0o644)
	}
	os.MkdirAll(filepath.Join(f.workdir, ".git"), 0o755)
	res := f.ok(engine.Turn{Prompt: "#write=dir/new.txt #append=edit.txt #rm=old.txt #write=.git/config"})
	want := &output.Changes{Complete: true, Files: []output.ChangedFile{
		{Path: "dir/new.txt", Operation: "created"}, {Path: "edit.txt", Operation: "modified"}, {Path: "old.txt", Operation: "deleted"},
	}}
	if d := cmp.Diff(want, res.ChangedFiles); d != "" {
		t.Errorf("changed files (-want +got):\n%s", d)
	}
	res = f.ok(engine.Turn{Prompt: "#write=a.txt #write=b.txt", ChangedFilesLimit: 1})
	if res.ChangedFiles == nil || res.ChangedFiles.Complete {
		t.Errorf("bounded: %+v", res.ChangedFiles)
	}
	if res = f.ok(engine.Turn{Prompt: "#write=c.txt", ChangedFilesLimit: -1}); res.ChangedFiles != nil {
		t.Errorf("off: %+v", res.ChangedFiles)
	}
}

func TestRawRedacted(t *testing.T) {
	f := newFixture(t)
	secret := "sk-outpost-test-0123456789abcdef"
	_, err := f.run(engine.Turn{Prompt: "#leak MY_API_KEY #badjson", Output: json.RawMessage(nameSchema), Repairs: intp(0),
		Env: map[string]string{"MY_API_KEY": secret}})
	oe := outputErr(t, err)
	raw, _ := oe.Details["raw"].(string)
	if strings.Contains(raw, secret) || !strings.Contains(raw, "MY_API_KEY=") {
		t.Errorf("raw %q", raw)
	}
	if strings.Contains(err.Error(), secret) || strings.Contains(f.text(), secret) {
		t.Error("the secret leaked")
	}
}

// TestCancelAndSteerAcrossAttempts: a repair attempt is a turn like any
// other: steering reaches it and cancelling stops it.
func TestCancelAndSteerAcrossAttempts(t *testing.T) {
	t.Run("cancel", func(t *testing.T) {
		f := newFixture(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		turn := engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: echo.Harness()}, Workdir: f.workdir, Prompt: "#badjson", Output: json.RawMessage(nameSchema)}
		res, err := engine.Run(ctx, turn, &engine.RunOptions{Provider: f.provider, Store: f.store, Environ: []string{"PATH=" + os.Getenv("PATH")},
			OnEvent: func(ev harness.Event) {
				if ev.Kind == "repair" {
					cancel()
				}
			}})
		if outpost.CodeOf(err) != outpost.Cancelled {
			t.Fatalf("err = %v, want cancelled", err)
		}
		if res == nil || len(res.Attempts) == 0 {
			t.Errorf("result %+v", res)
		}
	})
	t.Run("steer", func(t *testing.T) {
		f := newFixture(t)
		steer := make(chan string, 1)
		res := f.ok(engine.Turn{Prompt: `#json-after=1 #json={"name":"x"}`, Output: json.RawMessage(nameSchema)}, func(o *engine.RunOptions) {
			o.Steer = steer
			prev := o.OnEvent
			o.OnEvent = func(ev harness.Event) {
				prev(ev)
				if ev.Kind == "repair" {
					steer <- "also say hello"
				}
			}
		})
		if string(res.Output) != `{"name":"x"}` {
			t.Errorf("output %s", res.Output)
		}
		steers := f.notices("steer")
		if len(steers) == 0 || steers[0].Details["delivered"] != true {
			t.Errorf("steer notices %+v", steers)
		}
	})
}

// TestTimeoutAcrossAttempts: the turn's deadline bounds its repairs too.
func TestTimeoutAcrossAttempts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := *echo.Harness()
	request := h.Request
	h.Request = func(in harness.Input) (harness.Command, error) {
		if strings.Contains(in.Prompt, "Your last answer") {
			in.Prompt += " #hang" // the repair attempt never answers
		}
		return request(in)
	}
	res, err := f.run(engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: &h}, Prompt: "#badjson", Output: json.RawMessage(nameSchema), Timeout: 20 * time.Second})
	if outpost.CodeOf(err) != outpost.Timeout {
		t.Fatalf("err = %v, want timeout", err)
	}
	if len(f.notices("repair")) != 1 || res == nil || len(res.Attempts) != 2 {
		t.Errorf("the timeout did not come from the repair attempt: %+v", res)
	}
}
