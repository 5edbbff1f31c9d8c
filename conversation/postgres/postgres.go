package postgres

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/internal/storeops"
)

//go:embed migrations/*.sql
var migrations embed.FS

// PartSize is the largest bytea value one row of file data holds.
const PartSize = 256 << 10

// ErrNewerSchema: the database's schema was made by a newer outpost.
var ErrNewerSchema = errors.New("postgres store: the database schema is newer than this outpost")

// Options adjust Open. Nil means defaults.
type Options struct {
	// MaxConns bounds the pool of connections for reads and writes
	// (default 8). Each hold takes one more connection of its own.
	MaxConns int32
}

// Store is the PostgreSQL conversation.Store. It is safe for concurrent
// use; Close it when done.
type Store struct {
	pool  *pgxpool.Pool
	holds *pgxpool.Pool // connections that hold advisory locks, one per hold
	url   string
}

var _ conversation.Store = (*Store)(nil)

// IsURL reports whether s is a PostgreSQL connection URL (postgres:// or
// postgresql://).
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// IsConnString reports whether s is a PostgreSQL connection string as pgx
// takes it: a URL (IsURL) or key=value pairs such as
// "host=/run/postgresql dbname=outpost" (values may be 'quoted').
func IsConnString(s string) bool {
	return IsURL(s) || keyValues().MatchString(s)
}

// keyValues is the shape of a key=value connection string: one or more
// keyword=value pairs, a value bare or in single quotes.
var keyValues = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^\s*([A-Za-z_]+\s*=\s*('([^'\\]|\\.)*'|[^\s']*)\s*)+$`)
})

// Open connects to the database at url (a postgres:// URL or key=value
// connection string, as pgx takes), creates or upgrades its schema, and
// returns the store. A schema newer than this build's: ErrNewerSchema.
func Open(ctx context.Context, url string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w: %w", conversation.ErrInvalid, redactURL(err, url))
	}
	pc.MaxConns = 8
	if o.MaxConns > 0 {
		pc.MaxConns = o.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres store: %w", redactURL(err, url))
	}
	hc := pc.Copy()
	hc.MaxConns = 256
	hc.MinConns = 0
	hc.ConnConfig.RuntimeParams["tcp_keepalives_idle"] = "5"
	hc.ConnConfig.RuntimeParams["tcp_keepalives_interval"] = "2"
	hc.ConnConfig.RuntimeParams["tcp_keepalives_count"] = "3"
	hc.ConnConfig.RuntimeParams["application_name"] = "outpost hold"
	holds, err := pgxpool.NewWithConfig(ctx, hc)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres store: %w", redactURL(err, url))
	}
	s := &Store{pool: pool, holds: holds, url: url}
	if err := s.migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the store's connections, waiting for holds still taken to
// be released.
func (s *Store) Close() {
	s.pool.Close()
	s.holds.Close()
}

// redactURL keeps a password in url out of err's text.
func redactURL(err error, url string) error {
	if pc, perr := pgconn.ParseConfig(url); perr == nil && pc.Password != "" && strings.Contains(err.Error(), pc.Password) {
		return errors.New(strings.ReplaceAll(err.Error(), pc.Password, "xxxxx"))
	}
	return err
}

// schemaLock is the advisory lock key migrations take.
const schemaLock = 0x6f7574706f7374 // "outpost"

// Migrations returns the embedded migrations' versions, in order.
func Migrations() []int {
	vs, _ := migrationList()
	out := make([]int, len(vs))
	for i, m := range vs {
		out[i] = m.version
	}
	return out
}

type migration struct {
	version int
	name    string
}

func migrationList() ([]migration, error) {
	ents, err := fs.ReadDir(migrations, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range ents {
		n, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(n)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: want NNNN_name.sql", e.Name())
		}
		out = append(out, migration{v, path.Join("migrations", e.Name())})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	return out, nil
}

// migrate brings the schema to the newest embedded version, refusing a
// newer one.
func (s *Store) migrate(ctx context.Context) error {
	list, err := migrationList()
	if err != nil {
		return fmt.Errorf("postgres store: %w", err)
	}
	latest := list[len(list)-1].version
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres store: %w", redactURL(err, s.url))
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(schemaLock)); err != nil {
		return fmt.Errorf("postgres store: schema lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS outpost_schema (version integer NOT NULL, applied timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("postgres store: %w", err)
	}
	var current int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM outpost_schema`).Scan(&current); err != nil {
		return fmt.Errorf("postgres store: reading the schema version: %w", err)
	}
	if current > latest {
		return fmt.Errorf("%w: version %d, this outpost knows up to %d; upgrade outpost (nothing was changed)", ErrNewerSchema, current, latest)
	}
	for _, m := range list {
		if m.version <= current {
			continue
		}
		sql, err := migrations.ReadFile(m.name)
		if err != nil {
			return fmt.Errorf("postgres store: %w", err)
		}
		if _, err := tx.Exec(ctx, string(sql)); err != nil {
			return fmt.Errorf("postgres store: migration %s: %w", m.name, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO outpost_schema (version) VALUES ($1)`, m.version); err != nil {
			return fmt.Errorf("postgres store: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres store: migrations: %w", err)
	}
	return nil
}

func ready(ctx context.Context, op string) error {
	storeops.Count("postgres", op)
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("conversation: %s: %w", op, err)
	}
	return nil
}

// Put implements conversation.Store in one transaction: the row of the
// conversation is locked (or, for a new one, inserted, the primary key
// refusing a concurrent twin), its revision compared, the files replaced.
func (s *Store) Put(ctx context.Context, m conversation.Meta, files []conversation.File) error {
	if err := ready(ctx, "put"); err != nil {
		return err
	}
	if err := conversation.Validate(m, files); err != nil {
		return fmt.Errorf("conversation: put: %w", err)
	}
	if m.Revision < conversation.AnyRevision {
		return fmt.Errorf("conversation: put: %w: %s: revision %d", conversation.ErrInvalid, m.ID, m.Revision)
	}
	m.Files = make([]string, len(files))
	for i, f := range files {
		m.Files[i] = f.Path
	}
	for {
		// AnyRevision over a conversation created meanwhile starts again
		// from the new row, which then exists and is locked.
		if err := s.put(ctx, m, files); !errors.Is(err, errCreatedMeanwhile) {
			return err
		}
	}
}

var errCreatedMeanwhile = errors.New("created meanwhile")

func (s *Store) put(ctx context.Context, m conversation.Meta, files []conversation.File) error {
	base := m.Revision
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("conversation: put %s: %w", m.ID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var current int64
	err = tx.QueryRow(ctx, `SELECT revision FROM outpost_conversations WHERE id = $1 FOR UPDATE`, m.ID).Scan(&current)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		current = 0
	case err != nil:
		return fmt.Errorf("conversation: put %s: %w", m.ID, err)
	}
	next := current + 1
	if base != conversation.AnyRevision && base != current {
		return &conversation.StaleError{ID: m.ID, Base: base, Current: current}
	}
	m.Revision = next
	k := pageColumns(m)
	js, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("conversation: put %s: %w", m.ID, err)
	}
	if current == 0 {
		tag, err := tx.Exec(ctx, `INSERT INTO outpost_conversations (id, revision, native, meta, updated, created, owner) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING`,
			m.ID, next, []byte(m.Native), string(js), k.updated, k.created, m.Owner)
		if err != nil {
			return fmt.Errorf("conversation: put %s: %w", m.ID, err)
		}
		if tag.RowsAffected() == 0 {
			// Created meanwhile by another Put.
			if base == conversation.AnyRevision {
				return errCreatedMeanwhile
			}
			var cur int64
			_ = s.pool.QueryRow(ctx, `SELECT revision FROM outpost_conversations WHERE id = $1`, m.ID).Scan(&cur)
			return &conversation.StaleError{ID: m.ID, Base: base, Current: max(cur, 1)}
		}
	} else {
		if _, err := tx.Exec(ctx, `UPDATE outpost_conversations SET revision = $2, native = $3, meta = $4, updated = $5, created = $6, owner = $7 WHERE id = $1`,
			m.ID, next, []byte(m.Native), string(js), k.updated, k.created, m.Owner); err != nil {
			return fmt.Errorf("conversation: put %s: %w", m.ID, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM outpost_files WHERE conversation = $1`, m.ID); err != nil {
			return fmt.Errorf("conversation: put %s: %w", m.ID, err)
		}
	}
	if len(files) > 0 {
		rows := make([][]any, len(files))
		for i, f := range files {
			sum := sha256.Sum256(f.Data)
			rows[i] = []any{m.ID, int32(i), f.Path, int32(f.Mode), int64(len(f.Data)), sum[:]}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"outpost_files"}, []string{"conversation", "idx", "path", "mode", "size", "sha256"}, pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("conversation: put %s: %w", m.ID, err)
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"outpost_parts"}, []string{"conversation", "idx", "part", "data"}, &partSource{id: m.ID, files: files, part: -1}); err != nil {
			return fmt.Errorf("conversation: put %s: %w", m.ID, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("conversation: put %s: %w", m.ID, err)
	}
	return nil
}

// partSource feeds COPY the files' data in parts of PartSize, without
// copying it. An empty file has no part.
type partSource struct {
	id    string
	files []conversation.File
	idx   int
	part  int
}

func (p *partSource) Next() bool {
	p.part++
	for p.idx < len(p.files) && p.part*PartSize >= len(p.files[p.idx].Data) {
		p.idx++
		p.part = 0
	}
	return p.idx < len(p.files)
}

func (p *partSource) Values() ([]any, error) {
	d := p.files[p.idx].Data
	lo := p.part * PartSize
	return []any{p.id, int32(p.idx), int32(p.part), d[lo:min(lo+PartSize, len(d))]}, nil
}

func (p *partSource) Err() error { return nil }

// Get implements conversation.Store, reading one revision in one
// REPEATABLE READ transaction and checking every file's size and digest.
func (s *Store) Get(ctx context.Context, id string) (conversation.Meta, []conversation.File, error) {
	return s.read(ctx, "get", id, true)
}

// Meta implements conversation.Store.
func (s *Store) Meta(ctx context.Context, id string) (conversation.Meta, error) {
	m, _, err := s.read(ctx, "meta", id, false)
	return m, err
}

func (s *Store) read(ctx context.Context, op, id string, withFiles bool) (conversation.Meta, []conversation.File, error) {
	if err := ready(ctx, op); err != nil {
		return conversation.Meta{}, nil, err
	}
	if !conversation.ValidID(id) {
		return conversation.Meta{}, nil, fmt.Errorf("conversation: %s: %w: %q", op, conversation.ErrNotFound, id)
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return conversation.Meta{}, nil, fmt.Errorf("conversation: %s %s: %w", op, id, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var rev int64
	var js []byte
	err = tx.QueryRow(ctx, `SELECT revision, meta FROM outpost_conversations WHERE id = $1`, id).Scan(&rev, &js)
	if errors.Is(err, pgx.ErrNoRows) {
		return conversation.Meta{}, nil, fmt.Errorf("%w: %s", conversation.ErrNotFound, id)
	}
	if err != nil {
		return conversation.Meta{}, nil, fmt.Errorf("conversation: %s %s: %w", op, id, err)
	}
	m, err := decodeMeta(id, rev, js)
	if err != nil || !withFiles {
		return m, nil, err
	}
	files, err := readFiles(ctx, tx, id, len(m.Files))
	if err != nil {
		return conversation.Meta{}, nil, err
	}
	return m, files, nil
}

func decodeMeta(id string, rev int64, js []byte) (conversation.Meta, error) {
	var m conversation.Meta
	if err := json.Unmarshal(js, &m); err != nil {
		return m, fmt.Errorf("conversation: %s: %w: metadata: %w", id, conversation.ErrInvalid, err)
	}
	if m.ID != id {
		return conversation.Meta{}, fmt.Errorf("conversation: %s: %w: holds conversation %q", id, conversation.ErrInvalid, m.ID)
	}
	if m.Files == nil {
		m.Files = []string{}
	}
	m.Revision = rev
	return m, nil
}

func readFiles(ctx context.Context, tx pgx.Tx, id string, n int) ([]conversation.File, error) {
	type entry struct {
		size int64
		sum  []byte
	}
	files := make([]conversation.File, 0, n)
	var entries []entry
	rows, err := tx.Query(ctx, `SELECT idx, path, mode, size, sha256 FROM outpost_files WHERE conversation = $1 ORDER BY idx`, id)
	if err != nil {
		return nil, fmt.Errorf("conversation: get %s: %w", id, err)
	}
	for rows.Next() {
		var idx, mode int32
		var p string
		var e entry
		if err := rows.Scan(&idx, &p, &mode, &e.size, &e.sum); err != nil {
			return nil, fmt.Errorf("conversation: get %s: %w", id, err)
		}
		if int(idx) != len(files) || e.size < 0 || e.size > conversation.MaxSize {
			return nil, fmt.Errorf("conversation: %s: %w: file entry %d", id, conversation.ErrInvalid, idx)
		}
		files = append(files, conversation.File{Path: p, Mode: uint32(mode), Data: make([]byte, 0, e.size)})
		entries = append(entries, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("conversation: get %s: %w", id, err)
	}
	if len(files) != n {
		return nil, fmt.Errorf("conversation: %s: %w: %d files stored, metadata lists %d", id, conversation.ErrInvalid, len(files), n)
	}
	rows, err = tx.Query(ctx, `SELECT idx, part, data FROM outpost_parts WHERE conversation = $1 ORDER BY idx, part`, id)
	if err != nil {
		return nil, fmt.Errorf("conversation: get %s: %w", id, err)
	}
	next := make([]int32, len(files))
	for rows.Next() {
		var idx, part int32
		var data []byte
		if err := rows.Scan(&idx, &part, &data); err != nil {
			return nil, fmt.Errorf("conversation: get %s: %w", id, err)
		}
		if idx < 0 || int(idx) >= len(files) || part != next[idx] || int64(len(files[idx].Data)+len(data)) > entries[idx].size {
			return nil, fmt.Errorf("conversation: %s: %w: file %d part %d", id, conversation.ErrInvalid, idx, part)
		}
		next[idx]++
		files[idx].Data = append(files[idx].Data, data...)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("conversation: get %s: %w", id, err)
	}
	for i, f := range files {
		sum := sha256.Sum256(f.Data)
		if int64(len(f.Data)) != entries[i].size || !bytes.Equal(sum[:], entries[i].sum) {
			return nil, fmt.Errorf("conversation: %s: %w: %s: size or SHA-256 does not match", id, conversation.ErrInvalid, f.Path)
		}
		if len(f.Data) == 0 {
			files[i].Data = nil
		}
	}
	return files, nil
}

// List implements conversation.Store.
func (s *Store) List(ctx context.Context) ([]conversation.Meta, error) {
	if err := ready(ctx, "list"); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT id, revision, meta FROM outpost_conversations`)
	if err != nil {
		return nil, fmt.Errorf("conversation: list: %w", err)
	}
	defer rows.Close()
	out := []conversation.Meta{}
	for rows.Next() {
		var id string
		var rev int64
		var js []byte
		if err := rows.Scan(&id, &rev, &js); err != nil {
			return nil, fmt.Errorf("conversation: list: %w", err)
		}
		if m, err := decodeMeta(id, rev, js); err == nil {
			out = append(out, m)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("conversation: list: %w", err)
	}
	conversation.SortMetas(out)
	return out, nil
}

// Delete implements conversation.Store.
func (s *Store) Delete(ctx context.Context, id string) error {
	if err := ready(ctx, "delete"); err != nil {
		return err
	}
	if !conversation.ValidID(id) {
		return fmt.Errorf("conversation: delete: %w: %q", conversation.ErrNotFound, id)
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM outpost_conversations WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("conversation: delete %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("conversation: delete: %w: %s", conversation.ErrNotFound, id)
	}
	return nil
}

// lockKey is the advisory lock key of conversation id: 64 bits of
// FNV-1a. Two ids sharing a key only make one look busy while the other
// is held.
func lockKey(id string) int64 {
	h := fnv.New64a()
	h.Write([]byte("outpost.conversation/" + id))
	return int64(h.Sum64())
}

// Hold implements conversation.Store with a session-level advisory lock
// on a connection of the hold's own (see the package documentation for
// the liveness bound).
func (s *Store) Hold(ctx context.Context, id string, o conversation.Owner) (conversation.Hold, error) {
	if err := ready(ctx, "hold"); err != nil {
		return nil, err
	}
	if !conversation.ValidID(id) {
		return nil, fmt.Errorf("conversation: hold: %w: id %q", conversation.ErrInvalid, id)
	}
	conn, err := s.holds.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("conversation: hold %s: %w", id, redactURL(err, s.url))
	}
	fail := func(err error) (conversation.Hold, error) {
		// A connection in an unknown state never goes back to the pool
		// (it could keep the lock).
		conn.Conn().Close(context.WithoutCancel(ctx))
		conn.Release()
		return nil, fmt.Errorf("conversation: hold %s: %w", id, err)
	}
	key := lockKey(id)
	// A lock held with no holder's row is being taken (the row follows the
	// lock) or freed (the row goes first): after a short wait for the row,
	// try the lock again, so that a hold freed meanwhile is taken rather
	// than reported busy without its holder.
	for try := 1; ; try++ {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil {
			return fail(err)
		}
		if ok {
			break
		}
		h := conversation.AwaitHolder(ctx, func() (conversation.Holder, bool) { return holder(ctx, conn.Conn(), id, key) })
		if !h.Since.IsZero() || try == holdTries || ctx.Err() != nil {
			conn.Release()
			return nil, &conversation.BusyError{ID: id, Holder: h}
		}
	}
	since := time.Now().UTC()
	if _, err := conn.Exec(ctx, `INSERT INTO outpost_holds (id, host, pid, lease, since, backend) VALUES ($1, $2, $3, $4, $5, pg_backend_pid())
		ON CONFLICT (id) DO UPDATE SET host = $2, pid = $3, lease = $4, since = $5, backend = pg_backend_pid()`,
		id, o.Host, int32(o.PID), o.Lease, since); err != nil {
		return fail(err)
	}
	return &hold{conn: conn, id: id, key: key}, nil
}

// holdTries is how many times Hold tries a lock whose holder it cannot
// read before it reports the conversation busy without one.
const holdTries = 4

// holder reads who holds id: the row of the backend that holds the lock;
// false while there is none (the lock is being taken or freed).
func holder(ctx context.Context, conn *pgx.Conn, id string, key int64) (conversation.Holder, bool) {
	var h conversation.Holder
	var pid int32
	err := conn.QueryRow(ctx, `SELECT h.host, h.pid, h.lease, h.since FROM outpost_holds h
		WHERE h.id = $1 AND h.backend IN (SELECT l.pid FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
			AND l.objsubid = 1 AND l.classid = $2::bigint::oid AND l.objid = $3::bigint::oid)`,
		id, int64(uint32(uint64(key)>>32)), int64(uint32(key))).Scan(&h.Host, &pid, &h.Lease, &h.Since)
	if err != nil {
		return conversation.Holder{}, false
	}
	h.PID = int(pid)
	h.Since = h.Since.UTC()
	return h, true
}

type hold struct {
	mu   sync.Mutex
	conn *pgxpool.Conn
	id   string
	key  int64
}

// Release implements conversation.Hold: it unlocks and returns the
// connection to the hold pool; a connection that fails to unlock is
// closed instead, which frees the lock on the server.
func (h *hold) Release() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var unlocked bool
	_, err := h.conn.Exec(ctx, `DELETE FROM outpost_holds WHERE id = $1 AND backend = pg_backend_pid()`, h.id)
	if err == nil {
		err = h.conn.QueryRow(ctx, `SELECT pg_advisory_unlock($1)`, h.key).Scan(&unlocked)
	}
	if err != nil || !unlocked {
		h.conn.Conn().Close(ctx)
	}
	h.conn.Release()
	h.conn = nil
	if err != nil {
		return fmt.Errorf("conversation: release %s: %w", h.id, err)
	}
	return nil
}

var _ conversation.Resolver = (*Store)(nil)

// Resolve implements conversation.Resolver with three indexed queries
// instead of reading every conversation's metadata.
func (s *Store) Resolve(ctx context.Context, ref string) (string, error) {
	if err := ready(ctx, "resolve"); err != nil {
		return "", err
	}
	if ref == "" {
		return "", fmt.Errorf("%w: empty reference", conversation.ErrNotFound)
	}
	ids := func(sql string, arg any) ([]string, error) {
		rows, err := s.pool.Query(ctx, sql, arg)
		if err != nil {
			return nil, fmt.Errorf("conversation: resolve: %w", err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("conversation: resolve: %w", err)
		}
		return out, nil
	}
	if conversation.ValidID(ref) {
		exact, err := ids(`SELECT id FROM outpost_conversations WHERE id = $1`, ref)
		if err != nil || len(exact) == 1 {
			return ref, err
		}
	}
	natives, err := ids(`SELECT id FROM outpost_conversations WHERE native = $1`, []byte(ref))
	if err != nil {
		return "", err
	}
	if id, ok, err := conversation.Pick(ref, "native id", natives); ok {
		return id, err
	}
	if len(ref) >= conversation.MinPrefix && conversation.ValidID(ref) {
		like := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(ref) + "%"
		hits, err := ids(`SELECT id FROM outpost_conversations WHERE id LIKE $1 ESCAPE '\' ORDER BY id LIMIT 100`, like)
		if err != nil {
			return "", err
		}
		if id, ok, err := conversation.Pick(ref, "id prefix", hits); ok {
			return id, err
		}
	}
	return "", fmt.Errorf("%w: %q", conversation.ErrNotFound, ref)
}
