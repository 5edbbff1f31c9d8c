package local_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/outposthq/outpost/internal/owner"
	"github.com/outposthq/outpost/providers/local"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// helperBase names the base directory of the helper process that
// TestMain runs instead of the tests.
const helperBase = "OUTPOST_LOCAL_TEST_HELPER_BASE"

func TestMain(m *testing.M) {
	if base := os.Getenv(helperBase); base != "" {
		os.Exit(helper(base))
	}
	os.Exit(m.Run())
}

// hangScript leaves three processes: the group's leader (the shell), a
// child in its group and a child that left it with setsid. It prints
// their pids, then waits.
const hangScript = `sleep 100000 & a=$!; setsid sleep 100000 & b=$!; echo "$$ $a $b"; wait`

// helper runs hangScript in a lease of a provider on base, copies its
// line to stdout and blocks until it is killed.
func helper(base string) int {
	// The host's pids are what this checks: processes on the host as
	// they are (isolated leases: isolation_test.go).
	p := local.New(&local.Options{BaseDir: base, Isolation: "none"})
	l, err := sandbox.Acquire(context.Background(), p, driver.Options{Workdir: base})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	req := driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", hangScript}, Env: env(l)}
	proc, err := l.Start(context.Background(), req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go io.Copy(io.Discard, proc.Stderr())
	line, err := bufio.NewReader(proc.Stdout()).ReadString('\n')
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Print(line)
	select {}
}

// ended tells whether pid no longer runs (gone, or a zombie nobody reaped
// yet: it holds nothing any more).
func ended(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	st, err := readProcStat(pid)
	return err != nil || st.state == 'Z' || st.state == 'X'
}

// waitEnded polls, for at most a bounded while, until every pid ended,
// and returns those still running.
func waitEnded(pids ...int) []int {
	var left []int
	for range 1000 {
		left = left[:0]
		for _, pid := range pids {
			if !ended(pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return left
}

// killOnCleanup ends processes a failed test leaves behind.
func killOnCleanup(t *testing.T, pids ...int) {
	t.Cleanup(func() {
		for _, pid := range pids {
			if !ended(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

// TestSweepKilledOwner: a process SIGKILLed while its lease runs a hanging
// script leaves no process of it once a new provider has swept. The
// group's leader dies with its parent (PR_SET_PDEATHSIG); its child in the
// group and its setsid child outlive it until the sweep.
func TestSweepKilledOwner(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	base := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperBase+"="+base)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	var leader, inGroup, left int
	if _, err2 := fmt.Sscan(line, &leader, &inGroup, &left); err != nil || err2 != nil {
		t.Fatalf("the helper printed %q: %v %v", line, err, err2)
	}
	killOnCleanup(t, leader, inGroup, left)
	for i := 0; ; i++ { // setsid runs after the script printed the pid
		st, err := readProcStat(left)
		if err == nil && st.pgrp == left {
			break
		}
		if i == 1000 {
			t.Fatalf("the setsid child %d: %+v, %v; want it out of the group %d", left, st, err, leader)
		}
		time.Sleep(10 * time.Millisecond)
	}
	leases, err := filepath.Glob(filepath.Join(base, "local-*"))
	if err != nil || len(leases) != 1 {
		t.Fatalf("the helper's leases: %v, %v", leases, err)
	}
	cmd.Process.Kill()
	cmd.Wait()

	if still := waitEnded(leader); still != nil {
		t.Errorf("the group's leader %d outlived its SIGKILLed parent", leader)
	}
	for _, pid := range []int{inGroup, left} {
		if ended(pid) {
			t.Fatalf("%d ended with the owner: the test does not test the sweep", pid)
		}
	}
	acquire(t, local.New(&local.Options{BaseDir: base}))
	if still := waitEnded(leader, inGroup, left); still != nil {
		t.Errorf("processes of the dead owner's lease still run after the sweep: %v", still)
	}
	if _, err := os.Stat(leases[0]); err == nil {
		t.Errorf("the dead owner's lease %s survives the sweep", leases[0])
	}
}

// startGroup starts a sleeping process in a group of its own, as a lease
// would, and returns its group as the owner file records it.
func startGroup(t *testing.T) owner.Group {
	t.Helper()
	cmd := exec.Command("sleep", "100000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { cmd.Wait(); close(waited) }() // reaped when killed
	t.Cleanup(func() { cmd.Process.Kill(); <-waited })
	pid := cmd.Process.Pid
	return owner.Group{PGID: pid, Start: owner.ProcessStart(pid)}
}

// TestSweepGroups: the sweep kills a recorded group whose leader still
// runs with the recorded start time, and leaves alone a group whose
// leader's pid has another start time (a later process got the pid).
func TestSweepGroups(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadOwner := owner.Self()
	deadOwner.PID, deadOwner.Start = dead.Process.Pid, 1
	ours, reused := startGroup(t), startGroup(t)
	other := reused
	other.Start++ // the pid's process is not the one recorded
	base := t.TempDir()
	for name, g := range map[string]owner.Group{"local-0000000000aa": ours, "local-0000000000bb": other} {
		dir := filepath.Join(base, name)
		if err := os.MkdirAll(filepath.Join(dir, "home"), 0o700); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(map[string]any{"owner": deadOwner, "groups": []owner.Group{g}})
		if err := os.WriteFile(filepath.Join(dir, "owner"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	acquire(t, local.New(&local.Options{BaseDir: base}))
	if still := waitEnded(ours.PGID); still != nil {
		t.Errorf("the recorded group %d still runs after the sweep", ours.PGID)
	}
	if ended(reused.PGID) {
		t.Errorf("the sweep killed %d, whose start time is not the recorded one", reused.PGID)
	}
	for _, name := range []string{"local-0000000000aa", "local-0000000000bb"} {
		if _, err := os.Stat(filepath.Join(base, name)); err == nil {
			t.Errorf("the dead owner's lease %s survives the sweep", name)
		}
	}
}

// TestOwnerRecord: the owner file names this process and the groups
// started and not yet waited for.
func TestOwnerRecord(t *testing.T) {
	base := t.TempDir()
	l := acquire(t, local.New(&local.Options{BaseDir: base}))
	file := filepath.Join(filepath.Dir(l.Home()), "owner")
	read := func() (rec struct {
		Owner  owner.Owner
		Groups []owner.Group
	}) {
		t.Helper()
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatalf("owner file %q: %v", b, err)
		}
		return rec
	}
	if rec := read(); rec.Owner != owner.Self() || len(rec.Groups) != 0 {
		t.Errorf("owner file of a new lease: %+v", rec)
	}
	p, err := l.Start(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", "read x"}, Env: env(l), Stdin: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	rec := read()
	if len(rec.Groups) != 1 || rec.Groups[0].Start == 0 || rec.Groups[0].Start != owner.ProcessStart(rec.Groups[0].PGID) {
		t.Errorf("owner file of a running process: %+v", rec)
	}
	p.Stdin().Close()
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if rec := read(); len(rec.Groups) != 0 {
		t.Errorf("owner file after the process ended: %+v", rec)
	}
}
