package docker_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"

	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// TestMain runs four tests at a time (testenv.DefaultParallel; -parallel
// sets another number): they mostly wait on the Docker Engine, the four
// conformance suites (copy, bind, exec, warm) the longest.
func TestMain(m *testing.M) {
	echo.MaybeRun()
	testenv.DefaultParallel(4)
	dockertest.Main(m)
}

// TestConformance runs the provider conformance suite on the busybox
// image (the suite's programs are shell scripts), in both workspace modes.
func TestConformance(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	for _, mode := range []docker.WorkspaceMode{docker.Copy, docker.Bind} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			sandboxtest.RunConformanceTests(t, sandboxtest.Harness{
				NewProvider: func(t *testing.T) driver.Provider {
					return dockertest.Provider(t, dockertest.Busybox, func(o *docker.Options) { o.Workspace = mode })
				},
				Options: func(t *testing.T) driver.Options {
					return driver.Options{Workdir: workdir(t)}
				},
				Vanish: func(t *testing.T, l *sandbox.Lease) {
					cid := l.Sandbox().(*docker.Sandbox).ContainerID()
					if err := dockertest.Client(t).ContainerRemove(t.Context(), cid, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
						t.Fatal(err)
					}
				},
			})
		})
	}
}

// workdir is a temporary directory owned by the sandbox's default user
// when the tests run as root (a bind-mounted workspace's user is its
// owner, and root's would be refused), as a developer's own is.
func workdir(t *testing.T) string {
	d := t.TempDir()
	if os.Getuid() == 0 {
		if err := os.Chown(d, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// lease acquires a sandbox and releases it when the test ends.
func lease(t *testing.T, p driver.Provider, opts driver.Options) *sandbox.Lease {
	t.Helper()
	if opts.Workdir == "" {
		opts.Workdir = t.TempDir()
	}
	l, err := sandbox.Acquire(t.Context(), p, opts)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

func TestNoEngine(t *testing.T) {
	t.Parallel()
	p, err := docker.New(&docker.Options{Host: "unix://" + t.TempDir() + "/no-docker.sock", Binary: "/nonexistent"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir()})
	if outpost.CodeOf(err) != outpost.Sandbox {
		t.Fatalf("code %q, want sandbox (%v)", outpost.CodeOf(err), err)
	}
	if !errors.Is(err, docker.ErrNoEngine) {
		t.Errorf("error does not wrap ErrNoEngine: %v", err)
	}
	if !strings.Contains(err.Error(), "scripts/docker-up.sh") || !strings.Contains(err.Error(), "no-docker.sock") {
		t.Errorf("error does not say where it looked and how to fix it: %v", err)
	}
}

func TestParseSettings(t *testing.T) {
	t.Parallel()
	o, err := docker.ParseSettings(map[string]string{
		"image": "x:1", "network": "none", "user": "1:2", "memory": "512m", "cpu": "1.5", "pids": "none",
		"readonly": "true", "workspace": "bind", "pull": "never", "binary_mode": "copy", "spares": "2",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := docker.Options{Image: "x:1", Network: "none", User: "1:2", Memory: 512 << 20, CPU: 1.5, Pids: -1, ReadOnly: true, Workspace: docker.Bind, Pull: docker.PullNever, BinaryMode: docker.BinaryCopy, Spares: 2}
	if *o != want {
		t.Errorf("got %+v\nwant %+v", *o, want)
	}
	for _, bad := range []map[string]string{{"colour": "red"}, {"memory": "lots"}, {"cpu": "-2"}, {"pids": "0"}, {"readonly": "perhaps"}, {"spares": "0"}, {"spares": "many"}} {
		if _, err := docker.ParseSettings(bad); err == nil {
			t.Errorf("ParseSettings(%v) succeeded", bad)
		}
	}
	if o, err := docker.ParseSettings(map[string]string{"spares": "none"}); err != nil || o.Spares != -1 {
		t.Errorf("spares none: %+v, %v", o, err)
	}
	for _, bad := range []docker.Options{{Workspace: "nfs"}, {Pull: "sometimes"}, {BinaryMode: "scp"}} {
		if _, err := docker.New(&bad); err == nil {
			t.Errorf("New(%+v) succeeded", bad)
		}
	}
	if _, err := sandbox.Open("docker", map[string]string{"image": dockertest.Busybox}); err != nil {
		t.Errorf("sandbox.Open(docker): %v", err)
	}
}

func TestMain_binaryIsStatic(t *testing.T) {
	t.Parallel()
	if fi, err := os.Stat(dockertest.Binary(t)); err != nil || fi.Size() == 0 {
		t.Fatalf("no binary: %v", err)
	}
}
