//go:build !linux

package local

import (
	"os/exec"
	"syscall"
)

// start starts cmd in its own process group. This system has no
// parent-death signal: after a SIGKILL of outpost, the agent runs until
// it ends by itself.
func start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd.Start()
}
