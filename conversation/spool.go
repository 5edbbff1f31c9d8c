package conversation

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Spool keeps, on the local disk, conversations a store could not take
// when a turn ended (the store was down, the disk full), so the turn is
// not lost: the next outpost that opens the store pushes them (Push), and
// `outpost conversations sync` does it on demand. Each spooled
// conversation is one file in the store format (see FS), named
// <id>-r<revision>-<time>.conv, its Meta.Revision the revision the turn
// continued, so pushing it follows the same compare-and-swap as the turn's
// own Put would have.
type Spool struct{ dir string }

// NewSpool returns the spool kept in dir (created on first Save, 0700).
func NewSpool(dir string) *Spool { return &Spool{dir: dir} }

// Dir returns the spool's directory.
func (sp *Spool) Dir() string { return sp.dir }

// DefaultSpoolDir returns the spool directory for the store named store
// (a directory or URL without its password): <outpost home>/spool/<hash>,
// beside DefaultDir.
func DefaultSpoolDir(store string) (string, error) {
	dir, err := DefaultDir()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(store))
	return filepath.Join(filepath.Dir(dir), "spool", hex.EncodeToString(sum[:8])), nil
}

// Save writes a conversation to the spool (atomically: temporary file,
// fsync, rename) and returns the file's path. m.Revision is the revision
// the turn continued (0 for a new conversation).
func (sp *Spool) Save(m Meta, files []File) (string, error) {
	if err := Validate(m, files); err != nil {
		return "", fmt.Errorf("conversation: spool: %w", err)
	}
	if err := os.MkdirAll(sp.dir, 0o700); err != nil {
		return "", fmt.Errorf("conversation: spool %s: %w", m.ID, err)
	}
	name := filepath.Join(sp.dir, fmt.Sprintf("%s-r%d-%d%s", m.ID, max(m.Revision, 0), time.Now().UnixNano(), convExt))
	tmp, err := os.CreateTemp(sp.dir, ".spool-*")
	if err != nil {
		return "", fmt.Errorf("conversation: spool %s: %w", m.ID, err)
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriter(tmp)
	err = encode(w, m, files, nil)
	if err = errors.Join(err, w.Flush(), tmp.Sync(), tmp.Close()); err != nil {
		return "", fmt.Errorf("conversation: spool %s: %w", m.ID, err)
	}
	if err := os.Rename(tmp.Name(), name); err != nil {
		return "", fmt.Errorf("conversation: spool %s: %w", m.ID, err)
	}
	if err := syncDir(sp.dir); err != nil {
		return "", fmt.Errorf("conversation: spool %s: %w", m.ID, err)
	}
	return name, nil
}

// Pushed is the outcome of one spooled conversation in Push.
type Pushed struct {
	File string // the spool file (removed once stored)
	ID   string // the conversation the turn continued or created
	// Stored is the id it was stored under: ID, or, when the store moved
	// on meanwhile (a stale revision), a new conversation forked from ID
	// that keeps the spooled turn.
	Stored string
	Err    error // not stored: the file stays for the next push
}

// Files returns the spooled files, oldest first.
func (sp *Spool) Files() ([]string, error) {
	ents, err := os.ReadDir(sp.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("conversation: spool: %w", err)
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), convExt) && !strings.HasPrefix(e.Name(), ".") {
			out = append(out, filepath.Join(sp.dir, e.Name()))
		}
	}
	slices.SortFunc(out, func(a, b string) int { return strings.Compare(spoolTime(a), spoolTime(b)) })
	return out, nil
}

func spoolTime(name string) string {
	b := strings.TrimSuffix(filepath.Base(name), convExt)
	if i := strings.LastIndexByte(b, '-'); i >= 0 {
		return fmt.Sprintf("%020s", b[i+1:])
	}
	return b
}

// Push stores every spooled conversation in s, oldest first, with the
// revision its turn continued. A stale revision (another turn stored the
// conversation meanwhile) does not lose the spooled turn: it is stored as
// a new conversation forked from it (Parent set, Pushed.Stored its id). A
// file another process is pushing is skipped. Push stops at the first
// failure to store, leaving that file and the rest for later, and returns
// that error; a damaged spool file is reported in its Pushed and kept.
func (sp *Spool) Push(ctx context.Context, s Store) ([]Pushed, error) {
	names, err := sp.Files()
	if err != nil {
		return nil, err
	}
	var out []Pushed
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return out, fmt.Errorf("conversation: push: %w", err)
		}
		p, err := sp.push(ctx, s, name)
		if p.File == "" {
			continue // pushed or removed by another process
		}
		out = append(out, p)
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

func (sp *Spool) push(ctx context.Context, s Store, name string) (Pushed, error) {
	l, err := lockFile(name+".lock", false)
	if err != nil {
		return Pushed{}, nil // another process pushes it
	}
	defer l.unlock(true)
	f, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return Pushed{}, nil
	}
	if err != nil {
		return Pushed{File: name, Err: err}, nil
	}
	m, files, err := decode(bufio.NewReader(f), defaultLimits, true)
	f.Close()
	if err != nil {
		return Pushed{File: name, Err: fmt.Errorf("conversation: spool file %s: %w", name, err)}, nil
	}
	p := Pushed{File: name, ID: m.ID, Stored: m.ID}
	err = s.Put(ctx, m, files)
	if errors.Is(err, ErrStale) {
		fork := m
		fork.ID, fork.Parent, fork.Revision = NewID(), m.ID, 0
		p.Stored = fork.ID
		err = s.Put(ctx, fork, files)
	}
	if err != nil {
		p.Err = err
		return p, fmt.Errorf("conversation: push %s: %w", m.ID, err)
	}
	if err := os.Remove(name); err != nil {
		p.Err = err
	}
	return p, nil
}
