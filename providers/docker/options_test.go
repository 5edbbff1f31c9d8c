package docker_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/docker/docker/api/types/mount"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox"
)

// TestBinaryCopy copies outpost's binary into the container (what a
// remote engine gets) of a read-only sandbox: it is root's and read-only
// to the sandbox's user, and runs as init, shim and echo agent.
func TestBinaryCopy(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	p := dockertest.Provider(t, dockertest.Busybox, func(o *docker.Options) {
		o.BinaryMode, o.ReadOnly = docker.BinaryCopy, true
	})
	l := lease(t, p, driver.Options{})
	ins, err := l.Sandbox().(*docker.Sandbox).Inspect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ins.HostConfig.Mounts {
		if m.Type == mount.TypeBind {
			t.Errorf("bind mount %+v with binary_mode=copy", m)
		}
	}
	if got := sh(t, l, "stat -c '%u %a' "+layout.BinaryPath+"; "+layout.BinaryPath+" echo-agent -- copied | grep -q 'copied (turn 1)' && echo ran"); got != "0 555\nran" {
		t.Errorf("copied binary: %q", got)
	}
}

// TestUserByName resolves user and group names through the image.
func TestUserByName(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	for user, want := range map[string]string{"agent": "1000 1000", "agent:nogroup": "1000 65534", "1000": "1000 1000"} {
		p := dockertest.Provider(t, dockertest.Busybox, func(o *docker.Options) { o.User = user })
		l := lease(t, p, driver.Options{})
		if got := sh(t, l, "id -u; id -g; stat -c '%u %g' $HOME | tr -d '\\n'"); !strings.HasSuffix(got, want) || !strings.HasPrefix(got, strings.ReplaceAll(want, " ", "\n")) {
			t.Errorf("user %q: ids and home owner %q, want %q", user, got, want)
		}
	}
	p := dockertest.Provider(t, dockertest.Busybox, func(o *docker.Options) { o.User = "nosuchuser" })
	if _, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir()}); outpost.CodeOf(err) != outpost.Sandbox || !strings.Contains(err.Error(), "nosuchuser") {
		t.Errorf("unknown user: %v", err)
	}
}

// TestPullNever fails clearly for an image the engine lacks.
func TestPullNever(t *testing.T) {
	t.Parallel()
	dockertest.Require(t)
	p := dockertest.Provider(t, "outpost/does-not-exist:never", func(o *docker.Options) { o.Pull = docker.PullNever })
	_, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir()})
	if !errors.Is(err, docker.ErrImage) || !strings.Contains(err.Error(), "outpost/does-not-exist:never") {
		t.Errorf("Acquire: %v, want ErrImage naming the image", err)
	}
}
