package conversation

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/internal/tarsafe"
)

// The conversation file format, shared by the filesystem store (a plain
// tar, <id>.conv) and Export (the same tar, gzip-compressed), is
// documented on FS.
const (
	formatName = "outpost.conversation"
	// formatVersion is the version of an archive without objects: every
	// stored conversation, and the export of one without checkpoints, so
	// that an older outpost reads them. formatObjects is the version of an
	// archive that carries checkpoints' objects after its files (an
	// export): an older outpost refuses it by its version, rather than
	// importing the conversation without them.
	formatVersion = 1
	formatObjects = 2
	metaEntry     = "meta.json"
	filesPrefix   = "files/"
	objectsPrefix = "objects/"
	// maxEnvelope bounds meta.json.
	maxEnvelope = 64 << 20
	// entryOverhead bounds the tar bytes around one entry's data: header,
	// PAX records for a MaxPathLen name and times, padding.
	entryOverhead = 3*512 + 2*MaxPathLen + 1024
	// objectOverhead is the same for an object's entry, whose name is
	// short: header, PAX header and records, padding.
	objectOverhead = 5 * 512
)

type envelope struct {
	Format  string      `json:"format"`
	Version int         `json:"version"`
	Meta    Meta        `json:"meta"`
	Files   []fileEntry `json:"files"`
	// Objects (version 2 only) declares the git objects that follow the
	// files: how many, and their content's total size.
	Objects *objectsEntry `json:"objects,omitempty"`
}

type objectsEntry struct {
	Count int   `json:"count"`
	Bytes int64 `json:"bytes"`
}

type fileEntry struct {
	Path   string `json:"path"`
	Mode   uint32 `json:"mode"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// encode writes a conversation in the format above, with objs (verified
// by the caller) after its files; without objects, in version 1. m and
// files must have passed validate.
func encode(w io.Writer, m Meta, files []File, objs []checkpoint.Object) error {
	env := envelope{Format: formatName, Version: formatVersion, Meta: m, Files: make([]fileEntry, len(files))}
	env.Meta.Files = make([]string, len(files))
	for i, f := range files {
		sum := sha256.Sum256(f.Data)
		env.Files[i] = fileEntry{Path: f.Path, Mode: f.Mode, Size: int64(len(f.Data)), SHA256: hex.EncodeToString(sum[:])}
		env.Meta.Files[i] = f.Path
	}
	if len(objs) > 0 {
		env.Version = formatObjects
		env.Objects = &objectsEntry{Count: len(objs)}
		for _, o := range objs {
			env.Objects.Bytes += int64(len(o.Data))
		}
	}
	js, err := json.Marshal(env)
	if err != nil {
		return fmt.Errorf("%w: %s: encoding metadata: %w", ErrInvalid, m.ID, err)
	}
	if len(js) > maxEnvelope {
		return fmt.Errorf("%w: %s: metadata larger than %d bytes", ErrInvalid, m.ID, maxEnvelope)
	}
	entries := make([]tarsafe.File, 0, len(files)+len(objs)+1)
	entries = append(entries, tarsafe.File{Name: metaEntry, Mode: 0o600, Data: js})
	for _, f := range files {
		mode := fs.FileMode(f.Mode)
		if mode == 0 {
			mode = 0o600
		}
		entries = append(entries, tarsafe.File{Name: filesPrefix + f.Path, Mode: mode, Data: f.Data})
	}
	for _, o := range objs {
		entries = append(entries, tarsafe.File{Name: objectName(o.Hash, o.Type), Mode: 0o600, Data: o.Data})
	}
	if err := tarsafe.Write(w, entries); err != nil {
		if errors.Is(err, tarsafe.ErrUnsafe) {
			return fmt.Errorf("%w: %w", ErrUnsafe, err)
		}
		return err
	}
	return nil
}

// decodeError marks a decoding failure as ErrInvalid, and as ErrUnsafe too
// when an entry was unsafe.
func decodeError(err error) error {
	if errors.Is(err, tarsafe.ErrUnsafe) && !errors.Is(err, ErrUnsafe) {
		err = fmt.Errorf("%w: %w", ErrUnsafe, err)
	}
	if errors.Is(err, ErrInvalid) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrInvalid, err)
}

// decode reads a conversation in the format above from r. With files false
// it stops after the envelope (the files are neither read nor verified).
// Every error wraps ErrInvalid (and ErrUnsafe for unsafe paths or
// entries); decode reads no more than the limits allow, and allocates in
// proportion to the data actually read, not to the sizes declared.
func decode(r io.Reader, lim limits, files bool) (Meta, []File, error) {
	m, out, _, err := decodeArchive(r, lim, files)
	return m, out, err
}

// decodeArchive is decode that also returns the archive's objects, each
// checked against its id; lim bounds them (none for a stored
// conversation: the zero limits).
func decodeArchive(r io.Reader, lim limits, files bool) (Meta, []File, []checkpoint.Object, error) {
	cr := &capReader{r: r, n: maxEnvelope + entryOverhead}
	tr := tar.NewReader(cr)
	env, err := readEnvelope(tr)
	if err != nil {
		return Meta{}, nil, nil, err
	}
	m, total, err := env.check(lim)
	if err != nil {
		return Meta{}, nil, nil, err
	}
	if !files {
		return m, nil, nil, nil
	}
	cr.n += total + int64(len(env.Files)+2)*entryOverhead
	out := make([]File, len(env.Files))
	for i, e := range env.Files {
		if out[i], err = readEntry(tr, i, len(env.Files), e); err != nil {
			return Meta{}, nil, nil, err
		}
	}
	var objs []checkpoint.Object
	if env.Objects != nil {
		cr.n += env.Objects.Bytes + int64(env.Objects.Count)*objectOverhead
		if objs, err = readObjects(tr, *env.Objects); err != nil {
			return Meta{}, nil, nil, err
		}
	}
	if h, err := next(tr); err != io.EOF {
		if err != nil {
			return Meta{}, nil, nil, decodeError(err)
		}
		return Meta{}, nil, nil, fmt.Errorf("%w: unexpected entry %q", ErrInvalid, h.Name)
	}
	return m, out, objs, nil
}

// readEnvelope reads the first entry, meta.json, of a known format and version.
func readEnvelope(tr *tar.Reader) (envelope, error) {
	var env envelope
	h, err := next(tr)
	if err == io.EOF {
		return env, fmt.Errorf("%w: empty archive", ErrInvalid)
	}
	if err != nil {
		return env, decodeError(err)
	}
	if h.Name != metaEntry || !regular(h) {
		return env, fmt.Errorf("%w: first entry is %q, want %s", ErrInvalid, h.Name, metaEntry)
	}
	if h.Size > maxEnvelope {
		return env, fmt.Errorf("%w: %s larger than %d bytes", ErrInvalid, metaEntry, maxEnvelope)
	}
	js, err := readN(tr, h.Size)
	if err != nil {
		return env, decodeError(fmt.Errorf("reading %s: %w", metaEntry, err))
	}
	if err := json.Unmarshal(js, &env); err != nil {
		return env, fmt.Errorf("%w: %s: %w", ErrInvalid, metaEntry, err)
	}
	if env.Format != formatName {
		return env, fmt.Errorf("%w: format %q, want %q", ErrInvalid, env.Format, formatName)
	}
	if env.Version != formatVersion && env.Version != formatObjects {
		return env, fmt.Errorf("%w: format version %d, this build reads %d and %d", ErrInvalid, env.Version, formatVersion, formatObjects)
	}
	if env.Objects != nil && env.Version < formatObjects {
		return env, fmt.Errorf("%w: objects in an archive of version %d", ErrInvalid, env.Version)
	}
	return env, nil
}

// check validates the envelope's file list against the limits, and
// returns its metadata and the files' declared total size.
func (env envelope) check(lim limits) (Meta, int64, error) {
	if len(env.Files) > lim.files {
		return Meta{}, 0, fmt.Errorf("%w: %d files, more than %d", ErrInvalid, len(env.Files), lim.files)
	}
	m := env.Meta
	m.Files = make([]string, len(env.Files))
	paths := make([]File, len(env.Files))
	var total int64
	for i, e := range env.Files {
		if e.Size < 0 || len(e.SHA256) != 2*sha256.Size {
			return Meta{}, 0, fmt.Errorf("%w: bad size or digest for %q", ErrInvalid, e.Path)
		}
		if e.Size > lim.size-total {
			return Meta{}, 0, fmt.Errorf("%w: files larger than %d bytes", ErrInvalid, lim.size)
		}
		total += e.Size
		m.Files[i] = e.Path
		paths[i] = File{Path: e.Path, Mode: e.Mode}
	}
	if err := validate(m, paths, lim); err != nil {
		return Meta{}, 0, decodeError(err)
	}
	if o := env.Objects; o != nil {
		if o.Count < 0 || o.Bytes < 0 {
			return Meta{}, 0, fmt.Errorf("%w: bad object count or size", ErrInvalid)
		}
		if o.Count > lim.objects {
			return Meta{}, 0, fmt.Errorf("%w: %d checkpoint objects, more than %d", ErrInvalid, o.Count, lim.objects)
		}
		if o.Bytes > lim.objectBytes {
			return Meta{}, 0, fmt.Errorf("%w: checkpoint objects of %d bytes, more than %d", ErrInvalid, o.Bytes, lim.objectBytes)
		}
	}
	return m, total, nil
}

// objectName is the entry of object h of type t: objects/<id>.<type>.
func objectName(h plumbing.Hash, t plumbing.ObjectType) string {
	return objectsPrefix + h.String() + "." + t.String()
}

// parseObjectName returns the id and type an object's entry name gives.
func parseObjectName(name string) (plumbing.Hash, plumbing.ObjectType, bool) {
	rest, ok := strings.CutPrefix(name, objectsPrefix)
	if !ok {
		return plumbing.ZeroHash, plumbing.InvalidObject, false
	}
	id, typ, ok := strings.Cut(rest, ".")
	if !ok || len(id) != 2*len(plumbing.ZeroHash) || strings.Trim(id, "0123456789abcdef") != "" {
		return plumbing.ZeroHash, plumbing.InvalidObject, false
	}
	for _, t := range []plumbing.ObjectType{plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject} {
		if typ == t.String() {
			return plumbing.NewHash(id), t, true
		}
	}
	return plumbing.ZeroHash, plumbing.InvalidObject, false
}

// readObjects reads the object entries decl declares, each checked
// against its id, none twice.
func readObjects(tr *tar.Reader, decl objectsEntry) ([]checkpoint.Object, error) {
	out := make([]checkpoint.Object, 0, min(decl.Count, 1<<16))
	seen := make(map[plumbing.Hash]bool, min(decl.Count, 1<<16))
	left := decl.Bytes
	for i := range decl.Count {
		h, err := next(tr)
		if err == io.EOF {
			return nil, fmt.Errorf("%w: truncated: %d of %d checkpoint objects", ErrInvalid, i, decl.Count)
		}
		if err != nil {
			return nil, decodeError(err)
		}
		id, typ, ok := parseObjectName(h.Name)
		if !ok || !regular(h) {
			return nil, fmt.Errorf("%w: entry %q, want a checkpoint object (%s<id>.<type>)", ErrInvalid, h.Name, objectsPrefix)
		}
		if h.Size > left {
			return nil, fmt.Errorf("%w: checkpoint objects larger than the %d bytes declared", ErrInvalid, decl.Bytes)
		}
		left -= h.Size
		if seen[id] {
			return nil, fmt.Errorf("%w: checkpoint object %s twice", ErrInvalid, id)
		}
		seen[id] = true
		data, err := readN(tr, h.Size)
		if err != nil {
			return nil, decodeError(fmt.Errorf("reading object %s: %w", id, err))
		}
		o := checkpoint.NewObject(typ, data)
		if o.Hash != id {
			return nil, fmt.Errorf("%w: checkpoint object %s: its content hashes to %s", ErrInvalid, id, o.Hash)
		}
		out = append(out, o)
	}
	if left != 0 {
		return nil, fmt.Errorf("%w: checkpoint objects of %d bytes, %d declared", ErrInvalid, decl.Bytes-left, decl.Bytes)
	}
	return out, nil
}

// readEntry reads file entry i of n, which must be e, and checks its digest.
func readEntry(tr *tar.Reader, i, n int, e fileEntry) (File, error) {
	h, err := next(tr)
	if err == io.EOF {
		return File{}, fmt.Errorf("%w: truncated: %d of %d files", ErrInvalid, i, n)
	}
	if err != nil {
		return File{}, decodeError(err)
	}
	if h.Name != filesPrefix+e.Path || !regular(h) || h.Size != e.Size {
		return File{}, fmt.Errorf("%w: entry %d is %q (%d bytes), want %s%s (%d bytes)", ErrInvalid, i+1, h.Name, h.Size, filesPrefix, e.Path, e.Size)
	}
	data, err := readN(tr, e.Size)
	if err != nil {
		return File{}, decodeError(fmt.Errorf("reading %s: %w", e.Path, err))
	}
	sum := sha256.Sum256(data)
	if hex.EncodeToString(sum[:]) != strings.ToLower(e.SHA256) {
		return File{}, fmt.Errorf("%w: %s: digest mismatch", ErrInvalid, e.Path)
	}
	return File{Path: e.Path, Mode: e.Mode, Data: data}, nil
}

// next returns the next entry other than a global header, checked by
// tarsafe.Check; io.EOF at the end.
func next(tr *tar.Reader) (*tar.Header, error) {
	h, err := tarsafe.Next(tr)
	if errors.Is(err, tarsafe.ErrGlobalHeaders) {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err != nil {
		return nil, err
	}
	if err := tarsafe.Check(h); err != nil {
		return nil, err
	}
	return h, nil
}

// regular reports a regular file (tar.Reader reports the old TypeRegA as
// TypeReg).
func regular(h *tar.Header) bool { return h.Typeflag == tar.TypeReg }

// readN reads exactly n bytes from r. Memory grows with the data read, so
// a small stream declaring a huge size costs little.
func readN(r io.Reader, n int64) ([]byte, error) {
	const chunk = 1 << 20
	if n <= chunk {
		b := make([]byte, n)
		_, err := io.ReadFull(r, b)
		return b, err
	}
	var buf bytes.Buffer
	buf.Grow(chunk)
	_, err := io.CopyN(&buf, r, n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return buf.Bytes(), err
}

// capReader fails once more than n bytes were read.
type capReader struct {
	r io.Reader
	n int64
}

var errTooLarge = fmt.Errorf("%w: archive larger than its declared contents", ErrInvalid)

func (c *capReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	return n, err
}
