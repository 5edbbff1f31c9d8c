package echo

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Subcommand is the argument that makes an outpost binary (or a test
// binary that calls MaybeRun) act as the echo agent.
const Subcommand = "echo-agent"

// MaybeRun runs the echo agent and exits when os.Args asks for it
// (os.Args[1] == Subcommand). main functions and TestMain call it first, so
// the binary can serve as its own agent.
func MaybeRun() {
	if len(os.Args) > 1 && os.Args[1] == Subcommand {
		os.Exit(Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
}

// line is one native output line of the echo agent.
type line struct {
	Type    string          `json:"type"`
	Session string          `json:"session,omitempty"`
	Parent  string          `json:"parent,omitempty"`
	Model   string          `json:"model,omitempty"`
	Turn    int             `json:"turn,omitempty"`
	ID      string          `json:"id,omitempty"`
	Name    string          `json:"name,omitempty"`
	Text    string          `json:"text,omitempty"`
	Input   json.RawMessage `json:"input,omitempty"`
	Output  string          `json:"output,omitempty"`
	Attempt int             `json:"attempt,omitempty"`
	Mode    string          `json:"mode,omitempty"`
	Usage   *nativeUsage    `json:"usage,omitempty"`
}

type nativeUsage struct {
	Input     int64 `json:"input"`
	Output    int64 `json:"output"`
	CacheRead int64 `json:"cache_read"`
}

// record is one line of the session file.
type record struct {
	Role   string `json:"role"` // meta, user, assistant
	Text   string `json:"text,omitempty"`
	ID     string `json:"id,omitempty"`
	Parent string `json:"parent,omitempty"`
}

// Main is the echo agent: a deterministic CLI that speaks its own JSONL
// dialect on stdout, keeps its conversation in
// $HOME/.echo/sessions/<id>.jsonl, and simulates the hard cases through
// prompt directives (see docs/presets/echo.md). It returns the exit status.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == ForkSubcommand {
		return forkMain(args[1:], stdout, stderr)
	}
	// Flags the agent does not know are passed-through arguments
	// (Input.ExtraArgs): the agent reports them ("#args") and goes on.
	args, passed := splitArgs(args)
	fs := flag.NewFlagSet(Subcommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	model := fs.String("model", "echo-1", "model name to report")
	resume := fs.String("resume", "", "continue the conversation with this id")
	fork := fs.Bool("fork", false, "with --resume: continue into a new conversation")
	live := fs.Bool("live", false, "read user messages as JSON lines on stdin")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *fork && *resume == "" {
		fmt.Fprintln(stderr, "echo: --fork needs --resume")
		return 2
	}
	prompt := strings.Join(fs.Args(), " ")
	w := bufio.NewWriterSize(stdout, 64<<10)
	defer w.Flush()
	a := &agent{out: w, stderr: stderr, model: *model, passed: passed}

	var msgs <-chan string
	if *live {
		ch := make(chan string, 16)
		msgs = ch
		go readLive(stdin, ch)
		first, ok := <-ch
		if !ok {
			fmt.Fprintln(stderr, "echo: stdin closed before the first message")
			return 2
		}
		prompt = first
	} else if prompt == "-" {
		b, err := io.ReadAll(io.LimitReader(stdin, 64<<20))
		if err != nil {
			fmt.Fprintln(stderr, "echo: reading prompt:", err)
			return 2
		}
		prompt = string(b)
	}
	if strings.TrimSpace(prompt) == "" {
		fmt.Fprintln(stderr, "echo: empty prompt")
		return 2
	}

	home, err := os.UserHomeDir()
	if err != nil {
		fmt.Fprintln(stderr, "echo: no home directory:", err)
		return 2
	}
	dir := filepath.Join(home, ".echo", "sessions")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		fmt.Fprintln(stderr, "echo:", err)
		return 2
	}
	var history []record
	id, parent := newID(), ""
	if *resume != "" {
		if !validID(*resume) {
			fmt.Fprintf(stderr, "echo: invalid conversation id %q\n", *resume)
			return 2
		}
		history, err = readSession(filepath.Join(dir, *resume+".jsonl"))
		if err != nil {
			fmt.Fprintf(stderr, "echo: no conversation found with id %s\n", *resume)
			return 2
		}
		if *fork {
			parent = *resume
		} else {
			id = *resume
		}
	}
	for {
		code, done := a.turn(dir, id, parent, history, prompt, msgs)
		if done || msgs == nil {
			return code
		}
		// Live mode: the next queued message is a new turn in this process.
		next, ok := <-msgs
		if !ok {
			return code
		}
		history, _ = readSession(filepath.Join(dir, id+".jsonl"))
		parent, prompt = "", next
	}
}

func readLive(r io.Reader, ch chan<- string) {
	defer close(ch)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var m struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m.Type != "user" {
			// Like the real CLIs, a line that is not a valid message is fatal.
			fmt.Fprintf(os.Stderr, "echo: invalid input line (%d bytes)\n", len(sc.Bytes()))
			os.Exit(4)
		}
		ch <- m.Text
	}
}

type agent struct {
	out    *bufio.Writer
	stderr io.Writer
	model  string
	passed []string // arguments the agent does not know
}

// ForkSubcommand is the echo agent's separate fork command:
// `echo-agent fork PARENT` copies conversation PARENT into a new one and
// prints the new id. The echo preset forks with --resume --fork; a preset
// with a Fork hook (Fork) uses this instead.
const ForkSubcommand = "fork"

func forkMain(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || !validID(args[0]) {
		fmt.Fprintln(stderr, "echo: usage: fork PARENT-ID")
		return 2
	}
	home, err := os.UserHomeDir()
	if err != nil {
		fmt.Fprintln(stderr, "echo: no home directory:", err)
		return 2
	}
	dir := filepath.Join(home, ".echo", "sessions")
	history, err := readSession(filepath.Join(dir, args[0]+".jsonl"))
	if err != nil {
		fmt.Fprintf(stderr, "echo: no conversation found with id %s\n", args[0])
		return 2
	}
	id := newID()
	recs := append([]record{{Role: "meta", ID: id, Parent: args[0]}}, withoutMeta(history)...)
	if err := writeSession(filepath.Join(dir, id+".jsonl"), recs); err != nil {
		fmt.Fprintln(stderr, "echo: saving session:", err)
		return 5
	}
	fmt.Fprintln(stdout, id)
	return 0
}

// splitArgs separates the flags the agent knows (and everything from a
// bare "--" or the first non-flag on) from unknown flags.
func splitArgs(args []string) (known, passed []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			return append(known, args[i:]...), passed
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch name {
		case "model", "resume":
			known = append(known, a)
			if !hasValue && i+1 < len(args) {
				i++
				known = append(known, args[i])
			}
		case "fork", "live", "h", "help":
			known = append(known, a)
		default:
			passed = append(passed, a)
		}
	}
	return known, passed
}

func (a *agent) emit(l line) {
	b, _ := json.Marshal(l)
	a.out.Write(b)
	a.out.WriteByte('\n')
}

func (a *agent) flush() { a.out.Flush() }

// turn runs one user turn. done reports that the process must end now
// (a failure directive), with the exit code.
func (a *agent) turn(dir, id, parent string, history []record, prompt string, msgs <-chan string) (int, bool) {
	turn := 1
	var histWords int64
	for _, r := range history {
		if r.Role == "user" {
			turn++
		}
		if r.Role == "user" || r.Role == "assistant" {
			histWords += words(r.Text)
		}
	}
	// Like the real CLIs, the user's message is on disk before the agent
	// works, so a turn stopped midway can be resumed.
	recs := history
	if len(recs) == 0 || parent != "" {
		recs = append([]record{{Role: "meta", ID: id, Parent: parent}}, withoutMeta(history)...)
	}
	recs = append(recs, record{Role: "user", Text: prompt})
	path := filepath.Join(dir, id+".jsonl")
	if err := writeSession(path, recs); err != nil {
		fmt.Fprintln(a.stderr, "echo: saving session:", err)
		return 5, true
	}
	a.emit(line{Type: "init", Session: id, Parent: parent, Model: a.model, Turn: turn})
	a.flush()

	reply := fmt.Sprintf("echo: %s (turn %d)", prompt, turn)
	var extra []string
	switch {
	case strings.Contains(prompt, "#quota"):
		reset := time.Now().UTC().Add(time.Hour).Truncate(time.Second).Format(time.RFC3339)
		fmt.Fprintf(a.stderr, "echo: usage limit reached for this key; it resets at %s\n", reset)
		return 1, true
	case strings.Contains(prompt, "#outage"):
		fmt.Fprintln(a.stderr, "echo: model service unavailable: 503 overloaded (connection reset by peer)")
		return 1, true
	case strings.Contains(prompt, "#crash"):
		fmt.Fprintln(a.stderr, "echo: simulated crash")
		return 3, true
	case strings.Contains(prompt, "#hang"):
		a.flush()
		// Sleep rather than block on nothing: with no timer pending, the
		// Go runtime may call a lone blocked goroutine a deadlock and exit.
		for {
			time.Sleep(time.Hour)
		}
	}
	if strings.Contains(prompt, "#retryforever") {
		// Like a CLI with no network: retry notices and nothing else.
		for attempt := 1; ; attempt++ {
			a.emit(line{Type: "retry", Attempt: attempt, Text: "Reconnecting... waiting for network, retrying in 20ms"})
			a.flush()
			time.Sleep(20 * time.Millisecond)
		}
	}
	if strings.Contains(prompt, "#retry") {
		fmt.Fprintln(a.stderr, "echo: rate limited (429), retrying in 10ms (attempt 1 of 3)")
		a.emit(line{Type: "retry", Attempt: 1, Text: "rate limited (429), retrying in 10ms (attempt 1 of 3)"})
		a.flush()
		time.Sleep(10 * time.Millisecond)
	}
	if strings.Contains(prompt, "#tool") {
		a.emit(line{Type: "tool_call", ID: "tool-1", Name: "shell", Input: json.RawMessage(`{"command":"echo hi"}`)})
		a.emit(line{Type: "tool_result", ID: "tool-1", Output: "hi\n"})
	}
	if strings.Contains(prompt, "#badlines") {
		a.out.WriteString("{\"type\":\"text\",\"text\":\n")
		a.out.WriteString("not json at all\n")
		a.out.Write([]byte{'{', '"', 't', 'y', 'p', 'e', '"', ':', '"', 't', 'e', 'x', 't', '"', ',', '"', 't', 'e', 'x', 't', '"', ':', '"', 0xff, 0xfe, '"', '}', '\n'})
		a.out.WriteString("{\"type\":\"from-the-future\",\"x\":1}\n")
	}
	if i := strings.Index(prompt, "#env "); i >= 0 {
		name := firstWord(prompt[i+5:])
		if v, ok := os.LookupEnv(name); ok {
			extra = append(extra, fmt.Sprintf("%s is set (%d bytes)", name, len(v)))
		} else {
			extra = append(extra, name+" is not set")
		}
	}
	if strings.Contains(prompt, "#args") {
		if len(a.passed) == 0 {
			extra = append(extra, "args: (none)")
		} else {
			extra = append(extra, "args: "+strings.Join(a.passed, " "))
		}
	}
	if i := strings.Index(prompt, "#leak "); i >= 0 {
		name := firstWord(prompt[i+6:])
		v := os.Getenv(name)
		extra = append(extra, name+"="+v)
		fmt.Fprintf(a.stderr, "echo: debug %s=%s\n", name, v)
	}
	if strings.Contains(prompt, "#big") {
		a.emit(line{Type: "text", Text: strings.Repeat("x", 8<<20)})
	}
	if strings.Contains(prompt, "#slow") {
		steps := 100
		if i := strings.Index(prompt, "#slow="); i >= 0 {
			if n, err := strconv.Atoi(firstWord(prompt[i+6:])); err == nil && n > 0 {
				steps = n
			}
		}
	slow:
		for i := 0; i < steps; i++ {
			a.emit(line{Type: "delta", ID: "m1", Text: fmt.Sprintf("step %d ", i+1)})
			a.flush()
			select {
			case m, ok := <-msgs:
				if !ok {
					msgs = nil
					continue
				}
				// A message that arrives while the agent works is seen
				// within this turn, which then wraps up.
				a.emit(line{Type: "steer", Mode: "injected", Text: m})
				extra = append(extra, "steered: "+m)
				break slow
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	if len(extra) > 0 {
		reply += "\n" + strings.Join(extra, "\n")
	}
	for _, op := range fileOps(prompt) {
		id := fmt.Sprintf("tool-%d", turn)
		a.emit(line{Type: "tool_call", ID: id, Name: "shell", Input: json.RawMessage(op.input)})
		a.emit(line{Type: "tool_result", ID: id, Output: op.run()})
	}
	if block, ok := jsonAnswer(history, prompt, turn); ok {
		// The prompt on a line of its own: one that ends with a fence
		// (an instruction restating a schema) must not swallow the block.
		reply = fmt.Sprintf("echo (turn %d):\n%s", turn, prompt)
		if len(extra) > 0 {
			reply += "\n" + strings.Join(extra, "\n")
		}
		reply += "\n\n```json\n" + block + "\n```"
	}
	a.emit(line{Type: "text", ID: "m1", Text: reply})
	a.flush()

	recs = append(recs, record{Role: "assistant", Text: reply})
	if err := writeSession(path, recs); err != nil {
		fmt.Fprintln(a.stderr, "echo: saving session:", err)
		return 5, true
	}
	if strings.Contains(prompt, "#nofinish") {
		return 0, true
	}
	a.emit(line{Type: "done", Text: reply, Usage: &nativeUsage{Input: words(prompt), Output: words(reply), CacheRead: histWords}})
	a.flush()
	return 0, false
}

// jsonAnswer is the structured answer the JSON directives ask for, read
// from the whole conversation (a repair turn's prompt holds none):
// #json=<value> (to the end of its line) answers value; #badjson answers a
// block that is not JSON; #json-after=N answers a broken block for the
// first N turns, then the #json value (default {"ok":true}).
func jsonAnswer(history []record, prompt string, turn int) (string, bool) {
	all := prompt
	for _, r := range history {
		if r.Role == "user" {
			all = r.Text + "\n" + all
		}
	}
	value, hasValue := "", false
	if i := strings.Index(all, "#json="); i >= 0 {
		value, _, _ = strings.Cut(all[i+len("#json="):], "\n")
		value, hasValue = strings.TrimSpace(value), true
	}
	after := -1
	if i := strings.Index(all, "#json-after="); i >= 0 {
		if n, err := strconv.Atoi(firstWord(all[i+len("#json-after="):])); err == nil && n >= 0 {
			after = n
		}
	}
	switch {
	case strings.Contains(all, "#badjson"), after >= 0 && turn <= after:
		return `{"broken": `, true
	case after >= 0 && !hasValue:
		return `{"ok":true}`, true
	}
	return value, hasValue
}

// fileOp is a file change the agent makes through its shell tool.
type fileOp struct {
	input string
	run   func() string
}

// fileOps are the #write=PATH, #append=PATH and #rm=PATH directives of
// prompt, relative to the working directory, in order.
func fileOps(prompt string) []fileOp {
	var ops []fileOp
	for _, f := range strings.Fields(prompt) {
		verb, name, ok := strings.Cut(f, "=")
		if !ok || name == "" {
			continue
		}
		cmd, _ := json.Marshal(map[string]string{"command": strings.TrimPrefix(verb, "#") + " " + name})
		switch verb {
		case "#write":
			ops = append(ops, fileOp{string(cmd), func() string {
				if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
					return err.Error()
				}
				return errText(os.WriteFile(name, []byte("written by echo\n"), 0o644))
			}})
		case "#append":
			ops = append(ops, fileOp{string(cmd), func() string {
				f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
				if err != nil {
					return err.Error()
				}
				_, err = f.WriteString("appended by echo\n")
				return errText(errors.Join(err, f.Close()))
			}})
		case "#rm":
			ops = append(ops, fileOp{string(cmd), func() string { return errText(os.Remove(name)) }})
		}
	}
	return ops
}

func errText(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

func withoutMeta(rs []record) []record {
	out := make([]record, 0, len(rs))
	for _, r := range rs {
		if r.Role != "meta" {
			out = append(out, r)
		}
	}
	return out
}

func firstWord(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return ""
}

func words(s string) int64 { return int64(len(strings.Fields(s))) }

func newID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func validID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i, c := range s {
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !strings.ContainsRune("0123456789abcdef", c) {
				return false
			}
		}
	}
	return true
}

func readSession(path string) ([]record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []record
	for _, l := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		var r record
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			return nil, fmt.Errorf("corrupt session file: %w", err)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, errors.New("empty session file")
	}
	return out, nil
}

func writeSession(path string, recs []record) error {
	var b strings.Builder
	for _, r := range recs {
		j, _ := json.Marshal(r)
		b.Write(j)
		b.WriteByte('\n')
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
