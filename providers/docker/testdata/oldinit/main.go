// Command oldinit stands for the in-sandbox binary of an older outpost,
// whose init knows neither --serve nor --setup: it runs the real binary
// (at OUTPOST_REAL, a mount of the test's) with the init's flags left
// out, and every other mode as asked. TestSetupFallback uses it.
package main

import (
	"fmt"
	"os"
	"syscall"
)

const real = "/opt/outpost-real/outpost-sandbox"

func main() {
	args := append([]string{real}, os.Args[1:]...)
	if len(os.Args) > 2 && os.Args[1] == "sandbox-shim" && os.Args[2] == "init" {
		args = []string{real, "sandbox-shim", "init"}
	}
	err := syscall.Exec(real, args, os.Environ())
	fmt.Fprintln(os.Stderr, "oldinit:", err)
	os.Exit(127)
}
