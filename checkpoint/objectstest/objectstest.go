package objectstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/outposthq/outpost/checkpoint"
)

// RunConformanceTests runs the suite against object stores made by open,
// which returns a new, empty store for each subtest (clean-up goes
// through t.Cleanup). A store that is shared by several values (one
// database) must still start empty for each subtest.
func RunConformanceTests(t *testing.T, open func(t *testing.T) checkpoint.Objects) {
	t.Helper()
	tests := []struct {
		name string
		f    func(t *testing.T, objs checkpoint.Objects)
	}{
		{"RoundTrip", testRoundTrip},
		{"GitIDs", testGitIDs},
		{"Missing", testMissing},
		{"IdempotentWrite", testIdempotent},
		{"NotFound", testNotFound},
		{"ConcurrentWrites", testConcurrent},
		{"CancelledContext", testCancelled},
		{"LargeBlob", testLargeBlob},
		{"Isolation", testIsolation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f(t, open(t))
		})
	}
}

// History is the objects of a small repository: two commits, the second
// parented on the first, their trees and their blobs. The trees hold a
// subdirectory, an executable, a symbolic link, an empty file and a
// submodule (a gitlink entry naming a commit of another repository, which
// is not among the objects, as git stores it).
type History struct {
	// Commits are oldest first; Head is the last.
	Commits []checkpoint.Object
	Trees   []checkpoint.Object
	Blobs   []checkpoint.Object
	// Submodule is the commit the gitlink entries name (not an object
	// of the history).
	Submodule plumbing.Hash
}

// Head is the newest commit's id.
func (h History) Head() plumbing.Hash { return h.Commits[len(h.Commits)-1].Hash }

// All returns every object, blobs first, then trees, then commits (each
// object after the ones it refers to).
func (h History) All() []checkpoint.Object {
	out := slices.Concat(h.Blobs, h.Trees, h.Commits)
	return slices.Clip(out)
}

// Hashes returns the ids of objs, in their order.
func Hashes(objs []checkpoint.Object) []plumbing.Hash {
	out := make([]plumbing.Hash, len(objs))
	for i, o := range objs {
		out[i] = o.Hash
	}
	return out
}

// NewHistory makes a History whose content depends on seed: histories of
// different seeds share only the objects whose content does not (the
// empty blob, the link target).
func NewHistory(t testing.TB, seed string) History {
	t.Helper()
	var h History
	blob := func(s string) plumbing.Hash {
		o := checkpoint.NewObject(plumbing.BlobObject, []byte(s))
		for _, b := range h.Blobs {
			if b.Hash == o.Hash {
				return o.Hash
			}
		}
		h.Blobs = append(h.Blobs, o)
		return o.Hash
	}
	tree := func(es ...object.TreeEntry) plumbing.Hash {
		o := Tree(t, es...)
		for _, x := range h.Trees {
			if x.Hash == o.Hash {
				return o.Hash
			}
		}
		h.Trees = append(h.Trees, o)
		return o.Hash
	}
	h.Submodule = plumbing.ComputeHash(plumbing.CommitObject, []byte("another repository "+seed))
	when := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	var parent []plumbing.Hash
	for turn := 1; turn <= 2; turn++ {
		src := tree(
			object.TreeEntry{Name: "main.go", Mode: filemode.Regular, Hash: blob(fmt.Sprintf("package main // %s turn %d\n", seed, turn))},
			object.TreeEntry{Name: "util.go", Mode: filemode.Regular, Hash: blob("package main // " + seed + " util\n")},
		)
		root := tree(
			object.TreeEntry{Name: "README.md", Mode: filemode.Regular, Hash: blob("# " + seed + "\n")},
			object.TreeEntry{Name: "empty", Mode: filemode.Regular, Hash: blob("")},
			object.TreeEntry{Name: "run.sh", Mode: filemode.Executable, Hash: blob("#!/bin/sh\necho " + seed + "\n")},
			object.TreeEntry{Name: "link", Mode: filemode.Symlink, Hash: blob("README.md")},
			object.TreeEntry{Name: "src", Mode: filemode.Dir, Hash: src},
			object.TreeEntry{Name: "vendor-lib", Mode: filemode.Submodule, Hash: h.Submodule},
		)
		c := Commit(t, root, parent, fmt.Sprintf("turn %d of %s\n\nOutpost-Turn: %d\n", turn, seed, turn), when.Add(time.Duration(turn)*time.Minute))
		h.Commits = append(h.Commits, c)
		parent = []plumbing.Hash{c.Hash}
	}
	return h
}

// Tree encodes a tree object of entries (sorted here in git's order) with
// go-git.
func Tree(t testing.TB, entries ...object.TreeEntry) checkpoint.Object {
	t.Helper()
	es := slices.Clone(entries)
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	sort.Slice(es, func(i, j int) bool { return key(es[i]) < key(es[j]) })
	return Encode(t, plumbing.TreeObject, (&object.Tree{Entries: es}).Encode)
}

// Commit encodes a commit object with go-git.
func Commit(t testing.TB, tree plumbing.Hash, parents []plumbing.Hash, msg string, when time.Time) checkpoint.Object {
	t.Helper()
	sig := object.Signature{Name: "echo (outpost)", Email: "outpost@localhost", When: when}
	c := &object.Commit{Author: sig, Committer: sig, Message: msg, TreeHash: tree, ParentHashes: parents}
	return Encode(t, plumbing.CommitObject, c.Encode)
}

// Encode makes an object of type typ with an encoder of go-git's object
// package (object.Tree.Encode, object.Commit.Encode), through a
// plumbing.MemoryObject.
func Encode(t testing.TB, typ plumbing.ObjectType, enc func(plumbing.EncodedObject) error) checkpoint.Object {
	t.Helper()
	mo := &plumbing.MemoryObject{}
	mo.SetType(typ)
	if err := enc(mo); err != nil {
		t.Fatalf("encoding a %s: %v", typ, err)
	}
	r, err := mo.Reader()
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	o := checkpoint.NewObject(typ, data)
	if o.Hash != mo.Hash() {
		t.Fatalf("checkpoint.NewObject gives %s, go-git %s", o.Hash, mo.Hash())
	}
	return o
}

func write(t *testing.T, objs checkpoint.Objects, list []checkpoint.Object) {
	t.Helper()
	if err := objs.Write(context.Background(), list); err != nil {
		t.Fatalf("Write of %d objects: %v", len(list), err)
	}
}

func missing(t *testing.T, objs checkpoint.Objects, hs []plumbing.Hash) []plumbing.Hash {
	t.Helper()
	got, err := objs.Missing(context.Background(), hs)
	if err != nil {
		t.Fatalf("Missing: %v", err)
	}
	return got
}

// readBack checks that every object of want reads back as it is.
func readBack(t *testing.T, objs checkpoint.Objects, want []checkpoint.Object) {
	t.Helper()
	for _, w := range want {
		got, err := objs.Read(context.Background(), w.Hash)
		if err != nil {
			t.Errorf("Read(%s %s): %v", w.Type, w.Hash, err)
			continue
		}
		if got.Type != w.Type || got.Hash != w.Hash || !bytes.Equal(got.Data, w.Data) {
			t.Errorf("Read(%s) = %s %s of %d bytes, want %s %s of %d bytes", w.Hash, got.Type, got.Hash, len(got.Data), w.Type, w.Hash, len(w.Data))
			continue
		}
		if err := got.Verify(); err != nil {
			t.Errorf("Read(%s) returned an object that does not verify: %v", w.Hash, err)
		}
	}
}

func testRoundTrip(t *testing.T, objs checkpoint.Objects) {
	ctx := context.Background()
	h := NewHistory(t, "round trip")
	write(t, objs, h.All())
	readBack(t, objs, h.All())

	// What was read decodes to what was encoded.
	head, err := objs.Read(ctx, h.Head())
	if err != nil {
		t.Fatal(err)
	}
	c := &object.Commit{}
	if err := c.Decode(memory(head)); err != nil {
		t.Fatalf("decoding the commit read back: %v", err)
	}
	if c.ParentHashes[0] != h.Commits[0].Hash || c.Message != "turn 2 of round trip\n\nOutpost-Turn: 2\n" {
		t.Errorf("commit read back: parents %v, message %q", c.ParentHashes, c.Message)
	}
	root, err := objs.Read(ctx, c.TreeHash)
	if err != nil {
		t.Fatalf("reading the commit's tree: %v", err)
	}
	tr := &object.Tree{}
	if err := tr.Decode(memory(root)); err != nil {
		t.Fatalf("decoding the tree read back: %v", err)
	}
	var names []string
	for _, e := range tr.Entries {
		names = append(names, fmt.Sprintf("%s %o", e.Name, uint32(e.Mode)))
	}
	want := []string{"README.md 100644", "empty 100644", "link 120000", "run.sh 100755", "src 40000", "vendor-lib 160000"}
	if !slices.Equal(names, want) {
		t.Errorf("tree read back: %q, want %q", names, want)
	}
}

func memory(o checkpoint.Object) *plumbing.MemoryObject {
	mo := &plumbing.MemoryObject{}
	mo.SetType(o.Type)
	_, _ = mo.Write(o.Data)
	return mo
}

// testGitIDs checks objects whose ids git itself gives (`git hash-object`,
// `git mktree </dev/null`).
func testGitIDs(t *testing.T, objs checkpoint.Objects) {
	known := []struct {
		obj checkpoint.Object
		id  string
	}{
		{checkpoint.NewObject(plumbing.BlobObject, nil), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"},
		{checkpoint.NewObject(plumbing.BlobObject, []byte("hello\n")), "ce013625030ba8dba906f756967f9e9ca394464a"},
		{Tree(t), "4b825dc642cb6eb9a060e54bf8d69288fbee4904"},
	}
	var list []checkpoint.Object
	for _, k := range known {
		if k.obj.Hash.String() != k.id {
			t.Fatalf("%s of %q has id %s, git says %s", k.obj.Type, k.obj.Data, k.obj.Hash, k.id)
		}
		list = append(list, k.obj)
	}
	write(t, objs, list)
	readBack(t, objs, list)
	empty, err := objs.Read(context.Background(), known[0].obj.Hash)
	if err == nil && len(empty.Data) != 0 {
		t.Errorf("the empty blob reads back as %d bytes", len(empty.Data))
	}
}

func testMissing(t *testing.T, objs checkpoint.Objects) {
	all := NewHistory(t, "missing").All()
	hs := Hashes(all)
	if got := missing(t, objs, hs); !slices.Equal(got, hs) {
		t.Fatalf("Missing on an empty store = %v, want every hash in order %v", got, hs)
	}
	if got := missing(t, objs, nil); len(got) != 0 {
		t.Errorf("Missing(nil) = %v, want none", got)
	}
	var odd, even []checkpoint.Object
	for i, o := range all {
		if i%2 == 0 {
			even = append(even, o)
		} else {
			odd = append(odd, o)
		}
	}
	write(t, objs, even)
	if got, want := missing(t, objs, hs), Hashes(odd); !slices.Equal(got, want) {
		t.Errorf("Missing after writing every other object = %v, want %v", got, want)
	}
	// Reversed input, reversed output.
	rev := slices.Clone(hs)
	slices.Reverse(rev)
	want := Hashes(odd)
	slices.Reverse(want)
	if got := missing(t, objs, rev); !slices.Equal(got, want) {
		t.Errorf("Missing of reversed hashes = %v, want %v", got, want)
	}
	write(t, objs, odd)
	if got := missing(t, objs, hs); len(got) != 0 {
		t.Errorf("Missing after writing every object = %v, want none", got)
	}
}

func testIdempotent(t *testing.T, objs checkpoint.Objects) {
	h := NewHistory(t, "idempotent")
	write(t, objs, h.All())
	write(t, objs, h.All())
	// Stored objects again, with new ones, and duplicates in one call.
	other := NewHistory(t, "idempotent too")
	mixed := slices.Concat(h.Blobs, other.All(), h.Trees, other.Blobs)
	write(t, objs, mixed)
	all := slices.Concat(h.All(), other.All())
	if got := missing(t, objs, Hashes(all)); len(got) != 0 {
		t.Errorf("Missing after repeated writes = %v, want none", got)
	}
	readBack(t, objs, all)
	write(t, objs, nil)
}

func testNotFound(t *testing.T, objs checkpoint.Objects) {
	ctx := context.Background()
	h := NewHistory(t, "not found")
	write(t, objs, h.Blobs)
	unknown := []plumbing.Hash{
		plumbing.ComputeHash(plumbing.BlobObject, []byte("never written")),
		h.Head(),
		h.Submodule,
		plumbing.ZeroHash,
	}
	for _, u := range unknown {
		if o, err := objs.Read(ctx, u); !errors.Is(err, checkpoint.ErrNotFound) {
			t.Errorf("Read(%s) of an object never written = %s of %d bytes, %v; want checkpoint.ErrNotFound", u, o.Type, len(o.Data), err)
		}
	}
	if got := missing(t, objs, unknown); !slices.Equal(got, unknown) {
		t.Errorf("Missing(%v) = %v, want all", unknown, got)
	}
}

func testConcurrent(t *testing.T, objs checkpoint.Objects) {
	ctx := context.Background()
	h := NewHistory(t, "concurrent")
	other := NewHistory(t, "concurrent, other")
	all := slices.Concat(h.All(), other.All())
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, 4*writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			list := slices.Clone(all)
			r := rand.New(rand.NewPCG(uint64(i), 42))
			r.Shuffle(len(list), func(a, b int) { list[a], list[b] = list[b], list[a] })
			// In two calls, so that writes of several goroutines
			// interleave.
			half := len(list) / 2
			for _, part := range [][]checkpoint.Object{list[:half], list[half:]} {
				if err := objs.Write(ctx, part); err != nil {
					errs <- fmt.Errorf("writer %d: Write: %w", i, err)
					return
				}
			}
			// Reads of what this goroutine wrote, while others still
			// write it.
			for _, o := range list[:half] {
				got, err := objs.Read(ctx, o.Hash)
				if err != nil {
					errs <- fmt.Errorf("writer %d: Read(%s): %w", i, o.Hash, err)
					return
				}
				if !bytes.Equal(got.Data, o.Data) {
					errs <- fmt.Errorf("writer %d: Read(%s): wrong content", i, o.Hash)
					return
				}
			}
			if _, err := objs.Missing(ctx, Hashes(all)); err != nil {
				errs <- fmt.Errorf("writer %d: Missing: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := missing(t, objs, Hashes(all)); len(got) != 0 {
		t.Errorf("Missing after concurrent writes = %v, want none", got)
	}
	readBack(t, objs, all)
}

func testCancelled(t *testing.T, objs checkpoint.Objects) {
	h := NewHistory(t, "cancelled")
	write(t, objs, h.Blobs)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := objs.Missing(ctx, Hashes(h.All())); !errors.Is(err, context.Canceled) {
		t.Errorf("Missing with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := objs.Read(ctx, h.Blobs[0].Hash); !errors.Is(err, context.Canceled) {
		t.Errorf("Read with a cancelled context: %v, want context.Canceled", err)
	}
	fresh := slices.Concat(h.Trees, h.Commits)
	if err := objs.Write(ctx, fresh); !errors.Is(err, context.Canceled) {
		t.Errorf("Write with a cancelled context: %v, want context.Canceled", err)
	}
	// The context is checked first: nothing was written.
	if got, want := missing(t, objs, Hashes(fresh)), Hashes(fresh); !slices.Equal(got, want) {
		t.Errorf("after a cancelled Write, Missing = %v, want %v (nothing written)", got, want)
	}
	ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, err := objs.Read(ctx, h.Blobs[0].Hash); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Read past the deadline: %v, want context.DeadlineExceeded", err)
	}
}

func testLargeBlob(t *testing.T, objs checkpoint.Objects) {
	// Random bytes: compression does not shrink them.
	data := make([]byte, 8<<20)
	_, _ = rand.NewChaCha8([32]byte{8, 20}).Read(data)
	big := checkpoint.NewObject(plumbing.BlobObject, data)
	tree := Tree(t, object.TreeEntry{Name: "big.bin", Mode: filemode.Regular, Hash: big.Hash})
	write(t, objs, []checkpoint.Object{big, tree})
	if got := missing(t, objs, []plumbing.Hash{big.Hash, tree.Hash}); len(got) != 0 {
		t.Errorf("Missing after writing the large blob = %v", got)
	}
	readBack(t, objs, []checkpoint.Object{big, tree})
}

func testIsolation(t *testing.T, objs checkpoint.Objects) {
	ctx := context.Background()
	data := []byte("original content\n")
	o := checkpoint.NewObject(plumbing.BlobObject, data)
	write(t, objs, []checkpoint.Object{o})
	data[0] = 'X' // the caller's slice, after Write
	got, err := objs.Read(ctx, o.Hash)
	if err != nil {
		t.Fatalf("Read after the caller changed its slice: %v", err)
	}
	if string(got.Data) != "original content\n" {
		t.Fatalf("Read = %q: the store kept the caller's slice", got.Data)
	}
	got.Data[0] = 'Y' // the slice Read returned
	again, err := objs.Read(ctx, o.Hash)
	if err != nil || string(again.Data) != "original content\n" {
		t.Errorf("second Read = %q, %v: the store returned its own slice", again.Data, err)
	}
}
