package copilot

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// Pinned CLI and defaults.
const (
	// Name is the preset's name and its bootstrap name.
	Name = "copilot"
	// Program is the executable the preset runs, looked up on the sandbox's
	// PATH (or installed by the "copilot" bootstrap).
	Program = "copilot"
	// HomeDir is the CLI's state directory (COPILOT_HOME) relative to the
	// sandbox home.
	HomeDir = ".copilot"
	// Inactivity is the default watchdog (kit.Inactivity). The CLI prints
	// its retries as they happen (the longest backoff measured is under a
	// minute), but a shell command may run silently for long, and so may a
	// long generation with streaming off.
	Inactivity = kit.Inactivity
	// MaxArgPrompt is the largest prompt passed as an argument; a longer one
	// is written to the CLI's standard input (kit.MaxArgPrompt).
	MaxArgPrompt = kit.MaxArgPrompt
)

// Variable names the preset reads from the resolved variables.
const (
	// TokenVariable, GHTokenVariable and GitHubTokenVariable are the
	// GitHub tokens, in the CLI's order of precedence.
	TokenVariable       = "COPILOT_GITHUB_TOKEN"
	GHTokenVariable     = "GH_TOKEN"
	GitHubTokenVariable = "GITHUB_TOKEN"
	// BaseURLVariable selects BYOK mode: a custom model provider.
	BaseURLVariable = "COPILOT_PROVIDER_BASE_URL"
	// OfflineVariable ("true") stops all GitHub traffic; it needs BYOK.
	OfflineVariable = "COPILOT_OFFLINE"
	// PkgCacheVariable moves the directory where the CLI unpacks its
	// ~235 MB package on first run (default $XDG_CACHE_HOME/copilot/pkg,
	// which is per lease). Point it at a directory shared by leases, as the
	// sandbox sees it, to pay the unpacking once; the CLI unpacks into a
	// temporary directory and renames it, so concurrent first runs are
	// safe.
	PkgCacheVariable = "COPILOT_PKG_CACHE_HOME"
)

// TokenVariables are the GitHub token variables in the CLI's order of
// precedence.
var TokenVariables = []string{TokenVariable, GHTokenVariable, GitHubTokenVariable}

// SecretVariables are the BYOK variables passed through as credentials
// (their values are redacted from all output).
var SecretVariables = []string{
	"COPILOT_PROVIDER_API_KEY",
	"COPILOT_PROVIDER_BEARER_TOKEN",
	"COPILOT_PROVIDER_API_KEY_COMMAND",
	"COPILOT_PROVIDER_HEADERS",
}

// ConfigVariables are the non-secret variables passed through as
// configuration when set.
var ConfigVariables = []string{
	BaseURLVariable,
	"COPILOT_PROVIDER_TYPE",
	"COPILOT_PROVIDER_WIRE_API",
	"COPILOT_PROVIDER_TRANSPORT",
	"COPILOT_PROVIDER_AZURE_API_VERSION",
	"COPILOT_PROVIDER_MODEL_ID",
	"COPILOT_PROVIDER_WIRE_MODEL",
	"COPILOT_PROVIDER_MAX_PROMPT_TOKENS",
	"COPILOT_PROVIDER_MAX_OUTPUT_TOKENS",
	OfflineVariable,
	"COPILOT_MODEL",
	"GH_HOST",
	"COPILOT_GH_HOST",
	PkgCacheVariable,
}

// Option names (harness.Input.Options, `outpost run --option KEY=VALUE`).
const (
	// OptionPermissions is "tools" (the default: --allow-all-tools) or
	// "all" (--allow-all: tools, any path and any URL).
	OptionPermissions = "permissions"
	// OptionReasoningEffort is passed as --reasoning-effort.
	OptionReasoningEffort = "reasoning-effort"
	// OptionMaxAICredits is passed as --max-ai-credits.
	OptionMaxAICredits = "max-ai-credits"
)

// ReasoningEfforts are the values the CLI takes for --reasoning-effort.
var ReasoningEfforts = []string{"none", "minimal", "low", "medium", "high", "xhigh", "max"}

// Harness returns the Copilot CLI preset.
func Harness() *harness.Harness {
	return &harness.Harness{
		Name:    Name,
		Request: Request,
		NewDecoder: func() func([]byte) []harness.Event {
			return NewDecoder().Decode
		},
		Credentials:           Credentials,
		Endpoints:             Endpoints,
		Configuration:         Configuration,
		Quota:                 Quota,
		QuotaDetails:          QuotaDetails,
		Unavailable:           Unavailable,
		Misconfigured:         Misconfigured,
		UsageCommand:          UsageCommand,
		UsageResult:           UsageResult,
		TranscriptUsage:       TranscriptUsage,
		ThreadUsage:           ThreadUsage,
		Usage:                 harness.UsageSession,
		Bootstrap:             Name,
		RequiresFinishedEvent: true,
		Variables: map[string]string{
			// Belt and braces with --no-auto-update: it also holds for
			// copilot processes the agent starts itself.
			"COPILOT_AUTO_UPDATE": "false",
		},
		Storage:    Storage(),
		Capture:    harness.True,
		Resumable:  harness.True,
		Forkable:   harness.False,
		Inactivity: Inactivity,
	}
}

// Request builds the command of one turn:
//
//	copilot --prompt=PROMPT --output-format json --allow-all-tools
//	        --no-auto-update --no-ask-user (--session-id=NEW | --resume=ID)
//	        [--model=M] [options] [extra args]
//
// with COPILOT_HOME=<home>/.copilot. A new conversation gets a session id
// minted here (Command.Session), so the engine knows it before the CLI
// prints anything. Prompts over MaxArgPrompt bytes go through standard
// input instead of --prompt. It fails on a fork (Copilot cannot fork in
// print mode), a conversation id that is not a session id, an unknown
// option or value, and extra arguments that would take over what outpost
// controls.
func Request(in harness.Input) (harness.Command, error) {
	if err := (kit.Opening{Preset: Name, NoFork: "the CLI has no fork in print mode"}).Check(in); err != nil {
		return harness.Command{}, err
	}
	args := []string{"--output-format", "json", "--no-auto-update", "--no-ask-user"}
	session := in.Conversation
	if session != "" {
		if !ValidSessionID(session) {
			return harness.Command{}, fmt.Errorf("copilot: %q is not a Copilot session id", session)
		}
		args = append(args, "--resume="+session)
	} else {
		id, err := NewSessionID()
		if err != nil {
			return harness.Command{}, fmt.Errorf("copilot: minting a session id: %w", err)
		}
		session = id
		args = append(args, "--session-id="+session)
	}
	if in.Model != "" {
		if !modelRE.MatchString(in.Model) {
			return harness.Command{}, fmt.Errorf("copilot: invalid model name %q", in.Model)
		}
		args = append(args, "--model="+in.Model)
	}
	permissions := "--allow-all-tools"
	for _, k := range slices.Sorted(maps.Keys(in.Options)) {
		v := in.Options[k]
		switch k {
		case OptionPermissions:
			switch v {
			case "", "tools":
			case "all":
				permissions = "--allow-all"
			default:
				return harness.Command{}, fmt.Errorf("copilot: option %s: want tools or all, not %q", k, v)
			}
		case OptionReasoningEffort:
			if !slices.Contains(ReasoningEfforts, v) {
				return harness.Command{}, fmt.Errorf("copilot: option %s: unknown level %q (known: %s)", k, v, strings.Join(ReasoningEfforts, ", "))
			}
			args = append(args, "--reasoning-effort="+v)
		case OptionMaxAICredits:
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f > 0) || f > 1e12 {
				return harness.Command{}, fmt.Errorf("copilot: option %s: want a positive number, not %q", k, v)
			}
			args = append(args, "--max-ai-credits="+v)
		default:
			return harness.Command{}, fmt.Errorf("copilot: unknown option %q (known: %s, %s, %s)", k, OptionPermissions, OptionReasoningEffort, OptionMaxAICredits)
		}
	}
	args = append(args, permissions)
	if err := kit.CheckExtraArgs(Name, in.ExtraArgs, reserved.Check); err != nil {
		return harness.Command{}, err
	}
	args = append(args, in.ExtraArgs...)
	cmd := harness.Command{Path: Program, Session: session}
	if in.Home != "" {
		cmd.Env = map[string]string{"COPILOT_HOME": path.Join(in.Home, HomeDir)}
	}
	// Without --prompt the CLI reads the prompt from standard input.
	kit.PromptFlag(&cmd, in.Prompt, args, nil)
	return cmd, nil
}

// reserved are the flags outpost sets or that would break a turn: the
// prompt and output format, session selection (Input.Conversation), the
// model (Agent.Model), options, and modes that leave JSON print mode.
var reserved = kit.Flags{
	"-p": "", "--prompt": "", "--output-format": "", "-s": "", "--silent": "",
	"-r": "use Resume", "--resume": "use Resume", "--continue": "use Resume", "--session-id": "",
	"--model":            "use the agent's model",
	"--reasoning-effort": "use the " + OptionReasoningEffort + " option",
	"--max-ai-credits":   "use the " + OptionMaxAICredits + " option",
	"--acp":              "", "-i": "", "--interactive": "", "-h": "", "--help": "", "-v": "", "--version": "",
}

var modelRE = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._:/@\[\]-]{0,199}$`)

// ValidSessionID reports whether id is a Copilot session id (a UUID).
// Outpost always resumes by full id, never by prefix or name.
func ValidSessionID(id string) bool { return kit.UUID(id) }

// NewSessionID returns a random (version 4) UUID.
func NewSessionID() (string, error) { return kit.NewUUID() }

// ErrClassicToken is returned by Credentials when the only GitHub tokens
// set are classic personal access tokens, which the CLI rejects before
// doing anything else (even in BYOK mode).
var ErrClassicToken = errors.New("copilot: classic personal access tokens (ghp_) are not supported by Copilot")

// Credentials selects what authenticates the CLI, from the resolved
// variables:
//
//   - the first of COPILOT_GITHUB_TOKEN, GH_TOKEN and GITHUB_TOKEN (the
//     CLI's precedence) that is set and is not a classic personal access
//     token (ghp_…, which the CLI refuses outright, even when it would not
//     need a GitHub token); only that one is passed;
//   - the BYOK secrets COPILOT_PROVIDER_API_KEY, _BEARER_TOKEN,
//     _API_KEY_COMMAND and _HEADERS, when set.
//
// When the only GitHub tokens are classic ones and no BYOK provider
// (COPILOT_PROVIDER_BASE_URL) is configured, it fails with
// ErrClassicToken, before any sandbox is allocated. With neither a token
// nor a BYOK provider the plan's Need names the variables: the turn fails
// before anything is downloaded or allocated, rather than with the CLI's
// "No authentication information found" (a sandbox has no keychain and no
// gh login). Pure: it reads only vars, and never quotes a value.
func Credentials(vars harness.Vars) (harness.Plan, error) {
	var p harness.Plan
	set := func(k, v string) {
		if p.Variables == nil {
			p.Variables = map[string]string{}
		}
		p.Variables[k] = v
	}
	var classic []string
	for _, name := range TokenVariables {
		v, ok := vars.Lookup(name)
		if !ok {
			continue
		}
		if strings.HasPrefix(v, "ghp_") {
			classic = append(classic, name)
			continue
		}
		set(name, v)
		break
	}
	for _, name := range SecretVariables {
		if v, ok := vars.Lookup(name); ok {
			set(name, v)
		}
	}
	_, byok := vars.Lookup(BaseURLVariable)
	if len(classic) > 0 && !byok && !hasToken(p) {
		return harness.Plan{}, fmt.Errorf("%w: %s holds one; set %s to a fine-grained personal access token or an OAuth token", ErrClassicToken, strings.Join(classic, " and "), TokenVariable)
	}
	if !byok && !hasToken(p) {
		p.Need = Need
	}
	return p, nil
}

// Need is the message of a turn with neither a GitHub token nor a BYOK
// provider (Plan.Need).
const Need = "copilot has no credential: set " + TokenVariable + " (or " + GHTokenVariable + " or " + GitHubTokenVariable +
	"; a fine-grained personal access token or an OAuth token, not a classic ghp_ one), or a BYOK provider with " + BaseURLVariable

func hasToken(p harness.Plan) bool {
	for _, name := range TokenVariables {
		if _, ok := p.Variables[name]; ok {
			return true
		}
	}
	return false
}

// Configuration passes the non-secret Copilot variables through when they
// are set (ConfigVariables: the BYOK provider's URL, type, wire API and
// model settings, COPILOT_OFFLINE, COPILOT_MODEL, the GitHub host, and
// COPILOT_PKG_CACHE_HOME). A COPILOT_PROVIDER_BASE_URL that is not an
// http:// or https:// URL is an error (its value is not quoted).
func Configuration(vars harness.Vars) (harness.Configuration, error) {
	v, err := kit.PassVariables("copilot", vars, ConfigVariables, BaseURLVariable)
	return harness.Configuration{Variables: v}, err
}

// Endpoints is the BYOK model provider for the credential gateway:
// COPILOT_PROVIDER_API_KEY or COPILOT_PROVIDER_BEARER_TOKEN, sent as
// Authorization: Bearer (provider type openai, the default) to
// COPILOT_PROVIDER_BASE_URL. It has no default: without BYOK the CLI
// talks to GitHub's Copilot service with a GitHub token, which stays in
// the sandbox's environment (secrets mode env).
var Endpoints = []harness.Endpoint{{
	API: "openai-chat",
	Secrets: []harness.EndpointSecret{
		{Variable: "COPILOT_PROVIDER_API_KEY", Credential: "bearer"},
		{Variable: "COPILOT_PROVIDER_BEARER_TOKEN", Credential: "bearer"},
	},
	BaseURL: BaseURLVariable,
}}
