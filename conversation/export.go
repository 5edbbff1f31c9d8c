package conversation

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/outposthq/outpost/checkpoint"
)

// Export writes the conversation id of s to w as one portable file: the
// conversation format (see FS) compressed with gzip, holding the metadata
// and every file, so Import on another machine recreates it with the same
// id. A fork's files already hold what it needs of its ancestors (Capture
// follows Storage.Ancestors), so exporting a fork alone is enough.
//
// When s keeps checkpoints (ObjectStorer) and the conversation has some,
// the file also carries every git object reachable from their Commit, Base
// and Memory ids (checkpoint.Reachable: the workspaces, their history
// and the conversation's files at each turn), read and verified from
// s.Objects(), in format version 2; without objects the file is version 1,
// as before. The objects are held in memory while the file is written.
//
// Errors: those of s.Get (ErrNotFound, ErrInvalid); ErrInvalid, wrapping
// the checkpoint package's error, for a checkpoint id that is not one or
// an object that is missing (checkpoint.ErrNotFound) or damaged
// (checkpoint.ErrCorrupt); then write errors. On error w may hold a
// partial file.
func Export(ctx context.Context, s Store, id string, w io.Writer) error {
	m, files, err := s.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("conversation: export: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("conversation: export %s: %w", id, err)
	}
	var objs []checkpoint.Object
	if st, ok := s.(ObjectStorer); ok && len(m.Checkpoints) > 0 {
		roots, err := checkpointRoots(m)
		if err != nil {
			return fmt.Errorf("conversation: export %s: %w", id, err)
		}
		if objs, err = checkpoint.Reachable(ctx, st.Objects(), roots); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("conversation: export %s: %w", id, ctx.Err())
			}
			return fmt.Errorf("conversation: export %s: %w: its checkpoints: %w", id, ErrInvalid, err)
		}
	}
	zw := gzip.NewWriter(w)
	zw.Name = m.ID + ".conv"
	zw.ModTime = m.Updated
	if err := encode(zw, m, files, objs); err != nil {
		return fmt.Errorf("conversation: export %s: %w", id, err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("conversation: export %s: %w", id, err)
	}
	return nil
}

// ImportOptions adjust Import. The zero value (and nil) imports a new
// conversation within the default limits.
type ImportOptions struct {
	// Replace allows replacing a stored conversation with the same id.
	Replace bool
	// MaxSize bounds the total size of the files, in bytes; 0 or more than
	// MaxSize means MaxSize.
	MaxSize int64
	// MaxFiles bounds the number of files; 0 or more than MaxFiles means
	// MaxFiles.
	MaxFiles int
	// MaxObjects and MaxObjectBytes bound the checkpoints' objects (their
	// number, and their content's total size); 0 or more than MaxObjects
	// or MaxObjectBytes means those.
	MaxObjects     int
	MaxObjectBytes int64
	// Owner, when set, replaces the archive's Meta.Owner: the server
	// gives an import to the client that imported it.
	Owner string
}

// Limits of the checkpoints' objects one Import takes, on their own
// besides MaxSize and MaxFiles (ImportOptions can lower them). Import
// holds the objects in memory until every one is verified, so
// MaxObjectBytes is also about the most memory an import's objects take.
const (
	// MaxObjects is the largest number of objects in one archive.
	MaxObjects = 1_000_000
	// MaxObjectBytes is the largest total size, in bytes, of the
	// objects' content in one archive (checkpoint.DefaultMaxBytes, the
	// largest workspace a checkpoint records).
	MaxObjectBytes = 4 << 30
)

// maxTrailer bounds what may follow the archive inside the gzip stream
// (tar padding).
const maxTrailer = 1 << 20

// Import reads a file written by Export from r and stores it in s under
// its own id, returning its metadata as stored. Everything is read and
// checked before anything is stored: the format and version, every entry
// and path (tarsafe; no absolute paths, "..", links or devices), sizes
// against the limits before anything is allocated, and every file's
// SHA-256.
//
// A file that carries checkpoints' objects (format version 2, see
// Export) is imported with them, into s.Objects(): every object's id is
// checked against its content, and the objects must hold everything
// reachable from the checkpoints (objects s already keeps count), and
// nothing else. They are written before the conversation is stored, so
// a stored checkpoint never names an object the store lacks; were that
// Put to fail, the objects stay (content-addressed and shared, they harm
// nothing; no store collects garbage yet). A conversation with
// checkpoints, or a file with objects, is refused by a store that cannot
// keep them (not an ObjectStorer): nothing is dropped silently. Files of
// version 1, without objects, import as before.
//
// Errors wrap ErrUnsafe for an unsafe path or entry, ErrInvalid for
// anything else malformed or over the limits (an object whose content
// does not hash to its id, an object missing or left over, a store
// that cannot keep checkpoints), ErrExist when s holds the id and
// opts.Replace is false (the Put of a new conversation refuses an
// existing one atomically), or come from the object store's Write or
// s.Put. Nothing is stored on error, but for objects before a failed
// Put. The imported conversation starts a new revision history in s.
func Import(ctx context.Context, s Store, r io.Reader, opts *ImportOptions) (Meta, error) {
	var o ImportOptions
	if opts != nil {
		o = *opts
	}
	lim := defaultLimits
	if o.MaxSize > 0 && o.MaxSize < lim.size {
		lim.size = o.MaxSize
	}
	if o.MaxFiles > 0 && o.MaxFiles < lim.files {
		lim.files = o.MaxFiles
	}
	lim.objects, lim.objectBytes = MaxObjects, MaxObjectBytes
	if o.MaxObjects > 0 && o.MaxObjects < lim.objects {
		lim.objects = o.MaxObjects
	}
	if o.MaxObjectBytes > 0 && o.MaxObjectBytes < lim.objectBytes {
		lim.objectBytes = o.MaxObjectBytes
	}
	if err := ctx.Err(); err != nil {
		return Meta{}, fmt.Errorf("conversation: import: %w", err)
	}
	zr, err := gzip.NewReader(bufio.NewReader(r))
	if err != nil {
		return Meta{}, fmt.Errorf("conversation: import: %w: not a gzip file: %w", ErrInvalid, err)
	}
	zr.Multistream(false)
	m, files, objs, err := decodeArchive(zr, lim, true)
	if err != nil {
		return Meta{}, fmt.Errorf("conversation: import: %w", err)
	}
	// Read the rest of the stream so gzip verifies its checksum.
	n, err := io.Copy(io.Discard, io.LimitReader(zr, maxTrailer+1))
	if err != nil {
		return Meta{}, fmt.Errorf("conversation: import %s: %w: %w", m.ID, ErrInvalid, err)
	}
	if n > maxTrailer {
		return Meta{}, fmt.Errorf("conversation: import %s: %w: data after the archive", m.ID, ErrInvalid)
	}
	if !o.Replace {
		_, err := s.Meta(ctx, m.ID)
		switch {
		case err == nil, errors.Is(err, ErrInvalid):
			return Meta{}, fmt.Errorf("conversation: import: %w: %s", ErrExist, m.ID)
		case !errors.Is(err, ErrNotFound):
			return Meta{}, fmt.Errorf("conversation: import %s: %w", m.ID, err)
		}
	}
	if err := importObjects(ctx, s, m, objs); err != nil {
		return Meta{}, fmt.Errorf("conversation: import %s: %w", m.ID, err)
	}
	if o.Owner != "" {
		m.Owner = o.Owner
	}
	// A revision belongs to one store: the import is a new one here.
	m.Revision = 0
	if o.Replace {
		m.Revision = AnyRevision
	}
	if err := s.Put(ctx, m, files); err != nil {
		if errors.Is(err, ErrStale) {
			return Meta{}, fmt.Errorf("conversation: import: %w: %s: %w", ErrExist, m.ID, err)
		}
		return Meta{}, fmt.Errorf("conversation: import: %w", err)
	}
	if stored, err := s.Meta(ctx, m.ID); err == nil {
		return stored, nil
	}
	m.Revision = max(m.Revision, 0) + 1
	return m, nil
}

// checkpointRoots returns the object ids m's checkpoints name (Commit,
// Base, Memory), each once; a malformed one is ErrInvalid.
func checkpointRoots(m Meta) ([]plumbing.Hash, error) {
	var roots []plumbing.Hash
	seen := make(map[plumbing.Hash]bool)
	for _, c := range m.Checkpoints {
		for _, id := range []string{c.Commit, c.Base, c.Memory} {
			if id == "" {
				continue
			}
			h, ok := parseHash(id)
			if !ok {
				return nil, fmt.Errorf("%w: checkpoint of turn %d: %q is not an object id", ErrInvalid, c.Turn, id)
			}
			if !seen[h] {
				seen[h] = true
				roots = append(roots, h)
			}
		}
	}
	return roots, nil
}

// parseHash parses an object id: 40 lowercase hexadecimal digits, not
// all zero.
func parseHash(id string) (plumbing.Hash, bool) {
	if len(id) != 2*len(plumbing.ZeroHash) || strings.Trim(id, "0123456789abcdef") != "" {
		return plumbing.ZeroHash, false
	}
	h := plumbing.NewHash(id)
	return h, !h.IsZero()
}

// importObjects checks an archive's objects against m's checkpoints and
// writes the ones s lacks into s.Objects(); see Import.
func importObjects(ctx context.Context, s Store, m Meta, objs []checkpoint.Object) error {
	if len(objs) == 0 && len(m.Checkpoints) == 0 {
		return nil
	}
	st, ok := s.(ObjectStorer)
	if !ok {
		return fmt.Errorf("%w: it has %d checkpoints (%d objects) and this store cannot keep checkpoints (%T is not a conversation.ObjectStorer)", ErrInvalid, len(m.Checkpoints), len(objs), s)
	}
	roots, err := checkpointRoots(m)
	if err != nil {
		return err
	}
	dst := st.Objects()
	carried := make(map[plumbing.Hash]checkpoint.Object, len(objs))
	for _, o := range objs {
		carried[o.Hash] = o
	}
	reached, err := checkpoint.Reachable(ctx, overlay{carried, dst}, roots)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: its checkpoints: %w", ErrInvalid, err)
	}
	// Write in reverse: what an object refers to before it.
	var write []checkpoint.Object
	for i := len(reached) - 1; i >= 0; i-- {
		if o, ok := carried[reached[i].Hash]; ok {
			write = append(write, o)
			delete(carried, o.Hash)
		}
	}
	for h, o := range carried {
		return fmt.Errorf("%w: %s %s is not reachable from its checkpoints", ErrInvalid, o.Type, h)
	}
	hashes := make([]plumbing.Hash, len(write))
	for i, o := range write {
		hashes[i] = o.Hash
	}
	missing, err := dst.Missing(ctx, hashes)
	if err != nil {
		return fmt.Errorf("checkpoint objects: %w", err)
	}
	need := make(map[plumbing.Hash]bool, len(missing))
	for _, h := range missing {
		need[h] = true
	}
	write = slices.DeleteFunc(write, func(o checkpoint.Object) bool { return !need[o.Hash] })
	if err := dst.Write(ctx, write); err != nil {
		return fmt.Errorf("checkpoint objects: %w", err)
	}
	return nil
}

// overlay reads an archive's objects, then the store's: an archive may
// leave out objects the receiving store already keeps.
type overlay struct {
	first map[plumbing.Hash]checkpoint.Object
	then  checkpoint.Objects
}

func (v overlay) Missing(ctx context.Context, hashes []plumbing.Hash) ([]plumbing.Hash, error) {
	var rest []plumbing.Hash
	for _, h := range hashes {
		if _, ok := v.first[h]; !ok {
			rest = append(rest, h)
		}
	}
	if len(rest) == 0 {
		return nil, ctx.Err()
	}
	return v.then.Missing(ctx, rest)
}

func (v overlay) Read(ctx context.Context, h plumbing.Hash) (checkpoint.Object, error) {
	if o, ok := v.first[h]; ok {
		if err := ctx.Err(); err != nil {
			return checkpoint.Object{}, err
		}
		return o, nil
	}
	return v.then.Read(ctx, h)
}

func (v overlay) Write(context.Context, []checkpoint.Object) error {
	return errors.New("conversation: an archive's objects are read-only")
}
