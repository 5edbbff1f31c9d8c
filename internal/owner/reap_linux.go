package owner

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// Reap ends, with SIGKILL, what a dead owner's sandbox left running on
// this machine, and returns how many groups and processes it signalled:
//
//   - each recorded group whose leader still runs with the recorded start
//     time (a leader with another start time is a later process that got
//     the pid: its group is left alone);
//   - each recorded group whose leader is gone but one of whose members has
//     env (an entry NAME=value) in its environment. A process group id stays
//     taken while any member lives, so such a group is still the recorded
//     one, and env, an entry only the sandbox's processes have (its private
//     HOME), rules out a later group of the same id;
//   - every other process with env in its environment: descendants that
//     left their group (setsid), and their own groups when they lead one.
//
// It never signals this process, its group, or pid 1. A process that
// both left the group and dropped env from its environment is not found.
func Reap(groups []Group, env string) int {
	procs := scan()
	n := 0
	// kill signals a process (id > 0) or a group (id < 0).
	kill := func(id int) {
		abs := max(id, -id)
		if abs > 1 && abs != os.Getpid() && abs != syscall.Getpgrp() && syscall.Kill(id, syscall.SIGKILL) == nil {
			n++
		}
	}
	done := map[int]bool{}
	for _, g := range groups {
		if g.PGID <= 1 || g.Start == 0 {
			continue
		}
		if s := ProcessStart(g.PGID); s != 0 {
			if s == g.Start {
				kill(-g.PGID)
				done[g.PGID] = true
			}
			continue
		}
		for _, p := range procs {
			if p.pgrp == g.PGID && p.hasEnv(env) {
				kill(-g.PGID)
				done[g.PGID] = true
				break
			}
		}
	}
	for _, p := range procs {
		if done[p.pgrp] || !p.hasEnv(env) {
			continue
		}
		if p.pgrp == p.pid {
			kill(-p.pid)
			done[p.pid] = true
		} else {
			kill(p.pid)
		}
	}
	return n
}

// proc is what Reap reads of a running process.
type proc struct {
	pid, pgrp int
	environ   []byte // read on first use
	read      bool
}

func (p *proc) hasEnv(env string) bool {
	if env == "" {
		return false
	}
	if !p.read {
		p.environ, _ = os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/environ")
		p.read = true
	}
	for _, kv := range bytes.Split(p.environ, []byte{0}) {
		if string(kv) == env {
			return true
		}
	}
	return false
}

// scan lists the live processes (not zombies) of this pid namespace.
func scan() []*proc {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	var out []*proc
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 0 {
			continue
		}
		f := statFields(pid)
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		pgrp, _ := strconv.Atoi(f[2])
		out = append(out, &proc{pid: pid, pgrp: pgrp})
	}
	return out
}
