package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/cmd/outpost/cli"
)

// lockedBuffer is a buffer written by one goroutine and read by another;
// seen is closed once it holds the text want.
type lockedBuffer struct {
	mu   sync.Mutex
	b    bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.b.Write(p)
	if w.want != "" && strings.Contains(w.b.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestServeStartLog: serve's start record names the sandboxes it serves
// (the default local when no --sandbox is given), never null.
func TestServeStartLog(t *testing.T) {
	t.Setenv("OUTPOST_HOME", t.TempDir())
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil { // serve's socket directory is its user's alone
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "serve.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &lockedBuffer{want: "listening", seen: make(chan struct{})}
	logs := &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, []string{"serve", "--socket", sock, "--pool-size", "-1", "--workdir", t.TempDir()}, strings.NewReader(""), out, logs)
	}()
	select {
	case <-out.seen:
	case code := <-done:
		t.Fatalf("serve exited with %d before listening: %s", code, logs)
	case <-time.After(2 * time.Minute):
		t.Fatalf("serve did not listen: %s", logs)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("serve exited with %d: %s", code, logs)
	}
	var rec struct {
		Msg       string          `json:"msg"`
		Sandboxes json.RawMessage `json:"sandboxes"`
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "outpost serve: listening" {
			break
		}
		rec.Msg = ""
	}
	if rec.Msg == "" {
		t.Fatalf("no start record in the log:\n%s", logs)
	}
	if diff := cmp.Diff(`["local"]`, string(rec.Sandboxes)); diff != "" {
		t.Errorf("sandboxes in the start record (-want +got):\n%s", diff)
	}
}

// TestServePolicyFlags: a bad --client-* value is a usage error; token
// add --operator and --policy write the line's fields, and a bad field
// is refused with nothing written.
func TestServePolicyFlags(t *testing.T) {
	home, wd := t.TempDir(), t.TempDir()
	for _, args := range [][]string{
		{"serve", "--client-secrets", "all"},
		{"serve", "--client-egress", "gateway,wide"},
		{"serve", "--client-egress-allow", "http://x"},
		{"serve", "--client-env", "A B"},
	} {
		if code, _, errOut := run(t, home, wd, args...); code != 2 {
			t.Errorf("%v: exit %d (%s), want 2", args, code, errOut)
		}
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if code, _, errOut := run(t, home, wd, "serve", "token", "add", "admin", "--tokens", tokens, "--operator", "--policy", "secrets=gateway,env"); code != 0 {
		t.Fatalf("token add --operator: exit %d (%s)", code, errOut)
	}
	if code, _, _ := run(t, home, wd, "serve", "token", "add", "x", "--tokens", tokens, "--policy", "secrets=all"); code == 0 {
		t.Error("token add took secrets=all")
	}
	b, _ := os.ReadFile(tokens)
	if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) != 1 || !strings.HasSuffix(lines[0], " operator secrets=gateway,env") {
		t.Errorf("tokens file:\n%s", b)
	}
}
