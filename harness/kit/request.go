package kit

import (
	"errors"
	"fmt"
	"strings"

	"github.com/outposthq/outpost/harness"
)

// Opening is what a preset's Request checks first, before it builds any
// argument. Messages start with the preset's name.
type Opening struct {
	// Preset names the preset in messages ("claude").
	Preset string
	// NoFork, when set, refuses every fork, saying why: the CLI has no way
	// to fork through its request ("the CLI has no fork in print mode").
	// Otherwise a fork needs the conversation it forks.
	NoFork string
	// Parent is what the CLI calls a conversation, in messages ("thread");
	// default "conversation".
	Parent string
}

// Check refuses, with an error naming the preset: a fork when NoFork is
// set; a fork without a conversation to fork; a prompt, model or
// conversation id with a NUL byte, which no process argument can carry.
func (o Opening) Check(in harness.Input) error {
	if in.Fork {
		if o.NoFork != "" {
			return fmt.Errorf("%s: conversations cannot be forked (%s)", o.Preset, o.NoFork)
		}
		if in.Conversation == "" {
			parent := o.Parent
			if parent == "" {
				parent = "conversation"
			}
			return fmt.Errorf("%s: fork needs the %s to fork", o.Preset, parent)
		}
	}
	for _, f := range []struct{ what, v string }{{"prompt", in.Prompt}, {"model name", in.Model}, {"conversation id", in.Conversation}} {
		if strings.IndexByte(f.v, 0) >= 0 {
			return fmt.Errorf("%s: the %s contains a NUL byte", o.Preset, f.what)
		}
	}
	return nil
}

// PromptFlag places a prompt for a CLI that takes it as --prompt=TEXT and
// reads it from standard input otherwise (Copilot CLI, Gemini CLI): up to
// MaxArgPrompt bytes as --prompt=TEXT before args (the attached form keeps
// a prompt that starts with "-" a prompt); a longer one as cmd's standard
// input, with stdinArgs before args in its place.
func PromptFlag(cmd *harness.Command, prompt string, args, stdinArgs []string) {
	if len(prompt) > MaxArgPrompt {
		cmd.Stdin = []byte(prompt)
		cmd.Args = append(append([]string(nil), stdinArgs...), args...)
		return
	}
	cmd.Args = append([]string{"--prompt=" + prompt}, args...)
}

// Flags are the command-line flags outpost controls for a CLI: its
// Request sets them, or they would break a turn (another output format, a
// mode that leaves print mode, a session outpost does not know). Each maps
// to how the caller gets the same effect ("use Resume", "use the effort
// option"), or "" when outpost sets it outright.
type Flags map[string]string

// Check refuses an extra argument that contains a NUL byte, or that names
// one of f: as it is ("-p", "--model") or, for a long flag, with an
// attached value ("--model=x"). Arguments that do not start with "-" are
// values and pass.
func (f Flags) Check(arg string) error {
	if strings.IndexByte(arg, 0) >= 0 {
		return errors.New("contains a NUL byte")
	}
	if !strings.HasPrefix(arg, "-") {
		return nil
	}
	name := arg
	if strings.HasPrefix(arg, "--") {
		name, _, _ = strings.Cut(arg, "=")
	}
	why, ok := f[name]
	switch {
	case !ok:
		return nil
	case why == "":
		return fmt.Errorf("%s is set by outpost", name)
	}
	return fmt.Errorf("%s is set by outpost: %s", name, why)
}

// CheckExtraArgs checks every extra argument with check (a Flags.Check, or
// a preset's own), and names the preset and the argument's 1-based
// position in the error.
func CheckExtraArgs(preset string, args []string, check func(string) error) error {
	for i, a := range args {
		if err := check(a); err != nil {
			return fmt.Errorf("%s: extra argument %d: %w", preset, i+1, err)
		}
	}
	return nil
}
