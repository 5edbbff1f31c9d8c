package local

import (
	"os/exec"
	"runtime"
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
