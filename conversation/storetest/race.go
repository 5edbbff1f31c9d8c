package storetest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/conversation"
)

func testRevisions(t *testing.T, s conversation.Store) {
	ctx := context.Background()
	f1 := []conversation.File{{Path: "h", Mode: 0o600, Data: []byte("one\n")}}
	m := meta("c01rev", t0)
	mustPut(t, s, m, f1)
	got, err := s.Meta(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Revision != 1 {
		t.Fatalf("revision of a new conversation = %d, want 1", got.Revision)
	}
	// Two turns continue revision 1: the first stores 2, the second is stale.
	a := got
	a.Turns++
	fa := []conversation.File{{Path: "h", Mode: 0o600, Data: []byte("one\ntwo a\n")}}
	mustPut(t, s, a, fa)
	b := got
	b.Turns++
	b.Model = "the loser"
	err = s.Put(ctx, b, []conversation.File{{Path: "h", Mode: 0o600, Data: []byte("one\ntwo b\n")}})
	var stale *conversation.StaleError
	if !errors.As(err, &stale) || !errors.Is(err, conversation.ErrStale) {
		t.Fatalf("stale Put: %v, want a *StaleError", err)
	}
	if d := cmp.Diff(conversation.StaleError{ID: "c01rev", Base: 1, Current: 2}, *stale); d != "" {
		t.Errorf("StaleError (-want +got):\n%s", d)
	}
	a.Revision = 2
	checkStored(t, s, a, fa) // the stale Put changed nothing
	for _, tc := range []struct {
		name          string
		base, current int64
	}{
		{"new over stored", 0, 2},
		{"from the future", 7, 2},
	} {
		m := a
		m.Revision = tc.base
		err := s.Put(ctx, m, f1)
		if !errors.As(err, &stale) || stale.Base != tc.base || stale.Current != tc.current {
			t.Errorf("%s: Put: %v, want StaleError{Base: %d, Current: %d}", tc.name, err, tc.base, tc.current)
		}
	}
	// AnyRevision replaces whatever is stored.
	any := a
	any.Revision = conversation.AnyRevision
	mustPut(t, s, any, f1)
	any.Revision = 3
	checkStored(t, s, any, f1)
	// A deleted conversation is not continued by a late turn.
	if err := s.Delete(ctx, m.ID); err != nil {
		t.Fatal(err)
	}
	late := any
	err = s.Put(ctx, late, f1)
	if !errors.As(err, &stale) || stale.Current != 0 {
		t.Errorf("Put continuing a deleted conversation: %v, want StaleError{Current: 0}", err)
	}
	if _, err := s.Meta(ctx, m.ID); !errors.Is(err, conversation.ErrNotFound) {
		t.Errorf("Meta after a refused Put: %v, want ErrNotFound", err)
	}
	// Created again, it starts at revision 1.
	late.Revision = 0
	mustPut(t, s, late, f1)
	late.Revision = 1
	checkStored(t, s, late, f1)
	// Listed metadata carries the revision.
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].Revision != 1 {
		t.Errorf("List = %v, %v; want one conversation at revision 1", list, err)
	}
}

func testImportRevision(t *testing.T, s conversation.Store) {
	ctx := context.Background()
	src := NewMemory()
	m := meta("c01imp", t0)
	files := []conversation.File{{Path: "h", Mode: 0o600, Data: []byte("x")}}
	mustPut(t, src, m, files)
	m.Revision = 1
	mustPut(t, src, m, files) // revision 2 there
	var buf bytes.Buffer
	if err := conversation.Export(ctx, src, m.ID, &buf); err != nil {
		t.Fatal(err)
	}
	got, err := conversation.Import(ctx, s, bytes.NewReader(buf.Bytes()), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Revision != 1 {
		t.Errorf("imported revision = %d, want 1 (a new history in this store)", got.Revision)
	}
	if _, err := conversation.Import(ctx, s, bytes.NewReader(buf.Bytes()), nil); !errors.Is(err, conversation.ErrExist) {
		t.Errorf("second Import: %v, want ErrExist", err)
	}
	got, err = conversation.Import(ctx, s, bytes.NewReader(buf.Bytes()), &conversation.ImportOptions{Replace: true})
	if err != nil || got.Revision != 2 {
		t.Errorf("Import --replace = revision %d, %v; want 2", got.Revision, err)
	}
}

var owner = conversation.Owner{Host: "host-a", PID: 4242, Lease: "lease-1"}

func testHolds(t *testing.T, s conversation.Store) {
	ctx := context.Background()
	before := time.Now().Add(-time.Minute)
	h, err := s.Hold(ctx, "c01held", owner)
	if err != nil {
		t.Fatalf("Hold of a conversation that is not stored yet: %v", err)
	}
	other := conversation.Owner{Host: "host-b", PID: 7, Lease: "lease-2"}
	_, err = s.Hold(ctx, "c01held", other)
	var busy *conversation.BusyError
	if !errors.As(err, &busy) || !errors.Is(err, conversation.ErrBusy) {
		t.Fatalf("second Hold: %v, want a *BusyError", err)
	}
	if busy.ID != "c01held" || busy.Holder.Owner != owner || busy.Holder.Since.Before(before) || busy.Holder.Since.After(time.Now().Add(time.Minute)) {
		t.Errorf("BusyError = %+v, want holder %+v since about now", busy, owner)
	}
	if !strings.Contains(err.Error(), "host-a") || !strings.Contains(err.Error(), "4242") {
		t.Errorf("busy error %q does not name the holder", err)
	}
	// The same owner is refused too: a hold is per turn, not per process.
	if _, err := s.Hold(ctx, "c01held", owner); !errors.Is(err, conversation.ErrBusy) {
		t.Errorf("Hold by the same owner: %v, want ErrBusy", err)
	}
	// Another conversation is free.
	h2, err := s.Hold(ctx, "c01other", other)
	if err != nil {
		t.Fatalf("Hold of another conversation: %v", err)
	}
	// Holds are advisory: Put and Get go on.
	mustPut(t, s, meta("c01held", t0), nil)
	if _, err := s.Meta(ctx, "c01held"); err != nil {
		t.Errorf("Meta of a held conversation: %v", err)
	}
	if err := h.Release(); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := h.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
	h3, err := s.Hold(ctx, "c01held", other)
	if err != nil {
		t.Fatalf("Hold after Release: %v", err)
	}
	// A released hold releasing again does not free the new holder's.
	h.Release()
	if _, err := s.Hold(ctx, "c01held", owner); !errors.Is(err, conversation.ErrBusy) {
		t.Errorf("Hold after a stale Release: %v, want ErrBusy", err)
	}
	h3.Release()
	h2.Release()
	for _, id := range []string{"", "../x", "C01BAD", "a/b"} {
		if h, err := s.Hold(ctx, id, owner); !errors.Is(err, conversation.ErrInvalid) {
			t.Errorf("Hold(%q): %v, want ErrInvalid", id, err)
			if h != nil {
				h.Release()
			}
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if h, err := s.Hold(cctx, "c01held", owner); !errors.Is(err, context.Canceled) {
		t.Errorf("Hold with a cancelled context: %v, want context.Canceled", err)
		if h != nil {
			h.Release()
		}
	}
}

func testHoldWait(t *testing.T, s conversation.Store) {
	ctx := context.Background()
	h, err := s.Hold(ctx, "c01wait", owner)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter is told once that it waits, and gets the hold when it is
	// released (here: as soon as it says it waits).
	calls := 0
	h2, err := conversation.HoldWait(ctx, s, "c01wait", conversation.Owner{Host: "b", PID: 2}, time.Hour, func(b *conversation.BusyError) {
		calls++
		if b.Holder.Owner != owner {
			t.Errorf("waiting for %+v, want %+v", b.Holder.Owner, owner)
		}
		h.Release()
	})
	if err != nil || calls != 1 {
		t.Fatalf("HoldWait = %v after %d busy calls; want a hold after 1", err, calls)
	}
	// A waiter whose bound runs out gets the busy error.
	_, err = conversation.HoldWait(ctx, s, "c01wait", owner, time.Millisecond, nil)
	if !errors.Is(err, conversation.ErrBusy) {
		t.Errorf("HoldWait past its bound: %v, want ErrBusy", err)
	}
	// Without a wait it does not wait.
	if _, err := conversation.HoldWait(ctx, s, "c01wait", owner, 0, func(*conversation.BusyError) { t.Error("onBusy called without a wait") }); !errors.Is(err, conversation.ErrBusy) {
		t.Errorf("HoldWait(0): %v, want ErrBusy", err)
	}
	// A cancelled waiter stops.
	cctx, cancel := context.WithCancel(ctx)
	_, err = conversation.HoldWait(cctx, s, "c01wait", owner, time.Hour, func(*conversation.BusyError) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled HoldWait: %v, want context.Canceled", err)
	}
	h2.Release()
}

// raceID is the conversation the racing cases share.
const raceID = "c01racing"

// Turn is one simulated turn of the racing cases: it holds the
// conversation (waiting up to wait), reads it, appends "who" to its
// history file, counts the turn and stores it from the revision it read.
// It returns the turn number it stored. With holds skipped it relies on
// the revision alone (a *StaleError for the losers).
func Turn(ctx context.Context, s conversation.Store, id, who string, wait time.Duration, hold bool) (int, error) {
	if hold {
		h, err := conversation.HoldWait(ctx, s, id, conversation.Self(who), wait, nil)
		if err != nil {
			return 0, err
		}
		defer h.Release()
	}
	m, files, err := s.Get(ctx, id)
	switch {
	case errors.Is(err, conversation.ErrNotFound):
		m = meta(id, t0)
		m.Turns, m.Revision = 0, 0
		files = []conversation.File{{Path: "history", Mode: 0o600}}
	case err != nil:
		return 0, err
	}
	m.Turns++
	m.Updated = time.Now().UTC()
	files[0].Data = fmt.Appendf(files[0].Data, "%d %s\n", m.Turns, who)
	if err := s.Put(ctx, m, files); err != nil {
		return 0, err
	}
	return m.Turns, nil
}

// checkHistory verifies that every reported turn is in the history, once,
// at its number, and that the history holds nothing else.
func checkHistory(t *testing.T, s conversation.Store, reported map[int]string) {
	t.Helper()
	m, files, err := s.Get(context.Background(), raceID)
	if len(reported) == 0 {
		if !errors.Is(err, conversation.ErrNotFound) {
			t.Errorf("no turn succeeded, yet Get: %v", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	want := make([]string, 0, len(reported))
	for n := 1; n <= len(reported); n++ {
		who, ok := reported[n]
		if !ok {
			t.Errorf("turn %d was never reported, yet %d turns were", n, len(reported))
		}
		want = append(want, fmt.Sprintf("%d %s", n, who))
	}
	got := strings.Split(strings.TrimSuffix(string(files[0].Data), "\n"), "\n")
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("history (-reported +stored):\n%s", d)
	}
	if m.Turns != len(reported) || m.Revision != int64(len(reported)) {
		t.Errorf("turns %d, revision %d; want %d successful turns", m.Turns, m.Revision, len(reported))
	}
}

// record adds a reported turn, failing on a duplicate number.
func record(t *testing.T, mu *sync.Mutex, reported map[int]string, n int, who string) {
	mu.Lock()
	defer mu.Unlock()
	if prev, ok := reported[n]; ok {
		t.Errorf("turn %d reported twice: by %s and %s", n, prev, who)
	}
	reported[n] = who
}

// testRacingPuts: without holds, turns that read the same revision race
// on Put; the revision lets exactly one of them win each time.
func testRacingPuts(t *testing.T, s conversation.Store) {
	racing(t, s, 8, 6, 0, false)
}

// testRacingTurns: goroutines that wait for the hold all get their turns.
func testRacingTurns(t *testing.T, s conversation.Store) {
	reported := racing(t, s, 8, 5, time.Hour, true)
	if len(reported) != 40 {
		t.Errorf("%d turns succeeded, want all 40 (they wait)", len(reported))
	}
}

// testRacingTurnsNoWait: goroutines that do not wait run or are busy.
func testRacingTurnsNoWait(t *testing.T, s conversation.Store) {
	racing(t, s, 8, 5, 0, true)
}

func racing(t *testing.T, s conversation.Store, workers, turns int, wait time.Duration, hold bool) map[int]string {
	ctx := context.Background()
	var mu sync.Mutex
	reported := map[int]string{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range turns {
				who := fmt.Sprintf("g%d.%d", w, i)
				n, err := Turn(ctx, s, raceID, who, wait, hold)
				switch {
				case err == nil:
					record(t, &mu, reported, n, who)
				case errors.Is(err, conversation.ErrBusy) && wait == 0, errors.Is(err, conversation.ErrStale) && !hold:
				default:
					t.Errorf("%s: %v", who, err)
				}
			}
		}()
	}
	wg.Wait()
	checkHistory(t, s, reported)
	return reported
}

// childEnv names the store a child process opens (see Main).
const childEnv = "OUTPOST_STORETEST_CHILD"

// Main is called from the TestMain of a store's test package when the
// suite's Options.Spec is set: in a child process started by the suite it
// runs the child's turns and exits; otherwise it returns at once. open
// turns a Spec back into a store.
//
//	func TestMain(m *testing.M) {
//		storetest.Main(open)
//		os.Exit(m.Run())
//	}
func Main(open func(spec string) (conversation.Store, error)) {
	spec, ok := os.LookupEnv(childEnv)
	if !ok {
		return
	}
	os.Exit(child(spec, open))
}

// child runs the turns of one racing process and prints one line per
// outcome: "ok N WHO", "busy WHO" or "error WHO: ...".
func child(spec string, open func(string) (conversation.Store, error)) int {
	s, err := open(spec)
	if err != nil {
		fmt.Println("error open:", err)
		return 1
	}
	if c, ok := s.(interface{ Close() }); ok {
		defer c.Close()
	}
	turns, _ := strconv.Atoi(os.Getenv(childEnv + "_TURNS"))
	wait, _ := time.ParseDuration(os.Getenv(childEnv + "_WAIT"))
	name := os.Getenv(childEnv + "_NAME")
	for i := range turns {
		who := fmt.Sprintf("%s.%d", name, i)
		n, err := Turn(context.Background(), s, raceID, who, wait, true)
		switch {
		case err == nil:
			fmt.Println("ok", n, who)
		case errors.Is(err, conversation.ErrBusy):
			fmt.Println("busy", who)
		default:
			fmt.Printf("error %s: %s\n", who, strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
	return 0
}

// testRacingProcesses: processes sharing the store race on one
// conversation, first waiting for the hold (all turns run), then not.
func testRacingProcesses(t *testing.T, s conversation.Store, spec func(conversation.Store) string) {
	if spec == nil {
		t.Skip("the store lives in one process (no Options.Spec)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	reported := map[int]string{}
	var mu sync.Mutex
	run := func(round string, procs, turns int, wait time.Duration) (ok, busy int) {
		var wg sync.WaitGroup
		for p := range procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := exec.Command(exe, "-test.run=^$")
				cmd.Env = append(os.Environ(), childEnv+"="+spec(s), fmt.Sprintf("%s_TURNS=%d", childEnv, turns),
					childEnv+"_WAIT="+wait.String(), fmt.Sprintf("%s_NAME=%s-p%d", childEnv, round, p))
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				if err != nil {
					t.Errorf("child %d: %v\n%s%s", p, err, out, stderr.Bytes())
					return
				}
				sc := bufio.NewScanner(bytes.NewReader(out))
				for sc.Scan() {
					f := strings.Fields(sc.Text())
					switch {
					case len(f) == 3 && f[0] == "ok":
						n, _ := strconv.Atoi(f[1])
						record(t, &mu, reported, n, f[2])
						mu.Lock()
						ok++
						mu.Unlock()
					case len(f) == 2 && f[0] == "busy" && wait == 0:
						mu.Lock()
						busy++
						mu.Unlock()
					default:
						t.Errorf("child %d: %s", p, sc.Text())
					}
				}
			}()
		}
		wg.Wait()
		return ok, busy
	}
	if ok, _ := run("wait", 4, 5, time.Hour); ok != 20 {
		t.Errorf("%d of 20 waiting turns succeeded", ok)
	}
	ok, busy := run("nowait", 4, 5, 0)
	if ok+busy != 20 || ok == 0 {
		t.Errorf("turns without waiting: %d ok, %d busy; want 20 in all, some ok", ok, busy)
	}
	checkHistory(t, s, reported)
	keys := make([]int, 0, len(reported))
	for k := range reported {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b, _ := json.Marshal(keys)
	t.Logf("turns stored: %s", b)
}
