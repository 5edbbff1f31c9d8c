package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox"
)

type raceFlags struct {
	agents             []string
	n                  int
	check, judge, from string
	sandbox, model     string
	workdir            string
	set, options, env  []string
	maxTokens, budget  int64
	timeout            time.Duration
	json               bool
	secrets, egress    string
	egressAllow        []string
}

func (a *app) raceCmd() *cobra.Command {
	var f raceFlags
	c := &cobra.Command{
		Use:   "race [flags] TASK",
		Short: "Run one task as several turns at once and keep the best",
		Long: `Run TASK as one turn of each --agent (each -n times), at once, each in its
own sandbox and its own copy of the working directory (or of the checkpoint
--from names); run --check in each sandbox after its turn; and print a
table: agent, model, check, tokens, duration, diff size. The winner is the
passing contestant with the fewest tokens, or the one --judge picks after
reading the diffs. Every contestant stays a conversation: resume, diff or
apply it. --max-tokens bounds each contestant, --budget all of them.

With --json: each contestant's result line, then one line
{"type":"race","winner":ID,...} with the table's figures.`,
		Example: `  outpost race --agent claude,codex,gemini --check 'go test ./...' "fix the failing test"
  outpost race --agent echo -n 3 --check 'test -f out.txt' '#write=out.txt go'
  outpost race --agent claude,codex --judge claude --budget 200000 "make the parser faster"`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error { return a.race(c.Context(), f, args[0]) },
	}
	fl := c.Flags()
	fl.StringSliceVar(&f.agents, "agent", []string{"echo"}, "agent presets that race, comma-separated or repeated")
	fl.IntVarP(&f.n, "count", "n", 1, "turns of each agent")
	fl.StringVar(&f.check, "check", "", "shell command run in each sandbox after its turn; a contestant passes when it exits 0")
	fl.StringVar(&f.judge, "judge", "", "agent preset that picks the winner after reading the passing contestants' diffs")
	fl.StringVar(&f.from, "from", "", "start from this checkpoint (ID[@TURN]) instead of the working directory")
	fl.StringVar(&f.sandbox, "sandbox", "local", "sandbox provider ("+strings.Join(sandbox.Providers(), ", ")+")")
	fl.StringVar(&f.model, "model", "", "model to ask every agent for (default: each CLI's)")
	fl.StringVar(&f.workdir, "workdir", "", "the directory every contestant starts from (default: the current one)")
	fl.StringArrayVar(&f.set, "set", nil, "sandbox provider setting KEY=VALUE; repeatable")
	fl.StringArrayVar(&f.options, "option", nil, "preset option [AGENT:]KEY=VALUE, for every contestant or for AGENT's (e.g. claude:permission-mode=acceptEdits); repeatable")
	fl.StringArrayVar(&f.env, "env", nil, "variable for every contestant, NAME=VALUE or NAME (taken from the environment); repeatable")
	fl.Int64Var(&f.maxTokens, "max-tokens", 0, "each contestant's token budget")
	fl.Int64Var(&f.budget, "budget", 0, "all contestants' token budget together")
	fl.DurationVar(&f.timeout, "timeout", 0, "stop each contestant's turn after this long")
	fl.BoolVar(&f.json, "json", false, "each contestant's result line, then a race line")
	keylessFlags(fl, &f.secrets, &f.egress, &f.egressAllow)
	return c
}

func (a *app) race(ctx context.Context, f raceFlags, task string) error {
	if f.n < 1 || f.n > 32 {
		return usageError{errors.New("-n takes a number from 1 to 32")}
	}
	if f.maxTokens < 0 || f.budget < 0 {
		return usageError{errors.New("--max-tokens and --budget take a positive number of tokens")}
	}
	spec := engine.RaceSpec{Prompt: task, Workdir: f.workdir, From: f.from, Check: f.check, MaxTokens: f.maxTokens, Budget: f.budget, Timeout: f.timeout}
	for _, name := range f.agents {
		h, err := lookupAgent(strings.TrimSpace(name))
		if err != nil {
			return err
		}
		for range f.n {
			spec.Contestants = append(spec.Contestants, harness.Agent{Kind: harness.KindCLI, Harness: h, Model: f.model})
		}
	}
	if f.judge != "" {
		h, err := lookupAgent(f.judge)
		if err != nil {
			return err
		}
		spec.Judge = &harness.Agent{Kind: harness.KindCLI, Harness: h}
	}
	settings, err := parsePairs(f.set, "--set", nil)
	if err != nil {
		return err
	}
	if spec.Env, err = parsePairs(f.env, "--env", lookupEnv); err != nil {
		return err
	}
	if spec.Options, err = raceOptions(f.options); err != nil {
		return err
	}
	provider, err := openProvider(f.sandbox, settings)
	if err != nil {
		return err
	}
	defer provider.Close()
	store, err := a.store()
	if err != nil {
		return err
	}
	defer a.tracing(ctx)()
	var mu sync.Mutex
	opts := &engine.RaceOptions{
		Run: engine.RunOptions{Provider: provider, Store: store, Spool: a.spool, Secrets: f.secrets, Egress: f.egress, EgressAllow: f.egressAllow},
		OnProgress: func(p engine.RaceProgress) {
			mu.Lock()
			defer mu.Unlock()
			fmt.Fprintln(a.stderr, progressLine(p))
		},
	}
	res, err := engine.Race(ctx, spec, opts)
	if err != nil {
		return err
	}
	if f.json {
		return a.raceJSON(res)
	}
	return a.raceTable(res)
}

// progressLine is one contestant's step for a person.
func progressLine(p engine.RaceProgress) string {
	s := fmt.Sprintf("· contestant %d (%s): %s", p.Contestant, p.Agent, p.State)
	switch {
	case p.Code != "":
		s += " · " + p.Code
	case p.Passed != nil && *p.Passed:
		s += " · passed"
	case p.Passed != nil:
		s += " · did not pass"
	}
	return s
}

func (a *app) raceJSON(res *engine.RaceResult) error {
	var lines []any
	for _, c := range res.Contestants {
		line := engine.NewResultLine(c.Result, c.Err)
		if line.Agent == "" {
			line.Agent = c.Agent
		}
		lines = append(lines, line)
	}
	lines = append(lines, struct {
		Type string `json:"type"`
		*engine.RaceResult
	}{"race", res})
	if err := writeJSONLines(a.stdout, lines); err != nil {
		return err
	}
	if res.Winner < 0 {
		return outpost.Errorf(outpost.Process, "race", "no contestant passed")
	}
	return nil
}

func (a *app) raceTable(res *engine.RaceResult) error {
	t := newTable(a.stdout, "#", "AGENT", "MODEL", "CHECK", "TOKENS", "DURATION", "DIFF", "CONVERSATION")
	for _, c := range res.Contestants {
		check := c.Verdict()
		if c.Result != nil && c.Result.Check != nil && !c.Result.Check.Passed && c.Code == "" {
			check = fmt.Sprintf("fail (%d)", c.Result.Check.ExitCode)
		}
		mark := fmt.Sprint(c.Index)
		if c.Index == res.Winner {
			mark += " *"
		}
		t.row(mark, c.Agent, orDefault(c.Model, "-"), check, fmt.Sprint(c.Tokens), (time.Duration(c.DurationMS) * time.Millisecond).String(),
			fmt.Sprintf("%d file(s) +%d -%d", c.Files, c.Added, c.Deleted), orDefault(c.Conversation, "-"))
	}
	if err := t.flush(); err != nil {
		return err
	}
	if res.Winner < 0 {
		fmt.Fprintln(a.stderr, "· no contestant passed")
		return outpost.Errorf(outpost.Process, "race", "no contestant passed")
	}
	w := res.Contestants[res.Winner]
	fmt.Fprintf(a.stderr, "· winner: contestant %d (%s), conversation %s\n", w.Index, w.Agent, w.Conversation)
	if res.Judge != nil && res.Judge.Reason != "" {
		fmt.Fprintf(a.stderr, "· the judge: %s\n", res.Judge.Reason)
	}
	fmt.Fprintf(a.stderr, "· see its work: outpost diff %s · take it: outpost apply %s\n", w.Conversation, w.Conversation)
	return nil
}

// raceOptions groups --option [AGENT:]KEY=VALUE by preset ("" for all).
func raceOptions(list []string) (map[string]map[string]string, error) {
	if len(list) == 0 {
		return nil, nil
	}
	out := map[string]map[string]string{}
	for _, o := range list {
		agent, kv := "", o
		if a, rest, ok := strings.Cut(o, ":"); ok && !strings.Contains(a, "=") {
			agent, kv = a, rest
		}
		pairs, err := parsePairs([]string{kv}, "--option", nil)
		if err != nil {
			return nil, err
		}
		if out[agent] == nil {
			out[agent] = map[string]string{}
		}
		for k, v := range pairs {
			out[agent][k] = v
		}
	}
	return out, nil
}
