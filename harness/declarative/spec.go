package declarative

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
)

// Spec is the content of a preset file. Field names are the file format
// (docs/presets/custom.md); a field that is absent keeps the meaning the
// reference rules give it.
type Spec struct {
	// Kind is required and "cli" is its only value.
	Kind string `json:"kind"`
	// Name is the agent's id (events, stored conversations, --agent).
	// Default: the file's base name without its extension.
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`

	// Protocol says how outpost talks to the CLI: absent, it runs one
	// command per turn and reads Output; "acp", the CLI is an Agent
	// Client Protocol agent (docs/presets/acp.md) started with Args (no
	// placeholders), which outpost drives over standard input and output:
	// prompt, session, new_args, resume_args, fork, schema_args and output
	// are not used, and with storage the conversation is resumable.
	Protocol string `json:"protocol,omitempty"`
	// AllowArgs (protocol acp) are added when the turn's permissions
	// option allows every request (the agent's mode that asks nothing).
	AllowArgs []string `json:"allow_args,omitempty"`

	// Program is the executable, looked up on the sandbox's PATH unless
	// absolute. Args is the argument template (see Placeholders); whole
	// elements "{model_args}", "{session_args}" and "{extra_args}" place
	// those lists, which otherwise follow Args in that order.
	Program string   `json:"program"`
	Args    []string `json:"args,omitempty"`
	// Prompt says where the prompt goes: "argument" (where Args holds
	// {prompt}), "stdin", or "file" (a temporary file in the sandbox's
	// home whose path replaces {prompt_file}). Default: argument.
	Prompt string `json:"prompt,omitempty"`
	// ModelArgs are added when the turn names a model ({model}).
	ModelArgs []string `json:"model_args,omitempty"`
	// Session says who chooses the native conversation id: "generated"
	// (outpost makes one for a new conversation and passes it as
	// {session}), "output" (the CLI reports it in its output). Absent: the
	// conversation has no id, and cannot be stored or resumed.
	Session string `json:"session,omitempty"`
	// NewArgs start a new conversation; ResumeArgs continue {session}.
	NewArgs    []string `json:"new_args,omitempty"`
	ResumeArgs []string `json:"resume_args,omitempty"`
	// Fork describes how the CLI forks a conversation.
	Fork *ForkSpec `json:"fork,omitempty"`
	// SchemaArgs are added when the turn asks for a JSON Schema and make
	// the schema native (harness.NativeSchema): {schema} is the schema as
	// compact JSON, {schema_file} the path of a file holding it. Absent:
	// the schema is an instruction in the prompt.
	SchemaArgs []string `json:"schema_args,omitempty"`
	// ResumeFiles are written into the sandbox's home before a turn that
	// resumes or forks a conversation: path and string values of content
	// hold {session} (the conversation continued, a fork's parent),
	// {workdir}, {workdir_slug} and {home} (a CLI that checks where a
	// session was recorded, such as Qwen Code's runtime status file).
	ResumeFiles []FileSpec `json:"resume_files,omitempty"`
	// ResumePrepare are commands (program and arguments) run in the
	// sandbox before a resumed or forked turn, after the CLI is installed:
	// with {session}, {workdir}, {home} and {workdir_sql} (the working
	// directory as an SQL string literal), for a CLI that records where a
	// session ran in a database (OpenCode). A command whose program is
	// Program runs the installed CLI.
	ResumePrepare [][]string `json:"resume_prepare,omitempty"`
	// ReservedArgs are flags refused in pass-through arguments, beyond the
	// flags the templates already use.
	ReservedArgs []string `json:"reserved_args,omitempty"`

	// Env is added to the command's environment (not secret).
	Env map[string]string `json:"env,omitempty"`
	// Variables are added to every command of the agent (harness.Variables).
	Variables map[string]string `json:"variables,omitempty"`
	// Credentials select what the agent authenticates with.
	Credentials *CredentialSpec `json:"credentials,omitempty"`
	// PassVariables are passed to the agent when set, as non-secret
	// configuration (a base URL, a model name): not redacted.
	PassVariables []string `json:"pass_variables,omitempty"`
	// Files are the agent's non-secret configuration files, written into
	// the sandbox's home once per lease (harness.Configuration).
	Files []FileSpec `json:"files,omitempty"`
	// Endpoint declares how the CLI reaches its model API, for a
	// credential gateway that points it elsewhere (not used by the turn).
	Endpoint *EndpointSpec `json:"endpoint,omitempty"`

	// Output says how to read the CLI's standard output.
	Output *OutputSpec `json:"output"`

	// Quota, Unavailable and Misconfigured are regular expressions matched
	// against failure texts and standard-error lines; Retry matches the
	// CLI's transient retry notices, which never count as terminal.
	Quota         []string `json:"quota,omitempty"`
	Unavailable   []string `json:"unavailable,omitempty"`
	Misconfigured []string `json:"misconfigured,omitempty"`
	Retry         []string `json:"retry,omitempty"`

	// Storage locates the conversation files in the sandbox's home.
	Storage *StorageSpec `json:"storage,omitempty"`
	// Capture, Resumable and Forkable: absent keeps the reference's
	// meaning (capture when storage exists; resumable when the session id
	// and storage are known; forkable when resumable and a fork is
	// described).
	Capture   *bool `json:"capture,omitempty"`
	Resumable *bool `json:"resumable,omitempty"`
	Forkable  *bool `json:"forkable,omitempty"`

	// Usage is the usage mode: "events", "unavailable" (absent: events
	// are counted without the completeness check).
	Usage string `json:"usage,omitempty"`
	// Bootstrap names a built-in pinned CLI installed when Program is
	// missing.
	Bootstrap string `json:"bootstrap,omitempty"`
	// Inactivity is the default watchdog, a Go duration ("15m").
	Inactivity string `json:"inactivity,omitempty"`
	// RetryBound is how long a turn may only retry before it is an outage
	// (a Go duration; absent: the engine's default).
	RetryBound string `json:"retry_bound,omitempty"`
}

// ForkSpec is how a CLI forks. Exactly one of Args and Command is set.
type ForkSpec struct {
	// Args fork through the turn's own request: they replace ResumeArgs,
	// with {parent} the conversation forked and, for generated sessions,
	// {session} the child's id.
	Args []string `json:"args,omitempty"`
	// Command is a separate command run in the sandbox before the turn
	// (program and arguments) with {parent} and, for generated sessions,
	// {child}. Without generated sessions the child's id is the first
	// line of its standard output.
	Command []string `json:"command,omitempty"`
}

// CredentialSpec plans the agent's credentials.
type CredentialSpec struct {
	// Variables are passed to the agent when set (secrets: redacted).
	Variables []string `json:"variables,omitempty"`
	// Required refuses a turn before allocation when none of Variables is
	// set (nor any HostFiles' source can be known to exist: host files are
	// not looked at, so Required and HostFiles exclude each other).
	Required bool `json:"required,omitempty"`
	// HostFiles are copied from the host's home into the sandbox's
	// (providers with host files only; never local).
	HostFiles []HostFileSpec `json:"host_files,omitempty"`
	// Login commands run once per lease after the files are in place.
	Login [][]string `json:"login,omitempty"`
}

// FileSpec is a configuration file generated into the sandbox's home.
type FileSpec struct {
	// Path is relative to the sandbox's home.
	Path string `json:"path"`
	// Content is the file's text (a JSON string), or any other JSON
	// value, written as compact JSON.
	Content json.RawMessage `json:"content"`
	// Merge combines it with a file already there: "json" (deep merge,
	// this file's keys win), "toml" (top-level keys that are absent are
	// added); absent: replace.
	Merge string `json:"merge,omitempty"`
}

// EndpointSpec is what a credential gateway needs to know about the
// CLI's model API: the protocol, the variable that holds the secret, and
// where the base URL is set (a variable, or a key of a configuration
// file).
type EndpointSpec struct {
	// API is the protocol: "openai-chat", "openai-responses",
	// "anthropic" or "gemini".
	API string `json:"api"`
	// Secret is the variable holding the API key.
	Secret string `json:"secret"`
	// BaseURL is the variable holding the base URL, if the CLI reads one.
	BaseURL string `json:"base_url,omitempty"`
	// BaseURLKey is "<file>#<dot.path>": the key of a configuration file
	// (one of Files) that holds the base URL, if the CLI reads it there.
	BaseURLKey string `json:"base_url_key,omitempty"`
}

// HostFileSpec is a file copied from the host's home.
type HostFileSpec struct {
	Source   string `json:"source"` // relative to the host's HOME
	Target   string `json:"target"` // relative to the sandbox's home
	Optional bool   `json:"optional,omitempty"`
}

// OutputSpec reads standard output.
type OutputSpec struct {
	// Format is "text" (each line a message delta, the whole output the
	// final message) or "jsonl" (one JSON object per line, read by Events).
	Format string `json:"format"`

	// Text format: lines matching Ignore are not part of the answer,
	// lines matching Failure are failure events, lines matching Notice
	// are notices, and a line matching UsageLine (named groups input,
	// output, cache_read, cache_write; "2.5k" and "1.2M" are read
	// approximately, and make the usage incomplete) reports usage.
	Ignore    []string `json:"ignore,omitempty"`
	Failure   []string `json:"failure,omitempty"`
	Notice    []string `json:"notice,omitempty"`
	UsageLine string   `json:"usage_line,omitempty"`

	// JSONL format: the first rule whose When matches a line decodes it.
	Events []EventRule `json:"events,omitempty"`
	// RequireFinished fails a turn whose output has no finished event.
	RequireFinished bool `json:"require_finished,omitempty"`
}

// EventRule decodes the JSON lines it matches into one event.
type EventRule struct {
	// When maps field paths to the JSON values they must hold.
	When map[string]any `json:"when,omitempty"`
	// Event is session, message, delta, reasoning, notice, failure,
	// finished, usage or ignore.
	Event string `json:"event"`
	// Field paths: dot-separated names, array indexes, and "*" for every
	// element of an array (strings found are joined).
	Text    string      `json:"text,omitempty"`
	Session string      `json:"session,omitempty"`
	ID      string      `json:"id,omitempty"`
	Stop    string      `json:"stop,omitempty"`
	Usage   *UsagePaths `json:"usage,omitempty"`
	// Kind is the fixed kind of a notice or failure ("retry", ...).
	Kind string `json:"kind,omitempty"`

	// Each applies the rule to every element of the array at this path:
	// the rule's other paths, and EachWhen, are then relative to the
	// element, and the line gives one event per element that EachWhen
	// matches (a message whose content blocks are text and tool calls).
	Each     string         `json:"each,omitempty"`
	EachWhen map[string]any `json:"each_when,omitempty"`
	// Continue keeps trying the rules that follow on the same line, so
	// one line can give several events (a session id on every line).
	Continue bool `json:"continue,omitempty"`

	// Tool events (tool_call, tool_result): Tool is the path of the
	// tool's name, Input of its input (any JSON value), Output of a
	// result's text; a result is an error when ErrorWhen holds. ID is the
	// call's id, which pairs a result with its call.
	Tool      string         `json:"tool,omitempty"`
	Input     string         `json:"input,omitempty"`
	Output    string         `json:"output,omitempty"`
	ErrorWhen map[string]any `json:"error_when,omitempty"`

	// Sum adds the usage this rule reads to the turn's running total and
	// reports the total, for CLIs that report usage per step rather than
	// for the whole turn (usage and finished rules).
	Sum bool `json:"sum,omitempty"`
}

// UsagePaths are the field paths of the token counters. Usage is complete
// when input, output and every other counter given a path are found; a
// counter without a path is one the CLI does not have.
type UsagePaths struct {
	Input      string `json:"input,omitempty"`
	Output     string `json:"output,omitempty"`
	CacheRead  string `json:"cache_read,omitempty"`
	CacheWrite string `json:"cache_write,omitempty"`
}

// StorageSpec locates conversation files.
type StorageSpec struct {
	// Roots are directories relative to the sandbox's home.
	Roots []string `json:"roots"`
	// Files are glob patterns relative to a root, holding {session}
	// unless Shared.
	Files []string `json:"files"`
	// Shared says the files hold every conversation of the sandbox (a
	// database, such as OpenCode's): they are captured and restored whole
	// with each conversation, and Files need no {session}.
	Shared bool `json:"shared,omitempty"`
	// Workdir says the first directory under a root is the CLI's folder
	// of the working directory, named by its slug ("slug": every
	// character but ASCII letters and digits replaced by "-", as Claude
	// Code and Qwen Code do). Restoring moves a file into the folder of
	// the new working directory, so a conversation resumes from any
	// directory of any sandbox. Absent: files are restored where they
	// were captured.
	Workdir string `json:"workdir,omitempty"`
}

// Options configure Parse and Load. Nil means defaults.
type Options struct {
	// Name is used when the file has no name (Load: the file's base name).
	Name string
	// Bootstrap reports whether a bootstrap name is known; nil accepts
	// any (the turn engine refuses an unknown one before allocation).
	Bootstrap func(name string) bool
}

// MaxFileSize bounds a preset file.
const MaxFileSize = 1 << 20

// FieldError is a bad field of a preset file.
type FieldError struct {
	Field string // JSON path of the field, e.g. "output.events[1].text"
	Msg   string
}

func (e *FieldError) Error() string { return "field " + e.Field + ": " + e.Msg }

func configErr(source string, err error) error {
	return &outpost.Error{Code: outpost.Configuration, Op: "agent file", Msg: source, Err: err}
}

// Parse validates a preset file's content and compiles it. source names
// the file in errors. Every error is an *outpost.Error with code
// configuration whose message names the bad field.
func Parse(source string, data []byte, opts *Options) (*harness.Harness, error) {
	if opts == nil {
		opts = &Options{}
	}
	if len(data) > MaxFileSize {
		return nil, configErr(source, fmt.Errorf("the file is larger than %d bytes", MaxFileSize))
	}
	var s Spec
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, configErr(source, jsonErr(data, err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, configErr(source, errors.New("trailing data after the JSON object"))
	}
	if s.Name == "" {
		s.Name = opts.Name
	}
	h, err := compile(&s, opts)
	if err != nil {
		return nil, configErr(source, err)
	}
	return h, nil
}

// jsonErr names the field of a JSON decoding error where it can.
func jsonErr(data []byte, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return &FieldError{Field: te.Field, Msg: fmt.Sprintf("want %s, not a JSON %s", te.Type, te.Value)}
	}
	if msg := err.Error(); strings.HasPrefix(msg, "json: unknown field ") {
		var v any
		if json.Unmarshal(data, &v) == nil {
			if f := unknownField(v, reflect.TypeOf(Spec{}), ""); f != "" {
				return &FieldError{Field: f, Msg: "unknown field"}
			}
		}
		return &FieldError{Field: strings.Trim(strings.TrimPrefix(msg, "json: unknown field "), `"`), Msg: "unknown field"}
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line := 1 + bytes.Count(data[:min(int(se.Offset), len(data))], []byte("\n"))
		return fmt.Errorf("invalid JSON at line %d: %w", line, err)
	}
	return fmt.Errorf("invalid JSON: %w", err)
}

// unknownField returns the path of the first field of v that type t does
// not have, "" when none.
func unknownField(v any, t reflect.Type, at string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		fields := map[string]reflect.Type{}
		for i := 0; i < t.NumField(); i++ {
			name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
			fields[name] = t.Field(i).Type
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			p := k
			if at != "" {
				p = at + "." + k
			}
			ft, ok := fields[k]
			if !ok {
				return p
			}
			if f := unknownField(m[k], ft, p); f != "" {
				return f
			}
		}
	case reflect.Slice:
		if a, ok := v.([]any); ok {
			for i, x := range a {
				if f := unknownField(x, t.Elem(), fmt.Sprintf("%s[%d]", at, i)); f != "" {
					return f
				}
			}
		}
	}
	return ""
}

// Load reads, validates and compiles the preset file at path. Its name
// defaults to the file's base name without extension.
func Load(path string, opts *Options) (*harness.Harness, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Name == "" {
		o.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, configErr(path, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, configErr(path, err)
	}
	return Parse(path, data, &o)
}

// IsPath reports whether an --agent value names a file rather than a
// preset: it holds a path separator or ends with ".json".
func IsPath(agent string) bool {
	return strings.ContainsRune(agent, '/') || strings.ContainsRune(agent, filepath.Separator) || strings.HasSuffix(agent, ".json")
}

// Dir is the directory of the user's preset files:
// $XDG_CONFIG_HOME/outpost/agents, or ~/.config/outpost/agents. getenv is
// os.Getenv when nil. "" when neither is known.
func Dir(getenv func(string) string) string {
	if getenv == nil {
		getenv = os.Getenv
	}
	if x := getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "outpost", "agents")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "outpost", "agents")
	}
	return ""
}

// Find loads the user's preset file <dir>/<name>.json. ok is false when
// there is no such file; a file that exists and is bad is an error, and so
// is one whose "name" is not its file's (its conversations could not find
// it again).
func Find(dir, name string, opts *Options) (h *harness.Harness, ok bool, err error) {
	if dir == "" || !nameOK(name) {
		return nil, false, nil
	}
	p := filepath.Join(dir, name+".json")
	if _, err := os.Stat(p); err != nil {
		return nil, false, nil
	}
	h, err = Load(p, opts)
	if err == nil && h.Name != name {
		err = configErr(p, &FieldError{Field: "name", Msg: fmt.Sprintf("%q differs from the file's name %q: a preset in the agents directory is found by its name", h.Name, name)})
		h = nil
	}
	return h, err == nil, err
}

// List returns the names of the preset files in dir, sorted ("" or a
// missing dir: none).
func List(dir string) []string {
	if dir == "" {
		return nil
	}
	m, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	var out []string
	for _, p := range m {
		n := strings.TrimSuffix(filepath.Base(p), ".json")
		if nameOK(n) {
			out = append(out, n)
		}
	}
	return out
}
