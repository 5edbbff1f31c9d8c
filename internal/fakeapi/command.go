package fakeapi

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// What the fakes' commands (cmd/fakeanthropic, cmd/fakeopenai) share:
// they take a comma-separated queue of scenario names, append a JSON line
// per request to a log file, print their base URL (and write it to a file
// a script waits on) and serve until they are told to stop.

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
