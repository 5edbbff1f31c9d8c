package conversation

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/outposthq/outpost/checkpoint"
)

// SplitRef splits a turn reference "ID@TURN" into the conversation
// reference and the turn (0 when there is none: the last). A TURN that is
// not a number from 1 is ErrInvalid.
func SplitRef(ref string) (string, int, error) {
	id, turn, ok := strings.Cut(ref, "@")
	if !ok {
		return ref, 0, nil
	}
	n, err := strconv.Atoi(turn)
	if err != nil || n < 1 {
		return "", 0, fmt.Errorf("%w: %q: the turn after @ must be a number from 1", ErrInvalid, ref)
	}
	return id, n, nil
}

// TurnCheckpoint is one turn's checkpoint, located.
type TurnCheckpoint struct {
	Meta       Meta
	Checkpoint Checkpoint
	Objects    checkpoint.Objects
}

// Commit and Base are the checkpoint's commits as hashes.
func (t TurnCheckpoint) Commit() plumbing.Hash { return plumbing.NewHash(t.Checkpoint.Commit) }
func (t TurnCheckpoint) Base() plumbing.Hash   { return plumbing.NewHash(t.Checkpoint.Base) }

// Tree reads the tree of a commit of the checkpoint's store.
func (t TurnCheckpoint) Tree(ctx context.Context, commit plumbing.Hash) (plumbing.Hash, error) {
	c, err := checkpoint.ReadCommit(ctx, t.Objects, commit)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	return c.TreeHash, nil
}

// LocateCheckpoint finds the checkpoint of ref ("ID[@TURN]"; an id, a
// unique prefix or a native id; no TURN: the last) in s. A conversation
// or turn without one is checkpoint.ErrNotFound, saying why.
func LocateCheckpoint(ctx context.Context, s Store, ref string) (TurnCheckpoint, error) {
	id, turn, err := SplitRef(ref)
	if err != nil {
		return TurnCheckpoint{}, err
	}
	if id, err = Resolve(ctx, s, id); err != nil {
		return TurnCheckpoint{}, err
	}
	m, err := s.Meta(ctx, id)
	if err != nil {
		return TurnCheckpoint{}, err
	}
	os, ok := s.(ObjectStorer)
	if !ok {
		return TurnCheckpoint{}, fmt.Errorf("%w: the store keeps no checkpoints", checkpoint.ErrNotFound)
	}
	if len(m.Checkpoints) == 0 {
		return TurnCheckpoint{}, fmt.Errorf("%w: conversation %s has no checkpoint (made with --checkpoint off, or before checkpoints)", checkpoint.ErrNotFound, id)
	}
	cp := m.Checkpoints[len(m.Checkpoints)-1]
	if turn > 0 {
		found := false
		for _, c := range m.Checkpoints {
			if c.Turn == turn {
				cp, found = c, true
			}
		}
		if !found {
			return TurnCheckpoint{}, fmt.Errorf("%w: conversation %s has no checkpoint of turn %d (turns %s)", checkpoint.ErrNotFound, id, turn, turnList(m.Checkpoints))
		}
	}
	return TurnCheckpoint{Meta: m, Checkpoint: cp, Objects: os.Objects()}, nil
}

func turnList(cps []Checkpoint) string {
	var parts []string
	for _, c := range cps {
		parts = append(parts, strconv.Itoa(c.Turn))
	}
	return strings.Join(parts, ", ")
}

// TurnDiff is what DiffTurns compares and finds.
type TurnDiff struct {
	From    string              `json:"from"` // commits
	To      string              `json:"to"`
	Files   []checkpoint.Change `json:"files"`
	Patch   *object.Patch       `json:"-"`
	Added   int                 `json:"added"`
	Deleted int                 `json:"deleted"`
}

// DiffTurns compares checkpoints: with one reference, what that turn
// changed (its base to its commit); with two, the first's workspace to
// the second's.
func DiffTurns(ctx context.Context, s Store, a, b string) (TurnDiff, error) {
	ta, err := LocateCheckpoint(ctx, s, a)
	if err != nil {
		return TurnDiff{}, err
	}
	from, to := ta.Base(), ta.Commit()
	if b != "" {
		tb, err := LocateCheckpoint(ctx, s, b)
		if err != nil {
			return TurnDiff{}, err
		}
		from, to = ta.Commit(), tb.Commit()
	}
	ft, err := ta.Tree(ctx, from)
	if err != nil {
		return TurnDiff{}, err
	}
	tt, err := ta.Tree(ctx, to)
	if err != nil {
		return TurnDiff{}, err
	}
	files, p, err := checkpoint.Diff(ctx, ta.Objects, ft, tt)
	if err != nil {
		return TurnDiff{}, err
	}
	d := TurnDiff{From: from.String(), To: to.String(), Files: files, Patch: p}
	for _, f := range files {
		d.Added += f.Added
		d.Deleted += f.Deleted
	}
	return d, nil
}

// ApplyTurn merges what turn ref changed into the working tree dir
// (checkpoint.Apply: three-way against the checkpoint the turn started
// from; all or nothing).
func ApplyTurn(ctx context.Context, s Store, ref, dir string) (*checkpoint.Applied, error) {
	t, err := LocateCheckpoint(ctx, s, ref)
	if err != nil {
		return nil, err
	}
	base, err := t.Tree(ctx, t.Base())
	if err != nil {
		return nil, err
	}
	theirs, err := t.Tree(ctx, t.Commit())
	if err != nil {
		return nil, err
	}
	return checkpoint.Apply(ctx, t.Objects, base, theirs, dir)
}

// BranchTurns writes the conversation's checkpoints up to ref's turn into
// the git repository holding dir as branch name: one commit a turn (and
// one for a workspace changed between turns), the last the branch's tip.
func BranchTurns(ctx context.Context, s Store, ref, dir, name string, force bool) (TurnCheckpoint, int, error) {
	t, err := LocateCheckpoint(ctx, s, ref)
	if err != nil {
		return TurnCheckpoint{}, 0, err
	}
	n, err := checkpoint.Branch(ctx, t.Objects, t.Commit(), dir, name, force)
	return t, n, err
}
