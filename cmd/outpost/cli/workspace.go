package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
)

// The workspace verbs (docs/workspaces.md): diff, apply and branch read
// the checkpoints turns recorded.

// checkpointErr codes a workspace verb's failure: a reference that is
// not found or malformed as the engine codes it.
func checkpointErr(op string, err error) error {
	if errors.Is(err, conversation.ErrInvalid) && !errors.Is(err, checkpoint.ErrCorrupt) {
		return outpost.Wrap(outpost.Configuration, op, err)
	}
	if errors.Is(err, conversation.ErrNotFound) || errors.Is(err, conversation.ErrAmbiguous) {
		return outpost.Wrap(outpost.Conversation, op, err)
	}
	if errors.Is(err, checkpoint.ErrBranchExists) {
		return outpost.Wrap(outpost.Configuration, op, err)
	}
	return engine.CheckpointError(op, err)
}

func (a *app) diffCmd() *cobra.Command {
	var stat, asJSON bool
	c := &cobra.Command{
		Use:   "diff ID[@TURN] [ID2[@TURN]]",
		Short: "Show what a turn changed in its workspace, or compare two turns' workspaces",
		Long: `Show the unified diff of a turn's checkpoint against the workspace it
started from (one reference; no @TURN: the last turn), or of the first
reference's workspace against the second's (two references).`,
		Example: `  outpost diff c01abc
  outpost diff c01abc@2 --stat
  outpost diff c01abc@1 c01def --json`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(c *cobra.Command, args []string) error {
			s, err := a.store()
			if err != nil {
				return err
			}
			var b string
			if len(args) == 2 {
				b = args[1]
			}
			d, err := conversation.DiffTurns(c.Context(), s, args[0], b)
			if err != nil {
				return checkpointErr("diff", err)
			}
			switch {
			case asJSON:
				return writeJSONLines(a.stdout, []any{struct {
					Type string `json:"type"`
					conversation.TurnDiff
				}{"diff", d}})
			case stat:
				fmt.Fprint(a.stdout, d.Patch.Stats().String())
				fmt.Fprintf(a.stdout, " %d file(s) changed, %d insertion(s)(+), %d deletion(s)(-)\n", len(d.Files), d.Added, d.Deleted)
				return nil
			}
			return d.Patch.Encode(a.stdout)
		},
	}
	c.Flags().BoolVar(&stat, "stat", false, "a line a file with its counts of lines added and deleted")
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON object: the commits compared and each file's change")
	c.MarkFlagsMutuallyExclusive("stat", "json")
	return c
}

func (a *app) applyCmd() *cobra.Command {
	var dir string
	var asJSON bool
	c := &cobra.Command{
		Use:   "apply ID[@TURN]",
		Short: "Merge what a turn changed into your working tree",
		Long: `Merge the change a turn made (its checkpoint against the workspace it
started from) into the working tree, three-way: a file you left as the turn
found it takes the turn's version, one you changed too is merged line by
line. When any file does not merge, nothing is written and every
conflicting file is listed (exit status of code conversation).`,
		Example: `  outpost apply c01abc
  outpost apply c01abc@2 --workdir ../repo`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			s, err := a.storeAndDir(&dir)
			if err != nil {
				return err
			}
			done, err := conversation.ApplyTurn(c.Context(), s, args[0], dir)
			var ce *checkpoint.ConflictError
			if errors.As(err, &ce) {
				for _, x := range ce.Conflicts {
					fmt.Fprintf(a.stderr, "conflict: %s: %s\n", x.Path, x.Reason)
				}
				oe := outpost.Errorf(outpost.Conversation, "apply", "%d file(s) do not merge; nothing was applied", len(ce.Conflicts))
				oe.Detail("checkpoint", "conflict").Detail("conflicts", ce.Conflicts)
				oe.Err = err
				return oe
			}
			if err != nil {
				return checkpointErr("apply", err)
			}
			if asJSON {
				return writeJSONLines(a.stdout, []any{struct {
					Type string `json:"type"`
					*checkpoint.Applied
				}{"apply", done}})
			}
			for _, g := range []struct {
				what  string
				paths []string
			}{{"written", done.Written}, {"merged", done.Merged}, {"deleted", done.Deleted}, {"unchanged", done.Unchanged}} {
				for _, p := range g.paths {
					fmt.Fprintf(a.stdout, "%-9s %s\n", g.what, p)
				}
			}
			return nil
		},
	}
	c.Flags().StringVar(&dir, "workdir", "", "the working tree to merge into (default: the current directory)")
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON object: the files written, merged, deleted and already as the turn left them")
	return c
}

func (a *app) branchCmd() *cobra.Command {
	var dir string
	var force bool
	c := &cobra.Command{
		Use:   "branch ID[@TURN] NAME",
		Short: "Write a conversation's turns into your git repository as a branch",
		Long: `Write the conversation's checkpoints, up to the turn named (default: the
last), into the git repository of the working directory as branch NAME:
one commit a turn, with the turn's prompt, agent, model and usage in its
message. An existing branch is refused unless --force.`,
		Example: `  outpost branch c01abc agent/fix-parser
  git log --stat agent/fix-parser`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			s, err := a.storeAndDir(&dir)
			if err != nil {
				return err
			}
			t, n, err := conversation.BranchTurns(c.Context(), s, args[0], dir, args[1], force)
			if err != nil {
				return checkpointErr("branch", err)
			}
			fmt.Fprintf(a.stdout, "branch %s at %s (turn %d of %s; %d object(s) written)\n", args[1], t.Checkpoint.Commit[:12], t.Checkpoint.Turn, t.Meta.ID, n)
			return nil
		},
	}
	c.Flags().StringVar(&dir, "workdir", "", "a directory of the git repository (default: the current one)")
	c.Flags().BoolVar(&force, "force", false, "move the branch if it exists")
	return c
}

// storeAndDir opens the store and makes *dir (--workdir) the current
// directory when it is empty.
func (a *app) storeAndDir(dir *string) (conversation.Store, error) {
	s, err := a.store()
	if err != nil {
		return nil, err
	}
	if *dir == "" {
		if *dir, err = os.Getwd(); err != nil {
			return nil, err
		}
	}
	return s, nil
}
