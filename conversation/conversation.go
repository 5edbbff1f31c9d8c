// Package conversation captures, stores, locates and restores the native
// conversation files agent CLIs write, so a conversation begun in one
// sandbox can be resumed or forked in another, on another machine.
//
// A conversation is the set of files a preset's harness.Storage matches for
// one native id (plus its ancestors, for CLIs whose forks only reference
// their parent), with Meta: outpost's id, the agent, the native id, the
// parent for forks, the working directory, times and usage. The Store keeps
// both; the filesystem store (NewFS) is the default. Every Store passes the
// suite in conversation/storetest.
//
// Ids come from NewID: "c" and 22 base32 characters, sortable by creation
// time. References typed by people (a full id, a unique id prefix of at
// least MinPrefix characters, or a native id) become ids through Resolve.
//
// FS keeps each conversation in one file, <DefaultDir>/<id>.conv, written
// atomically (temporary file, fsync, rename); Export and Import move one
// conversation between machines as a gzip'd copy of that file. Both
// formats carry a version and every file's size and SHA-256, so damage is
// reported as ErrInvalid rather than read as a conversation.
//
// Every stored conversation has a revision (Meta.Revision): Put is a
// compare-and-swap from the revision the caller read (*StaleError), so no
// interleaving of turns overwrites one. A turn that continues a
// conversation holds it (Store.Hold, HoldWait): another turn is refused
// with a *BusyError naming the holder, or waits. Both are part of the Store
// contract. A Spool keeps what a failing store could not take, to push it
// later under the same revision rules.
//
// Capture collects a native conversation from a sandbox's home, following
// the parent chain Storage.Ancestors reports, and Restore writes it back
// (relocated by Storage.Place) after refusing every path that could leave
// the home. This package does not import sandbox: Capture and Restore take
// the methods they need (Copier), which *sandbox.Lease satisfies.
package conversation

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/harness"
)

// Sentinel errors. Every function of this package, and every Store, wraps
// them with %w; test with errors.Is.
var (
	// ErrNotFound: no conversation with that id or reference, or no files
	// for a native id in a sandbox.
	ErrNotFound = errors.New("conversation: not found")
	// ErrAmbiguous: a reference (id prefix or native id) names several
	// conversations.
	ErrAmbiguous = errors.New("conversation: ambiguous reference")
	// ErrUnsafe: a file path or archive entry that is absolute, not clean,
	// leaves its root, is a link or special file, or carries non-permission
	// mode bits. Nothing was written.
	ErrUnsafe = errors.New("conversation: unsafe path")
	// ErrInvalid: malformed input or a damaged stored conversation (bad id,
	// corrupt or truncated file, unsupported format version, size limits
	// exceeded).
	ErrInvalid = errors.New("conversation: invalid conversation")
	// ErrExist: Import found a conversation with the same id and was not
	// asked to replace it.
	ErrExist = errors.New("conversation: already exists")
	// ErrStale: Put was given a revision that is not the stored one
	// (another turn stored the conversation since it was read); the error
	// is a *StaleError.
	ErrStale = errors.New("conversation: stale revision")
	// ErrBusy: Hold found the conversation held by another turn; the error
	// is a *BusyError naming the holder.
	ErrBusy = errors.New("conversation: busy")
)

// Limits every Store enforces on one conversation (Validate). Import can
// lower them with ImportOptions.
const (
	// MaxSize is the largest total size, in bytes, of a conversation's files.
	MaxSize = 1 << 30
	// MaxFiles is the largest number of files in one conversation.
	MaxFiles = 100_000
	// MaxPathLen is the longest file path, in bytes.
	MaxPathLen = 4096
)

// Meta describes a stored conversation. Field names are stable JSON.
type Meta struct {
	ID      string    `json:"id"`               // outpost's id (NewID)
	Agent   string    `json:"agent"`            // preset name
	Native  string    `json:"native"`           // the CLI's own session id
	Parent  string    `json:"parent,omitempty"` // outpost id of the conversation this was forked from
	Workdir string    `json:"workdir"`          // working directory of the last turn (inside the sandbox)
	Sandbox string    `json:"sandbox"`          // provider of the last turn
	Model   string    `json:"model,omitempty"`  // model of the last turn
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	Turns   int       `json:"turns"` // turns run through outpost
	// Owner is who made the conversation through `outpost serve` (the
	// peer: "token:NAME" or "uid:N"): another client of the server sees
	// it as unknown (docs/serve.md, Tenancy). Empty: made outside a
	// server (outpost run), or before owners were kept; only an operator
	// sees it. A resume keeps it; a fork is its forker's.
	Owner string `json:"owner,omitempty"`
	// Revision counts the successful Puts of this conversation in its
	// store: 1 after the first. Given to Put, it is the revision the
	// caller read (0: a new conversation), and Put refuses it with a
	// *StaleError when the store holds another (compare-and-swap). A
	// revision belongs to one store: Import starts it again.
	Revision int64 `json:"revision"`
	// Usage is the sum of the turns' usage as outpost recorded it.
	Usage harness.Usage `json:"usage"`
	// Metered is the sum of the turns' usage as the credential gateway
	// counted it (docs/metering.md); nil when no turn was metered.
	Metered *harness.Metered `json:"metered,omitempty"`
	// Budget is the conversation's token budget (--budget), over the
	// Metered tokens of all its turns; 0: none.
	Budget int64 `json:"budget,omitempty"`
	// Files lists the captured files (home-relative paths), for display.
	// Stores set it from the files given to Put, in their order; whatever
	// the caller put here is ignored.
	Files []string `json:"files"`
	// Checkpoints are the turns' workspace checkpoints, oldest first
	// (docs/workspaces.md): git commits in the store's object store
	// (ObjectStorer). A fork starts with its parent's up to the turn it
	// forked at. Empty for a conversation made without checkpoints.
	Checkpoints []Checkpoint `json:"checkpoints,omitempty"`
}

// Checkpoint records one turn's workspace and memory, as object ids in the
// store's object store.
type Checkpoint struct {
	// Turn is the turn's number in the conversation (1 for the first,
	// counting a fork's inherited turns).
	Turn int `json:"turn"`
	// Commit is the git commit of the workspace after the turn; Base the
	// commit of the workspace the turn started from (the previous
	// turn's Commit when nothing changed between the two).
	Commit string `json:"commit"`
	Base   string `json:"base"`
	// Memory is the git tree of the conversation's files after the turn
	// (masked as stored), so a fork at this turn restores them.
	Memory string `json:"memory,omitempty"`
	// Native is the agent's own conversation id after the turn.
	Native string `json:"native,omitempty"`
	// Revision is the conversation's revision this turn stored.
	Revision int64 `json:"revision"`
	// Files and Bytes describe the workspace tree (files kept, their
	// total size); Changed counts the files the turn changed.
	Files   int   `json:"files"`
	Bytes   int64 `json:"bytes"`
	Changed int   `json:"changed"`
	// Conversation is the conversation the checkpoint was made in: this
	// one, or for an inherited turn of a fork, an ancestor.
	Conversation string    `json:"conversation,omitempty"`
	Created      time.Time `json:"created"`
}

// ObjectStorer is implemented by stores that keep checkpoints' git objects
// beside their conversations: FS in a bare git repository
// (<dir>/checkpoints.git), postgres.Store in a table, so export, import
// and every machine of a fleet reach them.
type ObjectStorer interface {
	Objects() checkpoint.Objects
}

// File is one captured file.
type File struct {
	// Path is relative to the sandbox home: slash-separated, clean, without
	// "..", e.g. ".claude/projects/-work/abc.jsonl".
	Path string `json:"path"`
	// Mode holds permission bits only (0 restores as 0600); any other bit,
	// such as fs.ModeSymlink, makes the file unsafe.
	Mode uint32 `json:"mode"`
	Data []byte `json:"-"`
}

// Store keeps conversations. Implementations are safe for concurrent use
// by several goroutines and processes, and pass storetest's suite. FS is
// the default store; postgres.Store (conversation/postgres) the one a
// fleet shares; storetest.Memory an in-memory one for tests.
//
// Every method checks ctx before doing anything and returns an error
// wrapping ctx.Err() when it is done. Returned metadata and files belong to
// the caller; a Store keeps no reference to the slices given to Put.
type Store interface {
	// Put creates or replaces a conversation, atomically: a reader sees the
	// old version or the new one, never a mix or a partial file.
	//
	// m.Revision is the revision the caller read: 0 creates a conversation
	// that must not exist, n replaces revision n, AnyRevision replaces
	// whatever is stored (for imports and tools, never for turns). When the
	// store holds another revision, Put stores nothing and returns a
	// *StaleError (ErrStale): of concurrent Puts from one revision exactly
	// one succeeds, so no interleaving overwrites a turn. The stored
	// revision is the one replaced plus one (1 for a new conversation).
	//
	// Put first checks m and files with Validate (ErrInvalid, ErrUnsafe)
	// and then stores nothing on failure; stored metadata has Files set to
	// the files' paths.
	Put(ctx context.Context, m Meta, files []File) error
	// Get returns a conversation with its files, in the order given to Put.
	// Missing: ErrNotFound. Damaged: ErrInvalid.
	Get(ctx context.Context, id string) (Meta, []File, error)
	// Meta returns a conversation's metadata without its files. Missing:
	// ErrNotFound. Damaged: ErrInvalid (a Store may detect damage to the
	// files only in Get).
	Meta(ctx context.Context, id string) (Meta, error)
	// List returns every readable conversation's metadata, newest first (by
	// Updated, then Created, then ID, all descending). Conversations that
	// cannot be read are skipped, not reported: a store that can hold
	// damaged entries offers its own check (FS.Check). An empty store gives
	// an empty list and no error.
	List(ctx context.Context) ([]Meta, error)
	// Delete removes a conversation. Missing: ErrNotFound.
	Delete(ctx context.Context, id string) error
	// Hold takes conversation id (which need not exist yet) for one turn,
	// without waiting: while the Hold is not released, Hold of the same id
	// by anyone else (goroutine, process or machine sharing the store)
	// fails with a *BusyError (ErrBusy) naming o and when it took the hold.
	// A hold frees itself when its holder dies, within the store's
	// documented bound. Holds are advisory: Put does not check them, its
	// revision does. HoldWait waits for a busy conversation.
	Hold(ctx context.Context, id string, o Owner) (Hold, error)
}

// Copier is what Capture and Restore need from a sandbox; *sandbox.Lease
// satisfies it.
type Copier interface {
	// Home is the sandbox's private home directory (absolute).
	Home() string
	// CopyIn extracts a tar stream into dir (absolute, inside the sandbox),
	// creating missing parent directories.
	CopyIn(ctx context.Context, dir string, tar io.Reader) error
	// CopyOut returns a tar stream of path, its entries named relative to
	// path's parent as `docker cp` does (CopyOut("/h/.echo/sessions")
	// yields "sessions", "sessions/a.jsonl", ...), symbolic links as link
	// entries, not followed. A missing path gives an error satisfying
	// errors.Is(err, fs.ErrNotExist).
	CopyOut(ctx context.Context, path string) (io.ReadCloser, error)
}

// Lister is implemented by Copiers that can list a directory without
// copying it: Capture then copies out only the files it keeps, so its cost
// does not grow with the other conversations in the same home. List
// returns the regular files under dir, as clean slash-separated paths
// relative to dir (links are not followed and not listed). A missing dir
// gives an error satisfying errors.Is(err, fs.ErrNotExist); a Copier that
// cannot list returns one satisfying errors.Is(err, errors.ErrUnsupported)
// and Capture copies the whole root instead.
type Lister interface {
	List(ctx context.Context, dir string) ([]string, error)
}
