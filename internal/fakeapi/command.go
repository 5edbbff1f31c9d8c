package fakeapi

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// What the fakes' commands (cmd/fakeanthropic, cmd/fakeopenai, and the
// announcing and stopping of cmd/fakegemini) share:
// they take a comma-separated queue of scenario names, append a JSON line
// per request to a log file, print their base URL (and write it to a file
// a script waits on) and serve until they are told to stop.

// CommandFlags are the flags every fake's command takes, defined on
// flag.CommandLine by Flags.
type CommandFlags struct {
	Queue     *string // -queue: scenario names served first (SplitNames)
	NoMarkers *bool   // -no-markers: FAKE_* markers in prompts are text
	Log       *string // -log: the request log's path (OpenLog)
	LogBodies *bool   // -log-bodies: the log's lines carry the bodies
	URLFile   *string // -url-file: where Announce writes the base URL
}

// Flags defines the CommandFlags; the command parses them with its own.
func Flags() CommandFlags {
	return CommandFlags{
		Queue:     flag.String("queue", "", "comma-separated scenario names served first, one per request"),
		NoMarkers: flag.Bool("no-markers", false, "ignore FAKE_* markers in prompts"),
		Log:       flag.String("log", "", "append one JSON line per request to this file"),
		LogBodies: flag.Bool("log-bodies", false, "include request bodies in the -log lines"),
		URLFile:   flag.String("url-file", "", "write the base URL to this file once listening"),
	}
}

// SplitNames is the names of a comma-separated list (a -queue flag),
// trimmed, without empty ones.
func SplitNames(list string) []string {
	var names []string
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name != "" {
			names = append(names, name)
		}
	}
	return names
}

// OpenLog opens the request log at path for appending (made 0644 when
// missing); a nil file when path is empty (no -log).
func OpenLog(path string) (*os.File, error) {
	if path == "" {
		return nil, nil
	}
	return os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
}

// LoggedBody is a request body as a log line holds it: the JSON itself
// when it is valid JSON, else a string.
func LoggedBody(body []byte) any {
	if json.Valid(body) {
		return json.RawMessage(body)
	}
	return string(body)
}

// Announce prints a fake's base URL on standard output and, when file is
// set (-url-file), writes it there too, as a line.
func Announce(url, file string) error {
	fmt.Println(url)
	if file == "" {
		return nil
	}
	return os.WriteFile(file, []byte(url+"\n"), 0o644)
}

// StopSignals receives SIGINT and SIGTERM, which stop a fake's command.
func StopSignals() <-chan os.Signal {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	return sig
}
