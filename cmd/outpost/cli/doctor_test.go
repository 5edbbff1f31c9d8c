package cli_test

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/cmd/outpost/cli"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/server"
)

// doctorChecks runs `outpost doctor --json` and returns its checks by
// name ("serve", "key claude") and its result line.
func doctorChecks(t *testing.T, args ...string) (map[string]cli.DoctorCheck, cli.DoctorResult) {
	t.Helper()
	_, out, errOut := run(t, t.TempDir(), t.TempDir(), append([]string{"doctor", "--json", "--timeout", "10s"}, args...)...)
	checks := map[string]cli.DoctorCheck{}
	var res cli.DoctorResult
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var c cli.DoctorCheck
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("line %q: %v (stderr %s)", line, err, errOut)
		}
		if c.Type == "result" {
			json.Unmarshal([]byte(line), &res)
			continue
		}
		name := c.Check
		if c.Agent != "" {
			name += " " + c.Agent
		}
		checks[name] = c
	}
	return checks, res
}

// TestDoctorServe: the serve check finds no server, a stale socket a dead
// one left (warn: it does not answer), and a live server (ok, with its
// state); none of these fails the doctor.
func TestDoctorServe(t *testing.T) {
	dir, err := os.MkdirTemp("", "xdg") // short: a socket path has 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	t.Setenv("XDG_RUNTIME_DIR", dir)
	sock := filepath.Join(dir, "outpost", "serve.sock")

	checks, res := doctorChecks(t)
	if c := checks["serve"]; c.Status != cli.DoctorInfo || !strings.Contains(c.Message, "no server at "+sock) {
		t.Errorf("no server: %+v", c)
	}
	if res.Failed != 0 || res.ExitCode != 0 {
		t.Errorf("result %+v, want no failure", res)
	}

	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	checks, _ = doctorChecks(t)
	if c := checks["serve"]; c.Status != cli.DoctorWarn || !strings.Contains(c.Message, "does not answer") || c.Fix == "" {
		t.Errorf("stale socket: %+v", c)
	}
	os.Remove(sock)

	srv, err := server.New(&server.Options{Store: conversation.NewFS(t.TempDir()), Workdir: t.TempDir(), PoolSize: -1, Version: "v-doctor"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err = net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln, nil)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		srv.Shutdown(ctx)
	})
	checks, _ = doctorChecks(t)
	if c := checks["serve"]; c.Status != cli.DoctorOK || !strings.Contains(c.Message, "outpost serve answers at "+sock) || !strings.Contains(c.Message, "v-doctor") {
		t.Errorf("live server: %+v", c)
	}
}

// TestDoctorDocker: with --sandbox docker an engine that does not answer
// fails the doctor (exit status 5, sandbox), with the fix; without, it
// only warns.
func TestDoctorDocker(t *testing.T) {
	t.Setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
	for _, v := range []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CONFIG_DIR"} {
		t.Setenv(v, "") // empty counts as unset
	}
	checks, res := doctorChecks(t)
	if c := checks["docker"]; c.Status != cli.DoctorWarn || c.Code != "sandbox" || !strings.Contains(c.Message, "no Docker Engine answers") || !strings.Contains(c.Fix, "DOCKER_HOST") {
		t.Errorf("docker, not asked for: %+v", c)
	}
	if res.ExitCode != 0 {
		t.Errorf("result %+v", res)
	}
	checks, res = doctorChecks(t, "--sandbox", "docker")
	if c := checks["docker"]; c.Status != cli.DoctorFail {
		t.Errorf("docker, asked for: %+v", c)
	}
	if res.Failed != 1 || res.ExitCode != 5 || res.Error == nil || res.Error.Code != "sandbox" {
		t.Errorf("result %+v, want one failure, exit status 5", res)
	}
	// On a sandbox that takes host files, the host's claude login counts.
	if c := checks["key claude"]; c.Status != cli.DoctorWarn {
		t.Errorf("key claude: %+v", c)
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	os.MkdirAll(filepath.Join(home, ".claude"), 0o700)
	os.WriteFile(filepath.Join(home, ".claude", ".credentials.json"), []byte(`{"claudeAiOauth":{}}`), 0o600)
	checks, _ = doctorChecks(t, "--sandbox", "docker", "--agent", "claude")
	if c := checks["key claude"]; c.Status != cli.DoctorOK || !strings.Contains(c.Message, ".credentials.json") {
		t.Errorf("key claude with a login file on docker: %+v", c)
	}
	checks, _ = doctorChecks(t, "--agent", "claude")
	if c := checks["key claude"]; c.Status != cli.DoctorFail || !strings.Contains(c.Fix, "is not copied into this sandbox") {
		t.Errorf("key claude with a login file on local: %+v", c)
	}
}
