package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// suggestDistance is how far (in edits) a mistyped command, subcommand or
// flag may be from a real one to be suggested.
const suggestDistance = 2

// mistypes makes every command answer a mistype with an error (exit
// status 2) that suggests what was meant: an unknown subcommand of a
// command that has subcommands, and an unknown flag of any command.
// Without it a command that only groups others (`outpost conversations`)
// prints its help and exits 0 for `outpost conversations list`.
func mistypes(c *cobra.Command) {
	c.SuggestionsMinimumDistance = suggestDistance
	if c.HasSubCommands() {
		if !c.Runnable() {
			// Given nothing, it shows its help, as before; its usage line
			// does not promise flags of its own.
			c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
			c.DisableFlagsInUseLine = true
		}
		// cobra checks only the root's arguments against its
		// subcommands, and prints a command's help for any other.
		c.Args = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownCommand(c, args[0])
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		mistypes(sub)
	}
}

// unknownCommand is the usage error of a mistyped subcommand of c.
func unknownCommand(c *cobra.Command, typed string) error {
	msg := fmt.Sprintf("unknown command %q for %q", typed, c.CommandPath())
	if s := c.SuggestionsFor(typed); len(s) > 0 {
		return usageError{errors.New(msg + didYouMean(s))}
	}
	return usageError{fmt.Errorf("%s (see %q)", msg, c.CommandPath()+" --help")}
}

// flagError is every command's FlagErrorFunc: a usage error, with the
// flags c has that are close to an unknown one. An unknown flag after a
// mistyped subcommand (`outpost conversations lsit --json`) is reported
// as the unknown subcommand.
func flagError(c *cobra.Command, err error) error {
	var ne *pflag.NotExistError
	if !errors.As(err, &ne) {
		return usageError{err}
	}
	if args := c.Flags().Args(); c.HasSubCommands() && len(args) > 0 {
		if sub, _, ferr := c.Find(args[:1]); ferr != nil || sub == c {
			return unknownCommand(c, args[0])
		}
	}
	typed := ne.GetSpecifiedName()
	if ne.GetSpecifiedShortnames() != "" || typed == "" {
		return usageError{err}
	}
	if s := flagSuggestions(c.Flags(), typed); len(s) > 0 {
		return usageError{errors.New(err.Error() + didYouMean(s))}
	}
	return usageError{err}
}

// flagSuggestions are the visible flags of fs close to typed (without
// dashes): within suggestDistance edits, or starting with it.
func flagSuggestions(fs *pflag.FlagSet, typed string) []string {
	typed = strings.ToLower(typed)
	var out []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		if levenshtein(typed, f.Name) <= suggestDistance || (len(typed) > 1 && strings.HasPrefix(f.Name, typed)) {
			out = append(out, "--"+f.Name)
		}
	})
	return out
}

// didYouMean is the suggestions' part of an error, as cobra words it for
// the root's commands.
func didYouMean(s []string) string {
	return "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
}

// levenshtein is the edit distance between a and b (insertions, deletions
// and substitutions of one rune).
func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
