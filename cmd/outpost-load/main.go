// Command outpost-load is outpost's load harness (docs/benchmarks.md,
// "Scale"): it drives `outpost serve` through its public HTTP API with N
// concurrent conversations of M turns each, K event streams per turn, on
// one replica or R replicas sharing one PostgreSQL database, and reports
// the server's own cost per turn: throughput, latencies, CPU seconds,
// memory, goroutines, store operations and events delivered.
//
// It starts its servers itself, as `outpost-load serve`: the outpost
// command's own `outpost serve` (cmd/outpost/cli), with one sandbox
// provider more, "memory-echo": the in-memory sandbox (sandbox/memsandbox)
// with an echo agent that costs nothing, so that the server's work is what
// is measured. The real sandboxes (local, docker) are there too
// (--sandbox). It talks to its servers over Unix sockets only, and to a
// PostgreSQL store only on loopback: it never opens or reaches a network
// port. Every run is bounded in turns (--conversations × --turns ≤
// --max-turns) and in time (--timeout).
//
// `outpost-load plot` turns the JSON lines of several runs into the SVG
// line plots of docs/images/ (scripts/scale.sh).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/outposthq/outpost/cmd/outpost/cli"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/shim"
)

// serveSubcommand runs the harness's binary as a server: `outpost serve`
// with the memory-echo provider.
const serveSubcommand = "serve"

func main() {
	echo.MaybeRun()
	shim.MaybeRun()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case serveSubcommand:
			registerMemory()
			defer profile()()
			return cli.Run(ctx, args, os.Stdin, stdout, stderr)
		case "plot":
			return plotMain(args[1:], stdout, stderr)
		case "chaos":
			return chaosMain(ctx, args[1:], stdout, stderr)
		}
	}
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if err == errHelp {
			return 0
		}
		fmt.Fprintln(stderr, "outpost-load:", err)
		return 2
	}
	rep, err := run(ctx, cfg, stderr)
	if rep != nil {
		if werr := rep.write(cfg, stdout); werr != nil && err == nil {
			err = werr
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "outpost-load:", err)
		return 1
	}
	return 0
}

// profileEnv names the file a server of the harness writes its CPU
// profile to (--cpuprofile); its heap profile (allocations since the
// start, and what is in use at the end) goes beside it, as
// NAME.heap.pprof.
const profileEnv = "OUTPOST_LOAD_CPUPROFILE"

// profile starts the CPU profile profileEnv asks for; the function it
// returns stops it.
func profile() func() {
	name := os.Getenv(profileEnv)
	if name == "" {
		return func() {}
	}
	f, err := os.Create(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "outpost-load:", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "outpost-load:", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		if h, err := os.Create(strings.TrimSuffix(name, ".pprof") + ".heap.pprof"); err == nil {
			pprof.Lookup("allocs").WriteTo(h, 0)
			h.Close()
		}
	}
}
