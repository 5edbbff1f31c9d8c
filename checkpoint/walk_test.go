package checkpoint_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/checkpoint/objectstest"
)

// stored returns a Memory holding objs.
func stored(t *testing.T, objs ...[]checkpoint.Object) *checkpoint.Memory {
	t.Helper()
	m := checkpoint.NewMemory()
	for _, list := range objs {
		if err := m.Write(context.Background(), list); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// sameSet fails unless got holds exactly the objects of want, each once.
func sameSet(t *testing.T, got, want []checkpoint.Object) {
	t.Helper()
	seen := map[plumbing.Hash]int{}
	for _, o := range got {
		seen[o.Hash]++
		if err := o.Verify(); err != nil {
			t.Errorf("Reachable returned %s, which does not verify: %v", o.Hash, err)
		}
	}
	for h, n := range seen {
		if n != 1 {
			t.Errorf("Reachable returned %s %d times", h, n)
		}
	}
	wantSet := map[plumbing.Hash]bool{}
	for _, o := range want {
		wantSet[o.Hash] = true
		if seen[o.Hash] == 0 {
			t.Errorf("Reachable left out %s %s", o.Type, o.Hash)
		}
	}
	for _, o := range got {
		if !wantSet[o.Hash] {
			t.Errorf("Reachable returned %s %s, which is not reachable", o.Type, o.Hash)
		}
	}
}

func TestReachable(t *testing.T) {
	ctx := context.Background()
	h := objectstest.NewHistory(t, "reachable")
	other := objectstest.NewHistory(t, "unrelated")
	objs := stored(t, h.All(), other.All())

	got, err := checkpoint.Reachable(ctx, objs, []plumbing.Hash{h.Head()})
	if err != nil {
		t.Fatal(err)
	}
	sameSet(t, got, h.All())
	if got[0].Hash != h.Head() {
		t.Errorf("the first object is %s, want the root %s", got[0].Hash, h.Head())
	}
	// Every object comes before those it refers to: a commit before its
	// tree and parent, a tree before its entries.
	pos := map[plumbing.Hash]int{}
	for i, o := range got {
		pos[o.Hash] = i
	}
	for _, c := range h.Commits {
		cm, err := checkpoint.ReadCommit(ctx, objs, c.Hash)
		if err != nil {
			t.Fatal(err)
		}
		if pos[cm.TreeHash] < pos[c.Hash] {
			t.Errorf("tree %s comes before its commit %s", cm.TreeHash, c.Hash)
		}
	}

	// The first commit alone: its tree, none of the second's.
	got, err = checkpoint.Reachable(ctx, objs, []plumbing.Hash{h.Commits[0].Hash})
	if err != nil {
		t.Fatal(err)
	}
	first, err := checkpoint.Reachable(ctx, stored(t, h.All()), []plumbing.Hash{h.Commits[0].Hash})
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(got, func(o checkpoint.Object) bool { return o.Hash == h.Head() }) {
		t.Error("Reachable of the first commit reached the second")
	}
	sameSet(t, got, first)

	// Several roots (commits and trees), repeated, with zero hashes:
	// each object once.
	cm, err := checkpoint.ReadCommit(ctx, objs, other.Head())
	if err != nil {
		t.Fatal(err)
	}
	got, err = checkpoint.Reachable(ctx, objs, []plumbing.Hash{h.Head(), plumbing.ZeroHash, h.Commits[0].Hash, cm.TreeHash, h.Head()})
	if err != nil {
		t.Fatal(err)
	}
	otherTree, err := checkpoint.Reachable(ctx, objs, []plumbing.Hash{cm.TreeHash})
	if err != nil {
		t.Fatal(err)
	}
	sameSet(t, got, slices.Concat(h.All(), otherTree))
	for _, o := range otherTree {
		if o.Type == plumbing.CommitObject {
			t.Errorf("Reachable of a tree returned commit %s", o.Hash)
		}
	}

	// No roots: nothing.
	if got, err := checkpoint.Reachable(ctx, objs, nil); err != nil || len(got) != 0 {
		t.Errorf("Reachable(nil) = %d objects, %v", len(got), err)
	}
}

func TestReachableSkipsSubmodules(t *testing.T) {
	ctx := context.Background()
	h := objectstest.NewHistory(t, "submodule")
	got, err := checkpoint.Reachable(ctx, stored(t, h.All()), []plumbing.Hash{h.Head()})
	if err != nil {
		t.Fatalf("Reachable with a gitlink to a commit that is not stored: %v", err)
	}
	for _, o := range got {
		if o.Hash == h.Submodule {
			t.Errorf("Reachable returned the submodule's commit")
		}
	}
}

func TestReachableFollowsTags(t *testing.T) {
	ctx := context.Background()
	h := objectstest.NewHistory(t, "tagged")
	sig := object.Signature{Name: "outpost", Email: "outpost@localhost", When: time.Unix(0, 0).UTC()}
	tag := objectstest.Encode(t, plumbing.TagObject, (&object.Tag{Name: "v1", Tagger: sig, Message: "v1\n", TargetType: plumbing.CommitObject, Target: h.Head()}).Encode)
	got, err := checkpoint.Reachable(ctx, stored(t, h.All(), []checkpoint.Object{tag}), []plumbing.Hash{tag.Hash})
	if err != nil {
		t.Fatal(err)
	}
	sameSet(t, got, append(h.All(), tag))
}

func TestReachableMissing(t *testing.T) {
	ctx := context.Background()
	h := objectstest.NewHistory(t, "missing")
	for _, lost := range h.All() {
		var rest []checkpoint.Object
		for _, o := range h.All() {
			if o.Hash != lost.Hash {
				rest = append(rest, o)
			}
		}
		_, err := checkpoint.Reachable(ctx, stored(t, rest), []plumbing.Hash{h.Head()})
		if !errors.Is(err, checkpoint.ErrNotFound) {
			t.Errorf("Reachable without %s %s: %v, want checkpoint.ErrNotFound", lost.Type, lost.Hash, err)
			continue
		}
		if !strings.Contains(err.Error(), lost.Hash.String()) {
			t.Errorf("the error %q does not name the missing %s", err, lost.Hash)
		}
		if lost.Hash != h.Head() && !strings.Contains(err.Error(), "referred to by") {
			t.Errorf("the error %q does not say what refers to the missing object", err)
		}
	}
}

func TestReachableCorrupt(t *testing.T) {
	ctx := context.Background()
	blob := checkpoint.NewObject(plumbing.BlobObject, []byte("a file\n"))
	notATree := checkpoint.NewObject(plumbing.TreeObject, []byte("this is no tree"))
	notACommit := checkpoint.NewObject(plumbing.CommitObject, []byte("tree zzz\n"))
	dirIsBlob := objectstest.Tree(t, object.TreeEntry{Name: "d", Mode: filemode.Dir, Hash: blob.Hash})
	fileIsTree := objectstest.Tree(t, object.TreeEntry{Name: "f", Mode: filemode.Regular, Hash: dirIsBlob.Hash})
	commitOfBlob := objectstest.Commit(t, blob.Hash, nil, "tree is a blob\n", time.Unix(0, 0))
	emptyTree := objectstest.Tree(t)
	parentIsTree := objectstest.Commit(t, emptyTree.Hash, []plumbing.Hash{dirIsBlob.Hash}, "parent is a tree\n", time.Unix(0, 0))
	objs := stored(t, []checkpoint.Object{blob, notATree, notACommit, dirIsBlob, fileIsTree, commitOfBlob, emptyTree, parentIsTree})
	for name, root := range map[string]plumbing.Hash{
		"undecodable tree":          notATree.Hash,
		"undecodable commit":        notACommit.Hash,
		"directory entry is a blob": dirIsBlob.Hash,
		"file entry is a tree":      fileIsTree.Hash,
		"commit's tree is a blob":   commitOfBlob.Hash,
		"commit's parent is a tree": parentIsTree.Hash,
	} {
		if _, err := checkpoint.Reachable(ctx, objs, []plumbing.Hash{root}); !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Errorf("%s: Reachable = %v, want checkpoint.ErrCorrupt", name, err)
		}
	}
}

// lying is a store whose Read returns another object than asked for.
type lying struct{ checkpoint.Objects }

func (l lying) Read(ctx context.Context, h plumbing.Hash) (checkpoint.Object, error) {
	return checkpoint.NewObject(plumbing.BlobObject, []byte("not what you asked for")), nil
}

func TestReachableChecksWhatIsRead(t *testing.T) {
	h := objectstest.NewHistory(t, "lying")
	if _, err := checkpoint.Reachable(context.Background(), lying{stored(t, h.All())}, []plumbing.Hash{h.Head()}); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Errorf("Reachable through a store returning other objects: %v, want checkpoint.ErrCorrupt", err)
	}
}

func TestReachableCancelled(t *testing.T) {
	h := objectstest.NewHistory(t, "cancelled")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := checkpoint.Reachable(ctx, stored(t, h.All()), []plumbing.Hash{h.Head()}); !errors.Is(err, context.Canceled) {
		t.Errorf("Reachable with a cancelled context: %v, want context.Canceled", err)
	}
}
