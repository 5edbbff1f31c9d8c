// Command fakeanthropic serves the fake Anthropic Messages API of package
// internal/fakeapi/anthropic on a loopback port, for driving real CLIs by hand.
//
//	go run ./internal/fakeapi/anthropic/cmd/fakeanthropic -addr 127.0.0.1:18500 -scenario text -log /tmp/req.jsonl
//	ANTHROPIC_BASE_URL=http://127.0.0.1:18500 ANTHROPIC_API_KEY=sk-fake claude -p --output-format stream-json --verbose "say hi"
//
// The default scenario answers every request that no marker or queue entry
// claims; FAKE_* markers in the prompt (FAKE_TOOL, FAKE_THINK, FAKE_429, …)
// still select their scenario unless -no-markers is given. It prints the base
// URL on stdout and runs until SIGINT or SIGTERM.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/outposthq/outpost/internal/fakeapi"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
)

func main() {
	var (
		addr     = flag.String("addr", "127.0.0.1:0", "loopback address to listen on")
		scenario = flag.String("scenario", "text", "default scenario: "+strings.Join(anthropic.ScenarioNames(), ", "))
		text     = flag.String("text", anthropic.DefaultText, "default reply text")
		delay    = flag.Duration("delay", anthropic.DefaultSlowDelay, "pause before each delta of the slow scenario")
		toolCmd  = flag.String("tool-command", anthropic.DefaultToolCommand, "Bash command of the tool scenario")
		resetsAt = flag.Int64("resets-at", 0, "usage_limit reset time, unix seconds (0 = now+2h)")
		common   = fakeapi.Flags()
	)
	flag.Parse()

	opts := anthropic.Options{
		Addr:        *addr,
		Text:        *text,
		SlowDelay:   *delay,
		ToolCommand: *toolCmd,
		NoMarkers:   *common.NoMarkers,
	}
	if *resetsAt > 0 {
		opts.ResetsAt = time.Unix(*resetsAt, 0)
	}
	def, ok := anthropic.ScenarioByName(*scenario, &opts)
	if !ok {
		fatalf("unknown scenario %q (known: %s)", *scenario, strings.Join(anthropic.ScenarioNames(), ", "))
	}
	opts.Default = &def

	var logMu sync.Mutex
	logF, err := fakeapi.OpenLog(*common.Log)
	if err != nil {
		fatalf("%v", err)
	}
	if logF != nil {
		defer logF.Close()
	}
	opts.OnRequest = func(r anthropic.Request) {
		line := map[string]any{
			"seq": r.Seq, "time": r.Time.Format(time.RFC3339Nano), "method": r.Method, "path": r.Path,
			"query": r.RawQuery, "headers": r.Header,
		}
		if r.IsMessages() {
			line["scenario"] = r.Scenario
			line["model"] = r.Model
			line["stream"] = r.Stream
			line["max_tokens"] = r.MaxTokens
			line["nmsg"] = r.NumMessages
			line["last_user"] = r.LastUserText
			line["messages"] = r.Messages
		}
		if *common.LogBodies && len(r.Body) > 0 {
			line["body"] = fakeapi.LoggedBody(r.Body)
		}
		fmt.Fprintf(os.Stderr, "fakeanthropic: #%d %s %s?%s scenario=%s nmsg=%d last_user=%.80q\n",
			r.Seq, r.Method, r.Path, r.RawQuery, r.Scenario, r.NumMessages, r.LastUserText)
		if logF == nil {
			return
		}
		b, _ := json.Marshal(line)
		logMu.Lock()
		defer logMu.Unlock()
		_, _ = logF.Write(append(b, '\n'))
	}

	srv, err := anthropic.Start(opts)
	if err != nil {
		fatalf("%v", err)
	}
	for _, name := range fakeapi.SplitNames(*common.Queue) {
		sc, ok := anthropic.ScenarioByName(name, &opts)
		if !ok {
			srv.Close()
			fatalf("unknown queued scenario %q", name)
		}
		srv.Enqueue(sc)
	}
	if err := fakeapi.Announce(srv.URL(), *common.URLFile); err != nil {
		srv.Close()
		fatalf("%v", err)
	}
	<-fakeapi.StopSignals()
	srv.Close()
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fakeanthropic: "+format+"\n", args...)
	os.Exit(2)
}
