package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/output"
	"github.com/outposthq/outpost/sandbox"
)

// Workspaces that travel with the conversation (docs/workspaces.md): the
// workspace a turn starts from and the one it leaves are git commits in
// the store's object store, the fork or resume of a conversation can
// start in a fresh directory holding a turn's tree, and the conversation
// records every turn's checkpoint.

// Checkpoint modes (RunOptions.Checkpoint).
const (
	CheckpointOn  = "on"
	CheckpointOff = "off"
)

// WorkspaceNew is Turn.Workspace's value for a fresh directory of
// outpost's own (under WorkspacesDir).
const WorkspaceNew = "new"

// CheckpointResult is the checkpoint a turn recorded (Result.Checkpoint).
type CheckpointResult struct {
	Turn   int    `json:"turn"`
	Commit string `json:"commit"`
	Base   string `json:"base"`
	// Files and Bytes describe the workspace tree; Changed counts the
	// files the turn changed; Stored is what the store grew by (bytes of
	// new objects).
	Files   int   `json:"files"`
	Bytes   int64 `json:"bytes"`
	Changed int   `json:"changed"`
	Stored  int64 `json:"stored"`
}

// workspaceState is the engine's part of checkpoints.
type workspaceState struct {
	objs    checkpoint.Objects // nil: no checkpoints this turn
	forkAt  int                // the turn of Fork "ID@TURN"; 0: the last
	prev    *conversation.Checkpoint
	base    plumbing.Hash // the tree the turn started from
	baseCnt checkpoint.Tree
	made    *conversation.Checkpoint // this turn's, once recorded
	err     error                    // the checkpoint's failure after the turn
	result  *CheckpointResult
}

// WorkspacesDir is where Turn.Workspace "new" makes directories:
// $OUTPOST_HOME/workspaces, else beside the default store's directory.
func WorkspacesDir() (string, error) {
	d, err := conversation.DefaultDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(d), "workspaces"), nil
}

// SplitRef splits a conversation reference "ID@TURN" into the id and the
// turn (0 when there is none), as conversation.SplitRef, with a TURN that
// is not a number from 1 a configuration error.
func SplitRef(ref string) (string, int, error) {
	id, n, err := conversation.SplitRef(ref)
	if err != nil {
		return "", 0, outpost.Wrap(outpost.Configuration, "validate", err)
	}
	return id, n, nil
}

// CheckpointError codes an error of the checkpoint functions (diff,
// apply, branch, materialise) as the engine does: code conversation with
// details.checkpoint.
func CheckpointError(op string, err error) error { return checkpointErr(op, err) }

// checkWorkspace refuses checkpoint settings that cannot work whatever
// the sandbox.
func (e *turnRun) checkWorkspace() error {
	switch e.o.Checkpoint {
	case "", CheckpointOn, CheckpointOff:
	default:
		return refuse(outpost.Configuration, "checkpoint %q: want %q or %q", e.o.Checkpoint, CheckpointOn, CheckpointOff)
	}
	if e.t.Resume != "" && strings.Contains(e.t.Resume, "@") {
		return refuse(outpost.Configuration, "resume %q: a resume continues the last turn; fork at a turn with --fork ID@TURN", e.t.Resume)
	}
	if e.t.Workspace != "" && e.o.Lease != nil {
		return refuse(outpost.Configuration, "workspace %q: a turn on a lease the caller holds runs in the lease's workspace", e.t.Workspace)
	}
	return nil
}

// checkpointing reports whether the turn records checkpoints, and opens
// the store's objects.
func (e *turnRun) checkpointing() bool {
	if e.o.Checkpoint == CheckpointOff || e.o.Store == nil || !e.h.Captures() {
		return false
	}
	os, ok := e.o.Store.(conversation.ObjectStorer)
	if !ok {
		return false
	}
	e.ws.objs = os.Objects()
	return true
}

// forkTurn picks the checkpoint of Fork's "@TURN" and makes the parent
// what the conversation was after that turn: its memory, native id, turn
// count and checkpoints.
func (e *turnRun) forkTurn(ctx context.Context) error {
	n := e.ws.forkAt
	if n == 0 {
		return nil
	}
	m := &e.parent
	last := m.Turns
	if p := lastCheckpoint(m.Checkpoints); p != nil && p.Turn > last {
		last = p.Turn
	}
	if n > last {
		return outpost.Errorf(outpost.Conversation, "locate", "conversation %s has %d turn(s), not %d: %w", m.ID, last, n, checkpoint.ErrNotFound).Detail("checkpoint", "not_found")
	}
	cp, ok := findCheckpoint(m.Checkpoints, n)
	if !ok || cp.Memory == "" {
		return outpost.Errorf(outpost.Conversation, "locate", "conversation %s kept no checkpoint of turn %d (made without checkpoints, or with --checkpoint off): it can be forked at its last turn only", m.ID, n).Detail("checkpoint", "missing")
	}
	objs, err := e.objects()
	if err != nil {
		return err
	}
	files, err := memoryFiles(ctx, objs, plumbing.NewHash(cp.Memory))
	if err != nil {
		return checkpointErr("locate", err)
	}
	e.parentFs = files
	m.Turns = n
	m.Native = cp.Native
	m.Checkpoints = keepTurns(m.Checkpoints, n)
	return nil
}

// objects is the store's object store, for a turn that reads checkpoints.
func (e *turnRun) objects() (checkpoint.Objects, error) {
	if e.ws.objs != nil {
		return e.ws.objs, nil
	}
	os, ok := e.o.Store.(conversation.ObjectStorer)
	if !ok {
		return nil, outpost.Errorf(outpost.Configuration, "locate", "the conversation store keeps no checkpoints")
	}
	return os.Objects(), nil
}

func findCheckpoint(cps []conversation.Checkpoint, turn int) (conversation.Checkpoint, bool) {
	for _, c := range cps {
		if c.Turn == turn {
			return c, true
		}
	}
	return conversation.Checkpoint{}, false
}

func keepTurns(cps []conversation.Checkpoint, n int) []conversation.Checkpoint {
	var out []conversation.Checkpoint
	for _, c := range cps {
		if c.Turn <= n {
			out = append(out, c)
		}
	}
	return out
}

func lastCheckpoint(cps []conversation.Checkpoint) *conversation.Checkpoint {
	if len(cps) == 0 {
		return nil
	}
	c := cps[len(cps)-1]
	return &c
}

// memoryFiles reads a memory tree back as conversation files.
func memoryFiles(ctx context.Context, objs checkpoint.Objects, tree plumbing.Hash) ([]conversation.File, error) {
	fs, err := checkpoint.List(ctx, objs, tree)
	if err != nil {
		return nil, err
	}
	out := make([]conversation.File, 0, len(fs))
	for _, f := range fs {
		data, err := checkpoint.ReadBlob(ctx, objs, f.Hash)
		if err != nil {
			return nil, err
		}
		mode := uint32(0o600)
		if f.Mode == filemode.Executable {
			mode = 0o700
		}
		out = append(out, conversation.File{Path: f.Path, Mode: mode, Data: data})
	}
	return out, nil
}

// prepareWorkspace is the workspace's part of step 2: the directory of
// Turn.Workspace, holding the continued conversation's checkpoint, and
// the tree the turn starts from.
func (e *turnRun) prepareWorkspace(ctx context.Context) error {
	on := e.checkpointing()
	e.ws.prev = lastCheckpoint(e.parent.Checkpoints)
	if e.t.Workspace != "" {
		if err := e.materialize(ctx); err != nil {
			return err
		}
	}
	if !on || e.o.Lease != nil {
		return nil // a held lease's workspace is read in the sandbox (beforeTurn)
	}
	t, err := checkpoint.Snapshot(ctx, e.ws.objs, e.workdir, e.snapshotOptions(""))
	if e.storeDown(err) {
		return nil
	}
	if err != nil {
		return checkpointErr("checkpoint", fmt.Errorf("the working directory %s: %w (turn checkpoints off with --checkpoint off, or leave files out with .gitignore)", e.workdir, err))
	}
	e.ws.base, e.ws.baseCnt = t.Hash, t
	return nil
}

// materialize makes Turn.Workspace's directory and writes into it the
// tree of the checkpoint the turn continues (none for a new
// conversation: an empty directory).
func (e *turnRun) materialize(ctx context.Context) error {
	dir := e.t.Workspace
	if dir == WorkspaceNew {
		base, err := WorkspacesDir()
		if err == nil {
			err = os.MkdirAll(base, 0o755)
		}
		if err == nil {
			dir, err = os.MkdirTemp(base, e.convID+"-")
		}
		if err != nil {
			return outpost.Wrap(outpost.Configuration, "workspace", err)
		}
	} else if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	e.workdir = dir
	if e.ws.prev == nil {
		if e.parent.ID != "" {
			return outpost.Errorf(outpost.Conversation, "workspace", "conversation %s kept no checkpoint of its workspace to materialise", e.parent.ID).Detail("checkpoint", "missing")
		}
		return checkpointErr("workspace", checkpoint.EmptyDir(dir))
	}
	objs, err := e.objects()
	if err != nil {
		return err
	}
	c, err := checkpoint.ReadCommit(ctx, objs, plumbing.NewHash(e.ws.prev.Commit))
	if err != nil {
		return checkpointErr("workspace", err)
	}
	_, err = checkpoint.Materialize(ctx, objs, c.TreeHash, dir, &checkpoint.MaterializeOptions{Index: checkpoint.IndexPath(dir), When: c.Committer.When})
	return checkpointErr("workspace", err)
}

// snapshotOptions are the checkpoint's settings for a workspace at dir on
// this machine; index "" is the default stat cache of dir.
func (e *turnRun) snapshotOptions(skip string) *checkpoint.Options {
	o := &checkpoint.Options{Include: e.o.CheckpointInclude, Mask: e.red.Mask, Index: checkpoint.IndexPath(e.workdir)}
	if skip != "" {
		o.Skip = append(o.Skip, skip)
	}
	if fs, ok := e.o.Store.(*conversation.FS); ok {
		o.Skip = append(o.Skip, fs.Dir())
	}
	if d, err := WorkspacesDir(); err == nil {
		o.Skip = append(o.Skip, d)
	}
	return o
}

// beforeTurn reads the workspace a held lease's turn starts from, in the
// sandbox, and describes it for the changed files (answer.go).
func (e *turnRun) beforeTurn(ctx context.Context, lease *sandbox.Lease) error {
	e.snapshotBefore(ctx, lease)
	if e.ws.objs == nil || !e.ws.base.IsZero() {
		return nil
	}
	t, err := e.snapshotLease(ctx, lease)
	if e.storeDown(err) {
		return nil
	}
	if err != nil {
		return checkpointErr("checkpoint", err)
	}
	e.ws.base, e.ws.baseCnt = t.Hash, t
	return nil
}

// snapshotLease records the lease's workspace: in place where the host
// sees it, otherwise from the sandbox's tar stream of it.
func (e *turnRun) snapshotLease(ctx context.Context, lease *sandbox.Lease) (checkpoint.Tree, error) {
	if !lease.Isolated() { // the sandbox shares the host's filesystem (local)
		p := lease.Workdir()
		o := e.snapshotOptions(lease.Home())
		o.Index = checkpoint.IndexPath(p)
		return checkpoint.Snapshot(ctx, e.ws.objs, p, o)
	}
	// From the sandbox's stream, in memory: no temporary directory
	// written and read back (about 150 system calls of a 470-call echo
	// turn on the memory sandbox). A larger workspace, or a stream with
	// an entry only a directory settles, is copied out again below.
	rc, err := lease.CopyOut(ctx, lease.Workdir())
	if err != nil {
		return checkpoint.Tree{}, fmt.Errorf("the sandbox's workspace: %w", err)
	}
	o := e.snapshotOptions("")
	o.Index = ""
	t, err := checkpoint.SnapshotTar(ctx, e.ws.objs, tarsafe.NewReader(rc), o, snapshotMemory)
	rc.Close()
	if !errors.Is(err, checkpoint.ErrSpill) {
		return t, err
	}
	tmp, err := os.MkdirTemp("", "outpost-checkpoint-")
	if err != nil {
		// The host has no room to record it: like a store that is down,
		// this costs the checkpoint, not the turn (storeDown).
		return checkpoint.Tree{}, fmt.Errorf("%w: no temporary directory to copy the sandbox's workspace into: %w", checkpoint.ErrStore, err)
	}
	defer os.RemoveAll(tmp)
	rc, err = lease.CopyOut(ctx, lease.Workdir())
	if err != nil {
		return checkpoint.Tree{}, fmt.Errorf("the sandbox's workspace: %w", err)
	}
	defer rc.Close()
	if err := tarsafe.Extract(rc, tmp); err != nil {
		return checkpoint.Tree{}, fmt.Errorf("the sandbox's workspace: %w", err)
	}
	des, err := os.ReadDir(tmp)
	if err != nil || len(des) != 1 {
		return checkpoint.Tree{}, fmt.Errorf("the sandbox's workspace: copied out %d entries, not its directory", len(des))
	}
	return checkpoint.Snapshot(ctx, e.ws.objs, filepath.Join(tmp, des[0].Name()), o)
}

// snapshotMemory bounds the file content of sandboxes' workspaces that
// checkpoints hold in memory (checkpoint.SnapshotTar): 64 MiB at once in
// the process (a server's concurrent turns), 16 MiB for one; beyond, a
// workspace goes through a temporary directory.
var snapshotMemory = checkpoint.NewBudget(64<<20, 16<<20)

// storeDown turns checkpoints off for the rest of the turn when the
// object store failed to take objects (a database that is down), with a
// notice: the turn goes on and its conversation is stored or spooled as
// before (docs/stores.md), only without a checkpoint.
func (e *turnRun) storeDown(err error) bool {
	if !errors.Is(err, checkpoint.ErrStore) {
		return false
	}
	e.ws.objs = nil
	e.notice("checkpoint", "the store did not take the workspace's checkpoint; the turn goes on without one: "+err.Error(), map[string]any{"error": "store"})
	return true
}

// checkpointAfter is step 10's first part: the workspace after the turn
// as a commit, parented on the tree the turn started from.
func (e *turnRun) checkpointAfter(ctx context.Context, lease *sandbox.Lease, res *Result, native string, files []conversation.File) (err error) {
	if e.ws.objs == nil || e.ws.base.IsZero() {
		return nil
	}
	defer func() {
		if e.storeDown(err) {
			err = nil
		}
	}()
	after, err := e.snapshotLease(ctx, lease)
	if err != nil {
		return checkpointErr("checkpoint", err)
	}
	turn := e.parent.Turns + 1
	if p := e.ws.prev; p != nil && p.Turn >= turn {
		turn = p.Turn + 1
	}
	base, err := e.baseCommit(ctx, turn, res)
	if err != nil {
		return checkpointErr("checkpoint", err)
	}
	mem, err := checkpoint.MemoryTree(ctx, e.ws.objs, memoryOf(files))
	if err != nil {
		return checkpointErr("checkpoint", err)
	}
	commit, err := checkpoint.Commit(ctx, e.ws.objs, e.commitInfo(turn, after.Hash, []plumbing.Hash{base}, res, mem))
	if err != nil {
		return checkpointErr("checkpoint", err)
	}
	changed, err := checkpoint.Changed(ctx, e.ws.objs, e.ws.base, after.Hash)
	if err != nil {
		return checkpointErr("checkpoint", err)
	}
	cp := conversation.Checkpoint{Turn: turn, Commit: commit.String(), Base: base.String(), Memory: mem.String(),
		Native: native, Revision: e.parent.Revision + 1, Files: after.Files, Bytes: after.Bytes, Changed: changed,
		Conversation: e.convID, Created: time.Now().UTC()}
	e.ws.made = &cp
	res.Checkpoint = &CheckpointResult{Turn: turn, Commit: cp.Commit, Base: cp.Base, Files: cp.Files, Bytes: cp.Bytes,
		Changed: changed, Stored: after.WrittenBytes + e.ws.baseCnt.WrittenBytes}
	if changed == 0 {
		return nil // the result line names it; a notice is for work done
	}
	e.notice("checkpoint", fmt.Sprintf("checkpoint %s: turn %d, %d file(s) changed", cp.Commit[:12], turn, changed),
		map[string]any{"turn": turn, "commit": cp.Commit, "base": cp.Base, "changed": changed, "files": cp.Files, "bytes": cp.Bytes, "stored": res.Checkpoint.Stored})
	return nil
}

// baseCommit is the commit of the workspace the turn started from: the
// previous turn's checkpoint when the workspace was left as it was, or a
// commit of its own parented on it.
func (e *turnRun) baseCommit(ctx context.Context, turn int, res *Result) (plumbing.Hash, error) {
	var parents []plumbing.Hash
	if p := e.ws.prev; p != nil {
		c, err := checkpoint.ReadCommit(ctx, e.ws.objs, plumbing.NewHash(p.Commit))
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if c.TreeHash == e.ws.base {
			return c.Hash, nil
		}
		parents = []plumbing.Hash{c.Hash}
	}
	ci := checkpoint.CommitInfo{Tree: e.ws.base, Parents: parents, Author: "outpost", When: time.Now(),
		Title: fmt.Sprintf("outpost: the workspace before turn %d", turn),
		Trailers: []checkpoint.Trailer{{Key: checkpoint.TrailerConversation, Value: e.convID},
			{Key: checkpoint.TrailerTurn, Value: strconv.Itoa(turn)}, {Key: checkpoint.TrailerKind, Value: "base"}}}
	return checkpoint.Commit(ctx, e.ws.objs, ci)
}

// commitInfo is the turn's commit: its prompt (redacted) as the body, the
// agent, model, usage and revision as trailers.
func (e *turnRun) commitInfo(turn int, tree plumbing.Hash, parents []plumbing.Hash, res *Result, mem plumbing.Hash) checkpoint.CommitInfo {
	tr := []checkpoint.Trailer{
		{Key: checkpoint.TrailerConversation, Value: e.convID},
		{Key: checkpoint.TrailerTurn, Value: strconv.Itoa(turn)},
		{Key: checkpoint.TrailerAgent, Value: e.h.Name},
	}
	if e.model != "" {
		tr = append(tr, checkpoint.Trailer{Key: checkpoint.TrailerModel, Value: e.model})
	}
	tr = append(tr,
		checkpoint.Trailer{Key: checkpoint.TrailerRevision, Value: strconv.FormatInt(e.parent.Revision+1, 10)},
		checkpoint.Trailer{Key: checkpoint.TrailerInput, Value: strconv.FormatInt(res.Usage.InputTokens, 10)},
		checkpoint.Trailer{Key: checkpoint.TrailerOutput, Value: strconv.FormatInt(res.Usage.OutputTokens, 10)},
		checkpoint.Trailer{Key: checkpoint.TrailerMemory, Value: mem.String()},
		checkpoint.Trailer{Key: checkpoint.TrailerKind, Value: "turn"})
	return checkpoint.CommitInfo{Tree: tree, Parents: parents, Author: e.h.Name + " (outpost)", When: time.Now(),
		Title: fmt.Sprintf("outpost: turn %d of %s (%s)", turn, e.convID, e.h.Name),
		Body:  e.red.String(e.t.Prompt), Trailers: tr}
}

func memoryOf(files []conversation.File) []checkpoint.File {
	out := make([]checkpoint.File, len(files))
	for i, f := range files {
		out[i] = checkpoint.File{Path: f.Path, Mode: filemode.Regular, Data: f.Data}
		if f.Mode&0o100 != 0 {
			out[i].Mode = filemode.Executable
		}
	}
	return out
}

// nameCheckpoint names the stored checkpoint where the object store can
// (refs/outpost/<id>/<turn>), once the conversation is stored.
func (e *turnRun) nameCheckpoint(ctx context.Context) {
	n, ok := e.ws.objs.(checkpoint.Namer)
	if !ok || e.ws.made == nil {
		return
	}
	cp := e.ws.made
	_ = n.Name(ctx, fmt.Sprintf("refs/outpost/%s/%d", e.convID, cp.Turn), plumbing.NewHash(cp.Commit))
	_ = n.Name(ctx, fmt.Sprintf("refs/outpost-memory/%s/%d", e.convID, cp.Turn), plumbing.NewHash(cp.Memory))
}

// checkpointErr codes a checkpoint's failure: code conversation, with
// details.checkpoint saying which kind ("too_large", "unsafe", "corrupt",
// "not_found", "conflict", "failed").
func checkpointErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var oe *outpost.Error
	if errors.As(err, &oe) {
		return err
	}
	return (&outpost.Error{Code: outpost.Conversation, Op: op, Err: err}).Detail("checkpoint", CheckpointKind(err))
}

// CheckpointKind names a checkpoint error's kind for details.checkpoint.
func CheckpointKind(err error) string {
	switch {
	case errors.Is(err, checkpoint.ErrTooLarge):
		return "too_large"
	case errors.Is(err, checkpoint.ErrUnsafe):
		return "unsafe"
	case errors.Is(err, checkpoint.ErrCorrupt):
		return "corrupt"
	case errors.Is(err, checkpoint.ErrNotFound):
		return "not_found"
	case errors.Is(err, checkpoint.ErrConflict):
		return "conflict"
	}
	return "failed"
}

// dropOwnFiles leaves out of a turn's changed files what outpost itself
// wrote during the turn into a workspace that holds its store or
// workspaces (a store directory under the working directory): checkpoint
// objects are not the agent's work.
func (e *turnRun) dropOwnFiles(lease *sandbox.Lease, c *output.Changes) *output.Changes {
	if c == nil || lease.Isolated() {
		return c
	}
	root := lease.Workdir()
	var own []string
	for _, d := range e.snapshotOptions("").Skip {
		if rel, err := filepath.Rel(root, d); err == nil && filepath.IsLocal(rel) {
			own = append(own, filepath.ToSlash(rel)+"/")
		}
	}
	if len(own) == 0 {
		return c
	}
	kept := c.Files[:0:0]
	for _, f := range c.Files {
		if !hasAnyPrefix(f.Path, own) {
			kept = append(kept, f)
		}
	}
	c.Files = kept
	return c
}

func hasAnyPrefix(p string, prefixes []string) bool {
	for _, x := range prefixes {
		if strings.HasPrefix(p, x) {
			return true
		}
	}
	return false
}
