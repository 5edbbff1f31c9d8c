package gateway

import (
	"bytes"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/outposthq/outpost/internal/testenv"
)

// TestGitCloneNotPush is issue #42's proof: a git smart-HTTP server over
// HTTPS (git http-backend, pushes enabled) behind a rule that allows only
// fetching; the real git, run as the sandbox runs it (HTTPS_PROXY the
// grant's proxy URL, the grant's CA through TrustVariables), clones
// through the terminated tunnel, and its push gets 403 from the gateway
// without reaching the server.
func TestGitCloneNotPush(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		testenv.Missing(t, "git", "apt-get install git")
	}
	dir := t.TempDir()
	run := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(gitBin, args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	base := []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t"}
	execPath, err := run(base, "--exec-path")
	if err != nil {
		t.Fatal(execPath, err)
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", "seed"}, {"-C", "seed", "commit", "-q", "--allow-empty", "-m", "first"},
		{"clone", "-q", "--bare", "seed", "srv/repo.git"}, {"-C", "srv/repo.git", "config", "http.receivepack", "true"},
	} {
		if out, err := run(base, args...); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	backend := &cgi.Handler{Path: filepath.Join(strings.TrimSpace(execPath), "git-http-backend"), Root: "/",
		Env: []string{"GIT_PROJECT_ROOT=" + filepath.Join(dir, "srv"), "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=t"}}
	rf := newRuleFixture(t, backend, "HOST GET,POST /repo.git/info/refs /repo.git/git-upload-pack")
	ca, bundle := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "bundle.pem")
	_ = os.WriteFile(ca, rf.gr.CACert(), 0o600)
	_ = os.WriteFile(bundle, rf.gr.CABundle(), 0o600)
	sandbox := append(base, "HTTPS_PROXY="+rf.gr.ProxyURL(rf.addr))
	for k, v := range TrustVariables(ca, bundle) {
		sandbox = append(sandbox, k+"="+v)
	}
	if out, err := run(sandbox, "clone", "-q", "https://"+rf.target+"/repo.git", "work"); err != nil {
		t.Fatalf("clone through the gateway: %v\n%s\n%s", err, out, rf.logs.String())
	}
	if out, err := run(sandbox, "-C", "work", "commit", "-q", "--allow-empty", "-m", "second"); err != nil {
		t.Fatal(out, err)
	}
	out, err := run(sandbox, "-C", "work", "push", "-q", "origin", "HEAD:main")
	if err == nil || !strings.Contains(out, "403") {
		t.Errorf("push: %v, want a 403 refusal:\n%s", err, out)
	}
	var seen []string
	for len(rf.hits) > 0 {
		seen = append(seen, <-rf.hits)
	}
	if slices.Contains(seen, "POST /repo.git/git-receive-pack") || !slices.Contains(seen, "POST /repo.git/git-upload-pack") {
		t.Errorf("the git server saw %q", seen)
	}
	t.Logf("push refused:\n%s", out)
	if log, _ := run(base, "-C", "srv/repo.git", "log", "--oneline", "main"); strings.Count(log, "\n") != 1 || bytes.Contains([]byte(log), []byte("second")) {
		t.Errorf("the server's branch changed: %q", log)
	}
}
