package echo

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
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
	Error   bool            `json:"error,omitempty"`
	Attempt int             `json:"attempt,omitempty"`
	Mode    string          `json:"mode,omitempty"`
	Usage   *nativeUsage    `json:"usage,omitempty"`
}

type nativeUsage struct {
	Input     int64 `json:"input"`
	Output    int64 `json:"output"`
	CacheRead int64 `json:"cache_read"`
}

// options are the agent's command line.
type options struct {
	model, resume string
	fork, live    bool
	prompt        string   // the arguments after the flags, joined
	literal       bool     // the prompt followed "--": "-" is not standard input
	passed        []string // arguments the agent does not know
}

// errUsage is a command line the flag package already explained.
var errUsage = errors.New("usage")

// Main is the echo agent: a deterministic CLI that speaks its own JSONL
// dialect on stdout, keeps its conversation in
// $HOME/.echo/sessions/<id>.jsonl, and simulates the hard cases through
// prompt directives (see docs/presets/echo.md). It returns the exit status.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == ForkSubcommand {
		return forkMain(args[1:], stdout, stderr)
	}
	w := bufio.NewWriterSize(stdout, 64<<10)
	defer w.Flush()
	code, err := run(args, stdin, w, stderr)
	if err != nil && !errors.Is(err, errUsage) {
		fmt.Fprintln(stderr, "echo:", err)
	}
	return code
}

// run parses the command line, reads the first message, opens the
// conversation and runs its turns: one, or with --live one per message.
func run(args []string, stdin io.Reader, w *bufio.Writer, stderr io.Writer) (int, error) {
	o, err := parseArgs(args, stderr)
	if err != nil {
		return 2, err
	}
	msgs, prompt, err := o.firstMessage(stdin)
	if err != nil {
		return 2, err
	}
	dir, err := sessionDir()
	if err != nil {
		return 2, err
	}
	history, id, parent, err := o.conversation(dir)
	if err != nil {
		return 2, err
	}
	a := &agent{out: w, stderr: stderr, model: o.model, passed: o.passed}
	for {
		code, done := a.turn(dir, id, parent, history, prompt, msgs)
		if done || msgs == nil {
			return code, nil
		}
		// Live mode: the next queued message is a new turn in this process.
		next, ok := <-msgs
		if !ok {
			return code, nil
		}
		history, _ = readSession(sessionPath(dir, id))
		parent, prompt = "", next
	}
}

// parseArgs reads the flags the agent knows; the others are passed-through
// arguments (Input.ExtraArgs), which the agent reports ("#args") and
// otherwise ignores.
func parseArgs(args []string, stderr io.Writer) (options, error) {
	var o options
	known, rest, literal, passed := splitArgs(args)
	fs := flag.NewFlagSet(Subcommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.model, "model", "echo-1", "model name to report")
	fs.StringVar(&o.resume, "resume", "", "continue the conversation with this id")
	fs.BoolVar(&o.fork, "fork", false, "with --resume: continue into a new conversation")
	fs.BoolVar(&o.live, "live", false, "read user messages as JSON lines on stdin")
	if err := fs.Parse(known); err != nil {
		return o, errUsage
	}
	if o.fork && o.resume == "" {
		return o, errors.New("--fork needs --resume")
	}
	o.prompt, o.literal, o.passed = strings.Join(rest, " "), literal, passed
	return o, nil
}

// splitArgs separates the flags the agent knows (known), the prompt's
// words (rest) and the flags and values it does not know (passed). A bare
// "--" ends the flags: everything after it is the prompt, even words that
// look like flags, and whatever comes before it that the agent does not
// know is passed (literal is then true). Without "--" the prompt starts at
// the first word that is not a flag.
func splitArgs(args []string) (known, rest []string, literal bool, passed []string) {
	end := len(args)
	for i, a := range args {
		if a == "--" {
			end, rest, literal = i, args[i+1:], true
			break
		}
	}
	for i := 0; i < end; i++ {
		a := args[i]
		if !isFlag(a) {
			if !literal {
				return known, args[i:], false, passed
			}
			passed = append(passed, a)
			continue
		}
		name, hasValue := flagName(a)
		switch name {
		case "model", "resume":
			known = append(known, a)
			if !hasValue && i+1 < end {
				i++
				known = append(known, args[i])
			}
		case "fork", "live", "h", "help":
			known = append(known, a)
		default:
			passed = append(passed, a)
		}
	}
	return known, rest, literal, passed
}

func isFlag(a string) bool { return strings.HasPrefix(a, "-") && a != "-" && a != "--" }

// flagName is a flag's name without its dashes and attached value.
func flagName(a string) (name string, hasValue bool) {
	name, _, hasValue = strings.Cut(strings.TrimLeft(a, "-"), "=")
	return name, hasValue
}

// firstMessage is the first turn's prompt: the arguments; standard input
// when the prompt is a lone "-" before any "--"; with --live, the first
// JSON message on standard input, the later ones arriving on msgs.
func (o options) firstMessage(stdin io.Reader) (msgs <-chan string, prompt string, err error) {
	prompt = o.prompt
	switch {
	case o.live:
		ch := make(chan string, 16)
		go readLive(stdin, ch)
		first, ok := <-ch
		if !ok {
			return nil, "", errors.New("stdin closed before the first message")
		}
		msgs, prompt = ch, first
	case prompt == "-" && !o.literal:
		b, err := io.ReadAll(io.LimitReader(stdin, 64<<20))
		if err != nil {
			return nil, "", fmt.Errorf("reading prompt: %w", err)
		}
		prompt = string(b)
	}
	if strings.TrimSpace(prompt) == "" {
		return nil, "", errors.New("empty prompt")
	}
	return msgs, prompt, nil
}

// conversation is the history the turn continues, its id and, for a fork,
// its parent: a new conversation without --resume.
func (o options) conversation(dir string) (history []record, id, parent string, err error) {
	if o.resume == "" {
		return nil, newID(), "", nil
	}
	if history, err = loadSession(dir, o.resume); err != nil {
		return nil, "", "", err
	}
	if o.fork {
		return history, newID(), o.resume, nil
	}
	return history, o.resume, "", nil
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

func (a *agent) emit(l line) {
	b, _ := json.Marshal(l)
	a.out.Write(b)
	a.out.WriteByte('\n')
}

func (a *agent) flush() { a.out.Flush() }
