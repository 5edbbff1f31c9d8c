package conversation

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
)

// Export writes the conversation id of s to w as one portable file: the
// conversation format (see FS) compressed with gzip, holding the metadata
// and every file, so Import on another machine recreates it with the same
// id. A fork's files already hold what it needs of its ancestors (Capture
// follows Storage.Ancestors), so exporting a fork alone is enough.
//
// Errors: those of s.Get (ErrNotFound, ErrInvalid), then write errors. On
// error w may hold a partial file.
func Export(ctx context.Context, s Store, id string, w io.Writer) error {
	m, files, err := s.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("conversation: export: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("conversation: export %s: %w", id, err)
	}
	zw := gzip.NewWriter(w)
	zw.Name = m.ID + ".conv"
	zw.ModTime = m.Updated
	if err := encode(zw, m, files); err != nil {
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
}

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
// Errors wrap ErrUnsafe for an unsafe path or entry, ErrInvalid for
// anything else malformed or over the limits, ErrExist when s holds the id
// and opts.Replace is false (the Put of a new conversation refuses an
// existing one atomically), or come from s.Put. Nothing is stored on
// error. The imported conversation starts a new revision history in s.
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
	if err := ctx.Err(); err != nil {
		return Meta{}, fmt.Errorf("conversation: import: %w", err)
	}
	zr, err := gzip.NewReader(bufio.NewReader(r))
	if err != nil {
		return Meta{}, fmt.Errorf("conversation: import: %w: not a gzip file: %w", ErrInvalid, err)
	}
	zr.Multistream(false)
	m, files, err := decode(zr, lim, true)
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
