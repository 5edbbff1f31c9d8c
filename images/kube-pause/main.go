// Command kube-pause is the pause (sandbox) image of the test cluster that
// scripts/kube-up.sh builds: no registry can be reached, so the image is
// this static program FROM scratch. It sleeps until SIGTERM or SIGINT and
// reaps the zombies reparented to it, as the upstream pause does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range ch {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
