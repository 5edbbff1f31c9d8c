// Command fakegemini serves the fake Gemini API of package
// internal/fakeapi/gemini on a loopback port, for driving Gemini CLI by
// hand (docs/presets/gemini.md):
//
//	go run ./internal/fakeapi/gemini/cmd/fakegemini -url-file fake.url -log requests.jsonl &
//	GOOGLE_GEMINI_BASE_URL=$(cat fake.url) GEMINI_API_KEY=fake outpost run --agent gemini "Say hello"
//
// FAKE_TOOL, FAKE_QUOTA, FAKE_429, FAKE_503, FAKE_ECHO, FAKE_HANG and FAKE_DROP in
// the last user text select their scenario; the router's classification
// and a tool follow-up are answered as the package does. It prints the
// base URL on stdout and runs until SIGINT or SIGTERM.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/outposthq/outpost/internal/fakeapi"
	"github.com/outposthq/outpost/internal/fakeapi/gemini"
)

func main() {
	var (
		text    = flag.String("text", gemini.DefaultText, "default reply text")
		logPath = flag.String("log", "", "write one JSON line per request to this file when stopped")
		urlFile = flag.String("url-file", "", "write the base URL to this file once listening")
	)
	flag.Parse()
	s, err := gemini.New(gemini.Config{Text: *text})
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakegemini:", err)
		os.Exit(1)
	}
	if err := fakeapi.Announce(s.URL(), *urlFile); err != nil {
		s.Close()
		fmt.Fprintln(os.Stderr, "fakegemini:", err)
		os.Exit(1)
	}
	<-fakeapi.StopSignals()
	s.Close()
	if *logPath == "" {
		return
	}
	f, err := os.Create(*logPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakegemini:", err)
		os.Exit(1)
	}
	defer f.Close()
	enc := json.NewEncoder(f)
	for _, r := range s.Requests() {
		_ = enc.Encode(map[string]any{"seq": r.Seq, "method": r.Method, "path": r.Path, "query": r.Query,
			"model": r.Model, "rpc": r.RPC, "served": r.Served, "ncontents": r.NumContents, "tools": r.ToolNames,
			"schema": json.RawMessage(orNull(r.ResponseSchema)), "last_user": r.LastUserText, "body": json.RawMessage(orNull(r.RawBody))})
	}
}

func orNull(b []byte) []byte {
	if !json.Valid(b) {
		return []byte("null")
	}
	return b
}
