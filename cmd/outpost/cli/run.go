package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/output"
	"github.com/outposthq/outpost/sandbox"
)

// ResultLine is the last line of `outpost run --json`: the wire contract
// documented in docs/events.md, shared with the HTTP API.
type ResultLine = engine.ResultLine

// ErrorJSON is an error on the wire.
type ErrorJSON = outpost.ErrorJSON

// ErrorToJSON converts any error to its wire form.
func ErrorToJSON(err error) *ErrorJSON { return outpost.ToJSON(err) }

type runFlags struct {
	agent, sandbox, model, workdir, resume, fork, image string
	workspace, checkpoint                               string
	checkpointInclude                                   []string
	command, trace, secrets, egress                     string
	schema, protocol                                    string
	repairs                                             int
	maxTokens, budget                                   int64
	timeout, inactivity, retryBound, wait               time.Duration
	env, set, options, egressAllow                      []string
	json, raw, steerStdin, verbose                      bool
	agentSet                                            bool      // --agent was given
	extra                                               []string  // the arguments after --
	started                                             time.Time // when the command began
}

func (a *app) runCmd() *cobra.Command {
	var f runFlags
	c := &cobra.Command{
		Use:   "run [flags] PROMPT [-- ARGS...]",
		Short: "Run one turn of an agent in a sandbox",
		Long: `Run one turn of an agent in a sandbox and stream what it does.

PROMPT "-" reads the prompt from standard input. Without --json the turn is
shown for a person; with --json every event is one JSON object per line and
the last line is {"type":"result",...} (docs/events.md). The exit status
says how the turn ended (docs/errors.md).

ARGS after -- pass through to the agent's CLI; each preset refuses the
flags outpost controls. --agent takes a preset name, or a preset file
(docs/presets/custom.md): a path, or NAME for
$XDG_CONFIG_HOME/outpost/agents/NAME.json.`,
		Example: `  outpost run "hello"
  outpost run --json --resume c01abc "and now?"
  outpost run --agent echo --timeout 30s --env ECHO_API_KEY=... "#env ECHO_API_KEY"
  outpost run --agent aider "add a test" -- --no-auto-commits
  outpost run --agent ./mytool.json --trace turn.jsonl "hello"`,
		Args: func(c *cobra.Command, args []string) error {
			n := len(args)
			if d := c.ArgsLenAtDash(); d >= 0 {
				n = d
			}
			if n != 1 {
				return fmt.Errorf("accepts one PROMPT before --, received %d", n)
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			f.started = time.Now()
			f.agentSet = c.Flags().Changed("agent")
			if d := c.ArgsLenAtDash(); d >= 0 {
				f.extra = args[d:]
			}
			return a.run(c.Context(), f, args[0])
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.agent, "agent", "echo", "agent preset ("+strings.Join(presets.Names(), ", ")+"); with --resume or --fork, default the conversation's")
	fl.StringVar(&f.sandbox, "sandbox", "local", "sandbox provider ("+strings.Join(sandbox.Providers(), ", ")+")")
	fl.StringVar(&f.model, "model", "", "model to ask the agent for (default: the CLI's)")
	fl.StringVar(&f.workdir, "workdir", "", "working directory (default: the current one)")
	fl.StringVar(&f.resume, "resume", "", "continue the conversation with this id")
	fl.StringVar(&f.fork, "fork", "", "continue the conversation with this id into a new one; ID@TURN forks at that turn, its memory and (with --workspace) its files")
	fl.StringVar(&f.workspace, "workspace", "", "run in this directory (new or empty) instead of --workdir, holding the files of the checkpoint --resume or --fork continues; new: a fresh directory of outpost's own (docs/workspaces.md)")
	fl.StringVar(&f.checkpoint, "checkpoint", "on", "record the workspace as a git commit after every turn (on) or not (off)")
	fl.StringArrayVar(&f.checkpointInclude, "checkpoint-include", nil, "keep in checkpoints these paths .gitignore ignores (gitignore patterns); repeatable")
	fl.DurationVar(&f.wait, "wait", 0, "with --resume: wait up to this long for a conversation another turn holds (default: fail at once, exit status 75)")
	fl.DurationVar(&f.timeout, "timeout", 0, "stop the turn after this long (exit status 124)")
	fl.DurationVar(&f.inactivity, "inactivity", 0, "stop the turn when the agent prints nothing for this long (default: the preset's)")
	fl.StringArrayVar(&f.env, "env", nil, "variable for the agent, NAME=VALUE or NAME (taken from the environment); repeatable")
	fl.StringArrayVar(&f.set, "set", nil, "sandbox provider setting KEY=VALUE; repeatable")
	fl.StringVar(&f.image, "image", "", "container image (docker sandbox)")
	fl.StringArrayVar(&f.options, "option", nil, "agent preset option KEY=VALUE; repeatable")
	fl.BoolVar(&f.json, "json", false, "print events as JSON lines, then a result line")
	fl.BoolVar(&f.raw, "raw", false, "with --json: include each event's native line")
	fl.BoolVar(&f.steerStdin, "steer-stdin", false, "read messages for the running turn from standard input, one per line")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "show the agent's standard error")
	fl.StringVar(&f.schema, "schema", "", "JSON Schema FILE (or - for standard input) the answer must match; the validated value is printed (docs/output.md)")
	fl.IntVar(&f.repairs, "repairs", engine.DefaultRepairs, "response repair attempts for an answer that does not match (0 disables)")
	fl.StringVar(&f.protocol, "protocol", "", "ask for the result/handoff block: handoff")
	fl.StringVar(&f.command, "command", "", "run this executable in place of the preset's program (no bootstrap)")
	fl.StringVar(&f.trace, "trace", "", "append a JSON-lines trace of the turn to this file (steps, events, classification; redacted)")
	fl.Int64Var(&f.maxTokens, "max-tokens", 0, "stop the turn once its model calls spent this many tokens, repairs included (exit status 11; docs/metering.md)")
	fl.Int64Var(&f.budget, "budget", 0, "the conversation's token budget over all its turns, kept with it (exit status 11 once spent; docs/metering.md)")
	fl.DurationVar(&f.retryBound, "retry-bound", 0, "stop the turn when the agent only retries for this long (default: the preset's; negative: never)")
	keylessFlags(fl, &f.secrets, &f.egress, &f.egressAllow)
	c.MarkFlagsMutuallyExclusive("resume", "fork")
	c.MarkFlagsMutuallyExclusive("schema", "protocol")
	return c
}

// keylessFlags are the credential gateway's flags (docs/security.md).
func keylessFlags(fl *pflag.FlagSet, secrets, egress *string, allow *[]string) {
	fl.StringVar(secrets, "secrets", "", "how the agent's API keys reach it: gateway (a token for the credential gateway; the default where the preset can) or env")
	fl.StringVar(egress, "egress", "", "the sandbox's network: gateway (only the gateway and --egress-allow; the default where the provider enforces it) or open")
	fl.Var((*allowFlag)(allow), "egress-allow", "hosts the agent reaches through the gateway's proxy in egress mode gateway: host, *.domain, each with :port; comma-separated, repeatable; 'HOST [METHODS] [PATH...]' (with spaces: one entry) allows only those methods and paths")
}

// allowFlag is --egress-allow's value: a value without spaces is a
// comma-separated list of hosts; one with spaces is one entry with
// method or path rules ("github.com GET,POST /org/repo.git/info/refs"),
// whose methods are comma-separated.
type allowFlag []string

func (a *allowFlag) Set(v string) error {
	if strings.ContainsAny(strings.TrimSpace(v), " \t") {
		*a = append(*a, v)
		return nil
	}
	*a = append(*a, strings.Split(v, ",")...)
	return nil
}

func (a *allowFlag) String() string { return strings.Join(*a, ",") }

func (a *allowFlag) Type() string { return "entries" }

func parsePairs(list []string, what string, fromEnv func(string) (string, bool)) (map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range list {
		k, v, ok := strings.Cut(kv, "=")
		if k == "" {
			return nil, usageError{fmt.Errorf("%s %q: want NAME=VALUE", what, kv)}
		}
		if !ok {
			if fromEnv == nil {
				return nil, usageError{fmt.Errorf("%s %q: want NAME=VALUE", what, kv)}
			}
			if v, ok = fromEnv(k); !ok {
				return nil, usageError{fmt.Errorf("%s %s: not set in the environment", what, k)}
			}
		}
		m[k] = v
	}
	return m, nil
}

func (a *app) run(ctx context.Context, f runFlags, prompt string) error {
	if f.started.IsZero() {
		f.started = time.Now()
	}
	if _, err := lookupAgent(f.agent); err != nil {
		return a.fail(f, nil, err)
	}
	prompt, schema, err := a.runInputs(f, prompt)
	if err != nil {
		return a.failInput(f, err)
	}
	if f.maxTokens < 0 || f.budget < 0 {
		return usageError{errors.New("--max-tokens and --budget take a positive number of tokens")}
	}
	if f.wait < 0 || (f.wait > 0 && f.resume == "") {
		return usageError{errors.New("--wait takes a positive duration and applies to --resume (a fork never waits)")}
	}
	turn, settings, err := runTurn(f, prompt, schema)
	if err != nil {
		return err
	}
	provider, err := openProvider(f.sandbox, settings)
	if err != nil {
		return a.fail(f, nil, err)
	}
	defer provider.Close()
	store, err := a.store()
	if err != nil {
		return a.fail(f, nil, err)
	}
	if err := a.continued(ctx, store, &f, &turn); err != nil {
		return a.fail(f, nil, err)
	}
	out := a.eventWriter(f)
	opts := &engine.RunOptions{Provider: provider, Store: store, Spool: a.spool, OnEvent: out.event, Raw: f.raw && f.json,
		Secrets: f.secrets, Egress: f.egress, EgressAllow: f.egressAllow, MaxTokens: f.maxTokens, Budget: f.budget,
		Checkpoint: f.checkpoint, CheckpointInclude: f.checkpointInclude}
	defer a.tracing(ctx)()
	if f.trace != "" {
		tf, err := openTrace(f.trace)
		if err != nil {
			return a.fail(f, nil, err)
		}
		defer tf.Close()
		opts.Logger = traceLogger(tf)
	}
	if f.verbose {
		opts.Stderr = a.stderr
	}
	if f.steerStdin {
		opts.Steer = a.steer(ctx)
	}
	res, err := engine.Run(ctx, turn, opts)
	return a.finish(out, f, res, err)
}

// failInput reports an error of the command's inputs: the command line's
// own as a usage error, the others as the turn's.
func (a *app) failInput(f runFlags, err error) error {
	var ue usageError
	if errors.As(err, &ue) {
		return err
	}
	return a.fail(f, nil, err)
}

// runInputs reads what may come from standard input or a file: the
// prompt ("-") and the --schema document. Only one may read stdin.
func (a *app) runInputs(f runFlags, prompt string) (string, []byte, error) {
	if prompt == "-" && f.schema == "-" {
		return "", nil, usageError{errors.New("the prompt and --schema cannot both come from standard input")}
	}
	if (prompt == "-" || f.schema == "-") && f.steerStdin {
		what := "the prompt"
		if f.schema == "-" {
			what = "--schema"
		}
		return "", nil, usageError{fmt.Errorf("--steer-stdin reads standard input: %s cannot come from it too", what)}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--timeout", f.timeout}, {"--inactivity", f.inactivity}} {
		if d.v < 0 {
			// The library's negative Inactivity turns the watchdog off; a
			// person asking for a negative bound has mistyped one.
			return "", nil, outpost.Errorf(outpost.Configuration, "run", "%s %s: want a duration above zero (0: the default)", d.flag, d.v)
		}
	}
	var schema []byte
	if f.schema != "" {
		b, err := readSchema(a.stdin, f.schema)
		if err != nil {
			return "", nil, err
		}
		schema = b
	}
	if prompt == "-" {
		b, err := io.ReadAll(io.LimitReader(a.stdin, 64<<20))
		if err != nil {
			return "", nil, outpost.Wrap(outpost.Configuration, "prompt", err)
		}
		// The newline that ends a file or an echo is no part of the
		// prompt; one trailing newline is dropped, no more.
		prompt = string(b)
		if p, ok := strings.CutSuffix(prompt, "\n"); ok {
			prompt = strings.TrimSuffix(p, "\r")
		}
	}
	return prompt, schema, nil
}

// runTurn is the turn the flags describe (its agent resolved later, by
// continued), with the provider's settings.
func runTurn(f runFlags, prompt string, schema []byte) (engine.Turn, map[string]string, error) {
	env, err := parsePairs(f.env, "--env", lookupEnv)
	if err != nil {
		return engine.Turn{}, nil, err
	}
	settings, err := parsePairs(f.set, "--set", nil)
	if err != nil {
		return engine.Turn{}, nil, err
	}
	if f.image != "" {
		if settings == nil {
			settings = map[string]string{}
		}
		settings["image"] = f.image
	}
	options, err := parsePairs(f.options, "--option", nil)
	if err != nil {
		return engine.Turn{}, nil, err
	}
	turn := engine.Turn{
		Agent:      harness.Agent{Kind: harness.KindCLI, Model: f.model},
		Prompt:     prompt,
		Workdir:    f.workdir, // "": the current directory
		Resume:     f.resume,
		Fork:       f.fork,
		Workspace:  f.workspace,
		Wait:       f.wait,
		Env:        env,
		Timeout:    f.timeout,
		Inactivity: f.inactivity,
		Options:    options,
		ExtraArgs:  f.extra,
		Command:    f.command,
		RetryBound: f.retryBound,
		Output:     schema,
		Repairs:    &f.repairs,
		Protocol:   f.protocol,
	}
	return turn, settings, nil
}

// continued resolves the conversation the turn continues (--resume or
// --fork: an id, a unique prefix or a native id) and its agent: the
// conversation's, unless --agent says.
func (a *app) continued(ctx context.Context, store conversation.Store, f *runFlags, turn *engine.Turn) error {
	for _, ref := range []*string{&turn.Resume, &turn.Fork} {
		if *ref == "" {
			continue
		}
		base, turnAt, err := engine.SplitRef(*ref)
		if err != nil {
			return err
		}
		id, err := conversation.Resolve(ctx, store, base)
		if err != nil {
			continue // the engine reports it
		}
		*ref = id
		if turnAt > 0 {
			*ref = fmt.Sprintf("%s@%d", id, turnAt)
		}
		if m, err := store.Meta(ctx, id); err == nil && !f.agentSet {
			if _, err := lookupAgent(m.Agent); err == nil {
				f.agent = m.Agent
			}
		}
	}
	h, err := lookupAgent(f.agent)
	if err != nil {
		return err
	}
	turn.Agent.Harness = h
	return nil
}

func (a *app) eventWriter(f runFlags) eventWriter {
	if f.json {
		return newJSONWriter(a.stdout)
	}
	if (f.schema != "" || f.protocol != "") && !isTerminal(a.stdout) {
		// Redirected, stdout holds the structured answer alone (a JSON
		// document); the agent's text streams on stderr.
		h := newHumanWriter(a.stderr, a.stderr)
		h.answer = a.stdout
		return h
	}
	return newHumanWriter(a.stdout, a.stderr)
}

// steer reads messages for the running turn from standard input, one a
// line, until it ends or ctx does.
func (a *app) steer(ctx context.Context) <-chan string {
	ch := make(chan string)
	go func() {
		sc := bufio.NewScanner(a.stdin)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			if t := strings.TrimSpace(sc.Text()); t != "" {
				select {
				case ch <- t:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ch
}

func (a *app) fail(f runFlags, res *engine.Result, err error) error {
	if f.json {
		return a.finish(newJSONWriter(a.stdout), f, res, err)
	}
	return err
}

// finish prints the result. A turn that failed before it began (no
// result) still names the agent given and the command's own timing.
func (a *app) finish(out eventWriter, f runFlags, res *engine.Result, err error) error {
	if res == nil {
		end := time.Now()
		res = &engine.Result{Agent: f.agent, Model: f.model, StartedAt: f.started.UTC(), CompletedAt: end.UTC(), DurationMS: end.Sub(f.started).Milliseconds()}
	}
	if res.Agent == "" {
		res.Agent = f.agent
	}
	out.result(res, err)
	a.reported = out.reportsErrors()
	if err != nil {
		return err
	}
	return nil
}

func lookupEnv(k string) (string, bool) { return osLookupEnv(k) }

// readSchema reads --schema: a file, or standard input for "-", bounded.
// What it reads is compiled by the engine (a configuration error for a
// document that is not a valid schema, before any sandbox exists).
func readSchema(stdin io.Reader, name string) ([]byte, error) {
	var r io.Reader = stdin
	if name != "-" {
		f, err := osOpen(name)
		if err != nil {
			return nil, outpost.Wrap(outpost.Configuration, "schema", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, output.MaxSchema+1))
	if err != nil {
		return nil, outpost.Wrap(outpost.Configuration, "schema", err)
	}
	if len(b) > output.MaxSchema {
		return nil, outpost.Errorf(outpost.Configuration, "schema", "%s: %w", name, fmt.Errorf("%w: over the %d byte limit", output.ErrSchema, output.MaxSchema))
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, outpost.Errorf(outpost.Configuration, "schema", "%s: %w", name, fmt.Errorf("%w: empty document", output.ErrSchema))
	}
	return b, nil
}

// eventWriter renders a turn.
type eventWriter interface {
	event(ev harness.Event)
	result(res *engine.Result, err error)
	reportsErrors() bool
}

type jsonWriter struct {
	mu  sync.Mutex
	enc *json.Encoder
	w   *bufio.Writer
}

func newJSONWriter(w io.Writer) *jsonWriter {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	return &jsonWriter{enc: enc, w: bw}
}

func (j *jsonWriter) event(ev harness.Event) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.enc.Encode(ev)
	j.w.Flush()
}

func (j *jsonWriter) result(res *engine.Result, err error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.enc.Encode(engine.NewResultLine(res, err))
	j.w.Flush()
}

// The JSON result line carries the error; it is printed on stderr too so
// a person running --json by hand sees it.
func (j *jsonWriter) reportsErrors() bool { return false }
