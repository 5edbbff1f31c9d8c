package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadmeFirstCommand: the README's first command, on the built binary.
func TestReadmeFirstCommand(t *testing.T) {
	home, dir := t.TempDir(), t.TempDir()
	code, out, errOut := runOutpost(t, home, dir, "run", "hello")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "echo: hello (turn 1)") || !strings.Contains(errOut, "conversation c") {
		t.Errorf("stdout %q stderr %q", out, errOut)
	}
}

// TestInterruptStopsTheTurn: SIGINT to outpost ends the turn with the
// cancelled status, and nothing of the agent is left running.
func TestInterruptStopsTheTurn(t *testing.T) {
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
