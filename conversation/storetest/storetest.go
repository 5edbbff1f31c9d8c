// Package storetest is the conformance suite every conversation.Store
// passes: the filesystem store, the in-memory Memory of this package (for
// tests of code that uses a Store), and any store written
// outside outpost. Call RunConformanceTests from a test of the store's
// package.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
)

// Options adjust the suite. Nil runs everything but the cases with
// several processes.
type Options struct {
	// Spec, when set, returns a string that Main's open function turns
	// back into a store sharing s's conversations from another process;
	// the suite then races child processes (the test binary run again,
	// see Main) on one conversation. Leave it nil for stores that live in
	// one process (Memory).
	Spec func(s conversation.Store) string
}

// RunConformanceTests runs the suite against stores made by newStore, which
// returns a new, empty store for each subtest (clean-up goes through
// t.Cleanup).
func RunConformanceTests(t *testing.T, newStore func(t *testing.T) conversation.Store, opts *Options) {
	t.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	tests := []struct {
		name string
		f    func(t *testing.T, s conversation.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"Replace", testReplace},
		{"MetaWithoutFiles", testMetaWithoutFiles},
		{"EmptyList", testEmptyList},
		{"ListOrder", testListOrder},
		{"Pages", testPages},
		{"Delete", testDelete},
		{"NotFound", testNotFound},
		{"ConcurrentPuts", testConcurrentPuts},
		{"UnsafePaths", testUnsafePaths},
		{"InvalidConversations", testInvalid},
		{"CancelledContext", testCancelled},
		{"Isolation", testIsolation},
		{"Resolve", testResolve},
		{"Checkpoints", testCheckpoints},
		{"ObjectsOutliveDelete", testObjectsOutliveDelete},
		{"Revisions", testRevisions},
		{"ImportRevision", testImportRevision},
		{"Holds", testHolds},
		{"HoldWait", testHoldWait},
		{"RacingPuts", testRacingPuts},
		{"RacingTurns", testRacingTurns},
		{"RacingTurnsNoWait", testRacingTurnsNoWait},
		{"RacingProcesses", func(t *testing.T, s conversation.Store) { testRacingProcesses(t, s, o.Spec) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f(t, newStore(t))
		})
	}
}

var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// meta returns typical metadata.
func meta(id string, updated time.Time) conversation.Meta {
	return conversation.Meta{
		ID:      id,
		Agent:   "echo",
		Native:  "native-" + id,
		Workdir: "/work",
		Sandbox: "docker",
		Model:   "m1",
		Created: t0,
		Updated: updated,
		Turns:   3,
		Usage:   harness.Usage{InputTokens: 10, OutputTokens: 20, CacheReadTokens: 3, CacheWriteTokens: 4, Complete: true},
		// The metered usage and the budget are kept with the
		// conversation, so that a budget holds on every machine that
		// shares the store.
		Budget:  5000,
		Metered: metered(),
	}
}

func metered() *harness.Metered {
	u := harness.MeteredUsage{Requests: 2, ReasoningTokens: 5, Usage: harness.Usage{InputTokens: 11, OutputTokens: 21, CacheReadTokens: 300, CacheWriteTokens: 40, Complete: true}}
	return &harness.Metered{MeteredUsage: u, ByModel: map[string]harness.MeteredUsage{"m1": u}}
}

// paths returns the files' paths.
func paths(files []conversation.File) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.Path
	}
	return out
}

// opts compare data with bytes.Equal (cmp walks bytes one by one, far too
// slowly for megabytes) and nil like empty.
var opts = []cmp.Option{
	cmp.Comparer(bytes.Equal),
	cmp.FilterPath(func(p cmp.Path) bool { return p.Last().Type() != reflect.TypeFor[[]byte]() }, cmpopts.EquateEmpty()),
}

func mustPut(t *testing.T, s conversation.Store, m conversation.Meta, files []conversation.File) {
	t.Helper()
	if err := s.Put(context.Background(), m, files); err != nil {
		t.Fatalf("Put(%s): %v", m.ID, err)
	}
}

// checkStored verifies that s holds m with files.
func checkStored(t *testing.T, s conversation.Store, m conversation.Meta, files []conversation.File) {
	t.Helper()
	ctx := context.Background()
	want := m
	want.Files = paths(files)
	if want.Revision == 0 {
		want.Revision = 1 // stored once, as new
	}
	gotMeta, gotFiles, err := s.Get(ctx, m.ID)
	if err != nil {
		t.Fatalf("Get(%s): %v", m.ID, err)
	}
	if d := cmp.Diff(want, gotMeta, opts...); d != "" {
		t.Errorf("Get(%s) meta (-want +got):\n%s", m.ID, d)
	}
	if d := cmp.Diff(files, gotFiles, opts...); d != "" {
		t.Errorf("Get(%s) files (-want +got):\n%s", m.ID, d)
	}
	onlyMeta, err := s.Meta(ctx, m.ID)
	if err != nil {
		t.Fatalf("Meta(%s): %v", m.ID, err)
	}
	if d := cmp.Diff(want, onlyMeta, opts...); d != "" {
		t.Errorf("Meta(%s) (-want +got):\n%s", m.ID, d)
	}
}

func testRoundTrip(t *testing.T, s conversation.Store) {
	binary := make([]byte, 256*3)
	for i := range binary {
		binary[i] = byte(i)
	}
	big := bytes.Repeat([]byte("0123456789abcdef\n\x00\xff"), 4<<20/19) // a few MB
	files := []conversation.File{
		{Path: ".echo/sessions/n1.jsonl", Mode: 0o600, Data: []byte("{\"a\":1}\n")},
		{Path: ".echo/sessions/binary", Mode: 0o644, Data: binary},
		{Path: ".echo/sessions/empty", Mode: 0o600, Data: nil},
		{Path: ".echo/big.bin", Mode: 0o640, Data: big},
		{Path: ".claude/projects/-work-dir/ünïcode name.jsonl", Mode: 0, Data: []byte("x")},
		{Path: strings.Repeat("d/", 40) + "deep", Mode: 0o600, Data: []byte("deep")},
	}
	for i := range 200 {
		files = append(files, conversation.File{Path: fmt.Sprintf(".echo/many/f%03d.txt", i), Mode: 0o600, Data: fmt.Appendf(nil, "file %d\n", i)})
	}
	m := meta("c01round", t0.Add(time.Hour))
	m.Parent = "c01parent"
	m.Files = []string{"ignored"}
	mustPut(t, s, m, files)
	checkStored(t, s, m, files)
}

func testReplace(t *testing.T, s conversation.Store) {
	m1 := meta("c01replace", t0)
	mustPut(t, s, m1, []conversation.File{
		{Path: "a/one", Mode: 0o600, Data: []byte("one")},
		{Path: "a/two", Mode: 0o600, Data: []byte("two")},
	})
	m2 := meta("c01replace", t0.Add(time.Minute))
	m2.Turns = 4
	m2.Model = "m2"
	m2.Revision = 1
	f2 := []conversation.File{{Path: "b/three", Mode: 0o644, Data: []byte("three")}}
	mustPut(t, s, m2, f2)
	m2.Revision = 2
	checkStored(t, s, m2, f2)
	list, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Errorf("List after replace has %d conversations, want 1", len(list))
	}
}

func testMetaWithoutFiles(t *testing.T, s conversation.Store) {
	m := meta("c01nofiles", t0)
	m.Files = []string{"stale/path"} // ignored: no files were given
	mustPut(t, s, m, nil)
	checkStored(t, s, m, nil)
}

func testEmptyList(t *testing.T, s conversation.Store) {
	list, err := s.List(context.Background())
	if err != nil {
		t.Fatalf("List of an empty store: %v", err)
	}
	if len(list) != 0 {
		t.Errorf("List of an empty store = %v", list)
	}
}

func testListOrder(t *testing.T, s conversation.Store) {
	// Put in an order that is neither creation nor update order.
	ms := []conversation.Meta{
		meta("c01b", t0.Add(3*time.Hour)),
		meta("c01a", t0.Add(1*time.Hour)),
		meta("c01d", t0.Add(2*time.Hour)),
		meta("c01c", t0.Add(2*time.Hour)), // same Updated as c01d, created later
		meta("c01e", t0.Add(2*time.Hour)), // same Updated and Created as c01d: ID decides
	}
	ms[3].Created = t0.Add(time.Minute)
	for _, m := range ms {
		mustPut(t, s, m, []conversation.File{{Path: "f", Data: []byte(m.ID)}})
	}
	list, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range list {
		got = append(got, m.ID)
		if d := cmp.Diff([]string{"f"}, m.Files); d != "" {
			t.Errorf("List: %s Files (-want +got):\n%s", m.ID, d)
		}
	}
	want := []string{"c01b", "c01c", "c01e", "c01d", "c01a"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("List order (-want +got):\n%s", d)
	}
}

// testPages pages through the conversations of testListOrder two at a
// time (conversation.ListPage: a Pager's own, else List cut), all and one
// owner's: List's order, each once, the last page without a next cursor.
func testPages(t *testing.T, s conversation.Store) {
	ctx := context.Background()
	for i, id := range []string{"c01b", "c01a", "c01d", "c01c", "c01e"} {
		m := meta(id, t0.Add(time.Duration(len(id)+i%3)*time.Hour))
		if i%2 == 0 {
			m.Owner = "token:a"
		}
		mustPut(t, s, m, []conversation.File{{Path: "f", Data: []byte(id)}})
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owner := "token:a"
	for _, o := range []*string{nil, &owner} {
		var want, got []string
		for _, m := range list {
			if o == nil || m.Owner == *o {
				want = append(want, m.ID)
			}
		}
		after, pages := "", 0
		for {
			page, next, err := conversation.ListPage(ctx, s, conversation.PageQuery{After: after, Limit: 2, Owner: o})
			if err != nil {
				t.Fatalf("ListPage after %q: %v", after, err)
			}
			for _, m := range page {
				got = append(got, m.ID)
			}
			if pages++; next == "" || pages > 5 {
				break
			}
			after = next
		}
		if d := cmp.Diff(want, got); d != "" || pages != (len(want)+1)/2 {
			t.Errorf("pages of 2 (owner %v): %d pages (-List +pages):\n%s", o, pages, d)
		}
	}
	if _, _, err := conversation.ListPage(ctx, s, conversation.PageQuery{After: "nonsense", Limit: 2}); !errors.Is(err, conversation.ErrCursor) {
		t.Errorf("a cursor no page gave: %v, want ErrCursor", err)
	}
	// A Pager called directly checks the query as ListPage does.
	if p, ok := s.(conversation.Pager); ok {
		if page, next, err := p.ListPage(ctx, conversation.PageQuery{Limit: 0}); err == nil {
			t.Errorf("Pager.ListPage with limit 0: %d conversations, next %q, no error", len(page), next)
		}
		if _, _, err := p.ListPage(ctx, conversation.PageQuery{After: "nonsense", Limit: 2}); !errors.Is(err, conversation.ErrCursor) {
			t.Errorf("Pager.ListPage after a cursor no page gave: %v, want ErrCursor", err)
		}
	}
}

func testDelete(t *testing.T, s conversation.Store) {
	ctx := context.Background()
	mustPut(t, s, meta("c01keep", t0), []conversation.File{{Path: "k", Data: []byte("k")}})
	mustPut(t, s, meta("c01gone", t0), []conversation.File{{Path: "g", Data: []byte("g")}})
	if err := s.Delete(ctx, "c01gone"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, _, err := s.Get(ctx, "c01gone"); !errors.Is(err, conversation.ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, "c01gone"); !errors.Is(err, conversation.ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].ID != "c01keep" {
		t.Errorf("List after Delete = %v, want only c01keep", list)
	}
	// Put after Delete recreates it, as new.
	mustPut(t, s, meta("c01gone", t0), []conversation.File{{Path: "g2", Data: []byte("g2")}})
	checkStored(t, s, meta("c01gone", t0), []conversation.File{{Path: "g2", Data: []byte("g2")}})
}

func testNotFound(t *testing.T, s conversation.Store) {
	ctx := context.Background()
	mustPut(t, s, meta("c01other", t0), nil)
	for _, id := range []string{"c01missing", "c01othe", "", "../c01other", "C01OTHER"} {
		if _, _, err := s.Get(ctx, id); !errors.Is(err, conversation.ErrNotFound) {
			t.Errorf("Get(%q): %v, want ErrNotFound", id, err)
		}
		if _, err := s.Meta(ctx, id); !errors.Is(err, conversation.ErrNotFound) {
			t.Errorf("Meta(%q): %v, want ErrNotFound", id, err)
		}
		if err := s.Delete(ctx, id); !errors.Is(err, conversation.ErrNotFound) {
			t.Errorf("Delete(%q): %v, want ErrNotFound", id, err)
		}
	}
}

// version returns the files of version v of a conversation: every file
// names v, so a mix of versions is visible.
func version(v int) (conversation.Meta, []conversation.File) {
	m := meta("c01race", t0.Add(time.Duration(v)*time.Second))
	m.Model = fmt.Sprint("v", v)
	m.Revision = conversation.AnyRevision
	var files []conversation.File
	for i := range 5 + v%3 {
		files = append(files, conversation.File{
			Path: fmt.Sprintf("dir/f%d", i),
			Mode: 0o600,
			Data: bytes.Repeat(fmt.Appendf(nil, "v%d|", v), 1000*(i+1)),
		})
	}
	return m, files
}

func testConcurrentPuts(t *testing.T, s conversation.Store) {
	ctx := context.Background()
	const writers = 16
	var wg sync.WaitGroup
	errs := make(chan error, 2*writers)
	stop := make(chan struct{})
	// Readers check every version they see is whole.
	var readers sync.WaitGroup
	for range 4 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				m, files, err := s.Get(ctx, "c01race")
				if errors.Is(err, conversation.ErrNotFound) {
					continue
				}
				if err != nil {
					errs <- fmt.Errorf("concurrent Get: %w", err)
					return
				}
				if err := whole(m, files); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for v := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, files := version(v)
			if err := s.Put(ctx, m, files); err != nil {
				errs <- fmt.Errorf("Put v%d: %w", v, err)
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	m, files, err := s.Get(ctx, "c01race")
	if err != nil {
		t.Fatalf("Get after concurrent puts: %v", err)
	}
	if err := whole(m, files); err != nil {
		t.Error(err)
	}
	if m.Revision != writers {
		t.Errorf("revision after %d Puts = %d", writers, m.Revision)
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Errorf("List after concurrent puts of one id has %d conversations, want 1", len(list))
	}
}

// whole reports a conversation that is not exactly one version.
func whole(m conversation.Meta, files []conversation.File) error {
	var v int
	if _, err := fmt.Sscanf(m.Model, "v%d", &v); err != nil {
		return fmt.Errorf("unexpected model %q", m.Model)
	}
	wm, wf := version(v)
	wm.Files = paths(wf)
	wm.Revision = m.Revision // any: the order of the Puts is unknown
	if d := cmp.Diff(wm, m, opts...); d != "" {
		return fmt.Errorf("meta is not version %d (-want +got):\n%s", v, d)
	}
	if d := cmp.Diff(wf, files, opts...); d != "" {
		return fmt.Errorf("files are not version %d (-want +got):\n%s", v, d)
	}
	return nil
}

func testUnsafePaths(t *testing.T, s conversation.Store) {
	ctx := context.Background()
	for _, p := range []string{"../x", "/abs", "a/../../x", "..", "a/..", "./a", "a//b", "a/./b", "a/", "", `a\b`, "a\x00b"} {
		t.Run(fmt.Sprintf("%q", p), func(t *testing.T) {
			files := []conversation.File{
				{Path: "ok/file", Data: []byte("fine")},
				{Path: p, Data: []byte("evil")},
			}
			err := s.Put(ctx, meta("c01unsafe", t0), files)
			if !errors.Is(err, conversation.ErrUnsafe) {
				t.Errorf("Put with path %q: %v, want ErrUnsafe", p, err)
			}
			if _, _, err := s.Get(ctx, "c01unsafe"); !errors.Is(err, conversation.ErrNotFound) {
				t.Errorf("Get after a refused Put: %v, want ErrNotFound", err)
			}
		})
	}
	t.Run("symlink mode", func(t *testing.T) {
		files := []conversation.File{{Path: "link", Mode: uint32(fs.ModeSymlink | 0o777), Data: []byte("/etc/passwd")}}
		if err := s.Put(ctx, meta("c01unsafe", t0), files); !errors.Is(err, conversation.ErrUnsafe) {
			t.Errorf("Put with a symlink mode: %v, want ErrUnsafe", err)
		}
	})
}

func testInvalid(t *testing.T, s conversation.Store) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		id    string
		files []conversation.File
		edit  func(*conversation.Meta)
	}{
		"empty id":      {id: ""},
		"id with slash": {id: "a/b"},
		"id with dot":   {id: "a.conv"},
		"dot dot id":    {id: ".."},
		"uppercase id":  {id: "C01ABC"},
		"duplicate":     {id: "c01dup", files: []conversation.File{{Path: "a"}, {Path: "a"}}},
		"file and dir":  {id: "c01dir", files: []conversation.File{{Path: "a"}, {Path: "a/b"}}},
		"year 10000":    {id: "c01year", edit: func(m *conversation.Meta) { m.Updated = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }},
		"not UTF-8":     {id: "c01utf", edit: func(m *conversation.Meta) { m.Workdir = "/w\xff" }},
	} {
		t.Run(name, func(t *testing.T) {
			m := meta(tc.id, t0)
			if tc.edit != nil {
				tc.edit(&m)
			}
			if err := s.Put(ctx, m, tc.files); !errors.Is(err, conversation.ErrInvalid) {
				t.Errorf("Put: %v, want ErrInvalid", err)
			}
		})
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Errorf("refused Puts left %v", list)
	}
}

func testCancelled(t *testing.T, s conversation.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	files := []conversation.File{{Path: "f", Data: []byte("data")}}
	if err := s.Put(ctx, meta("c01cancel", t0), files); !errors.Is(err, context.Canceled) {
		t.Errorf("Put with a cancelled context: %v, want context.Canceled", err)
	}
	bg := context.Background()
	if _, _, err := s.Get(bg, "c01cancel"); !errors.Is(err, conversation.ErrNotFound) {
		t.Errorf("Get after a cancelled Put: %v, want ErrNotFound", err)
	}
	mustPut(t, s, meta("c01cancel", t0), files)
	if _, _, err := s.Get(ctx, "c01cancel"); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := s.List(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("List with a cancelled context: %v, want context.Canceled", err)
	}
	if err := s.Delete(ctx, "c01cancel"); !errors.Is(err, context.Canceled) {
		t.Errorf("Delete with a cancelled context: %v, want context.Canceled", err)
	}
	checkStored(t, s, meta("c01cancel", t0), files)
}

func testIsolation(t *testing.T, s conversation.Store) {
	ctx := context.Background()
	m := meta("c01iso", t0)
	files := []conversation.File{{Path: "f", Mode: 0o600, Data: []byte("original")}}
	mustPut(t, s, m, files)
	files[0].Data[0] = 'X'
	files[0].Path = "changed"
	want := []conversation.File{{Path: "f", Mode: 0o600, Data: []byte("original")}}
	_, got, err := s.Get(ctx, "c01iso")
	if err != nil {
		t.Fatal(err)
	}
	got[0].Data[0] = 'Y'
	gm, err := s.Meta(ctx, "c01iso")
	if err != nil {
		t.Fatal(err)
	}
	gm.Files[0] = "changed"
	checkStored(t, s, m, want)
}

func testResolve(t *testing.T, s conversation.Store) {
	ctx := context.Background()
	for _, m := range []conversation.Meta{
		{ID: "c01aaaa1", Native: "n-one", Created: t0, Updated: t0},
		{ID: "c01aaaa2", Native: "n-two", Created: t0, Updated: t0},
		{ID: "c01bbbb1", Native: "shared", Created: t0, Updated: t0},
		{ID: "c01bbbb2", Native: "shared", Created: t0, Updated: t0},
		{ID: "c01cccc1", Native: "c01aaaa", Created: t0, Updated: t0}, // a native id that looks like a prefix
	} {
		mustPut(t, s, m, nil)
	}
	for _, tc := range []struct {
		ref  string
		want string
		err  error
	}{
		{ref: "c01aaaa1", want: "c01aaaa1"},
		{ref: "n-two", want: "c01aaaa2"},
		{ref: "c01b", err: conversation.ErrAmbiguous},
		{ref: "c01bbbb1", want: "c01bbbb1"},
		{ref: "shared", err: conversation.ErrAmbiguous},
		{ref: "c01c", want: "c01cccc1"},
		{ref: "c01aaaa", want: "c01cccc1"},          // native id before prefix
		{ref: "c01", err: conversation.ErrNotFound}, // shorter than MinPrefix
		{ref: "c0", err: conversation.ErrNotFound},
		{ref: "c01z", err: conversation.ErrNotFound},
		{ref: "", err: conversation.ErrNotFound},
		{ref: "../c01aaaa1", err: conversation.ErrNotFound},
	} {
		got, err := conversation.Resolve(ctx, s, tc.ref)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("Resolve(%q) = %q, %v; want %v", tc.ref, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tc.ref, got, err, tc.want)
		}
	}
}
