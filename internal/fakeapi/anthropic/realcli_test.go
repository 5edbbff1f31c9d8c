package anthropic

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/internal/testenv"
)

// claudeBinary returns the pinned claude installed by scripts/install-clis.sh
// (its version comes from bootstrap/pins.json); a missing one fails the
// test under CI and skips it loudly elsewhere.
func claudeBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("runs the real claude CLI")
	}
	return testenv.RequireCLI(t, "claude")
}

type cliRun struct {
	lines []map[string]any
	rc    int
}

func runClaude(t *testing.T, bin, baseURL, home, cwd string, args ...string) cliRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"-p", "--output-format", "stream-json", "--verbose"}, args...)...)
	cmd.Dir = cwd
	cmd.Env = []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + home,
		"TMPDIR=" + t.TempDir(),
		"ANTHROPIC_BASE_URL=" + baseURL,
		"ANTHROPIC_API_KEY=sk-fake",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"CLAUDE_CODE_MAX_RETRIES=0",
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	rc := 0
	if ee, ok := err.(*exec.ExitError); ok {
		rc = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("claude: %v", err)
	}
	var out cliRun
	out.rc = rc
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("stdout line %q: %v", sc.Text(), err)
		}
		out.lines = append(out.lines, m)
	}
	if stderr.Len() > 0 {
		t.Logf("claude stderr: %s", stderr.String())
	}
	return out
}

func (r cliRun) result(t *testing.T) map[string]any {
	t.Helper()
	for i := len(r.lines) - 1; i >= 0; i-- {
		if r.lines[i]["type"] == "result" {
			return r.lines[i]
		}
	}
	t.Fatalf("no result line in %v", r.lines)
	return nil
}

// TestRealClaude drives the pinned Claude Code CLI against the fake: a tool
// turn, a resumed turn that must carry the whole history, and a 429.
func TestRealClaude(t *testing.T) {
	bin := claudeBinary(t)
	srv := New(t, Options{})
	home, cwd := t.TempDir(), t.TempDir()

	run := runClaude(t, bin, srv.URL(), home, cwd, "--permission-mode", "acceptEdits", "FAKE_TOOL:echo hi > out.txt; echo hi")
	res := run.result(t)
	if run.rc != 0 || res["is_error"] != false || res["result"] != "ECHO nmsg=4 last_user=[tool_result] hi" {
		t.Fatalf("tool turn rc=%d result=%v", run.rc, res)
	}
	if b, err := os.ReadFile(filepath.Join(cwd, "out.txt")); err != nil || string(b) != "hi\n" {
		t.Errorf("out.txt: %q %v", b, err)
	}
	reqs := srv.MessageRequests()
	if len(reqs) != 2 || reqs[0].APIKey != "sk-fake" || !reqs[0].Stream || !reqs[1].HasToolResult {
		t.Fatalf("requests %+v", reqs)
	}
	sid, _ := res["session_id"].(string)
	if matches, _ := filepath.Glob(filepath.Join(home, ".claude", "projects", "*", sid+".jsonl")); len(matches) != 1 {
		t.Errorf("session file for %s: %v", sid, matches)
	}

	run = runClaude(t, bin, srv.URL(), home, cwd, "--resume", sid, "again FAKE_ECHO")
	res = run.result(t)
	if run.rc != 0 || !strings.HasPrefix(res["result"].(string), "ECHO nmsg=6 last_user=again FAKE_ECHO") {
		t.Fatalf("resume rc=%d result=%v", run.rc, res["result"])
	}
	last := srv.MessageRequests()[2]
	if got := last.UserTexts(); len(got) != 3 || got[0] != "FAKE_TOOL:echo hi > out.txt; echo hi" || got[1] != "[tool_result] hi" {
		t.Errorf("resumed history %q", got)
	}

	run = runClaude(t, bin, srv.URL(), home, cwd, "FAKE_429")
	res = run.result(t)
	if run.rc != 1 || res["is_error"] != true || res["api_error_status"] != float64(429) {
		t.Errorf("429 rc=%d result=%v", run.rc, res)
	}
}
