package checkpoint

import (
	"context"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Trailer is one "Key: value" line at the end of a checkpoint's message.
type Trailer struct{ Key, Value string }

// Trailer keys outpost writes (docs/workspaces.md).
const (
	TrailerConversation = "Outpost-Conversation"
	TrailerTurn         = "Outpost-Turn"
	TrailerAgent        = "Outpost-Agent"
	TrailerModel        = "Outpost-Model"
	TrailerRevision     = "Outpost-Revision"
	TrailerMemory       = "Outpost-Memory"
	TrailerInput        = "Outpost-Input-Tokens"
	TrailerOutput       = "Outpost-Output-Tokens"
	TrailerKind         = "Outpost-Checkpoint"
)

// CommitInfo is what a checkpoint commit records.
type CommitInfo struct {
	Tree    plumbing.Hash
	Parents []plumbing.Hash
	// Title is the message's first line; Body follows it (the turn's
	// prompt, redacted by the caller); Trailers end it.
	Title    string
	Body     string
	Trailers []Trailer
	// Author names who made the change ("claude (outpost)"); When is the
	// commit's time.
	Author string
	When   time.Time
}

// maxBody bounds the prompt kept in a commit message.
const maxBody = 4000

// Commit writes a commit object of the tree and returns its id.
func Commit(ctx context.Context, objs Objects, ci CommitInfo) (plumbing.Hash, error) {
	sig := object.Signature{Name: ci.Author, Email: "outpost@localhost", When: ci.When}
	if sig.Name == "" {
		sig.Name = "outpost"
	}
	var msg strings.Builder
	msg.WriteString(oneLine(ci.Title))
	msg.WriteString("\n")
	if body := strings.TrimSpace(ci.Body); body != "" {
		if len(body) > maxBody {
			body = strings.ToValidUTF8(body[:maxBody], "") + "\n[...]"
		}
		msg.WriteString("\n" + body + "\n")
	}
	if len(ci.Trailers) > 0 {
		msg.WriteString("\n")
		for _, t := range ci.Trailers {
			fmt.Fprintf(&msg, "%s: %s\n", t.Key, oneLine(t.Value))
		}
	}
	c := &object.Commit{Author: sig, Committer: sig, Message: msg.String(), TreeHash: ci.Tree, ParentHashes: ci.Parents}
	obj, err := encoded(plumbing.CommitObject, c.Encode)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := writeMissing(ctx, objs, []Object{obj}); err != nil {
		return plumbing.ZeroHash, err
	}
	return obj.Hash, nil
}

func oneLine(s string) string {
	s = strings.ReplaceAll(strings.ReplaceAll(s, "\r", " "), "\n", " ")
	return strings.ToValidUTF8(s, "?")
}

// ReadCommit reads a commit object (ErrNotFound, ErrCorrupt).
func ReadCommit(ctx context.Context, objs Objects, h plumbing.Hash) (*object.Commit, error) {
	c, err := readObject[object.Commit](ctx, objs, h, plumbing.CommitObject)
	if err != nil {
		return nil, err
	}
	c.Hash = h
	return c, nil
}

// readObject reads and decodes the object h, which must be of type typ
// (ErrNotFound, ErrCorrupt).
func readObject[T any, P interface {
	*T
	Decode(plumbing.EncodedObject) error
}](ctx context.Context, objs Objects, h plumbing.Hash, typ plumbing.ObjectType) (P, error) {
	o, err := objs.Read(ctx, h)
	if err != nil {
		return nil, err
	}
	if o.Type != typ {
		return nil, fmt.Errorf("%w: %s is a %s, not a %s", ErrCorrupt, h, o.Type, typ)
	}
	v := P(new(T))
	if err := v.Decode(memObject(o)); err != nil {
		return nil, fmt.Errorf("%w: %s %s: %w", ErrCorrupt, typ, h, err)
	}
	return v, nil
}

// Trailers returns the trailers of a commit message written by Commit.
func Trailers(msg string) []Trailer {
	var out []Trailer
	lines := strings.Split(strings.TrimRight(msg, "\n"), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		k, v, ok := strings.Cut(lines[i], ": ")
		if !ok || strings.ContainsAny(k, " \t") || k == "" {
			break
		}
		out = append([]Trailer{{k, v}}, out...)
	}
	return out
}

// memObject is an object in go-git's form.
func memObject(o Object) *plumbing.MemoryObject {
	mo := &plumbing.MemoryObject{}
	mo.SetType(o.Type)
	_, _ = mo.Write(o.Data)
	return mo
}

// File is one file of a tree: its path (slash-separated), mode and blob.
type File struct {
	Path string
	Mode filemode.FileMode
	Hash plumbing.Hash
	Data []byte // set by MemoryTree's caller; List leaves it nil
}

// MemoryTree records files (a conversation's, as stored) as a tree and
// returns its id.
func MemoryTree(ctx context.Context, objs Objects, files []File) (plumbing.Hash, error) {
	es := make([]entry, 0, len(files))
	var blobs []Object
	for _, f := range files {
		if err := safeRel(f.Path); err != nil {
			return plumbing.ZeroHash, err
		}
		b := NewObject(plumbing.BlobObject, f.Data)
		blobs = append(blobs, b)
		mode := f.Mode
		if mode == 0 {
			mode = filemode.Regular
		}
		es = append(es, entry{rel: f.Path, mode: mode, hash: b.Hash, size: int64(len(f.Data))})
	}
	h, trees, err := buildTrees(es)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	if _, err := writeMissing(ctx, objs, append(blobs, trees...)); err != nil {
		return plumbing.ZeroHash, err
	}
	return h, nil
}

// safeRel refuses a path that is not clean, relative and inside its root.
func safeRel(p string) error {
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") || strings.Contains(p, "\x00") {
		return fmt.Errorf("%w: %q", ErrUnsafe, p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".git" {
			return fmt.Errorf("%w: %q holds a .git segment", ErrUnsafe, p)
		}
	}
	return nil
}

// List returns every file and link of a tree, recursively, in git's
// order. A hostile entry name ("..", "/", ".git") is ErrUnsafe; a
// submodule is left out.
func List(ctx context.Context, objs Objects, tree plumbing.Hash) ([]File, error) {
	var out []File
	err := listInto(ctx, objs, tree, "", &out)
	return out, err
}

func listInto(ctx context.Context, objs Objects, h plumbing.Hash, prefix string, out *[]File) error {
	t, err := readTree(ctx, objs, h)
	if err != nil {
		return err
	}
	for _, e := range t.Entries {
		if e.Name == "" || e.Name == "." || e.Name == ".." || e.Name == ".git" || strings.ContainsAny(e.Name, "/\x00") {
			return fmt.Errorf("%w: tree %s has an entry named %q", ErrUnsafe, h, e.Name)
		}
		p := path.Join(prefix, e.Name)
		switch e.Mode {
		case filemode.Dir:
			if err := listInto(ctx, objs, e.Hash, p, out); err != nil {
				return err
			}
		case filemode.Submodule:
		case filemode.Regular, filemode.Executable, filemode.Symlink, filemode.Deprecated:
			*out = append(*out, File{Path: p, Mode: e.Mode, Hash: e.Hash})
		default:
			return fmt.Errorf("%w: tree %s: %s has mode %o", ErrCorrupt, h, p, uint32(e.Mode))
		}
	}
	return nil
}

func readTree(ctx context.Context, objs Objects, h plumbing.Hash) (*object.Tree, error) {
	return readObject[object.Tree](ctx, objs, h, plumbing.TreeObject)
}

// ReadBlob reads a blob's content.
func ReadBlob(ctx context.Context, objs Objects, h plumbing.Hash) ([]byte, error) {
	o, err := objs.Read(ctx, h)
	if err != nil {
		return nil, err
	}
	if o.Type != plumbing.BlobObject {
		return nil, fmt.Errorf("%w: %s is a %s, not a blob", ErrCorrupt, h, o.Type)
	}
	return o.Data, nil
}
