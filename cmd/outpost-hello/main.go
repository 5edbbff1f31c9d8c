// Command outpost-hello runs one turn of the built-in echo agent on the
// local sandbox: the README's first command, and the smallest program
// built on the library (engine.Run with the local provider).
//
// It compiles about a third of what the full CLI does, so a first
// `go run ./cmd/outpost-hello "hello"` on a fresh machine is quick. Its
// conversations are the CLI's (conversation.DefaultDir): a turn it ran can
// be continued with `outpost run --resume ID`, and the other way round.
//
//	outpost-hello [--resume ID] PROMPT
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/providers/local"
)

func main() {
	echo.MaybeRun() // this binary is also the echo agent the local sandbox starts
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the command with its arguments and streams; it returns the
// exit code: outpost's for the turn's error (docs/errors.md; 130 when
// interrupted), 2 for a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost-hello", flag.ContinueOnError)
	fs.SetOutput(stderr)
	resume := fs.String("resume", "", "continue the conversation `ID` (from this command or `outpost run`)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: outpost-hello [--resume ID] PROMPT\n\nOne turn of the built-in echo agent on the local sandbox; the full CLI is `go install ./cmd/...`.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	dir, err := conversation.DefaultDir()
	if err == nil {
		var wd string
		if wd, err = os.Getwd(); err == nil {
			return turn(ctx, engine.Turn{
				Agent:   harness.Agent{Kind: harness.KindCLI, Harness: echo.Harness()},
				Prompt:  fs.Arg(0),
				Workdir: wd,
				Resume:  *resume,
			}, conversation.NewFS(dir), stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "outpost-hello: %v\n", err)
	return 1
}

// turn runs t, streaming the answer to stdout and the conversation to
// continue with to stderr, as `outpost run` does.
func turn(ctx context.Context, t engine.Turn, store conversation.Store, stdout, stderr io.Writer) int {
	var mu sync.Mutex
	midLine, streamed := false, map[string]bool{}
	res, err := engine.Run(ctx, t, &engine.RunOptions{
		Provider: local.New(nil),
		Store:    store,
		OnEvent: func(ev harness.Event) {
			if ev.Type != harness.EventMessage {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case ev.Delta: // the answer as it streams
				streamed[ev.ID] = true
				fmt.Fprint(stdout, ev.Text)
				midLine = !strings.HasSuffix(ev.Text, "\n")
			case ev.ID == "" || !streamed[ev.ID]: // a whole message not streamed before
				if midLine {
					fmt.Fprintln(stdout)
				}
				fmt.Fprintln(stdout, strings.TrimRight(ev.Text, "\n"))
				midLine = false
			}
		},
	})
	mu.Lock()
	defer mu.Unlock()
	if midLine {
		fmt.Fprintln(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "outpost-hello: %v\n", err)
		return outpost.ExitCode(err)
	}
	if res.Conversation != "" {
		fmt.Fprintf(stderr, "· conversation %s\n· continue with: go run ./cmd/outpost-hello --resume %s PROMPT (or outpost run --resume %s PROMPT)\n",
			res.Conversation, res.Conversation, res.Conversation)
	}
	return 0
}
