package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/internal/storeops"
)

var _ conversation.ObjectStorer = (*Store)(nil)

// Objects implements conversation.ObjectStorer: the checkpoints' git
// objects, in the table outpost_objects (migration 0003), one row per
// object, shared by every outpost that opens the database and by every
// conversation in it. Delete leaves a conversation's objects in place (no
// garbage collection yet). It is safe for concurrent use, from any number
// of processes: writes of the same objects only ever insert identical
// rows.
func (s *Store) Objects() checkpoint.Objects { return objectStore{s.pool} }

// objectStore is the checkpoint.Objects of a Store.
type objectStore struct{ pool *pgxpool.Pool }

// Bounds of one INSERT of Write: objects beyond are written by further
// statements (one object larger than writeBytes goes alone).
const (
	writeBytes   = 32 << 20
	writeObjects = 1000
)

func objectsError(op string, err error) error {
	return fmt.Errorf("postgres store: objects: %s: %w", op, err)
}

// Missing implements checkpoint.Objects with one query.
func (o objectStore) Missing(ctx context.Context, hashes []plumbing.Hash) ([]plumbing.Hash, error) {
	storeops.Count("postgres-objects", "missing")
	if err := ctx.Err(); err != nil {
		return nil, objectsError("missing", err)
	}
	if len(hashes) == 0 {
		return nil, nil
	}
	keys := make([][]byte, len(hashes))
	for i := range hashes {
		keys[i] = hashes[i][:]
	}
	rows, err := o.pool.Query(ctx, `SELECT hash FROM outpost_objects WHERE hash = ANY($1)`, keys)
	if err != nil {
		return nil, objectsError("missing", err)
	}
	present := make(map[plumbing.Hash]bool)
	var h plumbing.Hash
	var b []byte
	_, err = pgx.ForEachRow(rows, []any{&b}, func() error {
		copy(h[:], b)
		present[h] = true
		return nil
	})
	if err != nil {
		return nil, objectsError("missing", err)
	}
	var out []plumbing.Hash
	for _, h := range hashes {
		if !present[h] {
			out = append(out, h)
		}
	}
	return out, nil
}

// Read implements checkpoint.Objects: the row's content is checked
// against its id (checkpoint.ErrCorrupt).
func (o objectStore) Read(ctx context.Context, h plumbing.Hash) (checkpoint.Object, error) {
	storeops.Count("postgres-objects", "read")
	if err := ctx.Err(); err != nil {
		return checkpoint.Object{}, objectsError("read", err)
	}
	var typ int16
	var data []byte
	err := o.pool.QueryRow(ctx, `SELECT type, data FROM outpost_objects WHERE hash = $1`, h[:]).Scan(&typ, &data)
	if errors.Is(err, pgx.ErrNoRows) {
		return checkpoint.Object{}, fmt.Errorf("%w: object %s", checkpoint.ErrNotFound, h)
	}
	if err != nil {
		return checkpoint.Object{}, objectsError("read", err)
	}
	obj := checkpoint.Object{Type: plumbing.ObjectType(typ), Hash: h, Data: data}
	if obj.Data == nil {
		obj.Data = []byte{}
	}
	if err := obj.Verify(); err != nil {
		return checkpoint.Object{}, err
	}
	return obj, nil
}

// Write implements checkpoint.Objects. Every object is checked against
// its id first (checkpoint.ErrCorrupt: nothing is written), so a faulty
// writer cannot take an id from the correct content for every reader.
// Objects are sorted by id and inserted by as few statements as the
// bounds above allow, each `INSERT ... SELECT FROM unnest(...) ON
// CONFLICT DO NOTHING`: objects already stored are kept, and concurrent
// writers of the same objects take their row locks in the same order,
// so they never deadlock. Each statement commits on its own: an error
// leaves whole objects, some of them.
func (o objectStore) Write(ctx context.Context, objs []checkpoint.Object) error {
	storeops.Count("postgres-objects", "write")
	if err := ctx.Err(); err != nil {
		return objectsError("write", err)
	}
	list := make([]checkpoint.Object, 0, len(objs))
	for _, obj := range objs {
		if err := obj.Verify(); err != nil {
			return objectsError("write", err)
		}
		list = append(list, obj)
	}
	slices.SortFunc(list, func(a, b checkpoint.Object) int { return bytes.Compare(a.Hash[:], b.Hash[:]) })
	list = slices.CompactFunc(list, func(a, b checkpoint.Object) bool { return a.Hash == b.Hash })
	for len(list) > 0 {
		n, size := 0, 0
		for n < len(list) && n < writeObjects && (n == 0 || size+len(list[n].Data) <= writeBytes) {
			size += len(list[n].Data)
			n++
		}
		if err := o.insert(ctx, list[:n]); err != nil {
			return err
		}
		list = list[n:]
	}
	return nil
}

func (o objectStore) insert(ctx context.Context, objs []checkpoint.Object) error {
	hashes := make([][]byte, len(objs))
	types := make([]int16, len(objs))
	data := make([][]byte, len(objs))
	for i, obj := range objs {
		hashes[i] = obj.Hash[:]
		types[i] = int16(obj.Type)
		data[i] = obj.Data
		if data[i] == nil {
			data[i] = []byte{} // NOT NULL: the empty blob is empty, not null
		}
	}
	_, err := o.pool.Exec(ctx, `INSERT INTO outpost_objects (hash, type, data)
		SELECT * FROM unnest($1::bytea[], $2::smallint[], $3::bytea[])
		ON CONFLICT (hash) DO NOTHING`, hashes, types, data)
	if err != nil {
		return objectsError("write", err)
	}
	return nil
}
