// Command outpost runs coding-agent CLIs as turns inside sandboxes.
// See the README and docs/cli.md.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/outposthq/outpost/cmd/outpost/cli"
	"github.com/outposthq/outpost/gateway"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/shim"
)

func main() {
	echo.MaybeRun()
	shim.MaybeRun()
	// net/http's transports write some messages of their own to Go's
	// global logger; none may carry a credential the gateway holds.
	log.SetOutput(gateway.RedactingWriter(os.Stderr))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
