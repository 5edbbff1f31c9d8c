package local_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/providers/local"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// TestConformance runs the suite on both isolation modes. Isolated, the
// leases cut their network (egress gateway) and each has a tunnel open
// from the start, as the engine's turns do: every process runs behind the
// forwarder; the suite's tunnel client (outpost's in-sandbox binary) is on
// the PATH; the root is deep (a socket beside the homes was refused).
func TestConformance(t *testing.T) {
	t.Run("none", func(t *testing.T) {
		sandboxtest.RunConformanceTests(t, sandboxtest.Harness{
			NewProvider: func(t *testing.T) driver.Provider {
				return local.New(&local.Options{BaseDir: t.TempDir(), Isolation: "none"})
			},
		})
	})
	t.Run("namespaces", func(t *testing.T) {
		needBwrap(t)
		bin := tunnelClientDir(t)
		sandboxtest.RunConformanceTests(t, sandboxtest.Harness{
			NewProvider: func(t *testing.T) driver.Provider {
				// A root too deep for the tunnels' sockets beside the
				// homes: they go to a short directory of the lease's.
				deep := filepath.Join(t.TempDir(), strings.Repeat("d", 80))
				return tunnelFirst{local.New(&local.Options{BaseDir: deep, Isolation: "namespaces", Environ: []string{"PATH=" + bin + ":/usr/bin:/bin"}})}
			},
			Options: func(t *testing.T) driver.Options {
				return driver.Options{Workdir: t.TempDir(), Egress: driver.EgressGateway}
			},
		})
	})
}

// TestConformanceBusybox runs the suite's shell programs with busybox's
// sh and applets alone on PATH, as the docker provider's busybox image
// does.
func TestConformanceBusybox(t *testing.T) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Skip("busybox is not installed: the suite's scripts are not checked against busybox sh")
	}
	bin := t.TempDir()
	for _, applet := range []string{"sh", "cat", "sleep", "head", "tr", "stat"} {
		if err := os.Symlink(bb, filepath.Join(bin, applet)); err != nil {
			t.Fatal(err)
		}
	}
	sandboxtest.RunConformanceTests(t, sandboxtest.Harness{
		NewProvider: func(t *testing.T) driver.Provider {
			return local.New(&local.Options{BaseDir: t.TempDir(), Environ: []string{"PATH=" + bin}})
		},
		Command: func(p sandboxtest.Program, args ...string) driver.ExecRequest {
			req := sandboxtest.Shell(p, args...)
			req.Path = filepath.Join(bin, "sh")
			return req
		},
	})
}

func acquire(t *testing.T, p driver.Provider) *sandbox.Lease {
	t.Helper()
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir()})
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l
}

func env(l *sandbox.Lease) map[string]string {
	m := map[string]string{}
	for k, v := range l.Environment().Defaults {
		m[k] = v
	}
	for k, v := range l.Environment().Fixed {
		m[k] = v
	}
	return m
}

func TestRegistry(t *testing.T) {
	base := t.TempDir()
	p, err := sandbox.Open("local", map[string]string{"root": base})
	if err != nil {
		t.Fatal(err)
	}
	l := acquire(t, p)
	if !strings.HasPrefix(l.Home(), base+string(filepath.Separator)) {
		t.Errorf("home %s is not under the root setting %s", l.Home(), base)
	}
	if _, err := sandbox.Open("local", map[string]string{"image": "x"}); err == nil {
		t.Error("an unknown setting was accepted")
	}
}

func TestCapabilities(t *testing.T) {
	want := driver.Capabilities{HostFiles: false, Isolated: false, Stdin: true, Persistent: true, FixedEnv: driver.HomeVars(), Isolation: "none"}
	if diff := cmp.Diff(want, local.New(&local.Options{Isolation: "none"}).Capabilities()); diff != "" {
		t.Errorf("capabilities (-want +got):\n%s", diff)
	}
	// In namespaces, egress gateway is enforced.
	if _, err := exec.LookPath("bwrap"); err == nil {
		want.Egress, want.Isolation = true, "namespaces"
		if diff := cmp.Diff(want, local.New(&local.Options{Isolation: "namespaces"}).Capabilities()); diff != "" {
			t.Errorf("capabilities isolated (-want +got):\n%s", diff)
		}
	}
}

// TestHome checks that a lease's home is private, under the base
// directory, and removed on Close.
func TestHome(t *testing.T) {
	base := t.TempDir()
	l, err := sandbox.Acquire(t.Context(), local.New(&local.Options{BaseDir: base}), driver.Options{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	home := l.Home()
	rel, err := filepath.Rel(base, home)
	if err != nil || strings.HasPrefix(rel, "..") {
		t.Fatalf("home %s is not under the base %s", home, base)
	}
	leaseDir := filepath.Join(base, strings.Split(rel, string(filepath.Separator))[0])
	for _, d := range []string{leaseDir, home} {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o700 {
			t.Errorf("%s has mode %v, want 0700", d, fi.Mode().Perm())
		}
	}
	// Files the agent made read-only must not stop the release.
	ro := filepath.Join(home, "ro")
	if err := os.MkdirAll(filepath.Join(ro, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ro, "d", "f"), []byte("x"), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(ro, "d"), 0o500); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(leaseDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the lease directory survives Close: %v", err)
	}
}

// TestFixedEnv checks that HOME, the XDG directories and TMPDIR point
// inside the home, and that HOME and TMPDIR exist (programs create the XDG
// directories they use, as on a fresh account).
func TestFixedEnv(t *testing.T) {
	l := acquire(t, local.New(&local.Options{BaseDir: t.TempDir()}))
	fixed := l.Environment().Fixed
	var names []string
	for k, v := range fixed {
		names = append(names, k)
		if v != l.Home() && !strings.HasPrefix(v, l.Home()+"/") {
			t.Errorf("%s=%s is outside the home %s", k, v, l.Home())
		}
		if k != "HOME" && k != "TMPDIR" {
			continue
		}
		if fi, err := os.Stat(v); err != nil || !fi.IsDir() {
			t.Errorf("%s=%s is not a directory: %v", k, v, err)
		}
	}
	slices.Sort(names)
	want := slices.Sorted(slices.Values(driver.HomeVars()))
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("fixed names (-want +got):\n%s", diff)
	}
}

// TestAllowlist checks that only the allowlisted host variables reach a
// process.
func TestAllowlist(t *testing.T) {
	t.Setenv("OUTPOST_TEST_SECRET", "s3cret")
	t.Setenv("TZ", "Europe/Paris")
	l := acquire(t, local.New(&local.Options{BaseDir: t.TempDir()})) // reads os.Environ
	defaults := l.Environment().Defaults
	if _, ok := defaults["OUTPOST_TEST_SECRET"]; ok {
		t.Error("a host variable outside the allowlist is a default")
	}
	if defaults["PATH"] != os.Getenv("PATH") || defaults["TZ"] != "Europe/Paris" {
		t.Errorf("allowlisted host variables: PATH=%q TZ=%q, want the host's", defaults["PATH"], defaults["TZ"])
	}
	res, err := l.Exec(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", "env"}, Env: env(l)}, 0)
	if err != nil || !res.Status.Success() {
		t.Fatalf("env: %v, %+v, %s", err, res.Status, res.Stderr)
	}
	seen := map[string]string{}
	for _, kv := range strings.Split(string(res.Stdout), "\n") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			seen[k] = v
		}
	}
	if _, ok := seen["OUTPOST_TEST_SECRET"]; ok {
		t.Error("the process sees OUTPOST_TEST_SECRET")
	}
	if seen["PATH"] != os.Getenv("PATH") || seen["HOME"] != l.Home() {
		t.Errorf("the process sees PATH=%q HOME=%q", seen["PATH"], seen["HOME"])
	}

	// An explicit host environment: host values of fixed names are
	// ignored, a missing PATH gets a default.
	p := local.New(&local.Options{BaseDir: t.TempDir(), Environ: []string{
		"LANG=C.UTF-8", "AWS_SECRET_ACCESS_KEY=k", "HOME=/root", "XDG_CONFIG_HOME=/root/.config", "TERM=xterm", "malformed",
	}})
	l = acquire(t, p)
	want := map[string]string{"LANG": "C.UTF-8", "TERM": "xterm", "PATH": "/usr/local/bin:/usr/bin:/bin"}
	if diff := cmp.Diff(want, l.Environment().Defaults); diff != "" {
		t.Errorf("defaults from an explicit environment (-want +got):\n%s", diff)
	}
	if got := l.Environment().Fixed["XDG_CONFIG_HOME"]; !strings.HasPrefix(got, l.Home()) {
		t.Errorf("XDG_CONFIG_HOME=%s comes from the host", got)
	}
}

// procStat is what the test reads of /proc/PID/stat.
type procStat struct {
	state      byte
	ppid, pgrp int
	flags      uint64
}

// pfExiting is the kernel's PF_EXITING task flag: set when a process
// starts dying, before it closes its files.
const pfExiting = 0x4

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if i < 0 || len(f) < 7 {
		return procStat{}, fmt.Errorf("malformed /proc/%d/stat: %q", pid, s)
	}
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	flags, _ := strconv.ParseUint(f[6], 10, 64)
	return procStat{state: f[0][0], ppid: ppid, pgrp: pgrp, flags: flags}, nil
}

// TestProcessGroupKill spawns a background grandchild, lets its parent
// exit, kills the group and checks in /proc that the grandchild is gone.
func TestProcessGroupKill(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	l := acquire(t, local.New(&local.Options{BaseDir: t.TempDir(), Isolation: "none"}))
	req := sandboxtest.Shell(sandboxtest.Spawn)
	req.Env = env(l)
	p, err := l.Start(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Signal(driver.Kill); p.Close() })
	go io.Copy(io.Discard, p.Stderr())
	out := bufio.NewReader(p.Stdout())
	line, err := out.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("Spawn printed %q, not a pid", line)
	}
	st, err := readProcStat(child)
	if err != nil {
		t.Fatalf("the grandchild: %v", err)
	}
	if st.state == 'Z' || st.pgrp == child || st.pgrp == syscall.Getpgrp() {
		t.Fatalf("the grandchild %d: state %c, group %d; want it running in its parent's group", child, st.state, st.pgrp)
	}
	if status, err := p.Wait(); err != nil || !status.Success() {
		t.Fatalf("the parent: %+v, %v", status, err)
	}
	if st, err := readProcStat(child); err != nil || st.state == 'Z' {
		t.Fatalf("the grandchild died with its parent (%v): the test proves nothing", err)
	}
	if err := p.Signal(driver.Kill); err != nil {
		t.Fatalf("Signal(Kill): %v", err)
	}
	// The grandchild holds stdout: its end means the grandchild has closed
	// its files, which it does only while dying.
	if _, err := io.ReadAll(out); err != nil {
		t.Fatal(err)
	}
	st, err = readProcStat(child)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		t.Fatal(err)
	case st.state != 'Z' && st.state != 'X' && st.flags&pfExiting == 0:
		t.Errorf("the grandchild %d is still alive after the group was killed: state %c", child, st.state)
	}
}

// TestOrphanSweep checks that the first Open of a provider removes the
// lease directories of processes that died without releasing them, and
// only those.
func TestOrphanSweep(t *testing.T) {
	base := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(name, owner string) string {
		t.Helper()
		dir := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Join(dir, "home", ".config"), 0o700); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(owner), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	deadOwner := mk("local-00000000dead", fmt.Sprintf("%d 0\n", dead.Process.Pid))
	reused := mk("local-0000000reuse", fmt.Sprintf("%d 1\n", os.Getpid())) // our pid, another start time
	live := mk("local-00000000live", fmt.Sprintf("%d 0\n", os.Getpid()))
	creating := mk("local-0000creating", "")
	unrelated := mk("unrelated", fmt.Sprintf("%d 0\n", dead.Process.Pid))

	acquire(t, local.New(&local.Options{BaseDir: base}))
	for dir, wantGone := range map[string]bool{deadOwner: true, reused: true, live: false, creating: false, unrelated: false} {
		_, err := os.Stat(dir)
		if gone := errors.Is(err, fs.ErrNotExist); gone != wantGone {
			t.Errorf("%s: gone %v, want %v (%v)", filepath.Base(dir), gone, wantGone, err)
		}
	}
}

// TestOpenRefusals checks that a bad working directory fails the Open and
// leaves nothing in the base directory.
func TestOpenRefusals(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p := local.New(&local.Options{BaseDir: base})
	for _, wd := range []string{filepath.Join(base, "missing"), file} {
		if _, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: wd}); err == nil {
			t.Errorf("Acquire with workdir %s succeeded", wd)
		}
	}
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		t.Errorf("a refused Open left %s", e.Name())
	}
}

// TestCopyInThroughHostLink checks that CopyIn writes nothing outside its
// directory even through a link already in the home pointing outside.
func TestCopyInThroughHostLink(t *testing.T) {
	l := acquire(t, local.New(&local.Options{BaseDir: t.TempDir()}))
	home := l.Home()
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("original"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(home, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(home, "filelink")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"link/x", "link/sub/x"} {
		if err := sandboxtest.WriteFiles(t.Context(), l, home, []tarsafe.File{{Name: name, Data: []byte("escaped")}}); err == nil {
			t.Errorf("writing %s through a link to %s succeeded", name, outside)
		}
	}
	// A file at a link's name replaces the link, never writes through it.
	if err := sandboxtest.WriteFiles(t.Context(), l, home, []tarsafe.File{{Name: "filelink", Data: []byte("replaced")}}); err != nil {
		t.Errorf("replacing a link with a file: %v", err)
	}
	entries, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("the directory outside holds %d entries, want only the victim", len(entries))
	}
	if b, _ := os.ReadFile(victim); string(b) != "original" {
		t.Errorf("the file outside now holds %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(home, "filelink")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("filelink: %v, %v; want a regular file", fi, err)
	}
}
