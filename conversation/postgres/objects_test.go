package postgres_test

import (
	"context"
	"errors"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/jackc/pgx/v5"

	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/checkpoint/objectstest"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/conversation/postgres"
	"github.com/outposthq/outpost/internal/pgtest"
)

var _ conversation.ObjectStorer = (*postgres.Store)(nil)

func TestObjectsConformance(t *testing.T) {
	objectstest.RunConformanceTests(t, func(t *testing.T) checkpoint.Objects {
		return open(t, pgtest.NewDB(t)).Objects()
	})
}

// TestObjectsShared checks that two stores opened on one database (two
// machines of a fleet) share their objects.
func TestObjectsShared(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDB(t)
	a, b := open(t, url), open(t, url)
	h := objectstest.NewHistory(t, "shared")
	if err := a.Objects().Write(ctx, h.All()); err != nil {
		t.Fatal(err)
	}
	got, err := checkpoint.Reachable(ctx, b.Objects(), []plumbing.Hash{h.Head()})
	if err != nil || len(got) != len(h.All()) {
		t.Fatalf("Reachable through the other store = %d objects, %v; want %d", len(got), err, len(h.All()))
	}
}

func TestObjectsCorrupt(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDB(t)
	objs := open(t, url).Objects()
	h := objectstest.NewHistory(t, "corrupt")
	if err := objs.Write(ctx, h.All()); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	blob, tree := h.Blobs[0], h.Trees[0]
	if _, err := conn.Exec(ctx, `UPDATE outpost_objects SET data = data || 'x'::bytea WHERE hash = $1`, blob.Hash[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE outpost_objects SET type = 3 WHERE hash = $1`, tree.Hash[:]); err != nil {
		t.Fatal(err)
	}
	for name, hash := range map[string]plumbing.Hash{"changed content": blob.Hash, "changed type": tree.Hash} {
		if o, err := objs.Read(ctx, hash); !errors.Is(err, checkpoint.ErrCorrupt) {
			t.Errorf("%s: Read = %s %q, %v; want checkpoint.ErrCorrupt", name, o.Type, o.Data, err)
		}
	}
	// A stored row is never replaced, not even by the right content: a
	// damaged row stays damaged (and reported) until repaired by hand.
	if err := objs.Write(ctx, []checkpoint.Object{blob}); err != nil {
		t.Fatal(err)
	}
	if _, err := objs.Read(ctx, blob.Hash); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Errorf("Read after writing the object again: %v, want checkpoint.ErrCorrupt", err)
	}

	// An object that does not hash to its id is refused, with every
	// object of the same Write.
	wrong := checkpoint.Object{Type: plumbing.BlobObject, Hash: plumbing.ComputeHash(plumbing.BlobObject, []byte("right")), Data: []byte("wrong")}
	fresh := checkpoint.NewObject(plumbing.BlobObject, []byte("fresh"))
	if err := objs.Write(ctx, []checkpoint.Object{fresh, wrong}); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Errorf("Write of an object that does not hash to its id: %v, want checkpoint.ErrCorrupt", err)
	}
	if miss, err := objs.Missing(ctx, []plumbing.Hash{fresh.Hash, wrong.Hash}); err != nil || len(miss) != 2 {
		t.Errorf("after the refused Write, Missing = %v, %v; want both", miss, err)
	}
	if err := objs.Write(ctx, []checkpoint.Object{{Type: plumbing.InvalidObject, Hash: fresh.Hash, Data: fresh.Data}}); !errors.Is(err, checkpoint.ErrCorrupt) {
		t.Errorf("Write of an object of no valid type: %v, want checkpoint.ErrCorrupt", err)
	}
}

// TestObjectsBatches writes more objects and bytes than one statement
// takes.
func TestObjectsBatches(t *testing.T) {
	ctx := context.Background()
	objs := open(t, pgtest.NewDB(t)).Objects()
	var many []checkpoint.Object
	for i := range 2500 {
		many = append(many, checkpoint.NewObject(plumbing.BlobObject, []byte{byte(i), byte(i >> 8), 'x'}))
	}
	big := make([]byte, 12<<20) // three: more than one statement's 32 MiB
	for i := range 3 {
		big[0] = byte(i)
		many = append(many, checkpoint.NewObject(plumbing.BlobObject, append([]byte(nil), big...)))
	}
	if err := objs.Write(ctx, many); err != nil {
		t.Fatal(err)
	}
	if miss, err := objs.Missing(ctx, objectstest.Hashes(many)); err != nil || len(miss) != 0 {
		t.Fatalf("Missing = %d hashes, %v; want none", len(miss), err)
	}
	o, err := objs.Read(ctx, many[len(many)-1].Hash)
	if err != nil || len(o.Data) != len(big) || o.Data[0] != 2 {
		t.Errorf("Read of a 12 MiB blob: %d bytes, %v", len(o.Data), err)
	}
}
