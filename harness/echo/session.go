package echo

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
)

// record is one line of the session file.
type record struct {
	Role   string `json:"role"` // meta, user, assistant
	Text   string `json:"text,omitempty"`
	ID     string `json:"id,omitempty"`
	Parent string `json:"parent,omitempty"`
}

// ForkSubcommand is the echo agent's separate fork command:
// `echo-agent fork PARENT` copies conversation PARENT into a new one and
// prints the new id. The echo preset forks with --resume --fork; a preset
// with a Fork hook (Fork) uses this instead.
const ForkSubcommand = "fork"

func forkMain(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || !validID(args[0]) {
		fmt.Fprintln(stderr, "echo: usage: fork PARENT-ID")
		return 2
	}
	dir, err := sessionDir()
	if err != nil {
		fmt.Fprintln(stderr, "echo:", err)
		return 2
	}
	history, err := loadSession(dir, args[0])
	if err != nil {
		fmt.Fprintln(stderr, "echo:", err)
		return 2
	}
	id := newID()
	recs := append([]record{{Role: "meta", ID: id, Parent: args[0]}}, withoutMeta(history)...)
	if err := writeSession(sessionPath(dir, id), recs); err != nil {
		fmt.Fprintln(stderr, "echo: saving session:", err)
		return 5
	}
	fmt.Fprintln(stdout, id)
	return 0
}

// sessionDir is $HOME/.echo/sessions, created if missing.
func sessionDir() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory: %w", err)
	}
	dir := filepath.Join(home, ".echo", "sessions")
	return dir, os.MkdirAll(dir, 0o700)
}

func sessionPath(dir, id string) string { return filepath.Join(dir, id+".jsonl") }

// loadSession reads conversation id, which must exist.
func loadSession(dir, id string) ([]record, error) {
	if !validID(id) {
		return nil, fmt.Errorf("invalid conversation id %q", id)
	}
	history, err := readSession(sessionPath(dir, id))
	if err != nil {
		return nil, fmt.Errorf("no conversation found with id %s", id)
	}
	return history, nil
}

func withoutMeta(rs []record) []record {
	out := make([]record, 0, len(rs))
	for _, r := range rs {
		if r.Role != "meta" {
			out = append(out, r)
		}
	}
	return out
}

// newID is a new session id: a version 4 UUID (crypto/rand does not fail
// since Go 1.24).
func newID() string {
	id, _ := kit.NewUUID()
	return id
}

func validID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdef", c) {
				return false
			}
		}
	}
	return true
}

func readSession(path string) ([]record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []record
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		var r record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			return nil, fmt.Errorf("corrupt session file: %w", err)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, errors.New("empty session file")
	}
	return out, nil
}

func writeSession(path string, recs []record) error {
	var b strings.Builder
	for _, r := range recs {
		j, _ := json.Marshal(r)
		b.Write(j)
		b.WriteByte('\n')
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// History is the conversation's exchange as the session file of native
// holds it: each user message and each answer.
func History(t harness.Transcript) []harness.Event {
	data, ok := t.Files[".echo/sessions/"+t.Native+".jsonl"]
	if !ok {
		return nil
	}
	var out []harness.Event
	for _, l := range strings.Split(string(data), "\n") {
		var r record
		if json.Unmarshal([]byte(l), &r) != nil {
			continue
		}
		switch r.Role {
		case "user":
			out = append(out, harness.Event{Type: harness.EventMessage, Kind: harness.KindUser, Text: r.Text})
		case "assistant":
			out = append(out, harness.Event{Type: harness.EventMessage, Text: r.Text})
		}
	}
	return out
}
