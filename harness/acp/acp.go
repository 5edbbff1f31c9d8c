package acp

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// ClientName and ClientVersion are the clientInfo outpost gives the agent
// in initialize; the version is the preset kind's, not outpost's release.
const (
	ClientName    = "outpost"
	ClientVersion = "1.0.0"
)

// Option names (harness.Input.Options) every ACP preset reads.
const (
	// OptionPermissions answers the agent's permission requests: "allow"
	// (default: every request is allowed once), "deny" (every one is
	// refused), "ask" (the turn's caller answers each,
	// engine.RunOptions.Permission; without one each is refused), or a
	// comma-separated list of ACP tool kinds allowed, the others refused
	// ("read,search,edit").
	OptionPermissions = "permissions"
	// OptionSteer says how a steering message reaches the running turn:
	// "queue" (default: the next session/prompt once the running one
	// ends) or "interrupt" (session/cancel, then the message as the next
	// prompt).
	OptionSteer = "steer"
)

// ToolKinds are the ACP tool kinds a permissions list may name.
var ToolKinds = []string{"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"}

// Config is how an agent's ACP mode is started.
type Config struct {
	// Name is the preset's name ("gemini-acp").
	Name string
	// Program is the executable; empty: the base preset's Request's.
	Program string
	// Args start the agent's ACP server ("--acp", or "acp").
	Args []string
	// ModelArgs are added when the turn names a model, "{model}" replaced
	// by it. Empty: a model is refused (the agent takes none on its
	// command line).
	ModelArgs []string
	// AllowArgs are added when the turn's permissions option allows every
	// request (the agent's own mode that asks nothing, such as Gemini
	// CLI's --approval-mode yolo); otherwise the agent asks, and the
	// option answers.
	AllowArgs []string
	// AskArgs are added when it does not (permissions deny, ask or a list
	// of kinds): the agent's own mode that asks before it acts, for an
	// agent that otherwise asks nothing (codex-acp:
	// approval_policy="untrusted").
	AskArgs []string
	// Options are the agent's own options beside permissions and steer:
	// each turns a value into arguments, or refuses it (codex-acp's
	// sandbox).
	Options map[string]func(value string) ([]string, error)
	// Env is added to the command's environment (not secret).
	Env map[string]string
	// Reserved are flags refused in pass-through arguments, beside Args,
	// ModelArgs, AllowArgs and AskArgs.
	Reserved []string
	// Bootstrap names the pin that installs the adapter when it is a
	// program of its own (claude-code-acp, codex-acp); empty: the base
	// preset's, whose CLI itself speaks ACP (copilot --acp).
	Bootstrap string
	// Resume, when set, readies a continued session in the sandbox: files
	// written into the home and commands run before the agent starts
	// (harness.Command's Files and Prepare), as a preset file's
	// resume_files and resume_prepare.
	Resume func(in harness.Input) ([]harness.File, []harness.Command, error)
	// AgentText, when set, reads each agent_message_chunk's text before it
	// is taken as the model's words. An agent that reports its own state
	// as message chunks (Copilot CLI 1.0.102 in ACP mode sends its
	// session.info and session.error messages as "Info: …" and "Error: …"
	// chunks, and ends the prompt end_turn) returns the event the chunk
	// is instead: a notice, or a failure, after which the prompt's end is
	// no success (the failure's kind becomes turn_failed, so the preset's
	// classifiers read its text as a failed turn's). ok false: the chunk
	// is the model's text.
	AgentText func(text string) (ev harness.Event, ok bool)
}

// Preset returns the ACP mode of the CLI that base runs: base lends its
// credentials, configuration, classifiers, storage, fork step, bootstrap,
// endpoints and variables; the turn runs through LiveInput (LiveOnly).
// base itself is not changed.
func Preset(base *harness.Harness, c Config) *harness.Harness {
	h := *base
	if c.Program == "" {
		if cmd, err := base.Request(harness.Input{Prompt: "x"}); err == nil {
			c.Program = cmd.Path
		}
	}
	live := func(in harness.Input) (harness.Live, error) { return newClient(c, in) }
	h.Name = c.Name
	if c.Bootstrap != "" {
		h.Bootstrap = c.Bootstrap
	}
	h.LiveInput = live
	h.LiveOnly = true
	h.Request = func(in harness.Input) (harness.Command, error) {
		l, err := newClient(c, in)
		if err != nil {
			return harness.Command{}, err
		}
		return l.Command(), nil
	}
	h.Events, h.NewTurnDecoder = nil, nil
	h.NewDecoder = NewDecoder
	h.DecodeEnd = false
	h.NativeSchema = false
	h.RequiresFinishedEvent = true
	h.Usage = harness.UsageEvents
	h.UsageCommand, h.UsageResult = nil, nil
	h.Quota = either(base.Quota, quotaTag)
	h.QuotaDetails = base.QuotaDetails
	h.Unavailable = either(base.Unavailable, outageTag)
	h.Misconfigured = either(base.Misconfigured, authTag)
	if h.Fork == nil {
		// The base forks through its request, which ACP has no way to
		// say (session/fork is not yet part of the protocol).
		if h.Storage != nil {
			h.Forkable = harness.False
		} else {
			h.Forkable = harness.Unset
		}
	}
	return &h
}

// either matches what a or b matches (a may be nil).
func either(a, b func(string) bool) func(string) bool {
	if a == nil {
		return b
	}
	return func(s string) bool { return a(s) || b(s) }
}

// The tags errorText puts on a JSON-RPC error's text, which the preset's
// classifiers read beside the base preset's patterns: an HTTP-like 429 as
// the error code (Gemini CLI passes its model API's status through), a
// 5xx, and ACP's auth_required (-32000).
var (
	quotaTag  = lazyre.New(`\[acp code 429\]`).MatchString
	outageTag = lazyre.New(`\[acp code 5[0-9][0-9]\]`).MatchString
	authTag   = lazyre.New(`\[acp code -32000\]|\[acp code 40[13]\]`).MatchString
)

// settings are a turn's options.
type settings struct {
	allowAll, denyAll bool
	ask               bool            // the caller answers (permissions=ask)
	kinds             map[string]bool // allowed tool kinds, when neither
	interrupt         bool            // steer=interrupt
	args              []string        // Config.Options' arguments
}

func parseSettings(c Config, opts map[string]string) (settings, error) {
	s := settings{allowAll: true}
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		v := opts[k]
		switch k {
		case OptionPermissions:
			p, err := parsePermissions(c.Name, v)
			if err != nil {
				return s, err
			}
			s.allowAll, s.denyAll, s.kinds, s.ask = p.allowAll, p.denyAll, p.kinds, p.ask
		case OptionSteer:
			switch v {
			case "queue", "":
			case "interrupt":
				s.interrupt = true
			default:
				return s, fmt.Errorf("%s: option %s: unknown value %q (known: queue, interrupt)", c.Name, k, v)
			}
		default:
			opt, ok := c.Options[k]
			if !ok {
				known := append([]string{OptionPermissions, OptionSteer}, slices.Sorted(maps.Keys(c.Options))...)
				return s, fmt.Errorf("%s: unknown option %q (known: %s)", c.Name, k, strings.Join(known, ", "))
			}
			args, err := opt(v)
			if err != nil {
				return s, fmt.Errorf("%s: option %s: %w", c.Name, k, err)
			}
			s.args = append(s.args, args...)
		}
	}
	return s, nil
}

func parsePermissions(name, v string) (settings, error) {
	switch v {
	case "", "allow":
		return settings{allowAll: true}, nil
	case "deny":
		return settings{denyAll: true}, nil
	case "ask":
		return settings{ask: true}, nil
	}
	s := settings{kinds: map[string]bool{}}
	for _, k := range strings.Split(v, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains(ToolKinds, k) {
			return s, fmt.Errorf("%s: option %s: %q is not allow, deny, ask or a list of ACP tool kinds (%s)", name, OptionPermissions, k, strings.Join(ToolKinds, ", "))
		}
		s.kinds[k] = true
	}
	return s, nil
}

// allows reports whether the policy allows a tool of kind.
func (s settings) allows(kind string) bool {
	switch {
	case s.allowAll:
		return true
	case s.denyAll:
		return false
	}
	if kind == "" {
		kind = "other"
	}
	return s.kinds[kind]
}

var modelRE = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}$`)

// command builds the agent's command line for a turn.
func (c Config) command(in harness.Input, s settings) (harness.Command, error) {
	if err := (kit.Opening{Preset: c.Name, NoFork: "ACP has no fork yet"}).Check(in); err != nil {
		return harness.Command{}, err
	}
	if c.Program == "" {
		return harness.Command{}, fmt.Errorf("%s: no program", c.Name)
	}
	args := slices.Clone(c.Args)
	if in.Model != "" {
		if len(c.ModelArgs) == 0 {
			return harness.Command{}, fmt.Errorf("%s: this agent takes no model in its ACP mode", c.Name)
		}
		if !modelRE.MatchString(in.Model) {
			return harness.Command{}, fmt.Errorf("%s: invalid model name %q", c.Name, in.Model)
		}
		for _, a := range c.ModelArgs {
			args = append(args, strings.ReplaceAll(a, "{model}", in.Model))
		}
	}
	if s.allowAll {
		args = append(args, c.AllowArgs...)
	} else {
		args = append(args, c.AskArgs...)
	}
	args = append(args, s.args...)
	flags := kit.Flags{}
	for _, list := range [][]string{c.Args, c.ModelArgs, c.AllowArgs, c.AskArgs, c.Reserved} {
		for _, a := range list {
			if strings.HasPrefix(a, "-") {
				flags[a] = ""
			}
		}
	}
	if err := kit.CheckExtraArgs(c.Name, in.ExtraArgs, flags.Check); err != nil {
		return harness.Command{}, err
	}
	args = append(args, in.ExtraArgs...)
	cmd := harness.Command{Path: c.Program, Args: args, Env: maps.Clone(c.Env), KeepStdin: true}
	if in.Conversation != "" && c.Resume != nil {
		files, prepare, err := c.Resume(in)
		if err != nil {
			return harness.Command{}, err
		}
		cmd.Files, cmd.Prepare = files, prepare
	}
	return cmd, nil
}
