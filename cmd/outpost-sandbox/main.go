// Command outpost-sandbox is the small static binary that docker,
// kubernetes and ssh sandboxes run inside: the exec shim (`outpost-sandbox
// sandbox-shim MODE`, internal/shim) and the echo agent (`outpost-sandbox
// echo-agent`, harness/echo). It has the same subcommands as the outpost
// CLI for these two, so either binary serves inside a sandbox, but none of
// the CLI's: it links neither the providers' clients (Kubernetes, Docker),
// nor Prometheus, PostgreSQL or the JSON Schema library, and so starts in
// about a millisecond. A test of this package keeps its dependency list
// that way.
//
// The providers find or build it through internal/selfbin.
package main

import (
	"fmt"
	"os"

	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/selfbin"
	"github.com/outposthq/outpost/internal/shim"
)

func main() {
	echo.MaybeRun()
	shim.MaybeRun()
	if len(os.Args) == 2 && os.Args[1] == "version" {
		fmt.Println("outpost-sandbox", selfbin.Version())
		return
	}
	fmt.Fprintf(os.Stderr, "usage: outpost-sandbox %s|%s ARGS...\n(the in-sandbox part of outpost: the exec shim and the echo agent; the CLI is outpost)\n", shim.Subcommand, echo.Subcommand)
	os.Exit(2)
}
