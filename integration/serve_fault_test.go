package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outposthq/outpost/internal/pgtest"
)

// serveStore starts `outpost serve` on the world's store and outpost home
// (so its spool is the CLI's).
func (w *storeWorld) serve(args ...string) *served {
	w.t.Helper()
	return startServe(w.t, w.home, "", append([]string{"--store", w.spec}, args...)...)
}

// turnThrough runs a turn through the server and returns its result line.
func (s *served) turnThrough(req map[string]any, onItem func(streamed)) map[string]any {
	s.t.Helper()
	id, err := s.start(req)
	if err != nil {
		s.t.Fatal(err)
	}
	items, err := s.follow(id, 0, func(it streamed) bool {
		if onItem != nil {
			onItem(it)
		}
		return false
	})
	if err != nil || len(items) == 0 || items[len(items)-1].typ != "result" {
		s.t.Fatalf("turn %s: %v, %d items", id, err, len(items))
	}
	return items[len(items)-1].data
}

// TestServeDeleteHeld: DELETE /v1/conversations/{id} answers 409 while
// another outpost process holds the conversation (a resume running
// there), on each store, and deletes it once that turn is over.
func TestServeDeleteHeld(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, w *storeWorld) {
		id := w.mustRun("first").res.Conversation
		s := w.serve()
		holder, reap := w.hold(id)
		defer reap()
		code, b := s.do("DELETE", "/v1/conversations/"+id, nil)
		if code != 409 || !strings.Contains(string(b), `"conflict"`) {
			t.Fatalf("DELETE of a held conversation: %d %s, want 409 conflict", code, b)
		}
		if r := w.outpost("conversations", "show", id); r.code != 0 {
			t.Fatalf("the held conversation is gone: exit %d %s", r.code, r.stderr)
		}
		holder.Process.Signal(syscall.SIGINT)
		holder.Wait()
		deadline := time.Now().Add(15 * time.Second) // docs/stores.md: a PostgreSQL hold is freed within 11 s
		for {
			code, b = s.do("DELETE", "/v1/conversations/"+id, nil)
			if code == 204 {
				break
			}
			if code != 409 || time.Now().After(deadline) {
				t.Fatalf("DELETE once the holder is done: %d %s, want 204", code, b)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
}

// TestServeSpoolOnOutage stops the real PostgreSQL server in the middle of
// a turn through `outpost serve`: the turn's result says details.spooled;
// once PostgreSQL is back, the server pushes the spool by itself (no
// restart) and the conversation resumes with the spooled turn in it.
func TestServeSpoolOnOutage(t *testing.T) {
	w := newStoreWorld(t, "postgres")
	pg := pgtest.Shared(t)
	s := w.serve("--spool-push", "200ms")
	first := s.turnThrough(map[string]any{"prompt": "first"}, nil)
	id, _ := first["conversation"].(string)
	stopped := false
	res := s.turnThrough(map[string]any{"prompt": "#slow=60 during the outage", "resume": id}, func(streamed) {
		if !stopped {
			stopped = true
			if err := pg.Stop("immediate"); err != nil {
				t.Fatal(err)
			}
		}
	})
	restarted := false
	defer func() {
		if !restarted {
			pg.Start()
		}
	}()
	e, _ := res["error"].(map[string]any)
	d, _ := e["details"].(map[string]any)
	spooled, _ := d["spooled"].(string)
	if e["code"] != "conversation" || !strings.HasPrefix(spooled, w.home) {
		b, _ := json.Marshal(res)
		t.Fatalf("turn during the outage: %s, want code conversation with details.spooled in the outpost home", b)
	}
	if n := s.metric("outpost_spool_files"); n != 1 || s.metric("outpost_spool_bytes") == 0 {
		t.Errorf("outpost_spool_files %v, want 1 (and bytes)", n)
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	for deadline := time.Now().Add(60 * time.Second); s.metric("outpost_spool_files") != 0; {
		if time.Now().After(deadline) {
			t.Fatal("the spool was not pushed once PostgreSQL was back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	after := s.turnThrough(map[string]any{"prompt": "after the outage", "resume": id}, nil)
	if text := fmt.Sprint(after["text"]); !strings.Contains(text, "(turn 3)") || after["error"] != nil {
		t.Errorf("resume after the outage: %v %v (the spooled turn is turn 2)", text, after["error"])
	}
}
