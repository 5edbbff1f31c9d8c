// Command fakeopenai serves the fake OpenAI API of package
// internal/fakeapi/openai (Responses and Chat Completions) on a loopback
// port, for driving real CLIs by hand — `outpost run --agent codex` against
// it is described in docs/presets/codex.md:
//
//	go run ./internal/fakeapi/openai/cmd/fakeopenai -url-file /tmp/fake.url -log /tmp/requests.jsonl &
//	OPENAI_BASE_URL=$(cat /tmp/fake.url) OPENAI_API_KEY=sk-fake outpost run --agent codex --model gpt-5.5 "Say hello"
//
// The default scenario (-scenario) answers every request that no queue entry
// or marker claims; FAKE_* markers in the last user text (FAKE_TOOL,
// FAKE_SLOW, FAKE_429, … see openai.Markers) still select their scenario
// unless -no-markers is given, and a request that ends with a tool result
// is answered "Tool output was: …". It listens on a free port of
// 127.0.0.1, prints the base URL (ending in /v1) on stdout and runs until
// SIGINT or SIGTERM.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/outposthq/outpost/internal/fakeapi"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
)

// scenarios are the names -scenario and -queue take.
var scenarios = map[string]openai.Scenario{
	"text":               openai.Text(""),
	"reasoning":          openai.Reasoning("", ""),
	"tool":               openai.ToolCall(""),
	"patch":              openai.ApplyPatch(""),
	"echo":               openai.Echo(),
	"slow":               openai.Slow(0, 0),
	"rate-limit":         openai.RateLimited(),
	"usage-limit":        openai.UsageLimitReached(),
	"insufficient-quota": openai.InsufficientQuota(),
	"500":                openai.ServerError(),
	"503":                openai.Unavailable(),
	"401":                openai.Unauthorized(),
	"drop":               openai.Drop(),
	"truncate":           openai.Truncate(),
	"failed":             openai.Failed("", ""),
	"hang":               openai.Hang(),
	"stall":              openai.Stall(),
	"disconnect":         openai.Disconnect(),
}

func names() string {
	return strings.Join(slices.Sorted(maps.Keys(scenarios)), ", ")
}

func main() {
	var (
		scenario = flag.String("scenario", "text", "default scenario: "+names())
		text     = flag.String("text", openai.DefaultText, "default reply text")
		command  = flag.String("tool-command", openai.DefaultCommand, "shell command of the tool scenario")
		delay    = flag.Duration("delay", 200*time.Millisecond, "pause before each delta of the slow scenario")
		chunks   = flag.Int("chunks", 30, "number of deltas of the slow scenario")
		common   = fakeapi.Flags()
	)
	flag.Parse()

	def, ok := scenarios[*scenario]
	if !ok {
		fatalf("unknown scenario %q (known: %s)", *scenario, names())
	}
	var queued []openai.Scenario
	for _, name := range fakeapi.SplitNames(*common.Queue) {
		sc, ok := scenarios[name]
		if !ok {
			fatalf("unknown queued scenario %q (known: %s)", name, names())
		}
		queued = append(queued, sc)
	}
	logF, err := fakeapi.OpenLog(*common.Log)
	if err != nil {
		fatalf("%v", err)
	}
	if logF != nil {
		defer logF.Close()
	}
	cfg := openai.Config{
		Text:       *text,
		Command:    *command,
		DeltaDelay: *delay,
		SlowChunks: *chunks,
		Choose: func(r *openai.Request) openai.Scenario {
			if r.LastItemIsToolOutput() {
				return openai.Scenario{} // the built-in follow-up
			}
			if !*common.NoMarkers {
				if _, ok := openai.ScenarioForText(r.LastUserText); ok {
					return openai.Scenario{}
				}
			}
			return def
		},
		Logf: func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
	}
	srv, err := openai.New(cfg)
	if err != nil {
		fatalf("%v", err)
	}
	srv.Enqueue(queued...)
	if err := fakeapi.Announce(srv.URL(), *common.URLFile); err != nil {
		srv.Close()
		fatalf("%v", err)
	}
	sig := fakeapi.StopSignals()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	written := 0
	for {
		select {
		case <-tick.C:
			written = writeLog(logF, srv, written, *common.LogBodies)
		case <-sig:
			srv.Close()
			writeLog(logF, srv, written, *common.LogBodies)
			return
		}
	}
}

// writeLog appends the requests after the first written ones to f (one
// JSON object per line) and returns how many are written.
func writeLog(f *os.File, srv *openai.Server, written int, bodies bool) int {
	if f == nil {
		return written
	}
	reqs := srv.Requests()
	for _, r := range reqs[min(written, len(reqs)):] {
		line := map[string]any{
			"seq": r.Seq, "time": r.Time.Format(time.RFC3339Nano), "method": r.Method, "path": r.Path,
			"query": r.Query, "api": r.API, "served": r.Served, "model": r.Model, "n_input": r.NumInput,
			"last_item_type": r.LastItemType, "last_user": r.LastUserText, "tools": r.ToolNames,
		}
		if bodies && len(r.RawBody) > 0 {
			line["body"] = fakeapi.LoggedBody(r.RawBody)
		}
		b, err := json.Marshal(line)
		if err != nil {
			continue
		}
		if _, err := f.Write(append(b, '\n')); err != nil {
			fmt.Fprintf(os.Stderr, "fakeopenai: writing the log: %v\n", err)
		}
	}
	return len(reqs)
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fakeopenai: "+format+"\n", args...)
	os.Exit(2)
}
