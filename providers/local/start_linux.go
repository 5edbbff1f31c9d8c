package local

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// forker runs functions on one goroutine locked to its OS thread for the
// life of the process. The kernel sends a child's parent-death signal when
// the thread that forked it ends, not the process (go.dev/issue/27505): a
// child forked from this thread gets it only when the process ends.
var forker = sync.OnceValue(func() chan<- func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives as long as the process
		for f := range ch {
			f()
		}
	}()
	return ch
})

// start starts cmd in its own process group, to be killed by the kernel
// when this process dies (PR_SET_PDEATHSIG, kept across exec): a SIGKILLed
// outpost does not leave its agents running. The signal reaches only the
// direct child; the sweep of the next outpost ends the rest of the group.
func start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	done := make(chan error, 1)
	forker() <- func() { done <- cmd.Start() }
	return <-done
}

// innerSession returns the host pid of the session bubblewrap made for
// the process whose outer bwrap is pid (--new-session): bwrap's one child,
// the PID namespace's init, leads it, and the program and its children
// are in its group. 0 when it is not (or no longer) there.
func innerSession(pid int) int {
	if c := children(pid); len(c) == 1 {
		return c[0]
	}
	return 0
}

// children are the pids of pid's children (Linux's
// /proc/PID/task/PID/children).
func children(pid int) []int {
	p := strconv.Itoa(pid)
	b, err := os.ReadFile("/proc/" + p + "/task/" + p + "/children")
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			out = append(out, n)
		}
	}
	return out
}
