package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/internal/plural"
)

func (a *app) conversationsCmd() *cobra.Command {
	c := &cobra.Command{
		Use:     "conversations",
		Aliases: []string{"conv", "c"},
		Short:   "List, show, remove, export and import stored conversations",
	}
	var lsJSON, showJSON, replace bool
	var output string
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
			if lsJSON {
				return writeJSONLines(a.stdout, list)
			}
			t := newTable(a.stdout, "ID", "AGENT", "TURNS", "REV", "UPDATED", "PARENT", "WORKDIR")
			for _, m := range list {
				t.row(m.ID, m.Agent, fmt.Sprint(m.Turns), fmt.Sprint(m.Revision), m.Updated.Local().Format(time.DateTime), orDefault(m.Parent, "-"), m.Workdir)
			}
			return t.flush()
		},
	}
	ls.Flags().BoolVar(&lsJSON, "json", false, "one JSON object per line")

	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show a conversation's metadata (id, unique prefix or native id)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			m, err := a.meta(c, args[0])
			if err != nil {
				return err
			}
			if showJSON {
				return writeJSONLines(a.stdout, []conversation.Meta{m})
			}
			t := newTable(a.stdout, "FIELD", "VALUE")
			t.row("id", m.ID)
			t.row("agent", m.Agent)
			t.row("native", m.Native)
			t.row("parent", orDefault(m.Parent, "-"))
			t.row("workdir", m.Workdir)
			t.row("sandbox", m.Sandbox)
			t.row("model", orDefault(m.Model, "-"))
			t.row("created", m.Created.Local().Format(time.RFC3339))
			t.row("updated", m.Updated.Local().Format(time.RFC3339))
			t.row("turns", fmt.Sprint(m.Turns))
			t.row("revision", fmt.Sprint(m.Revision))
			t.row("usage", usageText(m.Usage))
			t.row("files", strings.Join(m.Files, ", "))
			return t.flush()
		},
	}
	show.Flags().BoolVar(&showJSON, "json", false, "print JSON")

	rm := &cobra.Command{
		Use:   "rm ID...",
		Short: "Remove stored conversations",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			s, err := a.store()
			if err != nil {
				return err
			}
			for _, ref := range args {
				id, err := conversation.Resolve(c.Context(), s, ref)
				if err != nil {
					return outpost.Wrap(outpost.Conversation, "rm", fmt.Errorf("%s: %w", ref, err))
				}
				if err := s.Delete(c.Context(), id); err != nil {
					return outpost.Wrap(outpost.Conversation, "rm", err)
				}
				fmt.Fprintln(a.stdout, "removed", id)
			}
			return nil
		},
	}

	export := &cobra.Command{
		Use:   "export ID",
		Short: "Write a conversation as one portable file (to -o FILE or stdout)",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			s, err := a.store()
			if err != nil {
				return err
			}
			id, err := conversation.Resolve(c.Context(), s, args[0])
			if err != nil {
				return outpost.Wrap(outpost.Conversation, "export", fmt.Errorf("%s: %w", args[0], err))
			}
			var w io.Writer = a.stdout
			var f *os.File
			if output != "" && output != "-" {
				if f, err = os.CreateTemp(dirOf(output), ".outpost-export-*"); err != nil {
					return outpost.Wrap(outpost.Conversation, "export", err)
				}
				defer os.Remove(f.Name())
				w = f
			}
			if err := conversation.Export(c.Context(), s, id, w); err != nil {
				if f != nil {
					f.Close()
				}
				return outpost.Wrap(outpost.Conversation, "export", err)
			}
			if f != nil {
				if err := f.Close(); err != nil {
					return outpost.Wrap(outpost.Conversation, "export", err)
				}
				if err := os.Rename(f.Name(), output); err != nil {
					return outpost.Wrap(outpost.Conversation, "export", err)
				}
				fmt.Fprintf(a.stderr, "exported %s to %s\n", id, output)
			}
			return nil
		},
	}
	export.Flags().StringVarP(&output, "output", "o", "", "file to write (default: standard output)")

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

	sync := &cobra.Command{
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

	c.AddCommand(ls, show, rm, export, imp, sync)
	return c
}

func dirOf(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i+1]
	}
	return "."
}

func (a *app) meta(c *cobra.Command, ref string) (conversation.Meta, error) {
	s, err := a.store()
	if err != nil {
		return conversation.Meta{}, err
	}
	id, err := conversation.Resolve(c.Context(), s, ref)
	if err != nil {
		return conversation.Meta{}, outpost.Wrap(outpost.Conversation, "locate", fmt.Errorf("%s: %w", ref, err))
	}
	m, err := s.Meta(c.Context(), id)
	if err != nil {
		return m, outpost.Wrap(outpost.Conversation, "locate", err)
	}
	return m, nil
}

func (a *app) usageCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "usage ID",
		Short: "Show a conversation's token usage over the turns outpost ran",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			m, err := a.meta(c, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				b, _ := json.Marshal(map[string]any{"conversation": m.ID, "agent": m.Agent, "turns": m.Turns, "usage": m.Usage})
				fmt.Fprintln(a.stdout, string(b))
				return nil
			}
			fmt.Fprintf(a.stdout, "%s (%s, %s): tokens %s\n", m.ID, m.Agent, plural.N(m.Turns, "turn"), usageText(m.Usage))
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
