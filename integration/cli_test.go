package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/outposthq/outpost/internal/testenv"
)

// TestReadmeFirstCommand: the README's first block is `go run
// ./cmd/outpost-hello "hello"` alone; built, it answers, names the conversation,
// and that conversation continues with the full CLI and with itself.
func TestReadmeFirstCommand(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const first = `go run ./cmd/outpost-hello "hello"`
	_, block, _ := strings.Cut(string(readme), "```sh\n")
	block, _, _ = strings.Cut(block, "```\n")
	steps, err := parseDocBlock(block, 1)
	if err != nil || len(steps) != 1 {
		t.Fatalf("the README's first block is not one command (%v):\n%s", err, block)
	}
	if argv, err := shellWords(steps[0].text, nil); err != nil || !slices.Equal(argv, []string{"go", "run", "./cmd/outpost-hello", "hello"}) {
		t.Fatalf("the README's first command is %q (%v); this test runs %q", steps[0].text, err, first)
	}
	home, dir := t.TempDir(), t.TempDir()
	hello := func(args ...string) (string, string) {
		t.Helper()
		cmd := exec.Command(testenv.GoBuild(t, "github.com/outposthq/outpost/cmd/outpost-hello"), args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "OUTPOST_HOME="+home)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("outpost-hello %q: %v: %s", args, err, errOut.String())
		}
		return out.String(), errOut.String()
	}
	out, errOut := hello("hello")
	_, id, _ := strings.Cut(errOut, "· conversation ")
	id, _, _ = strings.Cut(id, "\n")
	if out != "echo: hello (turn 1)\n" || !strings.HasPrefix(id, "c") {
		t.Fatalf("stdout %q stderr %q", out, errOut)
	}
	code, out, errOut := runOutpost(t, home, dir, "run", "--resume", id, "and then?")
	if code != 0 || !strings.Contains(out, "echo: and then? (turn 2)") {
		t.Fatalf("outpost run --resume: exit %d, stdout %q, stderr %s", code, out, errOut)
	}
	if out, _ := hello("--resume", id, "more"); out != "echo: more (turn 3)\n" {
		t.Errorf("outpost-hello --resume: %q", out)
	}
}

// TestInterruptStopsTheTurn: SIGINT to outpost ends the turn with the
// cancelled status, and nothing of the agent is left running.
func TestInterruptStopsTheTurn(t *testing.T) {
	t.Parallel()
	home, dir := t.TempDir(), t.TempDir()
	marker := fmt.Sprintf("interrupt-%d", os.Getpid())
	cmd := exec.Command(outpostBinary(t), "run", "--json", "#slow=100000 "+marker)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "OUTPOST_HOME="+home, "TMPDIR="+t.TempDir())
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	var session string
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		var ev struct{ Type, Session string }
		json.Unmarshal(sc.Bytes(), &ev)
		if ev.Type == "message" && session == "" {
			session = ev.Session
			cmd.Process.Signal(syscall.SIGINT)
		}
	}
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit %d, want 130; output:\n%s", code, strings.Join(lines, "\n"))
	}
	last := lines[len(lines)-1]
	if !strings.Contains(last, `"code":"cancelled"`) {
		t.Errorf("result %s", last)
	}
	if session == "" {
		t.Fatal("no session seen")
	}
	// No echo agent of this session may survive.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if bytes.Contains(b, []byte("echo-agent")) && bytes.Contains(b, []byte(marker)) {
			t.Errorf("agent still running: %s %q", p, b)
		}
	}
}
