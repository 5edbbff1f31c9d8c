package cli

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/plural"
)

func (a *app) conversationsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "conversations",
		Aliases: []string{"conv", "c"},
		Short:   "List, show, remove, export and import stored conversations",
	}
	c.AddCommand(a.lsCmd(), a.showCmd(), a.rmCmd(), a.exportCmd(), a.importCmd(), a.syncCmd())
	return c
}

func (a *app) lsCmd() *cobra.Command {
	var asJSON bool
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List stored conversations, newest first",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			s, err := a.store()
			if err != nil {
				return err
			}
			list, err := s.List(c.Context())
			if err != nil && len(list) == 0 {
				return outpost.Wrap(outpost.Conversation, "list", err)
			}
			if err != nil {
				fmt.Fprintln(a.stderr, "outpost: some conversations could not be read:", err)
			}
			if asJSON {
				return writeJSONLines(a.stdout, list)
			}
			t := newTable(a.stdout, "ID", "AGENT", "TURNS", "REV", "UPDATED", "PARENT", "WORKDIR")
			for _, m := range list {
				t.row(m.ID, m.Agent, fmt.Sprint(m.Turns), fmt.Sprint(m.Revision), m.Updated.Local().Format(time.DateTime), orDefault(m.Parent, "-"), m.Workdir)
			}
			return t.flush()
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line")
	return ls
}

func (a *app) showCmd() *cobra.Command {
	return a.metaCmd("show ID", "Show a conversation's metadata (id, unique prefix or native id)",
		func(m conversation.Meta) any { return m },
		func(m conversation.Meta) error {
			t := newTable(a.stdout, "FIELD", "VALUE")
			for _, f := range [][2]string{
				{"id", m.ID}, {"agent", m.Agent}, {"native", m.Native}, {"parent", orDefault(m.Parent, "-")},
				{"workdir", m.Workdir}, {"sandbox", m.Sandbox}, {"model", orDefault(m.Model, "-")},
				{"created", m.Created.Local().Format(time.RFC3339)}, {"updated", m.Updated.Local().Format(time.RFC3339)},
				{"turns", fmt.Sprint(m.Turns)}, {"revision", fmt.Sprint(m.Revision)},
				{"usage", usageText(m.Usage)}, {"files", strings.Join(m.Files, ", ")},
			} {
				t.row(f[0], f[1])
			}
			if err := t.flush(); err != nil || len(m.Checkpoints) == 0 {
				return err
			}
			fmt.Fprintln(a.stdout)
			cp := newTable(a.stdout, "TURN", "CHECKPOINT", "BASE", "CHANGED", "FILES", "CREATED")
			for _, c := range m.Checkpoints {
				cp.row(fmt.Sprint(c.Turn), c.Commit[:12], c.Base[:12], fmt.Sprint(c.Changed), fmt.Sprint(c.Files), c.Created.Local().Format(time.RFC3339))
			}
			return cp.flush()
		})
}

// metaCmd is a command that shows one conversation (its one argument: an
// id, a unique prefix or a native id): with --json the value asJSON
// makes of its metadata, on one line, else what human writes.
func (a *app) metaCmd(use, short string, asJSON func(conversation.Meta) any, human func(conversation.Meta) error) *cobra.Command {
	var jsonFlag bool
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			m, err := a.meta(c, args[0])
			if err != nil {
				return err
			}
			if jsonFlag {
				return writeJSONLines(a.stdout, []any{asJSON(m)})
			}
			return human(m)
		},
	}
	c.Flags().BoolVar(&jsonFlag, "json", false, "print JSON")
	return c
}

// resolve opens the store and resolves ref (an id, a unique prefix or a
// native id); its errors are the conversation errors of op.
func (a *app) resolve(c *cobra.Command, op, ref string) (conversation.Store, string, error) {
	s, err := a.store()
	if err != nil {
		return nil, "", err
	}
	id, err := conversation.Resolve(c.Context(), s, ref)
	if err != nil {
		return nil, "", outpost.Wrap(outpost.Conversation, op, fmt.Errorf("%s: %w", ref, err))
	}
	return s, id, nil
}

func (a *app) rmCmd() *cobra.Command {
	return &cobra.Command{
		Use:        "rm ID...",
		Short:      "Remove stored conversations",
		SuggestFor: []string{"remove", "delete"},
		Args:       cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			for _, ref := range args {
				s, id, err := a.resolve(c, "rm", ref)
				if err != nil {
					return err
				}
				// A conversation a turn holds (in any process, on any machine
				// sharing the store) is not removed under it: busy, exit 75.
				if err := conversation.DeleteUnheld(c.Context(), s, id, conversation.Self("outpost conversations rm")); err != nil {
					if e, busy := engine.BusyError("rm", err); busy {
						return e
					}
					return outpost.Wrap(outpost.Conversation, "rm", err)
				}
				fmt.Fprintln(a.stdout, "removed", id)
			}
			return nil
		},
	}
}

func (a *app) exportCmd() *cobra.Command {
	var output string
	export := &cobra.Command{
		Use:   "export ID",
		Short: "Write a conversation as one portable file (to -o FILE or stdout)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			s, id, err := a.resolve(c, "export", args[0])
			if err != nil {
				return err
			}
			if output == "" || output == "-" {
				if err := conversation.Export(c.Context(), s, id, a.stdout); err != nil {
					return outpost.Wrap(outpost.Conversation, "export", err)
				}
				return nil
			}
			err = writeFileAtomic(output, func(w io.Writer) error { return conversation.Export(c.Context(), s, id, w) })
			if err != nil {
				return outpost.Wrap(outpost.Conversation, "export", err)
			}
			fmt.Fprintf(a.stderr, "exported %s to %s\n", id, output)
			return nil
		},
	}
	export.Flags().StringVarP(&output, "output", "o", "", "file to write (default: standard output)")
	return export
}

func (a *app) importCmd() *cobra.Command {
	var replace bool
	imp := &cobra.Command{
		Use:   "import FILE",
		Short: "Import a conversation exported on another machine (FILE - reads stdin)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			s, err := a.store()
			if err != nil {
				return err
			}
			var r io.Reader = a.stdin
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return outpost.Wrap(outpost.Conversation, "import", err)
				}
				defer f.Close()
				r = f
			}
			m, err := conversation.Import(c.Context(), s, r, &conversation.ImportOptions{Replace: replace})
			if err != nil {
				return outpost.Wrap(outpost.Conversation, "import", err)
			}
			fmt.Fprintln(a.stdout, "imported", m.ID)
			return nil
		},
	}
	imp.Flags().BoolVar(&replace, "replace", false, "replace a conversation with the same id")
	return imp
}

func (a *app) syncCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "sync",
		Short: "Store the turns spooled while the store could not be written",
		Long: `Store the turns spooled while the store could not be written.

When a turn ends and its conversation cannot be stored (the store is down,
the disk is full), outpost retries for a bounded time, then keeps the
conversation in a local spool and fails with details.spooled naming the
file. Every outpost that opens the store pushes the spool first; sync does
it on demand. A spooled turn whose conversation moved on meanwhile is kept
as a new conversation forked from it.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			a.noAutoPush = true
			s, err := a.store()
			if err != nil {
				return err
			}
			files, err := a.spool.Files()
			if err != nil {
				return outpost.Wrap(outpost.Conversation, "sync", err)
			}
			if len(files) == 0 {
				fmt.Fprintln(a.stdout, "nothing spooled")
				return nil
			}
			return a.push(c.Context(), s, true)
		},
	}
}

// writeFileAtomic writes name through a temporary file beside it, renamed
// over name once write succeeded: a failure leaves nothing half-written.
func writeFileAtomic(name string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(name), ".outpost-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}

func (a *app) meta(c *cobra.Command, ref string) (conversation.Meta, error) {
	s, id, err := a.resolve(c, "locate", ref)
	if err != nil {
		return conversation.Meta{}, err
	}
	m, err := s.Meta(c.Context(), id)
	if err != nil {
		return m, outpost.Wrap(outpost.Conversation, "locate", err)
	}
	return m, nil
}

func (a *app) usageCmd() *cobra.Command {
	return a.metaCmd("usage ID", "Show a conversation's token usage over the turns outpost ran: the agent's, the gateway's per model, the budget left",
		func(m conversation.Meta) any {
			v := map[string]any{"conversation": m.ID, "agent": m.Agent, "turns": m.Turns, "usage": m.Usage}
			if m.Metered != nil {
				v["metered"] = m.Metered
			}
			if m.Budget > 0 {
				v["budget"], v["budget_left"] = m.Budget, budgetLeft(m)
			}
			return v
		},
		func(m conversation.Meta) error {
			_, err := fmt.Fprintf(a.stdout, "%s (%s, %s): tokens %s\n%s", m.ID, m.Agent, plural.N(m.Turns, "turn"), usageText(m.Usage), meteredText(m))
			return err
		})
}

// budgetLeft is what is left of a conversation's budget, never below 0.
func budgetLeft(m conversation.Meta) int64 {
	var spent int64
	if m.Metered != nil {
		spent = m.Metered.Tokens()
	}
	return max(m.Budget-spent, 0)
}

// meteredText is the gateway's count of a conversation, per model, and
// its budget, one line each, for a person; "" without either.
func meteredText(m conversation.Meta) string {
	var b strings.Builder
	if mt := m.Metered; mt != nil {
		fmt.Fprintf(&b, "  metered: %s\n", meteredUsageText(mt.MeteredUsage))
		models := slices.Sorted(maps.Keys(mt.ByModel))
		for _, name := range models {
			fmt.Fprintf(&b, "    %s: %s\n", name, meteredUsageText(mt.ByModel[name]))
		}
	}
	if m.Budget > 0 {
		fmt.Fprintf(&b, "  budget: %d tokens, %d left\n", m.Budget, budgetLeft(m))
	}
	return b.String()
}

func meteredUsageText(u harness.MeteredUsage) string {
	s := plural.N(int(u.Requests), "request") + ", " + usageText(u.Usage)
	if u.ReasoningTokens > 0 {
		s += fmt.Sprintf(", reasoning %d", u.ReasoningTokens)
	}
	return s
}
