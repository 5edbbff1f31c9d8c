package docker_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox/driver"
)

// TestSetupFallback: with the in-sandbox binary of an older outpost,
// whose init neither serves nor sets up, the container (made for a setup:
// root init) is laid out by the archive once it runs, every process is an
// exec as the sandbox's user, and the workspace goes in and back.
func TestSetupFallback(t *testing.T) {
	dockertest.Require(t, dockertest.Busybox)
	docker.SetServeWait(t, 2*time.Second)
	realDir := t.TempDir()
	b, err := os.ReadFile(dockertest.Binary(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(realDir, "outpost-sandbox"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	old := testenv.GoBuild(t, "./providers/docker/testdata/oldinit")
	p := dockertest.Provider(t, dockertest.Busybox, func(o *docker.Options) { o.Binary = old })
	dir := workdir(t)
	if err := os.WriteFile(filepath.Join(dir, "f.txt"), []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l := lease(t, p, driver.Options{Workdir: dir, Mounts: []driver.Mount{{Source: realDir, Target: "/opt/outpost-real"}}})
	sb := l.Sandbox().(*docker.Sandbox)
	if docker.Serving(sb) {
		t.Fatal("an older init serves")
	}
	if err := sb.Degraded(); err == nil || !strings.Contains(err.Error(), "no hello from the init") {
		t.Errorf("Degraded with an older init: %v, want why it does not serve", err)
	}
	env := fullEnv(l)
	env["PATH"] = "/outpost/bin:/bin"
	res, err := l.Exec(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", `id -u; id -g; grep '^CapEff:' /proc/self/status; stat -c '%u:%g %a' $HOME /workspace/f.txt; cat f.txt; echo changed > f.txt`}, Env: env}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	want := "1000\n1000\nCapEff:\t0000000000000000\n1000:1000 700\n1000:1000 644\nhost\n"
	if string(res.Stdout) != want || res.Status.Code != 0 {
		t.Errorf("stdout %q, stderr %q, status %+v; want %q", res.Stdout, res.Stderr, res.Status, want)
	}
	if docker.Puts(sb) == 0 || docker.Execs(sb) == 0 {
		t.Errorf("%d archives in, %d execs: want the archive and execs", docker.Puts(sb), docker.Execs(sb))
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f.txt")); string(b) != "changed\n" {
		t.Errorf("host's f.txt %q after release", b)
	}
}
