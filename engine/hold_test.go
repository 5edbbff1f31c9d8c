package engine_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/conversation/storetest"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/providers/local"
)

// holdWorld runs echo turns against one store.
type holdWorld struct {
	t      *testing.T
	store  conversation.Store
	events []harness.Event
	opts   func(*engine.RunOptions)
}

func (w *holdWorld) run(tn engine.Turn, environ ...string) (*engine.Result, error) {
	w.t.Helper()
	tn.Agent = harness.Agent{Kind: "cli", Harness: echo.Harness()}
	if tn.Workdir == "" {
		tn.Workdir = w.t.TempDir()
	}
	w.events = nil
	o := &engine.RunOptions{
		Provider: local.New(&local.Options{BaseDir: w.t.TempDir()}),
		Store:    w.store,
		Environ:  append([]string{"PATH=" + os.Getenv("PATH")}, environ...),
		OnEvent:  func(ev harness.Event) { w.events = append(w.events, ev) },
	}
	if w.opts != nil {
		w.opts(o)
	}
	return engine.Run(context.Background(), tn, o)
}

func (w *holdWorld) first() string {
	w.t.Helper()
	res, err := w.run(engine.Turn{Prompt: "first"})
	if err != nil {
		w.t.Fatal(err)
	}
	return res.Conversation
}

var someone = conversation.Owner{Host: "elsewhere", PID: 31337, Lease: "docker lease x"}

func TestResumeOfAHeldConversation(t *testing.T) {
	w := &holdWorld{t: t, store: storetest.NewMemory()}
	id := w.first()
	h, err := w.store.Hold(context.Background(), id, someone)
	if err != nil {
		t.Fatal(err)
	}
	_, err = w.run(engine.Turn{Prompt: "second", Resume: id})
	var oe *outpost.Error
	if !errors.As(err, &oe) || oe.Code != outpost.Conversation || oe.Details["busy"] != true || outpost.ExitCode(err) != outpost.ExitBusy {
		t.Fatalf("resume of a held conversation: %v (%+v)", err, oe)
	}
	holder, _ := oe.Details["holder"].(map[string]any)
	if holder["pid"] != 31337 || holder["host"] != "elsewhere" || oe.Details["since"] == nil || !errors.Is(err, conversation.ErrBusy) {
		t.Errorf("busy details %v", oe.Details)
	}
	if !strings.Contains(err.Error(), "31337") {
		t.Errorf("message %q does not name the holder", err)
	}
	// A fork does not wait: it reads the last stored revision.
	fork, err := w.run(engine.Turn{Prompt: "fork", Fork: id})
	if err != nil || !strings.Contains(fork.Text, "turn 2") {
		t.Fatalf("fork of a held conversation: %v %v", fork, err)
	}
	// Waiting: told once, then run when the holder releases.
	released := false
	w.opts = func(o *engine.RunOptions) {
		o.OnEvent = func(ev harness.Event) {
			w.events = append(w.events, ev)
			if ev.Type == harness.EventNotice && ev.Kind == "waiting" && !released {
				released = true
				h.Release()
			}
		}
	}
	res, err := w.run(engine.Turn{Prompt: "second", Resume: id, Wait: time.Hour})
	if err != nil || !strings.Contains(res.Text, "turn 2") || !released {
		t.Fatalf("waiting resume: %v %v (released %v)", res, err, released)
	}
	waits := 0
	for _, ev := range w.events {
		if ev.Kind == "waiting" {
			waits++
			if ev.Details["busy"] != true || ev.Agent != "echo" {
				t.Errorf("waiting notice %+v", ev)
			}
		}
	}
	if waits != 1 {
		t.Errorf("%d waiting notices, want 1", waits)
	}
	// The hold is released when the turn ends.
	h2, err := w.store.Hold(context.Background(), id, someone)
	if err != nil {
		t.Fatalf("hold after the turn: %v", err)
	}
	h2.Release()
}

// flaky fails its first Puts, as a store that restarts does; or stores a
// turn of its own first, as another machine does.
type flaky struct {
	conversation.Store
	failures atomic.Int32
	always   bool
	racer    bool
}

var errRestarting = errors.New("the database system is starting up")

func (f *flaky) Put(ctx context.Context, m conversation.Meta, files []conversation.File) error {
	if f.racer && m.Revision > 0 {
		other := m
		if err := f.Store.Put(ctx, other, files); err != nil {
			return err
		}
	}
	if f.always || f.failures.Add(-1) >= 0 {
		return errRestarting
	}
	return f.Store.Put(ctx, m, files)
}

func TestStoreFailureRetriesThenSpools(t *testing.T) {
	mem := storetest.NewMemory()
	st := &flaky{Store: mem}
	spool := conversation.NewSpool(filepath.Join(t.TempDir(), "spool"))
	w := &holdWorld{t: t, store: st, opts: func(o *engine.RunOptions) { o.Spool, o.StoreRetry = spool, 2*time.Second }}
	id := w.first()

	st.failures.Store(2) // a short outage: retried
	res, err := w.run(engine.Turn{Prompt: "second", Resume: id})
	if err != nil || res.Conversation != id {
		t.Fatalf("turn through a short outage: %v", err)
	}

	st.always = true // a long one: spooled
	_, err = w.run(engine.Turn{Prompt: "third", Resume: id})
	var oe *outpost.Error
	if !errors.As(err, &oe) || oe.Code != outpost.Conversation || !errors.Is(err, errRestarting) {
		t.Fatalf("turn through a long outage: %v", err)
	}
	file, _ := oe.Details["spooled"].(string)
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("details.spooled %q: %v", file, err)
	}
	st.always = false
	pushed, err := spool.Push(context.Background(), mem)
	if err != nil || len(pushed) != 1 || pushed[0].Stored != id {
		t.Fatalf("push: %+v %v", pushed, err)
	}
	m, _ := mem.Meta(context.Background(), id)
	if m.Turns != 3 || m.Revision != 3 {
		t.Errorf("after the push: %d turns, revision %d; want 3, 3", m.Turns, m.Revision)
	}

	// Another turn stored meanwhile: the store refuses this one as stale,
	// at once (no retry), and the turn is spooled, not lost.
	st.racer = true
	_, err = w.run(engine.Turn{Prompt: "fourth", Resume: id})
	if !errors.As(err, &oe) || oe.Details["stale"] != true || oe.Details["spooled"] == nil || !errors.Is(err, conversation.ErrStale) {
		t.Fatalf("stale turn: %v", err)
	}
}

func TestStoredFilesAreMasked(t *testing.T) {
	key := "sk-echo-0123456789abcdef"
	w := &holdWorld{t: t, store: storetest.NewMemory()}
	res, err := w.run(engine.Turn{Prompt: "#leak ECHO_API_KEY"}, "ECHO_API_KEY="+key)
	if err != nil {
		t.Fatal(err)
	}
	_, files, err := w.store.Get(context.Background(), res.Conversation)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if bytes.Contains(f.Data, []byte(key)) {
			t.Errorf("%s holds the key", f.Path)
		}
		if !bytes.Contains(f.Data, []byte("ECHO_API_KEY="+strings.Repeat("*", len(key)))) {
			t.Errorf("%s does not hold the masked answer:\n%s", f.Path, f.Data)
		}
	}
	next, err := w.run(engine.Turn{Prompt: "again", Resume: res.Conversation}, "ECHO_API_KEY="+key)
	if err != nil || !strings.Contains(next.Text, "turn 2") {
		t.Fatalf("resume of the masked conversation: %v %v", next, err)
	}
}
