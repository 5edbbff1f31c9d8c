package claude

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// Pinned CLI and defaults.
const (
	// Name is the preset's name.
	Name = "claude"
	// Program is the executable the preset runs, looked up on the sandbox's
	// PATH.
	Program = "claude"
	// Inactivity is the default watchdog (kit.Inactivity). The CLI never
	// ends a model stream that stalls after its headers by itself; a Bash
	// command may run for up to 10 minutes, and API_TIMEOUT_MS is 10
	// minutes by default.
	Inactivity = kit.Inactivity
	// MaxArgPrompt is the largest prompt passed as an argument; a longer one
	// is written to the CLI's standard input (kit.MaxArgPrompt).
	MaxArgPrompt = kit.MaxArgPrompt
)

// Variable names the preset reads.
const (
	APIKeyVariable     = "ANTHROPIC_API_KEY"
	AuthTokenVariable  = "ANTHROPIC_AUTH_TOKEN"
	OAuthTokenVariable = "CLAUDE_CODE_OAUTH_TOKEN"
	BaseURLVariable    = "ANTHROPIC_BASE_URL"
	// SettingsVariable holds a JSON object merged into the sandbox's
	// ~/.claude/settings.json over outpost's defaults.
	SettingsVariable = "OUTPOST_CLAUDE_SETTINGS"
	// ConfigDirVariable moves the CLI's state on the host; the host
	// credentials file is looked for there when it is set.
	ConfigDirVariable = "CLAUDE_CONFIG_DIR"
)

// Option names (harness.Input.Options).
const (
	OptionPermissionMode  = "permission-mode"
	OptionMaxRetries      = "max-retries"
	OptionAPITimeout      = "api-timeout"
	OptionPartialMessages = "partial-messages"
)

// PermissionModes are the values of the permission-mode option. "default"
// (and "") leaves the CLI's default; "manual" is the CLI's name for it.
var PermissionModes = []string{"default", "manual", "acceptEdits", "auto", "dontAsk", "plan", "bypassPermissions"}

// Harness returns the Claude Code preset.
func Harness() *harness.Harness {
	return &harness.Harness{
		Name:    Name,
		Request: Request,
		Events:  Events,
		NewDecoder: func() func([]byte) []harness.Event {
			return newDecoder().decode
		},
		Credentials:           Credentials,
		Endpoints:             Endpoints,
		Configuration:         Configuration,
		Quota:                 Quota,
		QuotaDetails:          QuotaDetails,
		Unavailable:           Unavailable,
		Misconfigured:         Misconfigured,
		TranscriptUsage:       TranscriptUsage,
		History:               History,
		ThreadUsage:           ThreadUsage,
		Usage:                 harness.UsageEvents,
		LiveInput:             LiveInput,
		Bootstrap:             Name,
		RequiresFinishedEvent: true,
		Variables: map[string]string{
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
			"DISABLE_AUTOUPDATER":                      "1",
		},
		Storage:      Storage(),
		Capture:      harness.True,
		Resumable:    harness.True,
		NativeSchema: true,
		Forkable:     harness.True,
		Inactivity:   Inactivity,
	}
}

// MaxArgSchema bounds a schema passed inline with --json-schema (the CLI
// takes the JSON itself, not a file, and one argument is at most 128 KiB on
// Linux).
const MaxArgSchema = 96 << 10

// turnCommand is what Request and LiveInput share.
type turnCommand struct {
	args    []string // without the prompt
	env     map[string]string
	partial bool
}

// Request builds the command of one turn (see the package comment). It
// fails on an unknown option or value, a conversation id that is not a
// Claude session id, and extra arguments that would take over what outpost
// controls (--print, the formats, --resume, --model, ...).
func Request(in harness.Input) (harness.Command, error) {
	tc, err := build(in)
	if err != nil {
		return harness.Command{}, err
	}
	cmd := harness.Command{Path: Program, Args: tc.args, Env: tc.env}
	if len(in.Prompt) > MaxArgPrompt {
		// Read from standard input: no argument, the prompt as stdin.
		cmd.Stdin = []byte(in.Prompt)
		return cmd, nil
	}
	cmd.Args = append(cmd.Args, "--", in.Prompt)
	return cmd, nil
}

func build(in harness.Input) (turnCommand, error) {
	tc := turnCommand{
		args: []string{"-p", "--output-format", "stream-json", "--verbose"},
		env:  map[string]string{},
	}
	if err := (kit.Opening{Preset: Name}).Check(in); err != nil {
		return tc, err
	}
	if err := tc.identity(in); err != nil {
		return tc, err
	}
	bypass, err := tc.options(in.Options)
	if err != nil {
		return tc, err
	}
	if err := kit.CheckExtraArgs(Name, in.ExtraArgs, checkExtraArg); err != nil {
		return tc, err
	}
	if slices.Contains(in.ExtraArgs, "--dangerously-skip-permissions") || slices.Contains(in.ExtraArgs, "--allow-dangerously-skip-permissions") {
		bypass = true
	}
	tc.args = append(tc.args, in.ExtraArgs...)
	if bypass {
		// The CLI refuses to bypass permissions as root unless it is told
		// it runs in a sandbox; asking outpost for it is that statement.
		tc.env["IS_SANDBOX"] = "1"
	}
	if len(tc.env) == 0 {
		tc.env = nil
	}
	return tc, nil
}

// identity adds the model, the schema and the session to resume or fork.
func (tc *turnCommand) identity(in harness.Input) error {
	if in.Model != "" {
		if !validModel(in.Model) {
			return fmt.Errorf("claude: invalid model name %q", in.Model)
		}
		tc.args = append(tc.args, "--model="+in.Model)
	}
	if len(in.Schema) > 0 {
		// The CLI offers the model a StructuredOutput tool with this input
		// schema, re-prompts once when it answers in text, and reports the
		// value as the result's text (docs/output.md).
		if len(in.Schema) > MaxArgSchema {
			return fmt.Errorf("claude: the schema is %d bytes; --json-schema takes at most %d", len(in.Schema), MaxArgSchema)
		}
		tc.args = append(tc.args, "--json-schema", string(in.Schema))
	}
	if in.Conversation != "" {
		if !ValidSessionID(in.Conversation) {
			return fmt.Errorf("claude: %q is not a Claude Code session id", in.Conversation)
		}
		tc.args = append(tc.args, "--resume", in.Conversation)
		if in.Fork {
			tc.args = append(tc.args, "--fork-session")
		}
	}
	return nil
}

// options applies the preset's options in a stable order; bypass reports
// a permission mode that skips permission checks.
func (tc *turnCommand) options(opts map[string]string) (bypass bool, err error) {
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		v := opts[k]
		switch k {
		case OptionPermissionMode:
			switch v {
			case "", "default":
			case "manual", "acceptEdits", "auto", "dontAsk", "plan":
				tc.args = append(tc.args, "--permission-mode", v)
			case "bypassPermissions":
				tc.args = append(tc.args, "--permission-mode", v)
				bypass = true
			default:
				return false, fmt.Errorf("claude: option %s: unknown mode %q (known: %s)", k, v, strings.Join(PermissionModes, ", "))
			}
		case OptionMaxRetries:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 100 {
				return false, fmt.Errorf("claude: option %s: want a number of retries from 0 to 100, not %q", k, v)
			}
			tc.env["CLAUDE_CODE_MAX_RETRIES"] = strconv.Itoa(n)
		case OptionAPITimeout:
			ms, err := parseMillis(v)
			if err != nil {
				return false, fmt.Errorf("claude: option %s: %w", k, err)
			}
			tc.env["API_TIMEOUT_MS"] = strconv.FormatInt(ms, 10)
		case OptionPartialMessages:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return false, fmt.Errorf("claude: option %s: want true or false, not %q", k, v)
			}
			if b {
				tc.args = append(tc.args, "--include-partial-messages")
				tc.partial = true
			}
		default:
			return false, fmt.Errorf("claude: unknown option %q (known: %s, %s, %s, %s)", k, OptionPermissionMode, OptionMaxRetries, OptionAPITimeout, OptionPartialMessages)
		}
	}
	return bypass, nil
}

// reserved are the flags outpost sets or that would break a turn: the
// output and input formats, resuming and session ids (Input.Conversation
// and Fork), the model (Agent.Model), the permission mode (the option),
// session persistence (capture needs the session file) and modes that leave
// print mode.
var reserved = kit.Flags{
	"-p": "", "--print": "", "--output-format": "", "--input-format": "", "--verbose": "",
	"-r": "use Resume or Fork", "--resume": "use Resume or Fork", "-c": "use Resume", "--continue": "use Resume",
	"--fork-session": "use Fork", "--session-id": "", "--replay-user-messages": "",
	"--model": "use the agent's model", "--permission-mode": "use the " + OptionPermissionMode + " option",
	"--include-partial-messages": "use the " + OptionPartialMessages + " option",
	"--no-session-persistence":   "outpost captures the session file", "--bg": "", "--background": "",
	"--json-schema": "use the turn's schema (outpost run --schema)",
	"-h":            "", "--help": "", "-v": "", "--version": "",
}

// checkExtraArg refuses "--" (outpost places it before the prompt) and
// what reserved refuses.
func checkExtraArg(a string) error {
	if a == "--" {
		return errors.New(`"--" is placed by outpost, before the prompt`)
	}
	return reserved.Check(a)
}

var modelRE = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._:/@\[\]-]{0,199}$`)

// ValidSessionID reports whether id is a Claude Code session id (a UUID).
func ValidSessionID(id string) bool { return kit.UUID(id) }

func validModel(m string) bool { return modelRE.MatchString(m) }

// parseMillis reads a Go duration ("90s") or a number of milliseconds.
func parseMillis(v string) (int64, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0, fmt.Errorf("want a positive timeout, not %q", v)
		}
		return n, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Millisecond {
		return 0, fmt.Errorf("want a duration such as 30s or a number of milliseconds, not %q", v)
	}
	return d.Milliseconds(), nil
}

// Credentials passes ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN and
// CLAUDE_CODE_OAUTH_TOKEN when set (and not empty: the CLI treats an empty
// value as absent). When none is set, the host's credentials file
// ($CLAUDE_CONFIG_DIR/.credentials.json, else
// $HOME/.claude/.credentials.json) is copied to ~/.claude/.credentials.json
// in sandboxes that take host files: optional (skipped when missing, and on
// the local provider, which receives only variables) and exclusive (its
// OAuth refresh token is single-use, so two live leases must not share it).
// Without a variable the plan's Need names them: a turn whose sandbox gets
// none of these fails before anything is downloaded or allocated, rather
// than with the CLI's "Not logged in · Please run /login". Pure: it reads
// only vars.
func Credentials(vars harness.Vars) (harness.Plan, error) {
	var p harness.Plan
	for _, name := range []string{APIKeyVariable, AuthTokenVariable, OAuthTokenVariable} {
		if v, ok := vars.Lookup(name); ok {
			if p.Variables == nil {
				p.Variables = map[string]string{}
			}
			p.Variables[name] = v
		}
	}
	if len(p.Variables) > 0 {
		return p, nil
	}
	p.Need = Need
	if src := hostCredentialsFile(vars); src != "" {
		p.HostFiles = []harness.HostFile{{
			Source:    src,
			Target:    ".claude/.credentials.json",
			Mode:      0o600,
			Optional:  true,
			Exclusive: true,
		}}
	}
	return p, nil
}

// Need is the message of a turn without a credential (Plan.Need).
const Need = "claude has no credential: set " + APIKeyVariable + " (or " + AuthTokenVariable + ", or " + OAuthTokenVariable +
	" for a subscription), or log in on the host with `claude` (~/.claude/.credentials.json) and use a sandbox that takes host files (docker, ssh, kubernetes)"

func hostCredentialsFile(vars harness.Vars) string {
	if dir, ok := vars.Lookup(ConfigDirVariable); ok && path.IsAbs(dir) {
		return path.Join(path.Clean(dir), ".credentials.json")
	}
	if home, ok := vars.Lookup("HOME"); ok && path.IsAbs(home) {
		return path.Join(path.Clean(home), ".claude", ".credentials.json")
	}
	return ""
}

// DefaultSettings is what outpost merges into ~/.claude/settings.json in
// every sandbox: the variables that keep a pinned CLI pinned and quiet, so
// they also hold for claude processes the agent starts itself.
var DefaultSettings = map[string]any{
	"env": map[string]any{
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
		"DISABLE_AUTOUPDATER":                      "1",
	},
}

// Configuration merges DefaultSettings, with the JSON object of
// OUTPOST_CLAUDE_SETTINGS deep-merged over it, into ~/.claude/settings.json,
// and passes ANTHROPIC_BASE_URL through when it is set. An
// OUTPOST_CLAUDE_SETTINGS that is not a JSON object is an error (its
// content is never quoted).
func Configuration(vars harness.Vars) (harness.Configuration, error) {
	var c harness.Configuration
	var err error
	if c.Variables, err = kit.PassVariables("claude", vars, []string{BaseURLVariable}, BaseURLVariable); err != nil {
		return c, err
	}
	settings := deepCopy(DefaultSettings).(map[string]any)
	if v, ok := vars.Lookup(SettingsVariable); ok {
		var user map[string]any
		dec := json.NewDecoder(strings.NewReader(v))
		dec.UseNumber()
		if err := dec.Decode(&user); err != nil || user == nil || dec.More() {
			return c, fmt.Errorf("claude: %s must hold one JSON object (settings.json content)", SettingsVariable)
		}
		harness.MergeObjects(settings, user)
	}
	b, err := json.MarshalIndent(settings, "", "  ")
	if err != nil {
		return c, fmt.Errorf("claude: settings: %w", err)
	}
	c.Files = []harness.File{{Path: ".claude/settings.json", Content: append(b, '\n'), Mode: 0o600, Merge: harness.MergeJSON}}
	return c, nil
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = deepCopy(e)
		}
		return s
	}
	return v
}

// DefaultBaseURL is the Anthropic API, the upstream when
// ANTHROPIC_BASE_URL is not set.
const DefaultBaseURL = "https://api.anthropic.com"

// Endpoints is the Anthropic API for the credential gateway: the CLI
// sends ANTHROPIC_API_KEY as x-api-key, and ANTHROPIC_AUTH_TOKEN and
// CLAUDE_CODE_OAUTH_TOKEN as Authorization: Bearer, to
// ANTHROPIC_BASE_URL (default the Anthropic API).
var Endpoints = []harness.Endpoint{{
	API: "anthropic",
	Secrets: []harness.EndpointSecret{
		{Variable: APIKeyVariable, Credential: "x-api-key"},
		{Variable: AuthTokenVariable, Credential: "bearer"},
		{Variable: OAuthTokenVariable, Credential: "bearer"},
	},
	BaseURL: BaseURLVariable,
	Default: DefaultBaseURL,
}}
