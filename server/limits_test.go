package server_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/server"
)

// TestAbuseLimits: what a client could exhaust is bounded: the retained
// events of a turn and of all turns (a truncated replay says so), the
// open event streams; and a tokens file another user could write is
// refused.
func TestAbuseLimits(t *testing.T) {
	t.Run("truncated replay", func(t *testing.T) {
		ts := start(t, func(o *server.Options) { o.MaxTurnEvents = 64 << 10 })
		st := ts.startTurn(map[string]any{"prompt": "#big hello"})
		ts.wait(st.ID)
		items := ts.events(st.ID, 0, nil)
		first := items[0]
		if first.data["type"] != "notice" || first.data["kind"] != "truncated" {
			t.Fatalf("the replay does not start with a truncated notice: %s", first.raw)
		}
		d, _ := first.data["details"].(map[string]any)
		if d["dropped_events"] != float64(first.seq) || d["dropped_bytes"].(float64) < 8<<20 || d["first_retained"] != float64(first.seq+1) {
			t.Errorf("truncated notice (id %d): %s", first.seq, first.raw)
		}
		for i, it := range items[1:] {
			if it.seq != first.seq+int64(i)+1 {
				t.Fatalf("event %d has id %d after the notice's %d", i, it.seq, first.seq)
			}
		}
		if items[len(items)-1].data["type"] != "result" {
			t.Errorf("the replay does not end with the result")
		}
		// From the last dropped event on, nothing is missed: no notice.
		if again := ts.events(st.ID, first.seq, nil); again[0].data["type"] == "notice" {
			t.Errorf("a replay from the first retained event says it was truncated: %s", again[0].raw)
		}
	})
	t.Run("retained bytes", func(t *testing.T) {
		const total = 3000
		ts := start(t, func(o *server.Options) { o.MaxConcurrent, o.MaxRetained = 1, total })
		var ids []string
		for i := range 4 {
			st := ts.startTurn(map[string]any{"prompt": fmt.Sprintf("hello %d", i)})
			ts.wait(st.ID)
			ids = append(ids, st.ID)
		}
		if code, b, _ := ts.do("GET", "/v1/turns/"+ids[0], nil); code != 404 {
			t.Errorf("the oldest finished turn is still kept: %d %s", code, b)
		}
		if code, _, _ := ts.do("GET", "/v1/turns/"+ids[3], nil); code != 200 {
			t.Errorf("the newest turn: %d", code)
		}
		if n := ts.metric("outpost_events_retained_bytes"); n > total || n == 0 {
			t.Errorf("retained events: %v bytes, want 1..%d", n, total)
		}
	})
	t.Run("event streams", func(t *testing.T) {
		ts := start(t, func(o *server.Options) { o.MaxStreams, o.MaxTurnStreams = 3, 2 })
		a := ts.startTurn(map[string]any{"prompt": "#slow=2000"})
		b := ts.startTurn(map[string]any{"prompt": "#slow=2000"})
		t.Cleanup(func() {
			ts.do("POST", "/v1/turns/"+a.ID+"/cancel", nil)
			ts.do("POST", "/v1/turns/"+b.ID+"/cancel", nil)
		})
		open := func(id string, want int) *http.Response {
			t.Helper()
			req, _ := http.NewRequest("GET", ts.url+"/v1/turns/"+id+"/events", nil)
			req.Header.Set("Authorization", "Bearer "+ts.token)
			resp, err := ts.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { resp.Body.Close() })
			if resp.StatusCode != want {
				t.Fatalf("stream of %s: %d, want %d", id, resp.StatusCode, want)
			}
			if want == 429 && resp.Header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
			return resp
		}
		first := open(a.ID, 200)
		open(a.ID, 200)
		open(a.ID, 429) // per turn
		open(b.ID, 200)
		open(b.ID, 429) // in all
		if n := ts.metric("outpost_event_streams"); n != 3 {
			t.Errorf("outpost_event_streams %v, want 3", n)
		}
		first.Body.Close()
		for deadline := time.Now().Add(10 * time.Second); ts.metric("outpost_event_streams") != 2; {
			if time.Now().After(deadline) {
				t.Fatal("a closed stream is still counted")
			}
			time.Sleep(10 * time.Millisecond)
		}
		open(b.ID, 200)
	})
	t.Run("tokens file", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "conf")
		path := filepath.Join(dir, "tokens")
		good, err := server.AddToken(path, "good")
		if err != nil {
			t.Fatal(err)
		}
		other := filepath.Join(t.TempDir(), "other")
		planted, err := server.AddToken(other, "planted")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name string
			path string
			mode os.FileMode
		}{{"file writable by others", path, 0o666}, {"file writable by the group", path, 0o620}, {"directory writable by others", dir, 0o777}} {
			t.Run(c.name, func(t *testing.T) {
				fi, _ := os.Stat(c.path)
				os.Chmod(c.path, c.mode)
				defer os.Chmod(c.path, fi.Mode().Perm())
				if _, err := server.LoadTokens(path); err == nil {
					t.Fatalf("mode %04o accepted", c.mode)
				}
			})
		}
		// A running server does not reload a file that became writable.
		tokens, err := server.LoadTokens(path)
		if err != nil {
			t.Fatal(err)
		}
		os.Chmod(path, 0o666)
		line, _ := os.ReadFile(other)
		f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		f.Write(line)
		f.Close()
		if _, ok := tokens.Check(planted); ok {
			t.Error("a token planted in a world-writable file was accepted")
		}
		if _, ok := tokens.Check(good); !ok {
			t.Error("the last good list was dropped")
		}
	})
}

// metric returns the value of an unlabelled series of /metrics.
func (ts *testServer) metric(name string) float64 {
	ts.t.Helper()
	_, b, _ := ts.do("GET", "/metrics", nil)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	ts.t.Fatalf("no metric %s", name)
	return 0
}
