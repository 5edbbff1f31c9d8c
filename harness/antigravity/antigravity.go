package antigravity

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// Pinned CLI and defaults.
const (
	// Name is the preset's name and its bootstrap name (an archive pinned
	// by version and SHA-512 in bootstrap/pins.json).
	Name = "antigravity"
	// Version is the agy version of the published material the preset was
	// built from (never run here: see the package comment).
	Version = "1.2.11"
	// Program is the executable the preset runs, looked up on the sandbox's
	// PATH (or installed by the "antigravity" bootstrap, which renames the
	// archive's "antigravity" binary to agy).
	Program = "agy"
	// StateDir is the CLI's state directory relative to the home (Linux).
	StateDir = ".gemini/antigravity-cli"
	// PrintTimeout is the default of --print-timeout, the CLI's own bound
	// on a print-mode turn (its default is 5m, short for agentic work).
	// Outpost's turn timeout and inactivity watchdog bound it as well: the
	// CLI is reported not to honour it in every hang.
	PrintTimeout = 30 * time.Minute
	// Inactivity is the default watchdog (kit.Inactivity).
	Inactivity = kit.Inactivity
	// MaxArgPrompt is the largest prompt the preset takes: agy gets it as
	// an argument (kit.MaxArgPrompt). Its stream-json standard input
	// (--input-format) could carry more but is unverified.
	MaxArgPrompt = kit.MaxArgPrompt
)

// Variable names the preset reads.
const (
	// APIKeyVariable is an alternative to the OAuth login reported for
	// 1.2.x (third-party; unverified).
	APIKeyVariable = "GEMINI_API_KEY"
	// EndpointVariable overrides the Cloud Code endpoint (third-party;
	// unverified).
	EndpointVariable = "CLOUD_CODE_URL"
	// AutoUpdateVariable turns the CLI's background self-update off.
	AutoUpdateVariable = "AGY_CLI_DISABLE_AUTO_UPDATE"
	// TokenFile is the CLI's file-token fallback, relative to the home.
	TokenFile = StateDir + "/antigravity-oauth-token"
)

// Option names (harness.Input.Options).
const (
	// OptionPermissions: skip (default: --dangerously-skip-permissions),
	// accept-edits or plan (--mode), sandbox (--sandbox), or default (no
	// flag: the CLI auto-denies what needs approval in print mode).
	OptionPermissions = "permissions"
	// OptionEffort is passed as --effort (low, medium, high, max).
	OptionEffort = "effort"
	// OptionPrintTimeout is passed as --print-timeout (a Go duration).
	OptionPrintTimeout = "print-timeout"
)

// Efforts are the values of the effort option.
var Efforts = []string{"low", "medium", "high", "max"}

// Harness returns the Antigravity CLI preset.
func Harness() *harness.Harness {
	return &harness.Harness{
		Name:    Name,
		Request: Request,
		NewDecoder: func() func([]byte) []harness.Event {
			return NewDecoder("").Decode
		},
		NewTurnDecoder: func(in harness.Input) func([]byte) []harness.Event {
			return NewDecoder(in.Conversation).Decode
		},
		Credentials:           Credentials,
		Configuration:         Configuration,
		Quota:                 Quota,
		QuotaDetails:          QuotaDetails,
		Unavailable:           Unavailable,
		Usage:                 harness.UsageEvents,
		Bootstrap:             Name,
		RequiresFinishedEvent: true,
		Variables:             map[string]string{AutoUpdateVariable: "1"},
		Storage:               Storage(),
		Capture:               harness.True,
		Resumable:             harness.True,
		NativeSchema:          true,
		Forkable:              harness.False,
		Inactivity:            Inactivity,
	}
}

// Request builds the command of one turn:
//
//	agy -p PROMPT --output-format stream-json --print-timeout 30m
//	    [--model M] [--effort E] [--dangerously-skip-permissions | --mode M | --sandbox]
//	    [--conversation ID] [extra args...]
//
// with standard input closed. It fails on a fork (no headless fork is
// known), a prompt over MaxArgPrompt bytes, an invalid conversation id, an
// unknown option or value, and extra arguments that would take over what
// outpost controls.
func Request(in harness.Input) (harness.Command, error) {
	if err := (kit.Opening{Preset: Name, NoFork: "agy has no headless fork"}).Check(in); err != nil {
		return harness.Command{}, err
	}
	if len(in.Prompt) > MaxArgPrompt {
		return harness.Command{}, fmt.Errorf("antigravity: the prompt is %d bytes; at most %d go on agy's command line (Linux limits one argument to 128 KiB), and its stream-json standard input is unverified", len(in.Prompt), MaxArgPrompt)
	}
	args := []string{"-p", in.Prompt}
	timeout := PrintTimeout.String()
	permission := []string{"--dangerously-skip-permissions"}
	var extra []string
	for _, k := range slices.Sorted(maps.Keys(in.Options)) {
		v := in.Options[k]
		switch k {
		case OptionPermissions:
			switch v {
			case "", "skip":
			case "accept-edits", "plan":
				permission = []string{"--mode", v}
			case "sandbox":
				permission = []string{"--sandbox"}
			case "default":
				permission = nil
			default:
				return harness.Command{}, fmt.Errorf("antigravity: option %s: want skip, accept-edits, plan, sandbox or default, not %q", k, v)
			}
		case OptionEffort:
			if !slices.Contains(Efforts, v) {
				return harness.Command{}, fmt.Errorf("antigravity: option %s: unknown effort %q (known: %s)", k, v, strings.Join(Efforts, ", "))
			}
			extra = append(extra, "--effort", v)
		case OptionPrintTimeout:
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Second {
				return harness.Command{}, fmt.Errorf("antigravity: option %s: want a duration of at least 1s, such as 30m, not %q", k, v)
			}
			timeout = d.String()
		default:
			return harness.Command{}, fmt.Errorf("antigravity: unknown option %q (known: %s, %s, %s)", k, OptionPermissions, OptionEffort, OptionPrintTimeout)
		}
	}
	args = append(args, "--output-format", "stream-json", "--print-timeout", timeout)
	if in.SchemaFile != "" {
		// Published facts: agy takes --json-schema F (not measured here).
		args = append(args, "--json-schema", in.SchemaFile)
	}
	if in.Model != "" {
		if !modelRE.MatchString(in.Model) {
			return harness.Command{}, fmt.Errorf("antigravity: invalid model name %q", in.Model)
		}
		args = append(args, "--model", in.Model)
	}
	args = append(args, extra...)
	args = append(args, permission...)
	if in.Conversation != "" {
		if !ValidConversationID(in.Conversation) {
			return harness.Command{}, fmt.Errorf("antigravity: %q is not a conversation id", in.Conversation)
		}
		args = append(args, "--conversation", in.Conversation)
	}
	if err := kit.CheckExtraArgs(Name, in.ExtraArgs, reserved.Check); err != nil {
		return harness.Command{}, err
	}
	args = append(args, in.ExtraArgs...)
	return harness.Command{Path: Program, Args: args}, nil
}

// reserved are the flags outpost sets or that would break a turn.
var reserved = kit.Flags{
	"-p": "", "--print": "", "--prompt": "", "--output-format": "", "--input-format": "",
	"--conversation": "use Resume", "-c": "use Resume", "--continue": "use Resume",
	"--model":                        "use the agent's model",
	"--effort":                       "use the " + OptionEffort + " option",
	"--print-timeout":                "use the " + OptionPrintTimeout + " option",
	"--dangerously-skip-permissions": "use the " + OptionPermissions + " option",
	"--mode":                         "use the " + OptionPermissions + " option",
	"--sandbox":                      "use the " + OptionPermissions + " option",
	"-h":                             "", "--help": "", "-v": "", "--version": "",
}

var (
	conversationIDRE = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)
	modelRE          = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}$`)
)

// ValidConversationID reports whether id can be an agy conversation id:
// the published ids are opaque, so any short token of letters, digits,
// '-' and '_' that is safe as a path segment.
func ValidConversationID(id string) bool { return conversationIDRE.MatchString(id) }

// Credentials passes GEMINI_API_KEY when set. Without it, the host's
// file token (~/.gemini/antigravity-cli/antigravity-oauth-token under the
// host's HOME) is copied into sandboxes that take host files: optional,
// and exclusive (an OAuth refresh token may be single-use). The local
// provider receives only variables: there the CLI uses the login it finds
// in the sandbox's home, which is empty. Without the variable the plan's
// Need names it: a turn whose sandbox gets neither fails before anything
// is downloaded or allocated. Pure: it reads only vars.
func Credentials(vars harness.Vars) (harness.Plan, error) {
	var p harness.Plan
	if v, ok := vars.Lookup(APIKeyVariable); ok {
		p.Variables = map[string]string{APIKeyVariable: v}
		return p, nil
	}
	p.Need = Need
	if home, ok := vars.Lookup("HOME"); ok && path.IsAbs(home) {
		p.HostFiles = []harness.HostFile{{
			Source:    path.Join(path.Clean(home), TokenFile),
			Target:    TokenFile,
			Mode:      0o600,
			Optional:  true,
			Exclusive: true,
		}}
	}
	return p, nil
}

// Need is the message of a turn without a credential (Plan.Need).
const Need = "antigravity has no credential: set " + APIKeyVariable + ", or log in on the host (~/" + TokenFile +
	") and use a sandbox that takes host files (docker, ssh, kubernetes)"

// Configuration passes CLOUD_CODE_URL through when set (an http:// or
// https:// URL; its value is not quoted in the error).
func Configuration(vars harness.Vars) (harness.Configuration, error) {
	v, err := kit.PassVariables("antigravity", vars, []string{EndpointVariable}, EndpointVariable)
	return harness.Configuration{Variables: v}, err
}
