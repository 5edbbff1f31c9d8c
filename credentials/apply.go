package credentials

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/tarsafe"
)

// maxFileSize bounds a host file and an existing sandbox file read for a
// merge.
const maxFileSize = 64 << 20

// Target is the part of a sandbox Apply writes to. *sandbox.Lease
// satisfies it.
type Target interface {
	// Home is the sandbox's private home directory, an absolute
	// slash-separated path inside the sandbox.
	Home() string
	// CopyIn extracts a tar stream into dir, an absolute directory inside
	// the sandbox, creating it if needed.
	CopyIn(ctx context.Context, dir string, tar io.Reader) error
	// CopyOut returns a tar stream of path (a file or a directory), entries
	// named relative to path's parent directory as `docker cp` does. A
	// missing path gives an error satisfying errors.Is(err, fs.ErrNotExist).
	CopyOut(ctx context.Context, path string) (io.ReadCloser, error)
}

// ApplyOptions says what the sandbox can receive and where exclusive host
// files are reserved.
type ApplyOptions struct {
	// HostFiles is the provider's capability to receive host files. When
	// false (the local provider, whose home is on the host) optional host
	// files are skipped and a required one is a configuration error: such
	// a sandbox receives only variables.
	HostFiles bool
	// Registry reserves HostFile.Exclusive sources; nil means the
	// process-wide registry (Reserve).
	Registry *Registry
}

// Apply writes a plan's host files and generated files into t's home with
// one CopyIn, and reserves its exclusive host files.
//
// Host files come first, then files in order, so a File may merge into a
// host file at the same path; two entries for one path combine in order.
// Paths must be clean, relative and inside the home (harness.RelativePath
// and path.Clean); modes default to 0600; directories created on the way
// are 0700.
//
// Host files: Source must be an absolute host path. A missing Source is
// skipped when Optional and a configuration error naming the path when
// not; when opts.HostFiles is false, optional host files are skipped
// without being read and required ones are refused with a configuration
// error, before anything is written. An Exclusive host file is reserved
// (see Registry.Reserve) before it is read; a reservation already held
// elsewhere is a configuration error.
//
// Files: Merge Replace overwrites. MergeJSON reads the existing file via
// CopyOut and deep-merges the plan's JSON object into it: the plan's keys
// win, nested objects are merged, arrays and other values are replaced; the
// result is written indented with sorted keys. MergeTOML adds the plan's
// top-level names the existing file lacks, leaving the file's own text
// byte for byte: the unit is the top-level name, so the plan's `name = …`
// and `name.sub = …` statements and its [name…] and [[name…]] tables are
// added only when the file defines name in none of these ways; statements
// go before the file's first table header, tables at the end. TOML is read
// by a minimal statement scanner (comments, bare, quoted and dotted keys,
// single- and multi-line strings, arrays and inline tables across lines),
// not a full parser: it does not validate values and does not merge inside
// a table the file already has. An existing file that is not valid JSON or
// TOML, is a directory or a symbolic link, or plan content that does not
// parse, is a configuration error naming the file and the line, never its
// content.
//
// release ends the reservations; it is never nil, is idempotent, and must
// be called when the lease closes. On error every reservation made is
// already released. Configuration errors are *outpost.Error with Op left
// empty for the caller's step (outpost.Wrap fills it); errors of the
// target and of ctx are returned wrapped with %w and uncoded, for the caller
// to classify (the engine uses code sandbox).
func Apply(ctx context.Context, t Target, files []harness.File, hostFiles []harness.HostFile, opts ApplyOptions) (release func(), err error) {
	var releases []func()
	release = func() {}
	defer func() {
		if err != nil {
			for _, r := range releases {
				r()
			}
		}
	}()
	if err := ctx.Err(); err != nil {
		return release, fmt.Errorf("applying files: %w", err)
	}
	home := t.Home()
	if !path.IsAbs(home) {
		return release, fmt.Errorf("sandbox home %q is not an absolute path", home)
	}
	if err := checkPaths(files, hostFiles); err != nil {
		return release, err
	}

	w := &homeWriter{ctx: ctx, t: t, home: home, files: map[string]*homeFile{}}

	if !opts.HostFiles {
		var required []string
		for _, h := range hostFiles {
			if !h.Optional {
				required = append(required, h.Source)
			}
		}
		if len(required) > 0 {
			return release, (&outpost.Error{
				Code: outpost.Configuration,
				Msg: "this sandbox receives only variables, not host files, and the plan requires " +
					strings.Join(required, ", ") + "; use a sandbox provider that can receive host files, or authenticate with variables",
			}).Detail("paths", required)
		}
		hostFiles = nil
	}
	registry := opts.Registry
	if registry == nil {
		registry = defaultRegistry
	}
	for _, h := range hostFiles {
		if h.Exclusive {
			r, err := registry.Reserve(h.Source)
			if err != nil {
				return release, err
			}
			releases = append(releases, r)
		}
		data, mode, err := readHostFile(h)
		if err != nil {
			return release, err
		}
		if data == nil {
			if h.Exclusive { // nothing copied: nothing to hold
				releases[len(releases)-1]()
				releases = releases[:len(releases)-1]
			}
			continue
		}
		w.set(h.Target, data, mode)
	}
	for _, f := range files {
		if err := w.apply(f); err != nil {
			return release, err
		}
	}
	if err := w.copyIn(); err != nil {
		return release, err
	}
	return sync.OnceFunc(func() {
		for _, r := range releases {
			r()
		}
	}), nil
}

// checkPaths validates every target path and refuses a path that is both a
// file and the parent of another.
func checkPaths(files []harness.File, hostFiles []harness.HostFile) error {
	all := map[string]bool{}
	bad := func(p, what string) error {
		return (&outpost.Error{
			Code: outpost.Configuration,
			Msg:  fmt.Sprintf("%s path %q must be a clean relative path inside the sandbox home", what, p),
		}).Detail("path", p)
	}
	for _, f := range files {
		if !harness.RelativePath(f.Path) || path.Clean(f.Path) != f.Path {
			return bad(f.Path, "file")
		}
		all[f.Path] = true
	}
	for _, h := range hostFiles {
		if !harness.RelativePath(h.Target) || path.Clean(h.Target) != h.Target {
			return bad(h.Target, "host file target")
		}
		all[h.Target] = true
	}
	for p := range all {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if all[d] {
				return (&outpost.Error{
					Code: outpost.Configuration,
					Msg:  fmt.Sprintf("path %q is both a file and the directory of %q", d, p),
				}).Detail("path", d)
			}
		}
	}
	return nil
}

// readHostFile reads a host file; a missing optional file gives nil data.
func readHostFile(h harness.HostFile) ([]byte, fs.FileMode, error) {
	mode := fileMode(h.Mode)
	if !filepath.IsAbs(h.Source) {
		return nil, 0, (&outpost.Error{
			Code: outpost.Configuration,
			Msg:  fmt.Sprintf("host file %q must be an absolute path", h.Source),
		}).Detail("path", h.Source)
	}
	fi, err := os.Stat(h.Source)
	if errors.Is(err, fs.ErrNotExist) {
		if h.Optional {
			return nil, 0, nil
		}
		return nil, 0, (&outpost.Error{
			Code: outpost.Configuration,
			Msg:  fmt.Sprintf("host file %s does not exist (the plan needs it for %s)", h.Source, h.Target),
		}).Detail("path", h.Source)
	}
	if err == nil && !fi.Mode().IsRegular() {
		err = errors.New("not a regular file")
	}
	if err == nil && fi.Size() > maxFileSize {
		err = fmt.Errorf("larger than %d bytes", maxFileSize)
	}
	var data []byte
	if err == nil {
		data, err = os.ReadFile(h.Source)
	}
	if err != nil {
		// fs errors name the path and the system error, never content.
		return nil, 0, (&outpost.Error{
			Code: outpost.Configuration,
			Msg:  fmt.Sprintf("cannot read host file %s", h.Source),
			Err:  err,
		}).Detail("path", h.Source)
	}
	if data == nil {
		data = []byte{}
	}
	return data, mode, nil
}

func fileMode(m uint32) fs.FileMode {
	if m == 0 {
		return 0o600
	}
	return fs.FileMode(m).Perm()
}

// homeWriter accumulates the final content of each path, reading existing
// files from the target once, and writes them all with one CopyIn.
type homeWriter struct {
	ctx   context.Context
	t     Target
	home  string
	order []string
	files map[string]*homeFile
}

type homeFile struct {
	data []byte // nil: not read yet / absent
	mode fs.FileMode
	have bool // data is the path's content (written by the plan or read from the target)
	dirt bool // to be written
}

func (w *homeWriter) entry(p string) *homeFile {
	f, ok := w.files[p]
	if !ok {
		f = &homeFile{}
		w.files[p] = f
		w.order = append(w.order, p)
	}
	return f
}

func (w *homeWriter) set(p string, data []byte, mode fs.FileMode) {
	f := w.entry(p)
	f.data, f.mode, f.have, f.dirt = data, mode, true, true
}

// existing returns the current content of p (nil, false when absent).
func (w *homeWriter) existing(p string) ([]byte, bool, error) {
	f := w.entry(p)
	if f.have {
		return f.data, f.data != nil, nil
	}
	data, err := w.readTarget(p)
	if err != nil {
		return nil, false, err
	}
	f.data, f.have = data, true
	return data, data != nil, nil
}

func (w *homeWriter) apply(f harness.File) error {
	mode := fileMode(f.Mode)
	switch f.Merge {
	case harness.Replace:
		w.set(f.Path, slices.Clone(f.Content), mode)
		return nil
	case harness.MergeJSON, harness.MergeTOML:
	default:
		return (&outpost.Error{
			Code: outpost.Configuration,
			Msg:  fmt.Sprintf("file %s: unknown merge %q", f.Path, string(f.Merge)),
		}).Detail("path", f.Path)
	}
	old, ok, err := w.existing(f.Path)
	if err != nil {
		return err
	}
	var merged []byte
	if !ok {
		merged = slices.Clone(f.Content)
	} else if f.Merge == harness.MergeJSON {
		merged, err = mergeJSON(f.Path, old, f.Content)
	} else {
		merged, err = mergeTOML(f.Path, old, f.Content)
	}
	if err != nil {
		return err
	}
	w.set(f.Path, merged, mode)
	return nil
}

// readTarget reads home/p from the sandbox; nil data means it is absent.
func (w *homeWriter) readTarget(p string) ([]byte, error) {
	full := path.Join(w.home, p)
	rc, err := w.t.CopyOut(w.ctx, full)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s from the sandbox: %w", full, err)
	}
	entries, err := tarsafe.Read(rc, maxFileSize)
	cerr := rc.Close()
	if err != nil {
		return nil, fmt.Errorf("reading %s from the sandbox: %w", full, err)
	}
	if cerr != nil {
		return nil, fmt.Errorf("reading %s from the sandbox: %w", full, cerr)
	}
	base := path.Base(p)
	for _, e := range entries {
		if e.Name != base {
			continue
		}
		switch {
		case e.Dir:
			return nil, notMergeable(p, "is a directory")
		case e.Link != "":
			return nil, notMergeable(p, "is a symbolic link")
		}
		if e.Data == nil {
			return []byte{}, nil
		}
		return e.Data, nil
	}
	return nil, fmt.Errorf("reading %s from the sandbox: the archive has no entry %q", full, base)
}

func notMergeable(p, why string) error {
	return (&outpost.Error{
		Code: outpost.Configuration,
		Msg:  fmt.Sprintf("existing %s in the sandbox home %s; cannot merge into it", p, why),
	}).Detail("path", p)
}

// copyIn writes every changed path and the directories leading to them.
func (w *homeWriter) copyIn() error {
	var entries []tarsafe.File
	dirs := map[string]bool{}
	for _, p := range w.order {
		f := w.files[p]
		if !f.dirt {
			continue
		}
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
		entries = append(entries, tarsafe.File{Name: p, Mode: f.mode, Data: f.data})
	}
	if len(entries) == 0 {
		return nil
	}
	var all []tarsafe.File
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		all = append(all, tarsafe.File{Name: d, Dir: true, Mode: 0o700})
	}
	all = append(all, entries...)
	var buf bytes.Buffer
	if err := tarsafe.Write(&buf, all); err != nil {
		return fmt.Errorf("building the archive for %s: %w", w.home, err)
	}
	if err := w.ctx.Err(); err != nil {
		return fmt.Errorf("applying files: %w", err)
	}
	if err := w.t.CopyIn(w.ctx, w.home, &buf); err != nil {
		return fmt.Errorf("copying files into %s: %w", w.home, err)
	}
	return nil
}
