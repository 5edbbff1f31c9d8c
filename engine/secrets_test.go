package engine_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/credentials"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/providers/local"
)

// writeDotEnv writes the fixture's .outpost/.env.
func (f *fixture) writeDotEnv(content string) {
	f.t.Helper()
	dir := filepath.Join(f.workdir, ".outpost")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".env"), []byte(content), 0o600); err != nil {
		f.t.Fatal(err)
	}
}

// TestSecretsMaskedEverywhere: a value passed for the agent is a secret
// when its name says so (DBPASS) or its value has the shape of a key,
// whatever its name; the agent prints them, and no byte of any shows in
// the events, the results, the errors, the trace, standard error or the
// stored conversation (files and metadata) of an FS store.
func TestSecretsMaskedEverywhere(t *testing.T) {
	const (
		dbpass   = "hunter2-correct-horse"                         // secret by its name
		keyShape = "sk-ant-api03-Zq8vX2mN4pL6rT1wY9bC3dF5gH7jK0sA" // secret by its value's prefix
		random   = "q7Rk2PzX9mVb4TnL8wYc3HsJ6dFg1KeA5uNo0iQx"      // secret by its value's entropy
		inDotEnv = "ghp_aB3dE5fG7hI9jK1lM3nO5pQ7rS9tU1vW3xY5"      // a .outpost/.env value shaped like a key
	)
	secrets := []string{dbpass, keyShape, random, inDotEnv}
	storeDir := t.TempDir()
	f := newFixture(t)
	f.store = conversation.NewFS(storeDir)
	f.writeDotEnv("BUILD_HINT=" + inDotEnv + "\nFOO_SETTING=abc\n")
	var trace, stderr bytes.Buffer
	var seen bytes.Buffer // everything the caller was given
	opts := func(o *engine.RunOptions) {
		o.Raw, o.Stderr = true, &stderr
		o.Logger = slog.New(slog.NewJSONHandler(&trace, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	env := map[string]string{"DBPASS": dbpass, "UPSTREAM": keyShape, "NOTE": random}
	record := func(res *engine.Result, err error) {
		f.mu.Lock()
		for _, ev := range f.events {
			b, _ := json.Marshal(ev)
			seen.Write(b)
		}
		f.mu.Unlock()
		b, _ := json.Marshal(engine.NewResultLine(res, err))
		seen.Write(b)
		fmt.Fprintf(&seen, "%v %+v %#v", err, err, outpost.ToJSON(err))
	}

	// The prompt (echoed back) quotes the .outpost/.env secret; the agent
	// prints DBPASS and fails without its final event, so the error
	// carries its standard error.
	res, err := f.run(engine.Turn{Prompt: "#leak DBPASS #nofinish about " + inDotEnv, Env: env}, opts)
	if outpost.CodeOf(err) != outpost.Process {
		t.Fatalf("first turn: %v, want process (no final event)", err)
	}
	record(res, err)
	if res == nil || res.Conversation == "" {
		t.Fatalf("first turn not stored: %+v", res)
	}
	id := res.Conversation
	for _, p := range []string{"#leak UPSTREAM", "#leak NOTE"} {
		res, err = f.run(engine.Turn{Prompt: p, Resume: id, Env: env}, opts)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		record(res, err)
		if !strings.Contains(res.Text, "="+credentials.Redacted) {
			t.Errorf("%s: the answer shows no redaction: %q", p, res.Text)
		}
	}

	places := map[string][]byte{"events, results and errors": seen.Bytes(), "trace": trace.Bytes(), "stderr": stderr.Bytes()}
	err = filepath.WalkDir(storeDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		places["store "+p] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for where, b := range places {
		for _, s := range secrets {
			if bytes.Contains(b, []byte(s)) {
				t.Errorf("%s shows the secret %s:\n%s", where, s, b)
			}
		}
	}
	if !bytes.Contains(trace.Bytes(), []byte(credentials.Redacted)) {
		t.Error("the trace shows no redaction")
	}
}

// TestDotEnvIsTheBase: the plain settings of .outpost/.env reach the
// agent as they are; a secret of it (by name or by value) only when the
// credential plan selects it (echo's plan takes ECHO_API_KEY).
func TestDotEnvIsTheBase(t *testing.T) {
	f := newFixture(t)
	f.writeDotEnv(strings.Join([]string{
		"FOO_SETTING=abc",
		"OTHER_API_TOKEN=s3cr3t-by-name",
		"UPSTREAM=sk-proj-4fGh7Jk2Lm9Np3Qr6St8Uv1Wx5Yz0Ab",
		"DATABASE_URL=postgres://app:hunter22@db.internal/app",
		echo.TokenVariable + "=sk-echo-0123456789abcdef",
	}, "\n"))
	for _, tt := range []struct{ prompt, want string }{
		{"#leak FOO_SETTING", "FOO_SETTING=abc"},
		{"#env OTHER_API_TOKEN", "OTHER_API_TOKEN is not set"},
		{"#env UPSTREAM", "UPSTREAM is not set"},
		{"#env DATABASE_URL", "DATABASE_URL is not set"},
		{"#env " + echo.TokenVariable, echo.TokenVariable + " is set (24 bytes)"},
	} {
		t.Run(tt.prompt, func(t *testing.T) {
			res := f.ok(engine.Turn{Prompt: tt.prompt})
			if !strings.Contains(res.Text, tt.want) {
				t.Errorf("answer %q, want %q in it", res.Text, tt.want)
			}
		})
	}
}

// TestDotDirChangedDuringTurn: an agent that writes the working
// directory's .outpost/ (a local sandbox runs in the directory itself)
// cannot have the next turn read it: the next turn refuses with a
// configuration error naming what changed and the mark to remove, and runs
// again once the user has removed it (issue 43: a planted .outpost/.env
// with a base URL of the agent's choosing got the real key).
func TestDotDirChangedDuringTurn(t *testing.T) {
	// In namespaces the agent sees an empty .outpost/ of its own: its
	// write never reaches the host's, and the next turn runs.
	if iso, _ := local.New(&local.Options{Isolation: "namespaces"}).Isolation(); iso.Active {
		i := newFixtureIsolated(t, "namespaces")
		i.writeDotEnv("FOO_SETTING=abc\n")
		i.ok(engine.Turn{Prompt: "#write=.outpost/.env"})
		if res := i.ok(engine.Turn{Prompt: "#leak FOO_SETTING"}); !strings.Contains(res.Text, "FOO_SETTING=abc") {
			t.Errorf("isolated: the host's .outpost/.env after the agent wrote its own: %q", res.Text)
		}
	}
	// On the host (isolation none) the agent writes the real one.
	f := newFixtureIsolated(t, "none")
	f.writeDotEnv("FOO_SETTING=abc\n")
	f.ok(engine.Turn{Prompt: "#write=.outpost/.env"})
	_, err := f.run(engine.Turn{Prompt: "#env FOO_SETTING"})
	mark := filepath.Join(f.workdir, filepath.FromSlash(credentials.ChangedMark))
	if outpost.CodeOf(err) != outpost.Configuration || !strings.Contains(fmt.Sprint(err), "changed while") ||
		!strings.Contains(fmt.Sprint(err), ".outpost/.env") || !strings.Contains(fmt.Sprint(err), mark) {
		t.Fatalf("the turn after .outpost/.env changed: %v (code %s), want a configuration error naming the file and %s", err, outpost.CodeOf(err), mark)
	}
	// The user reviews the file, puts it right and removes the mark.
	f.writeDotEnv("FOO_SETTING=abc\n")
	if err := os.Remove(mark); err != nil {
		t.Fatal(err)
	}
	if res := f.ok(engine.Turn{Prompt: "#leak FOO_SETTING"}); !strings.Contains(res.Text, "FOO_SETTING=abc") {
		t.Errorf("after the user's word: %q", res.Text)
	}
	// A .outpost/ that appears during a turn counts too.
	g := newFixture(t)
	g.ok(engine.Turn{Prompt: "#write=.outpost/x"})
	if _, err := g.run(engine.Turn{Prompt: "hi"}); outpost.CodeOf(err) != outpost.Configuration || !strings.Contains(fmt.Sprint(err), ".outpost/x") {
		t.Fatalf("after .outpost/ appeared: %v", err)
	}
	// A turn that leaves .outpost/ alone leaves no mark.
	h := newFixture(t)
	h.writeDotEnv("FOO_SETTING=abc\n")
	h.ok(engine.Turn{Prompt: "#write=work.txt"})
	h.ok(engine.Turn{Prompt: "hi"})
}
