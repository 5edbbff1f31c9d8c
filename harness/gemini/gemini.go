package gemini

import (
	"fmt"
	"maps"
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
	Name = "gemini"
	// Program is the executable the preset runs.
	Program = "gemini"
	// HomeDir is the CLI's state directory relative to the sandbox home.
	HomeDir = ".gemini"
	// SettingsFile is the user settings file the configuration merges into.
	SettingsFile = HomeDir + "/settings.json"
	// MaxAttempts is the CLI's general.maxAttempts that the configuration
	// sets (the CLI's default is 10, about five minutes on a persistent
	// 429 or 5xx): measured, three attempts give up after about 17 s.
	MaxAttempts = 3
	// MaxArgPrompt is the largest prompt passed as an argument; a longer
	// one goes to standard input, which the CLI reads before -p's text.
	MaxArgPrompt = kit.MaxArgPrompt
)

// Endpoint facts, for the credential gateway: the variable holding the
// secret, the variable that moves the API, and where the CLI puts the key
// on each request (measured: the x-goog-api-key header; the API also
// accepts the key query parameter).
const (
	APIKeyVariable       = "GEMINI_API_KEY"
	GoogleAPIKeyVariable = "GOOGLE_API_KEY"
	BaseURLVariable      = "GOOGLE_GEMINI_BASE_URL"
	CredentialHeader     = "x-goog-api-key"
	CredentialQuery      = "key"
	// APIVersionPath is the path prefix of every model call under the
	// base URL (/v1beta/models/<model>:streamGenerateContent?alt=sse).
	APIVersionPath = "/v1beta"
)

// ConfigVariables are the non-secret variables passed through when set.
var ConfigVariables = []string{
	BaseURLVariable,
	"GOOGLE_GENAI_API_VERSION",
	"GOOGLE_GENAI_USE_VERTEXAI",
	"GOOGLE_CLOUD_PROJECT",
	"GOOGLE_CLOUD_LOCATION",
	"GOOGLE_VERTEX_BASE_URL",
	"GEMINI_MODEL",
}

// Option names (harness.Input.Options).
const (
	// OptionApprovalMode is passed as --approval-mode: yolo (default:
	// every tool runs; in the CLI's own default mode the shell and edit
	// tools are not even registered headless), auto_edit, plan, default.
	OptionApprovalMode = "approval-mode"
)

// ApprovalModes are the values of OptionApprovalMode.
var ApprovalModes = []string{"yolo", "auto_edit", "plan", "default"}

// Harness returns the Gemini CLI preset.
func Harness() *harness.Harness {
	return &harness.Harness{
		Name:    Name,
		Request: Request,
		NewDecoder: func() func([]byte) []harness.Event {
			return NewDecoder().Decode
		},
		Fork:                  Fork,
		Credentials:           Credentials,
		Endpoints:             Endpoints,
		Configuration:         Configuration,
		Quota:                 Quota,
		Unavailable:           Unavailable,
		Misconfigured:         Misconfigured,
		Usage:                 harness.UsageEvents,
		Bootstrap:             Name,
		RequiresFinishedEvent: true,
		Variables: map[string]string{
			// Belt and braces with --skip-trust, for gemini processes the
			// agent starts itself.
			"GEMINI_CLI_TRUST_WORKSPACE": "true",
			// Without it the CLI starts a second node process of itself
			// (to raise its heap limit), which doubles its start: about
			// 1.5 s of CPU a turn (docs/presets/gemini.md).
			"GEMINI_CLI_NO_RELAUNCH": "true",
		},
		Storage:    Storage(),
		Capture:    harness.True,
		Resumable:  harness.True,
		Forkable:   harness.True,
		Inactivity: kit.Inactivity,
	}
}

// Request builds the command of one turn:
//
//	gemini --prompt=PROMPT --output-format stream-json --skip-trust
//	       --approval-mode yolo (--session-id NEW | --resume ID)
//	       [--model M] [extra args]
//
// A new conversation gets a session id minted here (Command.Session). A
// fork arrives as the child's id, made by the Fork hook, and is resumed.
func Request(in harness.Input) (harness.Command, error) {
	if err := (kit.Opening{Preset: Name}).Check(in); err != nil {
		return harness.Command{}, err
	}
	args := []string{"--output-format", "stream-json", "--skip-trust"}
	session := in.Conversation
	if session != "" {
		if !ValidSessionID(session) {
			return harness.Command{}, fmt.Errorf("gemini: %q is not a Gemini CLI session id", session)
		}
		args = append(args, "--resume", session)
	} else {
		id, err := kit.NewUUID()
		if err != nil {
			return harness.Command{}, fmt.Errorf("gemini: minting a session id: %w", err)
		}
		session = id
		args = append(args, "--session-id", session)
	}
	if in.Model != "" {
		if !modelRE.MatchString(in.Model) {
			return harness.Command{}, fmt.Errorf("gemini: invalid model name %q", in.Model)
		}
		args = append(args, "--model", in.Model)
	}
	mode := "yolo"
	for _, k := range slices.Sorted(maps.Keys(in.Options)) {
		v := in.Options[k]
		if k != OptionApprovalMode {
			return harness.Command{}, fmt.Errorf("gemini: unknown option %q (known: %s)", k, OptionApprovalMode)
		}
		if !slices.Contains(ApprovalModes, v) {
			return harness.Command{}, fmt.Errorf("gemini: option %s: unknown mode %q (known: %s)", k, v, strings.Join(ApprovalModes, ", "))
		}
		mode = v
	}
	args = append(args, "--approval-mode", mode)
	if err := kit.CheckExtraArgs(Name, in.ExtraArgs, reserved.Check); err != nil {
		return harness.Command{}, err
	}
	args = append(args, in.ExtraArgs...)
	cmd := harness.Command{Path: Program, Session: session}
	// The CLI prepends standard input to -p's text (a long prompt's).
	kit.PromptFlag(&cmd, in.Prompt, args, []string{"--prompt= "})
	return cmd, nil
}

// reserved are the flags outpost sets or that would break a turn.
var reserved = kit.Flags{
	"-p": "", "--prompt": "", "-o": "", "--output-format": "", "--skip-trust": "",
	"-i": "", "--prompt-interactive": "", "--acp": "", "--experimental-acp": "",
	"-r": "use Resume", "--resume": "use Resume", "--session-id": "", "--session-file": "use Fork",
	"--list-sessions": "", "--delete-session": "",
	"-m": "use the agent's model", "--model": "use the agent's model",
	"-y": "use the " + OptionApprovalMode + " option", "--yolo": "use the " + OptionApprovalMode + " option",
	"--approval-mode": "use the " + OptionApprovalMode + " option",
	"-h":              "", "--help": "", "-v": "", "--version": "", "-w": "", "--worktree": "",
}

var modelRE = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._:/@-]{0,199}$`)

// ValidSessionID reports whether id is a Gemini CLI session id (a UUID).
func ValidSessionID(id string) bool { return kit.UUID(id) }

// Credentials passes GEMINI_API_KEY and GOOGLE_API_KEY when set. Without
// either, the turn fails before allocation with Need's message: Vertex AI
// and Google login through files are not planned by this preset.
func Credentials(vars harness.Vars) (harness.Plan, error) {
	p := harness.Plan{Need: "set " + APIKeyVariable + " (the Gemini API key; " + BaseURLVariable + " moves the API)"}
	for _, name := range []string{APIKeyVariable, GoogleAPIKeyVariable} {
		if v, ok := vars.Lookup(name); ok {
			if p.Variables == nil {
				p.Variables = map[string]string{}
			}
			p.Variables[name] = v
		}
	}
	return p, nil
}

// Configuration merges the CLI's settings into ~/.gemini/settings.json:
// API-key authentication (needed with GOOGLE_GEMINI_BASE_URL: the CLI
// 0.61.0 otherwise resolves a "gateway" auth type that headless mode
// refuses, exit 41), MaxAttempts, no update check, usage statistics
// or telemetry (each of which kept the process alive about a minute after
// its answer, measured offline), and no session cleanup: the CLI's
// (general.sessionRetention, on by default in 0.61.0) deletes at start-up
// every chat file of a session one of whose files holds no message yet,
// as the file a resume starts does, so a conversation's third turn on a
// fresh sandbox found its history deleted ("No previous sessions found
// for this project"); it also deletes sessions older than 30 days, which
// a conversation resumed later still needs. Outpost's store keeps them. It passes ConfigVariables through; a base
// URL that is not http(s) is an error.
func Configuration(vars harness.Vars) (harness.Configuration, error) {
	passed, err := kit.PassVariables("gemini", vars, ConfigVariables, BaseURLVariable)
	if err != nil {
		return harness.Configuration{}, err
	}
	c := harness.Configuration{Variables: passed}
	auth := ""
	if v, _ := vars.Lookup("GOOGLE_GENAI_USE_VERTEXAI"); v == "true" {
		auth = `"security":{"auth":{"selectedType":"vertex-ai"}},`
	} else if _, ok := vars.Lookup(APIKeyVariable); ok {
		auth = `"security":{"auth":{"selectedType":"gemini-api-key"}},`
	} else if _, ok := vars.Lookup(GoogleAPIKeyVariable); ok {
		auth = `"security":{"auth":{"selectedType":"gemini-api-key"}},`
	}
	settings := `{` + auth + `"general":{"maxAttempts":` + strconv.Itoa(MaxAttempts) +
		`,"enableAutoUpdate":false,"enableAutoUpdateNotification":false,"sessionRetention":{"enabled":false}},` +
		`"privacy":{"usageStatisticsEnabled":false},"telemetry":{"enabled":false}}`
	c.Files = []harness.File{{Path: SettingsFile, Content: []byte(settings), Merge: harness.MergeJSON}}
	return c, nil
}

// DefaultBaseURL is the Gemini API, the upstream when
// GOOGLE_GEMINI_BASE_URL is not set.
const DefaultBaseURL = "https://generativelanguage.googleapis.com"

// Endpoints is the Gemini API for the credential gateway: the CLI sends
// GEMINI_API_KEY or GOOGLE_API_KEY as x-goog-api-key to
// GOOGLE_GEMINI_BASE_URL (default the Gemini API).
var Endpoints = []harness.Endpoint{{
	API: "gemini",
	Secrets: []harness.EndpointSecret{
		{Variable: APIKeyVariable, Credential: CredentialHeader},
		{Variable: GoogleAPIKeyVariable, Credential: CredentialHeader},
	},
	BaseURL: BaseURLVariable,
	Default: DefaultBaseURL,
}}
