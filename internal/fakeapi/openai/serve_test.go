package openai

import (
	"encoding/json"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestServe runs the fake as a standalone server for manual experiments with the real
// CLIs. It is skipped unless FAKEAPI_OPENAI_SERVE names a directory; it writes the base URL
// to DIR/url, every request (full body included) to DIR/requests.jsonl, and serves until
// SIGTERM/SIGINT or FAKEAPI_OPENAI_SERVE_FOR (a duration, default 10m) passes:
//
//	FAKEAPI_OPENAI_SERVE=/tmp/fake go test -count=1 -timeout 0 -run '^TestServe$' ./internal/fakeapi/openai/
func TestServe(t *testing.T) {
	dir := os.Getenv("FAKEAPI_OPENAI_SERVE")
	if dir == "" {
		t.Skip("FAKEAPI_OPENAI_SERVE not set")
	}
	d := 10 * time.Minute
	if v := os.Getenv("FAKEAPI_OPENAI_SERVE_FOR"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "requests.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := Start(t, Config{Logf: t.Logf})
	if err := os.WriteFile(filepath.Join(dir, "url"), []byte(s.URL()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	written := 0
	flush := func() {
		reqs := s.Requests()
		for _, r := range reqs[written:] {
			b, _ := json.Marshal(map[string]any{
				"seq": r.Seq, "time": r.Time.Format(time.RFC3339Nano), "method": r.Method, "path": r.Path,
				"query": r.Query, "headers": r.Header, "served": r.Served, "n_input": r.NumInput,
				"last_item_type": r.LastItemType, "last_user": r.LastUserText, "tool_output": r.ToolOutput,
				"tools": r.ToolNames, "body": json.RawMessage(orNull(r.RawBody)),
			})
			f.Write(append(b, '\n'))
		}
		written = len(reqs)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	stop := time.After(d)
	for {
		select {
		case <-tick.C:
			flush()
		case <-sig:
			flush()
			return
		case <-stop:
			flush()
			return
		}
	}
}

func orNull(b []byte) []byte {
	if json.Valid(b) && len(b) > 0 {
		return b
	}
	q, _ := json.Marshal(string(b))
	return q
}
