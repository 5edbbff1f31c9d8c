package docker_test

import (
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/docker/docker/api/types/mount"

	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox"
)

// sh runs a shell command in the lease (busybox image) and returns its
// stdout; it fails the test unless the command exits 0.
func sh(t *testing.T, l *sandbox.Lease, script string) string {
	t.Helper()
	res := shStatus(t, l, script)
	if !res.Status.Success() {
		t.Fatalf("%q: status %+v, stderr %q", script, res.Status, res.Stderr)
	}
	return strings.TrimSpace(string(res.Stdout))
}

func shStatus(t *testing.T, l *sandbox.Lease, script string) sandbox.ExecResult {
	t.Helper()
	env := map[string]string{}
	for k, v := range l.Environment().Defaults {
		env[k] = v
	}
	for k, v := range l.Environment().Fixed {
		env[k] = v
	}
	res, err := l.Exec(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", script}, Env: env}, 1<<20)
	if err != nil {
		t.Fatalf("%q: %v", script, err)
	}
	return res
}

// TestHardeningDefaults checks, by inspecting the container and from
// inside it, that every hardening default is in effect.
func TestHardeningDefaults(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	p := dockertest.Provider(t, dockertest.Busybox)
	before := time.Now().Add(-time.Second)
	l := lease(t, p, driver.Options{Labels: map[string]string{"example.com/team": "infra"}})
	sb := l.Sandbox().(*docker.Sandbox)
	ins, err := sb.Inspect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	hc, cfg := ins.HostConfig, ins.Config
	// The init starts as root with the three capabilities of its setup,
	// and is the user with none once the lease is open (below).
	if cfg.User != "0:0" || !slices.Contains(cfg.Entrypoint, shim.SetupFlag) {
		t.Errorf("user %q, entrypoint %q: want the init's setup as root", cfg.User, cfg.Entrypoint)
	}
	if !slices.Equal(hc.CapDrop, []string{"ALL"}) || !slices.Equal(hc.CapAdd, []string{"CAP_CHOWN", "CAP_SETGID", "CAP_SETUID"}) || hc.Privileged {
		t.Errorf("capabilities: drop %v, add %v, privileged %v", hc.CapDrop, hc.CapAdd, hc.Privileged)
	}
	if !slices.Contains(hc.SecurityOpt, "no-new-privileges:true") {
		t.Errorf("security options %v lack no-new-privileges", hc.SecurityOpt)
	}
	if hc.PidsLimit == nil || *hc.PidsLimit != docker.DefaultPids {
		t.Errorf("pids limit %v, want %d", hc.PidsLimit, docker.DefaultPids)
	}
	if hc.Memory != docker.DefaultMemory || hc.MemorySwap != docker.DefaultMemory {
		t.Errorf("memory %d swap %d, want %d for both", hc.Memory, hc.MemorySwap, docker.DefaultMemory)
	}
	if want := int64(min(docker.DefaultCPU, float64(runtime.NumCPU())) * 1e9); hc.NanoCPUs != want {
		t.Errorf("NanoCPUs %d, want %d", hc.NanoCPUs, want)
	}
	if hc.NetworkMode != docker.DefaultNetwork {
		t.Errorf("network %q, want %q", hc.NetworkMode, docker.DefaultNetwork)
	}
	if !slices.Contains(hc.ExtraHosts, "host.docker.internal:host-gateway") {
		t.Errorf("extra hosts %v lack host.docker.internal", hc.ExtraHosts)
	}
	if hc.ReadonlyRootfs {
		t.Error("root filesystem is read-only by default")
	}
	if hc.LogConfig.Type != "none" {
		t.Errorf("log driver %q", hc.LogConfig.Type)
	}
	if len(cfg.Entrypoint) < 3 || cfg.Entrypoint[0] != layout.BinaryPath || cfg.Entrypoint[2] != "init" {
		t.Errorf("entrypoint %v", cfg.Entrypoint)
	}
	mounts := map[string]mount.Mount{}
	for _, m := range hc.Mounts {
		mounts[m.Target] = m
	}
	if m := mounts[layout.StateDir]; m.Type != mount.TypeVolume {
		t.Errorf("%s is %+v, want a volume", layout.StateDir, m)
	}
	if m := mounts[layout.BinaryPath]; m.Type != mount.TypeBind || !m.ReadOnly {
		t.Errorf("%s is %+v, want a read-only bind mount", layout.BinaryPath, m)
	}
	if m := mounts[layout.Workspace]; m.Type != mount.TypeVolume {
		t.Errorf("%s is %+v, want a volume (copy mode)", layout.Workspace, m)
	}
	lb := cfg.Labels
	want := map[string]string{
		docker.LabelLease:     sb.ID(),
		docker.LabelOwnerPID:  strconv.Itoa(os.Getpid()),
		docker.LabelWorkspace: "copy",
		"example.com/team":    "infra",
	}
	for k, v := range want {
		if lb[k] != v {
			t.Errorf("label %s = %q, want %q", k, lb[k], v)
		}
	}
	for _, k := range []string{docker.LabelOwnerStart, docker.LabelOwnerBoot, docker.LabelOwnerPidNS, docker.LabelOwnerHost, docker.LabelVersion} {
		if lb[k] == "" {
			t.Errorf("label %s is empty", k)
		}
	}
	if c, err := time.Parse(time.RFC3339Nano, lb[docker.LabelCreated]); err != nil || c.Before(before) {
		t.Errorf("label %s = %q", docker.LabelCreated, lb[docker.LabelCreated])
	}
	if ins.Name != "/"+sb.ID() {
		t.Errorf("container name %q, want /%s", ins.Name, sb.ID())
	}

	// From inside.
	if got := sh(t, l, "id -u; id -g"); got != "1000\n1000" {
		t.Errorf("id: %q", got)
	}
	for _, proc := range []string{"self", "1"} {
		status := sh(t, l, "grep -E '^(Uid|CapEff|CapPrm|CapInh|CapAmb|NoNewPrivs):' /proc/"+proc+"/status")
		for _, want := range []string{"Uid:\t1000\t1000\t1000\t1000", "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapInh:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1"} {
			if !strings.Contains(status, want) {
				t.Errorf("/proc/%s/status lacks %q:\n%s", proc, want, status)
			}
		}
	}
	// Root's files stay out of the user's reach: no capability lets it
	// write or own them.
	if res := shStatus(t, l, "chown 1000 /outpost/bin || touch /etc/outpost-test || su -c true"); res.Status.Success() {
		t.Errorf("the sandbox's user acted as root: %s", res.Stdout)
	}
	if got := sh(t, l, "stat -c '%u %a' $HOME $TMPDIR; stat -c %u /workspace"); got != "1000 700\n1000 700\n1000" {
		t.Errorf("home, tmp and workspace owners and modes:\n%s", got)
	}
	if res := shStatus(t, l, "touch /outpost/bin/outpost"); res.Status.Success() {
		t.Error("the sandbox's user can write outpost's binary")
	}
}

// TestHardeningSettings checks that the limits, user, network and
// read-only root are what the settings say, and that a read-only sandbox
// still has a writable home, workspace and /tmp (with exec).
func TestHardeningSettings(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	settings := map[string]string{"network": "none", "readonly": "true", "memory": "256m", "cpu": "0.5", "pids": "64", "user": "1234:1234"}
	o, err := docker.ParseSettings(settings)
	if err != nil {
		t.Fatal(err)
	}
	p := dockertest.Provider(t, dockertest.Busybox, func(d *docker.Options) {
		bin := d.Binary
		*d = *o
		d.Image, d.Binary = dockertest.Busybox, bin
	})
	l := lease(t, p, driver.Options{})
	ins, err := l.Sandbox().(*docker.Sandbox).Inspect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	hc := ins.HostConfig
	if hc.NetworkMode != "none" || len(hc.ExtraHosts) != 0 {
		t.Errorf("network %q, extra hosts %v", hc.NetworkMode, hc.ExtraHosts)
	}
	if !hc.ReadonlyRootfs {
		t.Error("root filesystem is writable")
	}
	if !strings.Contains(hc.Tmpfs["/tmp"], "exec") || strings.Contains(hc.Tmpfs["/tmp"], "noexec") {
		t.Errorf("/tmp tmpfs options %q", hc.Tmpfs["/tmp"])
	}
	if hc.Memory != 256<<20 || hc.NanoCPUs != 5e8 || hc.PidsLimit == nil || *hc.PidsLimit != 64 {
		t.Errorf("memory %d, NanoCPUs %d, pids %v", hc.Memory, hc.NanoCPUs, hc.PidsLimit)
	}
	// The init set the sandbox up as root, and is the user since.
	if ins.Config.User != "0:0" {
		t.Errorf("user %q", ins.Config.User)
	}
	if got := sh(t, l, "id -u; grep ^Uid: /proc/1/status"); got != "1234\nUid:\t1234\t1234\t1234\t1234" {
		t.Errorf("id -u and the init's: %q", got)
	}
	if got := sh(t, l, "ls /sys/class/net"); got != "lo" {
		t.Errorf("network interfaces with network=none: %q", got)
	}
	if res := shStatus(t, l, "touch /etc/outpost-test"); res.Status.Success() {
		t.Error("wrote to the read-only root filesystem")
	}
	script := `set -e
echo home > $HOME/f; echo ws > /workspace/f; cat $HOME/f /workspace/f
printf '#!/bin/sh\necho tmp-exec\n' > /tmp/s; chmod +x /tmp/s; /tmp/s`
	if got := sh(t, l, script); got != "home\nws\ntmp-exec" {
		t.Errorf("writable places of a read-only sandbox: %q", got)
	}
}
