package docker_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/volume"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation/storetest"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox"
)

// TestExitStatuses: exit codes are values, deaths by signal are named,
// and 128+n from a program that simply exited is not mistaken for one.
func TestExitStatuses(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	l := lease(t, dockertest.Provider(t, dockertest.Busybox), driver.Options{})
	for script, want := range map[string]harness.ExitStatus{
		"exit 0":        {Code: 0},
		"exit 3":        {Code: 3},
		"exit 137":      {Code: 137},
		"kill -TERM $$": {Code: -1, Signal: "terminated"},
		"kill -KILL $$": {Code: -1, Signal: "killed"},
	} {
		if got := shStatus(t, l, script).Status; got != want {
			t.Errorf("%q: status %+v, want %+v", script, got, want)
		}
	}
	env := l.Environment().Defaults
	_, err := l.Start(t.Context(), driver.ExecRequest{Path: "no-such-program", Env: env})
	if !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("Start of a missing program: %v, want exec.ErrNotFound", err)
	}
	_, err = l.Start(t.Context(), driver.ExecRequest{Path: "/bin/true", Env: env, Dir: "/no/such/dir"})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Start in a missing directory: %v, want fs.ErrNotExist", err)
	}
}

// TestMinimalImage runs an echo turn in the default image, which has no
// shell: outpost's own binary is the agent, and lookups need no shell.
func TestMinimalImage(t *testing.T) {
	t.Parallel()
	dockertest.Require(t)
	p := dockertest.Provider(t, "")
	store := storetest.NewMemory()
	wd := t.TempDir()
	res, err := engine.Run(t.Context(), engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: echo.Harness()}, Prompt: "hello", Workdir: wd},
		&engine.RunOptions{Provider: p, Store: store, Environ: []string{}})
	if err != nil {
		t.Fatalf("echo turn in %s: %v", docker.MinimalImage, err)
	}
	if !strings.Contains(res.Text, "hello (turn 1)") || res.Sandbox != "docker" {
		t.Errorf("result %+v", res)
	}
	l := lease(t, p, driver.Options{Workdir: wd})
	if got, err := l.LookPath(t.Context(), "outpost"); err != nil || got != layout.BinaryPath {
		t.Errorf("LookPath(outpost) = %q, %v", got, err)
	}
	if _, err := l.LookPath(t.Context(), "sh"); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("LookPath(sh) in an image without a shell: %v", err)
	}
}

// TestVanishedDuringTurn removes the container while an echo turn runs:
// the turn ends with code sandbox and details.vanished, and the release
// says the workspace's changes are lost.
func TestVanishedDuringTurn(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	cli := dockertest.Client(t)
	p := dockertest.Provider(t, dockertest.Busybox)
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	cid := l.Sandbox().(*docker.Sandbox).ContainerID()
	var once sync.Once
	_, err = engine.Run(t.Context(), engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: echo.Harness()}, Prompt: "#slow=100000"}, &engine.RunOptions{
		Lease: l, Store: storetest.NewMemory(), Environ: []string{},
		OnEvent: func(ev harness.Event) {
			if ev.Type == harness.EventMessage && ev.Delta {
				once.Do(func() {
					if err := cli.ContainerRemove(context.Background(), cid, container.RemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
						t.Errorf("removing the container: %v", err)
					}
				})
			}
		},
	})
	if outpost.CodeOf(err) != outpost.Sandbox {
		t.Fatalf("code %q, want sandbox (%v)", outpost.CodeOf(err), err)
	}
	var oe *outpost.Error
	if !errors.As(err, &oe) || oe.Details["vanished"] != true {
		t.Errorf("details %v lack vanished (%v)", oe.Details, err)
	}
	if !l.Vanished(t.Context()) {
		t.Error("Lease.Vanished is false")
	}
	// The next turn on the lease fails the same way, before its agent runs.
	_, err = engine.Run(t.Context(), engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: echo.Harness()}, Prompt: "next"}, &engine.RunOptions{
		Lease: l, Store: storetest.NewMemory(), Environ: []string{}})
	if !errors.As(err, &oe) || oe.Code != outpost.Sandbox || oe.Details["vanished"] != true {
		t.Errorf("a turn on a vanished lease: %v (details %v)", err, oe.Details)
	}
	if err := l.Close(context.Background()); !errors.Is(err, driver.ErrVanished) {
		t.Errorf("Close: %v, want ErrVanished", err)
	}
}

// owned creates a stopped outpost-labelled container with owner labels,
// removed when the test ends.
func owned(t *testing.T, lease string, owner map[string]string) string {
	t.Helper()
	cli := dockertest.Client(t)
	labels := map[string]string{docker.LabelLease: lease, docker.LabelCreated: "2026-01-01T00:00:00Z"}
	for k, v := range owner {
		labels[k] = v
	}
	c, err := cli.ContainerCreate(t.Context(), &container.Config{Image: dockertest.Busybox, Cmd: []string{"true"}, Labels: labels}, nil, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cli.ContainerRemove(context.Background(), c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
	})
	return c.ID
}

func exists(t *testing.T, id string) bool {
	_, err := dockertest.Client(t).ContainerInspect(t.Context(), id)
	if err != nil && !errdefs.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func deadPID(t *testing.T) string {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(cmd.Process.Pid)
}

// TestLiveness judges owners from their labels alone.
func TestLiveness(t *testing.T) {
	t.Parallel()
	me := docker.Self()
	dead, _ := strconv.Atoi(deadPID(t))
	for _, c := range []struct {
		name  string
		owner docker.Owner
		want  docker.Liveness
	}{
		{"me", me, docker.Alive},
		{"dead pid", docker.Owner{PID: dead, Start: 1, Boot: me.Boot, PidNS: me.PidNS, Host: me.Host}, docker.Dead},
		{"reused pid", docker.Owner{PID: me.PID, Start: me.Start + 1, Boot: me.Boot, PidNS: me.PidNS, Host: me.Host}, docker.Dead},
		{"rebooted", docker.Owner{PID: me.PID, Start: me.Start, Boot: "old-boot", PidNS: me.PidNS, Host: me.Host}, docker.Dead},
		{"other machine", docker.Owner{PID: 1, Boot: "other-boot", Host: "elsewhere"}, docker.Unknown},
		{"other pid namespace", docker.Owner{PID: 1, Boot: me.Boot, PidNS: "pid:[1]", Host: me.Host}, docker.Unknown},
		{"no labels", docker.Owner{}, docker.Unknown},
	} {
		if got := c.owner.Liveness(); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// TestGC checks which owners count as dead, that a dry run removes
// nothing, that GC removes the dead owners' containers and dangling
// outpost volumes, and that a provider's first Open sweeps too.
func TestGC(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	me := docker.Self()
	here := func(pid, start string) map[string]string {
		return map[string]string{docker.LabelOwnerPID: pid, docker.LabelOwnerStart: start, docker.LabelOwnerBoot: me.Boot, docker.LabelOwnerPidNS: me.PidNS, docker.LabelOwnerHost: me.Host}
	}
	myStart := strconv.FormatUint(me.Start, 10)
	dead := owned(t, "outpost-gcdead00001", here(deadPID(t), "1"))
	reused := owned(t, "outpost-gcreused001", here(strconv.Itoa(os.Getpid()), "12345")) // our pid, another start time
	rebooted := owned(t, "outpost-gcreboot001", map[string]string{docker.LabelOwnerPID: "1", docker.LabelOwnerBoot: "another-boot", docker.LabelOwnerHost: me.Host})
	alive := owned(t, "outpost-gcalive0001", here(strconv.Itoa(os.Getpid()), myStart))
	foreign := owned(t, "outpost-gcforeign01", map[string]string{docker.LabelOwnerPID: "1", docker.LabelOwnerBoot: "another-boot", docker.LabelOwnerHost: "another-host"})
	otherNS := owned(t, "outpost-gcotherns01", map[string]string{docker.LabelOwnerPID: "1", docker.LabelOwnerBoot: me.Boot, docker.LabelOwnerPidNS: "pid:[1]", docker.LabelOwnerHost: me.Host})

	cli := dockertest.Client(t)
	vol, err := cli.VolumeCreate(t.Context(), volume.CreateOptions{Labels: map[string]string{docker.LabelLease: "outpost-gcvolume001"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.VolumeRemove(context.Background(), vol.Name, true) })

	p := dockertest.Provider(t, dockertest.Busybox)
	rep, err := p.GC(t.Context(), docker.GCOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, c := range rep.Containers {
		listed = append(listed, c.Container)
		if c.Removed {
			t.Errorf("dry run removed %s", c.Lease)
		}
	}
	for _, id := range []string{dead, reused, rebooted} {
		// Another test process's sweep may have removed it already.
		if !slices.Contains(listed, id) && exists(t, id) {
			t.Errorf("dry run does not list %s", id)
		}
	}
	for _, id := range []string{alive, foreign, otherNS} {
		if slices.Contains(listed, id) {
			t.Errorf("dry run lists %s, whose owner is alive or unknown", id)
		}
	}
	if _, err := cli.VolumeInspect(t.Context(), vol.Name); err == nil && !slices.Contains(rep.Volumes, vol.Name) {
		t.Errorf("dry run: volumes %v lack the dangling %s", rep.Volumes, vol.Name)
	}

	if _, err := p.GC(t.Context(), docker.GCOptions{}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]bool{dead: false, reused: false, rebooted: false, alive: true, foreign: true, otherNS: true} {
		if got := exists(t, id); got != want {
			t.Errorf("container %s exists: %v, want %v", id[:12], got, want)
		}
	}
	if _, err := cli.VolumeInspect(t.Context(), vol.Name); !errdefs.IsNotFound(err) {
		t.Errorf("dangling outpost volume not removed: %v", err)
	}

	// A new provider's first lease sweeps.
	orphan := owned(t, "outpost-gcsweep0001", here(deadPID(t), "1"))
	lease(t, dockertest.Provider(t, dockertest.Busybox), driver.Options{})
	if exists(t, orphan) {
		t.Error("the first lease of a provider did not sweep a dead owner's container")
	}
}
