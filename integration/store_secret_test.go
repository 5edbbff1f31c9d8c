package integration

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
)

// TestClaudeSecretNotStored: a real Claude Code is told its own API key
// and the fake model repeats it, so the key is in the CLI's transcript in
// the prompt and the answer. The stored conversation holds no byte of it,
// and the CLI still resumes from the masked transcript.
func TestClaudeSecretNotStored(t *testing.T) {
	t.Parallel()
	e := newClaudeEnv(t, "local", anthropic.Options{})
	first := e.run(engine.Turn{Prompt: "remember " + e.key + " FAKE_ECHO"}, turnOpts{})
	e.mustSucceed(first)
	id := first.res.Conversation
	if !strings.Contains(string(e.srv.Requests()[len(e.srv.Requests())-1].Body), e.key) {
		t.Fatal("the key never reached the CLI: the test shows nothing")
	}
	_, files, err := e.store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	masked := false
	for _, f := range files {
		if bytes.Contains(f.Data, []byte(e.key)) {
			t.Errorf("the key is in the stored %s", f.Path)
		}
		masked = masked || bytes.Contains(f.Data, []byte(strings.Repeat("*", len(e.key))))
	}
	if !masked {
		t.Error("no masked key in the stored transcript")
	}
	second := e.run(engine.Turn{Prompt: "and now FAKE_ECHO", Resume: id}, turnOpts{})
	e.mustSucceed(second)
	last := e.messages()[len(e.messages())-1]
	if last.NumMessages != 4 {
		t.Errorf("the resumed CLI sent %d messages, want the whole history (4)", last.NumMessages)
	}
}
