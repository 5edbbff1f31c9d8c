package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/gateway/meter"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox"
)

// A race runs one task as several turns at once, each in its own sandbox
// and workspace made from one starting checkpoint, checks each, and picks
// a winner (docs/workspaces.md). Every contestant stays a conversation.

// RaceSpec is one race's request.
type RaceSpec struct {
	// Prompt is the task every contestant gets.
	Prompt string
	// Contestants are the agents that run it, one turn each (the same
	// agent may run several times).
	Contestants []harness.Agent
	// Workdir is the caller's directory whose files every contestant
	// starts from ("": the current one); From, when set ("ID[@TURN]"),
	// starts from that checkpoint instead, and a contestant of the
	// conversation's own agent forks it (its memory too).
	Workdir string
	From    string
	// Check is the shell command run in each sandbox after its turn; a
	// contestant passes when it exits 0 (no Check: when its turn
	// succeeded).
	Check string
	// Judge, when set, picks the winner among the passing contestants
	// after reading their diffs; otherwise the passing contestant with
	// the fewest tokens wins (ties: the quickest).
	Judge *harness.Agent
	// MaxTokens bounds each contestant's turn; Budget all of them
	// together (code budget for the turn that crosses it).
	MaxTokens int64
	Budget    int64
	// Timeout bounds each contestant's turn.
	Timeout time.Duration
	// Options are preset options (Turn.Options) by preset name: those of
	// "" go to every contestant, a preset's own over them (Claude Code's
	// permission-mode, so that it may edit its workspace). Env are
	// variables for every contestant (Turn.Env).
	Options map[string]map[string]string
	Env     map[string]string
}

// RaceOptions configure Race. Run is the template of every
// contestant's RunOptions (its Provider, Store, Gateway...); Store must
// keep checkpoints (conversation.ObjectStorer).
type RaceOptions struct {
	Run RunOptions
	// OnEvent receives each contestant's events, tagged with its index.
	OnEvent func(contestant int, ev harness.Event)
	// OnProgress receives each contestant's progress: "started",
	// "finished" (the turn), "checked".
	OnProgress func(RaceProgress)
}

// RaceProgress is one step of a contestant.
type RaceProgress struct {
	Contestant int    `json:"contestant"`
	Agent      string `json:"agent"`
	State      string `json:"state"`
	// Conversation, Code and Passed are set once known.
	Conversation string `json:"conversation,omitempty"`
	Code         string `json:"code,omitempty"`
	Passed       *bool  `json:"passed,omitempty"`
}

// Contestant is one contestant's outcome.
type Contestant struct {
	Index        int            `json:"index"`
	Agent        string         `json:"agent"`
	Model        string         `json:"model,omitempty"`
	Conversation string         `json:"conversation,omitempty"`
	Workdir      string         `json:"workdir"`
	Passed       bool           `json:"passed"`
	Tokens       int64          `json:"tokens"`
	Cost         *harness.Usage `json:"metered,omitempty"`
	DurationMS   int64          `json:"duration_ms"`
	// Files, Added and Deleted measure its diff against the start.
	Files   int `json:"files"`
	Added   int `json:"added"`
	Deleted int `json:"deleted"`
	// Result and Err are its turn's, as Run returned them.
	Result *Result `json:"-"`
	Err    error   `json:"-"`
	Code   string  `json:"code,omitempty"`
}

// Verdict is the contestant's check in a word: its error's code when its
// turn failed, else "pass" or "fail".
func (c *Contestant) Verdict() string {
	switch {
	case c.Code != "":
		return c.Code
	case !c.Passed:
		return "fail"
	}
	return "pass"
}

// RaceResult is a race's outcome. Winner is -1 when no contestant passed
// (or the judge picked none).
type RaceResult struct {
	Winner       int           `json:"winner"`
	Conversation string        `json:"conversation,omitempty"` // the winner's
	Start        string        `json:"start"`                  // the starting tree
	Contestants  []*Contestant `json:"contestants"`
	Judge        *JudgeResult  `json:"judge,omitempty"`
	Tokens       int64         `json:"tokens"`
	DurationMS   int64         `json:"duration_ms"`
}

// JudgeResult is the judge's pick and why.
type JudgeResult struct {
	Conversation string `json:"conversation,omitempty"`
	Winner       int    `json:"winner"`
	Reason       string `json:"reason,omitempty"`
	Error        string `json:"error,omitempty"`
}

// Race runs a race. It fails only when the race cannot start (no
// contestant, no store for checkpoints, a start that cannot be read); a
// contestant that fails (crash, budget, timeout) is reported in its
// Contestant and does not win.
func Race(ctx context.Context, r RaceSpec, o *RaceOptions) (*RaceResult, error) {
	start := time.Now()
	if o == nil {
		o = &RaceOptions{}
	}
	if len(r.Contestants) == 0 {
		return nil, outpost.Errorf(outpost.Configuration, "race", "no contestant")
	}
	if strings.TrimSpace(r.Prompt) == "" {
		return nil, outpost.Errorf(outpost.Configuration, "race", "empty prompt")
	}
	if err := racePreflight(r, &o.Run); err != nil {
		return nil, err
	}
	objs, err := raceObjects(o.Run.Store)
	if err != nil {
		return nil, err
	}
	tree, fromAgent, err := raceStart(ctx, r, o.Run.Store, objs)
	if err != nil {
		return nil, err
	}
	base, err := WorkspacesDir()
	if err != nil {
		return nil, outpost.Wrap(outpost.Configuration, "race", err)
	}
	raceID := conversation.NewID()
	var shared *meter.Shared
	if r.Budget > 0 {
		shared = &meter.Shared{Tokens: r.Budget}
	}
	out := &RaceResult{Winner: -1, Start: tree.String(), Contestants: make([]*Contestant, len(r.Contestants))}
	var wg sync.WaitGroup
	for i, a := range r.Contestants {
		c := &Contestant{Index: i, Agent: a.Harness.Name, Model: a.Model, Workdir: filepath.Join(base, fmt.Sprintf("%s-race-%d-%s", raceID, i, a.Harness.Name))}
		out.Contestants[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			runContestant(ctx, r, o, c, a, objs, tree, fromAgent, shared)
		}()
	}
	wg.Wait()
	for _, c := range out.Contestants {
		measure(ctx, objs, tree, c)
		out.Tokens += c.Tokens
	}
	out.Winner = fewestTokens(out.Contestants)
	if r.Judge != nil && out.Winner >= 0 {
		out.Judge = judge(ctx, r, o, objs, tree, out.Contestants)
		if out.Judge.Error == "" {
			out.Winner = out.Judge.Winner
		}
	}
	if out.Winner >= 0 {
		out.Conversation = out.Contestants[out.Winner].Conversation
	}
	out.DurationMS = time.Since(start).Milliseconds()
	return out, nil
}

// racePreflight refuses a race one of whose agents (the judge too) has no
// credential (Preflight), before any workspace is made.
func racePreflight(r RaceSpec, o *RunOptions) error {
	var hostFiles bool
	switch {
	case o.Lease != nil:
		hostFiles = o.Lease.Capabilities().HostFiles
	case o.Provider != nil:
		hostFiles = o.Provider.Capabilities().HostFiles
	}
	agents := slices.Clone(r.Contestants)
	if r.Judge != nil {
		agents = append(agents, *r.Judge)
	}
	seen := map[*harness.Harness]bool{}
	for _, a := range agents {
		if a.Harness == nil || seen[a.Harness] {
			continue
		}
		seen[a.Harness] = true
		if _, err := Preflight(a.Harness, &PreflightOptions{Environ: o.Environ, Workdir: r.Workdir, Env: r.Env, HostFiles: hostFiles}); err != nil {
			return err
		}
	}
	return nil
}

func raceObjects(s conversation.Store) (checkpoint.Objects, error) {
	os, ok := s.(conversation.ObjectStorer)
	if !ok {
		return nil, outpost.Errorf(outpost.Configuration, "race", "a race needs a store that keeps checkpoints (RunOptions.Store)")
	}
	return os.Objects(), nil
}

// raceStart records the starting tree: From's checkpoint, or the
// caller's directory.
func raceStart(ctx context.Context, r RaceSpec, s conversation.Store, objs checkpoint.Objects) (plumbing.Hash, string, error) {
	if r.From != "" {
		t, err := conversation.LocateCheckpoint(ctx, s, r.From)
		if err != nil {
			return plumbing.ZeroHash, "", CheckpointError("race", err)
		}
		tree, err := t.Tree(ctx, t.Commit())
		return tree, t.Meta.Agent, CheckpointError("race", err)
	}
	wd, err := sandbox.ResolveWorkdir(r.Workdir)
	if err != nil {
		return plumbing.ZeroHash, "", outpost.Wrap(outpost.Configuration, "race", err)
	}
	t, err := checkpoint.Snapshot(ctx, objs, wd, &checkpoint.Options{Index: checkpoint.IndexPath(wd)})
	if err != nil {
		return plumbing.ZeroHash, "", CheckpointError("race", err)
	}
	return t.Hash, "", nil
}

// runContestant materialises the start into the contestant's own
// workspace and runs its turn there, then its check.
func runContestant(ctx context.Context, r RaceSpec, o *RaceOptions, c *Contestant, a harness.Agent, objs checkpoint.Objects, tree plumbing.Hash, fromAgent string, shared *meter.Shared) {
	progress := func(state string) {
		if o.OnProgress == nil {
			return
		}
		p := RaceProgress{Contestant: c.Index, Agent: c.Agent, State: state, Conversation: c.Conversation, Code: c.Code}
		if state == "checked" {
			passed := c.Passed
			p.Passed = &passed
		}
		o.OnProgress(p)
	}
	progress("started")
	defer progress("checked")
	if _, err := checkpoint.Materialize(ctx, objs, tree, c.Workdir, &checkpoint.MaterializeOptions{Index: checkpoint.IndexPath(c.Workdir)}); err != nil {
		c.Err = CheckpointError("race", err)
		c.Code = string(outpost.CodeOf(c.Err))
		return
	}
	t := Turn{Agent: a, Prompt: r.Prompt, Workdir: c.Workdir, Timeout: r.Timeout, Env: r.Env, Options: r.optionsOf(a.Harness.Name)}
	if r.From != "" && fromAgent == a.Harness.Name {
		t.Fork = r.From
	}
	ro := o.Run
	ro.Check, ro.MaxTokens = r.Check, r.MaxTokens
	if shared != nil {
		ro.Limits = append(append([]meter.Limiter(nil), ro.Limits...), shared)
	}
	if o.OnEvent != nil {
		ro.OnEvent = func(ev harness.Event) { o.OnEvent(c.Index, ev) }
	}
	res, err := Run(ctx, t, &ro)
	c.Result, c.Err = res, err
	if err != nil {
		c.Code = string(outpost.CodeOf(err))
	}
	if res != nil {
		c.Conversation = res.Conversation
		c.DurationMS = res.DurationMS
		c.Model = res.Model
		c.Passed = err == nil && (r.Check == "" || (res.Check != nil && res.Check.Passed))
	}
	progress("finished")
}

// measure fills in a contestant's tokens and diff size.
func measure(ctx context.Context, objs checkpoint.Objects, start plumbing.Hash, c *Contestant) {
	res := c.Result
	if res == nil {
		return
	}
	c.Tokens = res.Usage.Tokens()
	if res.Metered != nil {
		u := res.Metered.Usage
		c.Cost = &u
		c.Tokens = u.Tokens()
	}
	if res.Checkpoint == nil {
		return
	}
	cm, err := checkpoint.ReadCommit(ctx, objs, plumbing.NewHash(res.Checkpoint.Commit))
	if err != nil {
		return
	}
	files, _, err := checkpoint.Diff(ctx, objs, start, cm.TreeHash)
	if err != nil {
		return
	}
	c.Files = len(files)
	for _, f := range files {
		c.Added += f.Added
		c.Deleted += f.Deleted
	}
}

// fewestTokens is the passing contestant with the fewest tokens, the
// quickest of equals; -1 when none passed.
func fewestTokens(cs []*Contestant) int {
	var passing []*Contestant
	for _, c := range cs {
		if c.Passed {
			passing = append(passing, c)
		}
	}
	if len(passing) == 0 {
		return -1
	}
	sort.SliceStable(passing, func(i, j int) bool {
		a, b := passing[i], passing[j]
		if a.Tokens != b.Tokens {
			return a.Tokens < b.Tokens
		}
		return a.DurationMS < b.DurationMS
	})
	return passing[0].Index
}

// judgeSchema is the judge's answer.
const judgeSchema = `{"type":"object","properties":{"winner":{"type":"integer","minimum":0},"reason":{"type":"string"}},"required":["winner"],"additionalProperties":false}`

// maxJudgeDiff bounds each contestant's diff in the judge's prompt.
const maxJudgeDiff = 24 << 10

// judge asks the judge agent to pick among the passing contestants,
// with the task and each one's diff, for an answer of judgeSchema.
func judge(ctx context.Context, r RaceSpec, o *RaceOptions, objs checkpoint.Objects, start plumbing.Hash, cs []*Contestant) *JudgeResult {
	var b strings.Builder
	fmt.Fprintf(&b, "You judge a race of coding agents. Each was given the same task in a copy of the same workspace. Pick the best passing contestant.\n\nThe task:\n%s\n", r.Prompt)
	allowed := map[int]bool{}
	for _, c := range cs {
		if !c.Passed || c.Result == nil || c.Result.Checkpoint == nil {
			continue
		}
		allowed[c.Index] = true
		fmt.Fprintf(&b, "\n## Contestant %d (%s, %d tokens)\n", c.Index, c.Agent, c.Tokens)
		if cm, err := checkpoint.ReadCommit(ctx, objs, plumbing.NewHash(c.Result.Checkpoint.Commit)); err == nil {
			var patch strings.Builder
			if err := checkpoint.WritePatch(ctx, objs, start, cm.TreeHash, &patch); err == nil {
				p := patch.String()
				if len(p) > maxJudgeDiff {
					p = p[:maxJudgeDiff] + "\n[diff cut]\n"
				}
				b.WriteString("```diff\n" + p + "```\n")
			}
		}
	}
	fmt.Fprintf(&b, "\nAnswer with the number of the winning contestant and one sentence why.")
	dir, err := os.MkdirTemp("", "outpost-judge-")
	if err != nil {
		return &JudgeResult{Winner: -1, Error: err.Error()}
	}
	defer os.RemoveAll(dir)
	ro := o.Run
	ro.Check, ro.Checkpoint, ro.OnEvent = "", CheckpointOff, nil
	res, err := Run(ctx, Turn{Agent: *r.Judge, Prompt: b.String(), Workdir: dir, Output: json.RawMessage(judgeSchema), Timeout: r.Timeout}, &ro)
	jr := &JudgeResult{Winner: -1}
	if res != nil {
		jr.Conversation = res.Conversation
	}
	if err != nil {
		jr.Error = err.Error()
		return jr
	}
	var ans struct {
		Winner int    `json:"winner"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal(res.Output, &ans); err != nil || !allowed[ans.Winner] {
		jr.Error = fmt.Sprintf("the judge picked %s, not a passing contestant", string(res.Output))
		return jr
	}
	jr.Winner, jr.Reason = ans.Winner, ans.Reason
	return jr
}

// optionsOf are the preset options of one contestant.
func (r RaceSpec) optionsOf(preset string) map[string]string {
	all, own := r.Options[""], r.Options[preset]
	if len(all) == 0 && len(own) == 0 {
		return nil
	}
	out := map[string]string{}
	for k, v := range all {
		out[k] = v
	}
	for k, v := range own {
		out[k] = v
	}
	return out
}
