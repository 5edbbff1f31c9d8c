package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
)

// Workspaces that travel with the conversation (docs/workspaces.md), as
// the API offers them: a turn's workspace, checkpoint and check settings,
// forks at a turn ("ID@TURN"), and the diff of turns' checkpoints.

// Bounds of a request's checkpoint settings.
const (
	maxIncludePatterns = 64
	maxIncludePattern  = 1024
)

// workspaceOptions are a turn's checkpoint and check settings
// (engine.RunOptions).
type workspaceOptions struct {
	checkpoint   string
	include      []string
	check        string
	checkTimeout time.Duration
}

func (r *TurnRequest) workspaceOptions() workspaceOptions {
	return workspaceOptions{checkpoint: r.Checkpoint, include: r.CheckpointInclude, check: r.Check,
		checkTimeout: time.Duration(r.CheckTimeoutMS) * time.Millisecond}
}

// apply sets the settings on a turn's run options.
func (w workspaceOptions) apply(o *engine.RunOptions) {
	o.Checkpoint, o.CheckpointInclude = w.checkpoint, w.include
	o.Check, o.CheckTimeout = w.check, w.checkTimeout
}

// checkWorkspace refuses workspace, checkpoint and check settings a
// client may not give.
func (s *Server) checkWorkspace(req *TurnRequest) error {
	switch req.Workspace {
	case "", engine.WorkspaceNew:
	default:
		return fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("workspace %q: a client may ask only for %q (a fresh directory of the server's); it does not name the server's directories", req.Workspace, engine.WorkspaceNew))
	}
	if err := checkCheckpoint(req.Checkpoint, req.CheckpointInclude); err != nil {
		return err
	}
	return s.checkTimeout("check_timeout_ms", req.CheckTimeoutMS)
}

// checkCheckpoint refuses an unknown checkpoint mode and unbounded
// include patterns.
func checkCheckpoint(mode string, include []string) error {
	switch mode {
	case "", engine.CheckpointOn, engine.CheckpointOff:
	default:
		return fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("checkpoint %q: want %q or %q", mode, engine.CheckpointOn, engine.CheckpointOff))
	}
	if len(include) > maxIncludePatterns {
		return fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("checkpoint_include has %d patterns, over the limit of %d", len(include), maxIncludePatterns))
	}
	for _, p := range include {
		if strings.TrimSpace(p) == "" || len(p) > maxIncludePattern || strings.ContainsAny(p, "\x00\n") {
			return fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("checkpoint_include pattern %q: empty, over %d bytes, or holding a newline or NUL", p, maxIncludePattern))
		}
	}
	return nil
}

// checkTimeout refuses a negative duration in milliseconds, or one over
// the server's ceiling.
func (s *Server) checkTimeout(name string, ms int64) error {
	if ms < 0 {
		return fail(outpost.Configuration, ReasonBadRequest, name+" is negative")
	}
	if ms > s.o.MaxTimeout.Milliseconds() {
		return fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("%s %d is over this server's ceiling of %d", name, ms, s.o.MaxTimeout.Milliseconds()))
	}
	return nil
}

// resolveTurn resolves a turn reference "ID[@TURN]" (an id, a unique
// prefix or a native id; no TURN: 0, the last) into the conversation's
// id and metadata.
func (s *Server) resolveTurn(ctx context.Context, ref string) (string, int, conversation.Meta, error) {
	base, at, err := conversation.SplitRef(ref)
	if err != nil {
		return "", 0, conversation.Meta{}, fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("invalid turn reference %q: the turn after @ must be a number from 1", ref))
	}
	id, m, err := s.resolve(ctx, base)
	return id, at, m, err
}

// joinRef is the reference "ID@TURN", or the id alone for turn 0.
func joinRef(id string, turn int) string {
	if turn <= 0 {
		return id
	}
	return id + "@" + strconv.Itoa(turn)
}

// forkable refuses (404, as the engine would after a 202) a fork at a
// turn the conversation has no checkpoint of: details.checkpoint
// "not_found" for a turn it never had, "missing" for one made without
// checkpoints.
func forkable(m conversation.Meta, turn int) error {
	if turn == 0 {
		return nil
	}
	last := m.Turns
	for _, c := range m.Checkpoints {
		last = max(last, c.Turn)
	}
	if turn > last {
		e := fail(outpost.Conversation, ReasonNotFound, fmt.Sprintf("conversation %s has %d turn(s), not %d", m.ID, last, turn))
		e.err.Detail("checkpoint", "not_found")
		return e
	}
	for _, c := range m.Checkpoints {
		if c.Turn == turn && c.Memory != "" {
			return nil
		}
	}
	e := fail(outpost.Conversation, ReasonNotFound, fmt.Sprintf("conversation %s kept no checkpoint of turn %d (made without checkpoints): it can be forked at its last turn only", m.ID, turn))
	e.err.Detail("checkpoint", "missing")
	return e
}

// checkpointFail codes a failure of the checkpoint functions (diff,
// locate): an unknown conversation or turn is 404 with reason not_found
// (and details.checkpoint), a malformed reference 400; the rest as the
// engine codes them (code conversation, details.checkpoint).
func checkpointFail(op string, err error) error {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	switch {
	case errors.Is(err, conversation.ErrInvalid) && !errors.Is(err, checkpoint.ErrCorrupt):
		return fail(outpost.Configuration, ReasonBadRequest, err.Error())
	case errors.Is(err, checkpoint.ErrNotFound) || errors.Is(err, conversation.ErrNotFound):
		e := fail(outpost.Conversation, ReasonNotFound, err.Error())
		if errors.Is(err, checkpoint.ErrNotFound) {
			e.err.Detail("checkpoint", "not_found")
		}
		return e
	}
	return fromError(engine.CheckpointError(op, err))
}

// dropWorkspace removes a directory of the server's own (Turn.Workspace
// "new", a race contestant's) once the turn recorded its checkpoint: the
// store holds its tree, a fork or a resume with workspace "new" writes it
// back, and the diff route reads it. A workspace whose turn recorded none
// stays, for the operator to look at.
func (s *Server) dropWorkspace(res *engine.Result) {
	if res == nil || res.Checkpoint == nil || res.Workdir == "" {
		return
	}
	s.removeWorkspace(res.Workdir)
}

// removeWorkspace removes dir, and its stat cache, when it is under
// engine.WorkspacesDir.
func (s *Server) removeWorkspace(dir string) {
	base, err := engine.WorkspacesDir()
	if err != nil {
		return
	}
	if rel, err := filepath.Rel(base, dir); err != nil || !filepath.IsLocal(rel) || strings.Contains(rel, string(filepath.Separator)) {
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		s.log.Warn(s.o.Name+": removing a workspace", "dir", dir, "err", err.Error())
	}
	if idx := checkpoint.IndexPath(dir); idx != "" {
		_ = os.Remove(idx)
	}
}

// Diff formats (GET /v1/conversations/{id}/diff?format=).
const (
	diffPatch = "patch"
	diffStat  = "stat"
	diffJSON  = "json"
)

// diff compares checkpoints as `outpost diff` does: with to empty, what
// turn ref changed; else ref's workspace against to's. ref and to are
// turn references, checked and resolved here.
func (s *Server) diff(ctx context.Context, ref, to string) (conversation.TurnDiff, error) {
	st, err := s.store()
	if err != nil {
		return conversation.TurnDiff{}, err
	}
	a, err := s.canonical(ctx, ref)
	if err != nil {
		return conversation.TurnDiff{}, err
	}
	var b string
	if to != "" {
		if b, err = s.canonical(ctx, to); err != nil {
			return conversation.TurnDiff{}, err
		}
	}
	d, err := conversation.DiffTurns(ctx, st, a, b)
	if err != nil {
		return d, checkpointFail("diff", err)
	}
	if d.Files == nil {
		d.Files = []checkpoint.Change{}
	}
	return d, nil
}

// canonical is a turn reference with its conversation resolved: "ID" or
// "ID@TURN".
func (s *Server) canonical(ctx context.Context, ref string) (string, error) {
	id, at, _, err := s.resolveTurn(ctx, ref)
	if err != nil {
		return "", err
	}
	return joinRef(id, at), nil
}

// statText is the diff's --stat: a line a file, then the totals.
func statText(d conversation.TurnDiff) string {
	var b strings.Builder
	if d.Patch != nil {
		b.WriteString(d.Patch.Stats().String())
	}
	fmt.Fprintf(&b, " %d file(s) changed, %d insertion(s)(+), %d deletion(s)(-)\n", len(d.Files), d.Added, d.Deleted)
	return b.String()
}

// diffFormat is the format a request asks for (default patch).
func diffFormat(f string) (string, error) {
	switch f {
	case "", diffPatch:
		return diffPatch, nil
	case diffStat, diffJSON:
		return f, nil
	}
	return "", fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("format %q: want %s, %s or %s", f, diffPatch, diffStat, diffJSON))
}

// getDiff is GET /v1/conversations/{id}/diff: ?turn=N (default the
// last), ?to=ID[@TURN] (compare two workspaces), ?format=patch|stat|json.
func (s *Server) getDiff(w http.ResponseWriter, r *http.Request, id string, _ conversation.Meta) {
	q := r.URL.Query()
	format, err := diffFormat(q.Get("format"))
	if err != nil {
		writeErr(w, err)
		return
	}
	ref := id
	if t := q.Get("turn"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 1 {
			writeErr(w, fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("turn %q is not a number from 1", t)))
			return
		}
		ref = joinRef(id, n)
	}
	d, err := s.diff(r.Context(), ref, q.Get("to"))
	if err != nil {
		writeErr(w, err)
		return
	}
	switch format {
	case diffJSON:
		writeJSON(w, http.StatusOK, d)
	case diffStat:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte(statText(d)))
	default:
		w.Header().Set("Content-Type", "text/x-diff; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		if d.Patch != nil {
			// The patch is in memory (DiffTurns); a write fails only when
			// the client went away.
			_ = d.Patch.Encode(w)
		}
	}
}
