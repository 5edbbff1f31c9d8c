// Command agy is a scripted stand-in for Google's Antigravity CLI, which
// cannot be had here: it reproduces the print-mode behaviour published for
// agy 1.2.x (docs/presets/antigravity.md lists the sources) so the
// antigravity preset can be tested through the real engine. It is test
// infrastructure, built by the tests from this directory; it talks to no
// model.
//
//	agy -p PROMPT --output-format stream-json [--print-timeout D] [--model M]
//	    [--effort E] [--dangerously-skip-permissions | --mode M | --sandbox]
//	    [--conversation ID]
//
// Output (stdout, NDJSON keyed by "event", the published shapes):
//
//	{"event":"init","conversation_id":ID,"init":{"cwd":…,"model":…,"tools":[…],"permission_mode":…}}
//	{"event":"step_update","step_update":{"conversation_id":ID,"step_index":N,"state":"ACTIVE|DONE","step_type":"agent_response|tool",…}}
//	{"event":"result","result":{"conversation_id":ID,"status":"SUCCESS|ERROR","response":…,"num_turns":N,"usage":{…},"denied_actions":[…]}}
//
// Conversations live in $HOME/.gemini/antigravity-cli/brain/<id>/ with a
// transcript at .system_generated/logs/transcript.jsonl; --conversation
// with an unknown id warns on stderr and starts a new one (exit 0), as
// reported for the real CLI. Markers in the prompt script the failures:
//
//	AGY_TOOL          a run_command tool step (the command really runs)
//	AGY_QUOTA         AGY_ERROR RESOURCE_EXHAUSTED on stderr, exit 3
//	AGY_OUTAGE        AGY_ERROR UNAVAILABLE (503, retryable), exit 3
//	AGY_AUTH          AGY_ERROR UNAUTHENTICATED, exit 3
//	AGY_RESULT_ERROR  a result with status ERROR, then AGY_ERROR INTERNAL, exit 3
//	AGY_EMPTY         nothing at all, exit 0 (agy before 1.2.6 on a quota)
//	AGY_FORGET        with --conversation: acts as if the conversation were
//	                  not found (warning, new conversation, exit 0)
//	AGY_DENIED        an empty response with denied_actions, exit 0
//	AGY_ENV NAME      the answer says whether NAME is set
//	AGY_LEAK NAME     the answer and stderr quote NAME's value
//
// With AGY_STANDIN_FIXED_IDS set, ids are 00000000-0000-4000-8000-00000000000N.
package main

import (
	"bufio"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func main() { os.Exit(run(os.Args[1:])) }

type flags struct {
	prompt, outputFormat, model, effort, mode, conversation, timeout string
	print, skip, sandbox                                             bool
}

func parse(args []string) (flags, error) {
	var f flags
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		next := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("flag %s needs a value", name)
			}
			i++
			return args[i], nil
		}
		var err error
		switch name {
		case "-p", "--print", "--prompt":
			f.print = true
			f.prompt, err = next()
		case "--output-format":
			f.outputFormat, err = next()
		case "--print-timeout":
			f.timeout, err = next()
			if err == nil {
				if _, perr := time.ParseDuration(f.timeout); perr != nil {
					err = fmt.Errorf("invalid --print-timeout %q", f.timeout)
				}
			}
		case "--model":
			f.model, err = next()
		case "--effort":
			f.effort, err = next()
		case "--mode":
			f.mode, err = next()
		case "--conversation":
			f.conversation, err = next()
		case "--dangerously-skip-permissions":
			f.skip = true
		case "--sandbox":
			f.sandbox = true
		default:
			err = fmt.Errorf("unknown flag %s", a)
		}
		if err != nil {
			return f, err
		}
	}
	return f, nil
}

type out struct{ w *bufio.Writer }

func (o out) line(v any) {
	b, _ := json.Marshal(v)
	o.w.Write(b)
	o.w.WriteByte('\n')
	o.w.Flush()
}

// The published shapes, fields in the published order.
type (
	initLine struct {
		Event          string   `json:"event"`
		ConversationID string   `json:"conversation_id"`
		Init           initInfo `json:"init"`
	}
	initInfo struct {
		Cwd            string   `json:"cwd"`
		Model          string   `json:"model"`
		Tools          []string `json:"tools"`
		PermissionMode string   `json:"permission_mode"`
	}
	stepLine struct {
		Event      string     `json:"event"`
		StepUpdate stepUpdate `json:"step_update"`
	}
	stepUpdate struct {
		ConversationID string    `json:"conversation_id"`
		StepIndex      int       `json:"step_index"`
		State          string    `json:"state"`
		StepType       string    `json:"step_type"`
		TextDelta      string    `json:"text_delta,omitempty"`
		ToolName       string    `json:"tool_name,omitempty"`
		ToolInfo       *toolInfo `json:"tool_info,omitempty"`
	}
	toolInfo struct {
		Name       string         `json:"name"`
		Parameters map[string]any `json:"parameters"`
		Output     string         `json:"output,omitempty"`
		Error      any            `json:"error,omitempty"`
	}
	resultLine struct {
		Event  string     `json:"event"`
		Result resultInfo `json:"result"`
	}
	resultInfo struct {
		ConversationID string `json:"conversation_id"`
		Status         string `json:"status"`
		Response       string `json:"response"`
		Error          any    `json:"error,omitempty"`
		NumTurns       int    `json:"num_turns"`
		Usage          *usage `json:"usage,omitempty"`
		DeniedActions  []any  `json:"denied_actions,omitempty"`
	}
	usage struct {
		InputTokens     int `json:"input_tokens"`
		OutputTokens    int `json:"output_tokens"`
		CacheReadTokens int `json:"cache_read_tokens"`
	}
	agyErr struct {
		Status     string `json:"status"`
		ErrorCode  int    `json:"error_code"`
		Retryable  bool   `json:"retryable"`
		ErrorID    string `json:"error_id"`
		ShortError string `json:"short_error"`
	}
	// errInfo is result.error: its published shape is unknown; this
	// stand-in uses the AGY_ERROR fields.
	errInfo struct {
		Status     string `json:"status"`
		ErrorCode  int    `json:"error_code"`
		ShortError string `json:"short_error"`
	}
)

// publishedUsage is the usage of the published sample result.
var publishedUsage = &usage{InputTokens: 200, OutputTokens: 30, CacheReadTokens: 1000}

type transcriptEntry struct {
	Role string `json:"role"`
	Text string `json:"text"`
}

func run(args []string) int {
	f, err := parse(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		return 2
	}
	if !f.print || f.outputFormat != "stream-json" {
		fmt.Fprintln(os.Stderr, "Error: this stand-in only does print mode with --output-format stream-json")
		return 2
	}
	if strings.Contains(f.prompt, "AGY_EMPTY") {
		return 0
	}
	home, err := os.UserHomeDir()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		return 1
	}
	state := filepath.Join(home, ".gemini", "antigravity-cli")
	id := f.conversation
	var history []transcriptEntry
	if id != "" {
		history, err = readTranscript(filepath.Join(state, "brain", id))
		if err != nil || strings.Contains(f.prompt, "AGY_FORGET") {
			fmt.Fprintf(os.Stderr, "Warning: conversation %s not found; starting a new conversation\n", id)
			id = ""
		}
	}
	if id == "" {
		id = newID()
	}
	turn := 1
	for _, e := range history {
		if e.Role == "user" {
			turn++
		}
	}
	wd, _ := os.Getwd()
	model := f.model
	if model == "" {
		model = "gemini-3.7-flash-medium"
	}
	perm := "default"
	switch {
	case f.skip:
		perm = "bypassPermissions"
	case f.mode != "":
		perm = f.mode
	case f.sandbox:
		perm = "sandbox"
	}
	o := out{bufio.NewWriter(os.Stdout)}
	o.line(initLine{Event: "init", ConversationID: id, Init: initInfo{Cwd: wd, Model: model, Tools: []string{"run_command", "view_file", "write_to_file"}, PermissionMode: perm}})
	history = append(history, transcriptEntry{Role: "user", Text: f.prompt})
	if err := writeTranscript(state, id, wd, history); err != nil {
		fmt.Fprintln(os.Stderr, "Error: saving the conversation:", err)
		return 1
	}
	step := 0
	emitStep := func(su stepUpdate) {
		su.ConversationID, su.StepIndex = id, step
		o.line(stepLine{Event: "step_update", StepUpdate: su})
	}
	agyError := func(status string, code int, retryable bool, short string) int {
		b, _ := json.Marshal(agyErr{Status: status, ErrorCode: code, Retryable: retryable, ErrorID: newID(), ShortError: short})
		fmt.Fprintf(os.Stderr, "AGY_ERROR: %s\n", b)
		return 3
	}
	p := f.prompt
	switch {
	case strings.Contains(p, "AGY_QUOTA"):
		return agyError("RESOURCE_EXHAUSTED", 429, false, "RESOURCE_EXHAUSTED (code 429): Individual quota reached. Contact your administrator to enable overages. Resets in 146h14m2s.")
	case strings.Contains(p, "AGY_OUTAGE"):
		return agyError("UNAVAILABLE", 503, true, "UNAVAILABLE (code 503): The service is currently unavailable.")
	case strings.Contains(p, "AGY_AUTH"):
		return agyError("UNAUTHENTICATED", 401, false, "authentication required")
	case strings.Contains(p, "AGY_RESULT_ERROR"):
		o.line(resultLine{Event: "result", Result: resultInfo{ConversationID: id, Status: "ERROR",
			Error: errInfo{Status: "INTERNAL", ErrorCode: 500, ShortError: "INTERNAL (code 500): Internal error encountered."}, NumTurns: turn}})
		return agyError("INTERNAL", 500, true, "INTERNAL (code 500): Internal error encountered.")
	case strings.Contains(p, "AGY_DENIED"):
		o.line(resultLine{Event: "result", Result: resultInfo{ConversationID: id, Status: "SUCCESS", NumTurns: turn, Usage: publishedUsage,
			DeniedActions: []any{map[string]any{"tool_name": "run_command", "parameters": map[string]any{"CommandLine": "rm -rf build"}}}}})
		return 0
	}
	if strings.Contains(p, "AGY_TOOL") {
		params := map[string]any{"CommandLine": "echo hi"}
		emitStep(stepUpdate{State: "ACTIVE", StepType: "tool", ToolName: "run_command", ToolInfo: &toolInfo{Name: "run_command", Parameters: params}})
		output, err := exec.Command("sh", "-c", "echo hi").Output()
		info := &toolInfo{Name: "run_command", Parameters: params, Output: string(output)}
		if err != nil {
			info.Error = err.Error()
		}
		emitStep(stepUpdate{State: "DONE", StepType: "tool", ToolName: "run_command", ToolInfo: info})
		step++
	}
	response := fmt.Sprintf("agy: %s (turn %d)", firstLine(p), turn)
	for rest := p; strings.Contains(rest, "AGY_ENV "); {
		rest = rest[strings.Index(rest, "AGY_ENV ")+8:]
		name := firstWord(rest)
		if v, ok := os.LookupEnv(name); ok {
			response += fmt.Sprintf("\n%s is set (%d bytes)", name, len(v))
		} else {
			response += "\n" + name + " is not set"
		}
	}
	if i := strings.Index(p, "AGY_LEAK "); i >= 0 {
		name := firstWord(p[i+9:])
		response += "\n" + name + "=" + os.Getenv(name)
		fmt.Fprintf(os.Stderr, "debug: %s=%s\n", name, os.Getenv(name))
	}
	response += "\n"
	half := len(response) / 2
	emitStep(stepUpdate{State: "ACTIVE", StepType: "agent_response", TextDelta: response[:half]})
	emitStep(stepUpdate{State: "ACTIVE", StepType: "agent_response", TextDelta: response[half:]})
	emitStep(stepUpdate{State: "DONE", StepType: "agent_response"})
	history = append(history, transcriptEntry{Role: "assistant", Text: response})
	if err := writeTranscript(state, id, wd, history); err != nil {
		fmt.Fprintln(os.Stderr, "Error: saving the conversation:", err)
		return 1
	}
	o.line(resultLine{Event: "result", Result: resultInfo{ConversationID: id, Status: "SUCCESS", Response: response, NumTurns: turn, Usage: publishedUsage}})
	return 0
}

func transcriptPath(dir string) string {
	return filepath.Join(dir, ".system_generated", "logs", "transcript.jsonl")
}

func readTranscript(dir string) ([]transcriptEntry, error) {
	b, err := os.ReadFile(transcriptPath(dir))
	if err != nil {
		return nil, err
	}
	var out []transcriptEntry
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		var e transcriptEntry
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func writeTranscript(state, id, wd string, entries []transcriptEntry) error {
	p := transcriptPath(filepath.Join(state, "brain", id))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	var b strings.Builder
	for _, e := range entries {
		j, _ := json.Marshal(e)
		b.Write(j)
		b.WriteByte('\n')
	}
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		return err
	}
	// The cwd → latest conversation map (not part of a conversation).
	cache := filepath.Join(state, "cache")
	if err := os.MkdirAll(cache, 0o700); err != nil {
		return err
	}
	m, _ := json.Marshal(map[string]string{wd: id})
	return os.WriteFile(filepath.Join(cache, "last_conversations.json"), m, 0o600)
}

// idSeq counts the ids made when AGY_STANDIN_FIXED_IDS is set, which
// makes the recorded golden files reproducible.
var idSeq int

func newID() string {
	if os.Getenv("AGY_STANDIN_FIXED_IDS") != "" {
		idSeq++
		return fmt.Sprintf("00000000-0000-4000-8000-%012d", idSeq)
	}
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
