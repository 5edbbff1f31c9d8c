package codex

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
)

// Pinned CLI and defaults.
const (
	// Name is the preset's name.
	Name = "codex"
	// Program is the executable the preset runs, looked up on the
	// sandbox's PATH.
	Program = "codex"
	// HomeDir is the private CODEX_HOME, relative to the sandbox home.
	// Codex exits at once when CODEX_HOME does not exist; the preset's
	// configuration file creates it.
	HomeDir = ".codex"
	// ProviderID is the custom model provider the preset defines when
	// OPENAI_BASE_URL is set, and the one the retry options apply to unless
	// the provider option or an extra `-c model_provider=…` names another.
	ProviderID = "outpost"
	// Inactivity is the default watchdog (kit.Inactivity). Codex never
	// gives up by itself on a refused connection ("Reconnecting... waiting
	// for network", forever) nor on a server that never sends response
	// headers; and exec prints nothing while the model streams or a command
	// runs, so the bound is above a long command, or a stream that Codex's
	// own idle timeout (stream_idle_timeout_ms, 5 minutes by default) ends
	// and retries visibly.
	Inactivity = kit.Inactivity
	// MaxArgPrompt is the largest prompt passed as an argument; a longer
	// one is written to the CLI's standard input (kit.MaxArgPrompt).
	MaxArgPrompt = kit.MaxArgPrompt
)

// Variable names the preset reads.
const (
	// BaseURLVariable points Codex at an OpenAI-compatible Responses
	// endpoint. The CLI itself ignores it; the preset defines the custom
	// provider "outpost" with it (see Configuration).
	BaseURLVariable = "OPENAI_BASE_URL"
	// APIKeyVariable is the key of that custom provider (its env_key).
	// Without OPENAI_BASE_URL it is passed as CODEX_API_KEY too, the
	// variable of the built-in provider, unless that one is set.
	APIKeyVariable = "OPENAI_API_KEY"
	// CodexAPIKeyVariable is the API key of Codex's built-in provider.
	CodexAPIKeyVariable = "CODEX_API_KEY"
	// ModelVariable is the default model written to config.toml with
	// OPENAI_BASE_URL (a custom endpoint's model names are its own).
	ModelVariable = "OPENAI_MODEL"
	// HomeVariable is where the host's Codex keeps auth.json; default
	// ~/.codex.
	HomeVariable = "CODEX_HOME"
)

// Option names (harness.Input.Options, `outpost run --option KEY=VALUE`).
const (
	// OptionSandbox is Codex's sandbox for the commands the model runs:
	// read-only (the CLI's default), workspace-write or danger-full-access.
	OptionSandbox = "sandbox"
	// OptionReasoningEffort is model_reasoning_effort (minimal, low,
	// medium, high, xhigh, none).
	OptionReasoningEffort = "reasoning-effort"
	// OptionRequestMaxRetries, OptionStreamMaxRetries and
	// OptionStreamIdleTimeout bound the CLI's retries of a failed model
	// request: request_max_retries (silent HTTP retries of 5xx and transport
	// errors, default 4), stream_max_retries (visible "Reconnecting..."
	// retries, default 5) and stream_idle_timeout_ms (a Go duration or
	// milliseconds, default 5 minutes). They apply to a custom provider
	// only; Codex does not let them be changed for its built-in one.
	OptionRequestMaxRetries = "request-max-retries"
	OptionStreamMaxRetries  = "stream-max-retries"
	OptionStreamIdleTimeout = "stream-idle-timeout"
	// OptionProvider names the custom provider the retry options apply to
	// (default: the one an extra `-c model_provider=…` selects, else
	// ProviderID).
	OptionProvider = "provider"
	// OptionMaxModelRequests is the turn's budget of model requests. The
	// CLI has no step limit (a model that keeps calling tools loops until
	// killed); the preset counts the tool calls the model makes, each of
	// which is answered with one more request, and stops the turn when the
	// model has asked for its N-th tool result: the turn fails with code
	// process and details.limit "max-model-requests".
	OptionMaxModelRequests = "max-model-requests"
)

// Options lists the option names the preset reads.
var Options = []string{OptionSandbox, OptionReasoningEffort, OptionRequestMaxRetries, OptionStreamMaxRetries, OptionStreamIdleTimeout, OptionProvider, OptionMaxModelRequests}

// SandboxModes are the values of the sandbox option.
var SandboxModes = []string{"read-only", "workspace-write", "danger-full-access"}

// ReasoningEfforts are the values of the reasoning-effort option.
var ReasoningEfforts = []string{"none", "minimal", "low", "medium", "high", "xhigh"}

// Harness returns the Codex preset.
func Harness() *harness.Harness {
	return &harness.Harness{
		Name:    Name,
		Request: Request,
		NewDecoder: func() func([]byte) []harness.Event {
			return newDecoder(settings{}).decode
		},
		NewTurnDecoder: func(in harness.Input) func([]byte) []harness.Event {
			s, _ := parseSettings(in) // Request has refused bad options already
			return newDecoder(s).decode
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
		Storage:               Storage(),
		Capture:               harness.True,
		Resumable:             harness.True,
		NativeSchema:          true,
		Forkable:              harness.True,
		Inactivity:            Inactivity,
	}
}

// settings are a turn's parsed options.
type settings struct {
	sandbox       string
	effort        string
	provider      string
	retries       []string // -c pairs for the provider's retry bounds
	maxRequests   int      // 0: no budget
	continues     bool     // the turn resumes or forks a thread
	extraProvider string   // provider selected by the extra arguments
}

// parseSettings reads and checks a turn's options and extra arguments.
func parseSettings(in harness.Input) (settings, error) {
	var s settings
	s.continues = in.Conversation != ""
	var retries []string
	for _, k := range slices.Sorted(maps.Keys(in.Options)) {
		v := strings.TrimSpace(in.Options[k])
		switch k {
		case OptionSandbox:
			if v != "" && !slices.Contains(SandboxModes, v) {
				return s, fmt.Errorf("codex: option %s: unknown mode %q (known: %s)", k, v, strings.Join(SandboxModes, ", "))
			}
			s.sandbox = v
		case OptionReasoningEffort:
			if v != "" && !slices.Contains(ReasoningEfforts, v) {
				return s, fmt.Errorf("codex: option %s: unknown effort %q (known: %s)", k, v, strings.Join(ReasoningEfforts, ", "))
			}
			s.effort = v
		case OptionRequestMaxRetries, OptionStreamMaxRetries:
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 100 {
				return s, fmt.Errorf("codex: option %s: want a number of retries from 0 to 100, not %q", k, v)
			}
			retries = append(retries, strings.ReplaceAll(k, "-", "_")+"="+strconv.Itoa(n))
		case OptionStreamIdleTimeout:
			ms, err := parseMillis(v)
			if err != nil {
				return s, fmt.Errorf("codex: option %s: %w", k, err)
			}
			retries = append(retries, "stream_idle_timeout_ms="+strconv.FormatInt(ms, 10))
		case OptionProvider:
			if !providerIDRE(v) {
				return s, fmt.Errorf("codex: option %s: %q is not a provider id (letters, digits, '-' and '_')", k, v)
			}
			s.provider = v
		case OptionMaxModelRequests:
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return s, fmt.Errorf("codex: option %s: want a positive number of model requests, not %q", k, v)
			}
			s.maxRequests = n
		default:
			return s, fmt.Errorf("codex: unknown option %q (known: %s)", k, strings.Join(Options, ", "))
		}
	}
	for i, a := range in.ExtraArgs {
		if err := checkExtraArg(a, s.continues); err != nil {
			return s, fmt.Errorf("codex: extra argument %d: %w", i+1, err)
		}
		if id := selectedProvider(in.ExtraArgs, i); id != "" {
			s.extraProvider = id
		}
	}
	if s.provider == "" {
		s.provider = s.extraProvider
	}
	if s.provider == "" {
		s.provider = ProviderID
	}
	for _, r := range retries {
		s.retries = append(s.retries, "model_providers."+s.provider+"."+r)
	}
	return s, nil
}

func providerIDRE(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// selectedProvider returns the provider id that the extra argument at i
// selects (`-c model_provider=ID`, `--config=model_provider="ID"`, ...),
// or "".
func selectedProvider(args []string, i int) string {
	a := args[i]
	var kv string
	switch {
	case (a == "-c" || a == "--config") && i+1 < len(args):
		kv = args[i+1]
	case strings.HasPrefix(a, "--config="):
		kv = strings.TrimPrefix(a, "--config=")
	case strings.HasPrefix(a, "-c") && len(a) > 2:
		kv = a[2:]
	default:
		return ""
	}
	k, v, ok := strings.Cut(kv, "=")
	if !ok || strings.TrimSpace(k) != "model_provider" {
		return ""
	}
	v = strings.Trim(strings.TrimSpace(v), `"'`)
	if !providerIDRE(v) {
		return ""
	}
	return v
}

// checkExtraArg refuses extra arguments that would take over what outpost
// controls: the output format, the conversation (never `resume --last`,
// which picks the latest thread of the working directory, silently
// starting a new one elsewhere), the end of the options, and ephemeral
// threads, which leave no rollout to capture.
func checkExtraArg(a string, continues bool) error {
	flag, _, _ := strings.Cut(a, "=")
	switch flag {
	case "--last", "--all":
		return fmt.Errorf("%s is refused: outpost resumes conversations by id", a)
	case "--json", "--experimental-json":
		return fmt.Errorf("%s is set by outpost", a)
	case "--ephemeral":
		return errors.New("--ephemeral threads leave no rollout: outpost could not capture or resume them")
	case "--":
		return errors.New(`"--" is placed by outpost before the prompt`)
	case "resume", "fork", "review", "help":
		return fmt.Errorf("%q is a subcommand: outpost chooses it", a)
	case "-s", "--sandbox":
		if continues {
			return fmt.Errorf("%s does not exist for exec resume and exec fork: use the %s option", a, OptionSandbox)
		}
	}
	if strings.HasPrefix(a, "-s") && len(a) > 2 && !strings.HasPrefix(a, "--") && continues {
		return fmt.Errorf("%s does not exist for exec resume and exec fork: use the %s option", a, OptionSandbox)
	}
	if strings.ContainsRune(a, 0) {
		return errors.New("contains a NUL byte")
	}
	return nil
}

// parseMillis reads a Go duration ("30s") or a number of milliseconds.
func parseMillis(v string) (int64, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 || n > 24*3600*1000 {
			return 0, fmt.Errorf("want 1ms to 24h, not %q", v)
		}
		return n, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < time.Millisecond || d > 24*time.Hour {
		return 0, fmt.Errorf("want a duration from 1ms to 24h (\"30s\") or milliseconds, not %q", v)
	}
	return d.Milliseconds(), nil
}

func validModel(m string) bool {
	if m == "" || len(m) > 200 || strings.HasPrefix(m, "-") {
		return false
	}
	for _, r := range m {
		if r <= ' ' || r == 0x7f {
			return false
		}
	}
	return true
}

// tomlString quotes s as a TOML basic string (JSON's escapes are TOML's).
func tomlString(s string) string { return string(marshal(s)) }

// configPairs are the `-c key=value` overrides of a turn, shared by exec
// and app-server.
func (s settings) configPairs() []string {
	var pairs []string
	if s.effort != "" {
		pairs = append(pairs, "model_reasoning_effort="+tomlString(s.effort))
	}
	if len(s.retries) > 0 && s.provider == ProviderID {
		// A provider table needs a name; this keeps a partial "outpost"
		// table valid when OPENAI_BASE_URL did not define the provider
		// (the bounds then apply to nothing, as the built-in provider
		// cannot take them).
		pairs = append(pairs, "model_providers."+ProviderID+".name="+tomlString(ProviderID))
	}
	return append(pairs, s.retries...)
}

// Request builds the command of one turn:
//
//	codex exec [resume|fork] --json --skip-git-repo-check [-m MODEL]
//	           [-s MODE | -c sandbox_mode="MODE"] [-c overrides...]
//	           [extra args...] -- [THREAD_ID] PROMPT
//
// with CODEX_HOME in the sandbox home and standard input closed (an open
// one blocks exec forever). `exec resume` has no -s, so the sandbox mode of
// a resumed or forked turn is passed as a config override. A prompt longer
// than MaxArgPrompt, or the prompt "-" (which Codex reads as "from standard
// input"), is written to standard input. It fails on an unknown option or
// value, a conversation id that is not a thread id, and extra arguments
// outpost must control.
func Request(in harness.Input) (harness.Command, error) {
	s, err := parseSettings(in)
	if err != nil {
		return harness.Command{}, err
	}
	if err := (kit.Opening{Preset: Name, Parent: "thread"}).Check(in); err != nil {
		return harness.Command{}, err
	}
	if in.Conversation != "" && !ValidThreadID(in.Conversation) {
		return harness.Command{}, fmt.Errorf("codex: %q is not a Codex thread id", in.Conversation)
	}
	args := []string{"exec"}
	switch {
	case in.Fork:
		args = append(args, "fork")
	case in.Conversation != "":
		args = append(args, "resume")
	}
	args = append(args, "--json", "--skip-git-repo-check")
	if in.Model != "" {
		if !validModel(in.Model) {
			return harness.Command{}, fmt.Errorf("codex: invalid model name %q", in.Model)
		}
		args = append(args, "-m", in.Model)
	}
	if s.sandbox != "" {
		if in.Conversation != "" {
			args = append(args, "-c", "sandbox_mode="+tomlString(s.sandbox))
		} else {
			args = append(args, "-s", s.sandbox)
		}
	}
	for _, p := range s.configPairs() {
		args = append(args, "-c", p)
	}
	if in.SchemaFile != "" {
		// Codex sends the schema as the request's text.format (strict
		// json_schema) and the final message is the value.
		args = append(args, "--output-schema", in.SchemaFile)
	}
	args = append(args, in.ExtraArgs...)
	args = append(args, "--")
	if in.Conversation != "" {
		args = append(args, in.Conversation)
	}
	cmd := harness.Command{Path: Program, Env: env(in)}
	if len(in.Prompt) > MaxArgPrompt || in.Prompt == "-" {
		cmd.Args = append(args, "-")
		cmd.Stdin = []byte(in.Prompt)
		return cmd, nil
	}
	cmd.Args = append(args, in.Prompt)
	return cmd, nil
}

// env is the environment every Codex command of a turn gets.
func env(in harness.Input) map[string]string {
	if in.Home == "" {
		return nil
	}
	return map[string]string{HomeVariable: path.Join(in.Home, HomeDir)}
}

// Credentials selects what Codex authenticates with, in this order:
//
//   - OPENAI_BASE_URL set: OPENAI_API_KEY, the key of the custom provider
//     the configuration defines for it, else CODEX_API_KEY passed as
//     OPENAI_API_KEY (one of them is required; the credential gateway
//     always sets OPENAI_BASE_URL);
//   - CODEX_API_KEY, the built-in provider's key; else OPENAI_API_KEY,
//     passed as CODEX_API_KEY too (the CLI ignores OPENAI_API_KEY for its
//     built-in provider) and as itself, for custom providers given as
//     extra arguments;
//   - no key at all: the host's ChatGPT login, $CODEX_HOME/auth.json
//     (default ~/.codex/auth.json), copied into the sandbox's private
//     CODEX_HOME — never into the local sandbox, which takes variables
//     only. Its refresh token is rotated on use and is single-use: two
//     sandboxes refreshing copies of one file log each other (and the
//     host) out. The copy is therefore Exclusive: a second live lease
//     asking for the same file is refused until the first is released.
func Credentials(vars harness.Vars) (harness.Plan, error) {
	p := harness.Plan{Variables: map[string]string{}}
	key, hasKey := vars.Lookup(APIKeyVariable)
	if _, ok := vars.Lookup(BaseURLVariable); ok {
		codexKey, hasCodexKey := vars.Lookup(CodexAPIKeyVariable)
		if !hasKey && !hasCodexKey {
			return p, &harness.MissingVariableError{Names: []string{APIKeyVariable, CodexAPIKeyVariable},
				Why: BaseURLVariable + " makes Codex use a custom provider whose key is " + APIKeyVariable}
		}
		if !hasKey {
			key = codexKey
		}
		p.Variables[APIKeyVariable] = key
		if hasCodexKey {
			p.Variables[CodexAPIKeyVariable] = codexKey
		}
		return p, nil
	}
	if hasKey {
		p.Variables[APIKeyVariable] = key
	}
	if v, ok := vars.Lookup(CodexAPIKeyVariable); ok {
		p.Variables[CodexAPIKeyVariable] = v
	} else if hasKey {
		p.Variables[CodexAPIKeyVariable] = key
	}
	if len(p.Variables) > 0 {
		return p, nil
	}
	// Without a key, the host's login is Codex's only credential: a turn
	// with neither fails before allocation (Plan.Need).
	p.Need = "codex has no credential: set " + APIKeyVariable + " or " + CodexAPIKeyVariable + ", or log in on the host with `codex login` (auth.json), on a sandbox that takes host files"
	if src := hostAuthFile(vars); src != "" {
		p.HostFiles = append(p.HostFiles, harness.HostFile{
			Source:    src,
			Target:    HomeDir + "/auth.json",
			Mode:      0o600,
			Optional:  true,
			Exclusive: true,
		})
	}
	return p, nil
}

// hostAuthFile is where the host's Codex keeps its login, or "".
func hostAuthFile(vars harness.Vars) string {
	if h, ok := vars.Lookup(HomeVariable); ok && path.IsAbs(h) {
		return path.Join(h, "auth.json")
	}
	if h, ok := vars.Lookup("HOME"); ok && path.IsAbs(h) {
		return path.Join(h, HomeDir, "auth.json")
	}
	return ""
}

// Configuration is the config.toml merged into the sandbox's CODEX_HOME
// (keys the file already has are kept; creating the file also creates
// CODEX_HOME, which Codex needs to exist): no update check, no analytics,
// and with OPENAI_BASE_URL a custom provider "outpost" pointed at it —
// base_url, env_key OPENAI_API_KEY, wire_api "responses" — selected as
// model_provider, plus OPENAI_MODEL as the default model when set. It
// fails when OPENAI_BASE_URL is not an http(s) URL.
func Configuration(vars harness.Vars) (harness.Configuration, error) {
	var top, tables strings.Builder
	top.WriteString("# Written by outpost (harness/codex); keys already present were kept.\n")
	top.WriteString("check_for_update_on_startup = false\n")
	if base, ok := vars.Lookup(BaseURLVariable); ok {
		u, err := url.Parse(strings.TrimSpace(base))
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return harness.Configuration{}, fmt.Errorf("codex: %s must be an http or https URL such as https://host/v1", BaseURLVariable)
		}
		top.WriteString("model_provider = " + tomlString(ProviderID) + "\n")
		if m, ok := vars.Lookup(ModelVariable); ok {
			if !validModel(m) {
				return harness.Configuration{}, fmt.Errorf("codex: %s %q is not a model name", ModelVariable, m)
			}
			top.WriteString("model = " + tomlString(m) + "\n")
		}
		tables.WriteString("\n[model_providers." + ProviderID + "]\n")
		tables.WriteString("name = " + tomlString(ProviderID+" ("+BaseURLVariable+")") + "\n")
		tables.WriteString("base_url = " + tomlString(strings.TrimRight(u.String(), "/")) + "\n")
		tables.WriteString("env_key = " + tomlString(APIKeyVariable) + "\n")
		tables.WriteString("wire_api = \"responses\"\n")
	}
	tables.WriteString("\n[analytics]\nenabled = false\n")
	return harness.Configuration{Files: []harness.File{{
		Path:    HomeDir + "/config.toml",
		Content: []byte(top.String() + tables.String()),
		Mode:    0o600,
		Merge:   harness.MergeTOML,
	}}}, nil
}

// DefaultBaseURL is the OpenAI API, the upstream when OPENAI_BASE_URL is
// not set (the base URL of Codex's built-in provider).
const DefaultBaseURL = "https://api.openai.com/v1"

// Endpoints is the Responses API for the credential gateway: through
// it, OPENAI_BASE_URL is always set (to the gateway), so Codex uses the
// custom provider Configuration defines, whose key is OPENAI_API_KEY
// (Authorization: Bearer); the upstream is the host's OPENAI_BASE_URL,
// else the OpenAI API. A ChatGPT login (auth.json) is not an endpoint
// secret and is copied as before.
var Endpoints = []harness.Endpoint{{
	API: "openai-responses",
	Secrets: []harness.EndpointSecret{
		{Variable: APIKeyVariable, Credential: "bearer"},
		{Variable: CodexAPIKeyVariable, Credential: "bearer"},
	},
	BaseURL: BaseURLVariable,
	Default: DefaultBaseURL,
}}
