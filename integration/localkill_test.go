package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// leaseProcs lists the running processes (not zombies) whose HOME is the
// home of a local lease under base, by pid.
func leaseProcs(base string) map[int]string {
	out := map[int]string{}
	names, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range names {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil {
			continue
		}
		env, err := os.ReadFile(dir + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			home, ok := strings.CutPrefix(string(kv), "HOME="+base+"/")
			if ok && !zombie(pid) {
				out[pid] = home
			}
		}
	}
	return out
}

func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	return len(f) == 0 || f[0] == "Z" || f[0] == "X"
}

// pollProcs polls leaseProcs (for a bounded while) until want says yes,
// and returns the last list.
func pollProcs(base string, want func(map[int]string) bool) (map[int]string, bool) {
	var procs map[int]string
	for range 1000 {
		if procs = leaseProcs(base); want(procs) {
			return procs, true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return procs, false
}

// killLeftovers SIGKILLs the processes a failed test leaves behind.
func killLeftovers(t *testing.T, pids []int) {
	t.Cleanup(func() {
		for _, pid := range pids {
			if !zombie(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

func requireProc(t *testing.T) {
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("no /proc: the test finds the agents' processes there")
	}
}

// TestServeSIGKILLLocal: `outpost serve` SIGKILLed during a hanging local
// turn leaves no process of that turn once the server has started again
// and run a turn (the first lease sweeps), over 20 trials. The agent hangs
// silent (#hang): one that writes dies of SIGPIPE with its reader anyway.
func TestServeSIGKILLLocal(t *testing.T) {
	t.Parallel()
	requireProc(t)
	for trial := range 20 {
		t.Run(fmt.Sprint(trial), func(t *testing.T) {
			t.Parallel()
			base := t.TempDir()
			args := []string{"--set", "local.root=" + base}
			s := startServe(t, "", "", args...)
			id, err := s.start(map[string]any{"prompt": "#hang"})
			if err != nil {
				t.Fatal(err)
			}
			// The agent's session event: it runs, and hangs.
			s.follow(id, 0, func(it streamed) bool { return it.typ == "session" })
			turn, ok := pollProcs(base, func(m map[int]string) bool { return len(m) > 0 })
			if !ok {
				t.Fatal("the hanging turn's agent never ran")
			}
			pids := slices.Collect(mapsKeys(turn))
			killLeftovers(t, pids)
			s.cmd.Process.Kill()
			<-s.exited
			s2 := startServe(t, s.home, s.work, args...)
			id, err = s2.start(map[string]any{"prompt": "after the kill"})
			if err != nil {
				t.Fatal(err)
			}
			if items, err := s2.follow(id, 0, nil); err != nil || items[len(items)-1].data["error"] != nil {
				t.Fatalf("the turn after the restart: %v %v", err, items)
			}
			left, ok := pollProcs(base, func(m map[int]string) bool { return !anyOf(m, turn) })
			if !ok {
				t.Errorf("processes of the killed server's turn still run after the restart: %v (the turn's: %v)", left, turn)
			}
		})
	}
}

// anyOf tells whether a process of before (or of its homes) is in now.
func anyOf(now, before map[int]string) bool {
	homes := map[string]bool{}
	for _, h := range before {
		homes[h] = true
	}
	for pid, h := range now {
		if _, ok := before[pid]; ok || homes[h] {
			return true
		}
	}
	return false
}

func mapsKeys(m map[int]string) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestRunSIGKILLLocal: `outpost run` SIGKILLed during a hanging local turn
// whose agent has a child in its process group: the agent dies with
// outpost (parent-death signal), the child outlives it, and the next
// `outpost run` sweeps it.
func TestRunSIGKILLLocal(t *testing.T) {
	t.Parallel()
	requireProc(t)
	for trial := range 3 {
		t.Run(fmt.Sprint(trial), func(t *testing.T) {
			home, work, base := t.TempDir(), t.TempDir(), t.TempDir()
			pidfile := filepath.Join(t.TempDir(), "pids")
			script := filepath.Join(t.TempDir(), "agent")
			body := fmt.Sprintf("#!/bin/sh\nsleep 100000 &\necho \"$$ $!\" >%s.tmp && mv %[1]s.tmp %[1]s\nexec %s \"$@\"\n", pidfile, outpostBinary(t))
			if err := os.WriteFile(script, []byte(body), 0o700); err != nil {
				t.Fatal(err)
			}
			// On the host (isolation=none): its pids and a pid file out
			// of the workspace; in namespaces nothing outlives the agent
			// (providers/local.TestIsolatedNothingSurvives).
			cmd := exec.Command(outpostBinary(t), "run", "--json", "--set", "root="+base, "--set", "isolation=none", "--command", script, "#hang")
			cmd.Dir = work
			cmd.Env = append(os.Environ(), "OUTPOST_HOME="+home)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
			// The agent's session event: it runs, and hangs.
			sc := bufio.NewScanner(stdout)
			for sc.Scan() && !strings.Contains(sc.Text(), `"type":"session"`) {
			}
			var agent, child int
			for i := 0; ; i++ {
				if b, err := os.ReadFile(pidfile); err == nil {
					fmt.Sscan(string(b), &agent, &child)
					break
				}
				if i == 1000 {
					t.Fatal("the agent script never ran")
				}
				time.Sleep(10 * time.Millisecond)
			}
			killLeftovers(t, []int{agent, child})
			cmd.Process.Kill()
			cmd.Wait()
			if _, ok := pollProcs(base, func(m map[int]string) bool { _, ok := m[agent]; return !ok }); !ok {
				t.Errorf("the agent %d outlived the SIGKILLed outpost run", agent)
			}
			if zombie(child) {
				t.Fatalf("the agent's child %d ended with outpost: the test does not test the sweep", child)
			}
			if code, out, errb := runOutpost(t, home, work, "run", "--set", "root="+base, "after the kill"); code != 0 {
				t.Fatalf("the next outpost run: exit %d\n%s\n%s", code, out, errb)
			}
			if left, ok := pollProcs(base, func(m map[int]string) bool { return len(m) == 0 }); !ok {
				t.Errorf("processes of the killed outpost's turn still run after the next outpost run: %v", left)
			}
		})
	}
}
