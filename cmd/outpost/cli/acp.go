package cli

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/outposthq/outpost/acp"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/sandbox"
)

type acpFlags struct {
	agent, sandbox, model, image, secrets, egress, checkpoint string
	set, options, env, egressAllow                            []string
	budget, maxTokens                                         int64
	timeout, grace, sandboxIdle                               time.Duration
	verbose                                                   bool
}

// acpCmd is `outpost acp`: outpost as an Agent Client Protocol agent over
// stdio, for editors (docs/acp.md).
func (a *app) acpCmd() *cobra.Command {
	var f acpFlags
	c := &cobra.Command{
		Use:   "acp",
		Short: "Be an Agent Client Protocol agent on standard input and output, for editors",
		Long: `Speak the Agent Client Protocol (ACP) on standard input and output, as the
agent an editor (Zed, JetBrains, Neovim) or any ACP client starts. Each ACP
session is an outpost conversation (its id is the session's), each prompt a
turn of --agent in --sandbox on it; the turn's events stream back as
session/update notifications, session/cancel cancels the turn, and
session/load resumes a stored conversation in any later outpost acp,
replaying its history. A session keeps its sandbox from one prompt to the
next (a container on docker, with what the agent installed in it) until a
turn fails, the session closes, or --sandbox-idle passes without a prompt.
The flags are every session's settings; a session overrides them in its
request's _meta.outpost (docs/acp.md). Logs go to standard error. At the
end of input every request read is answered: running turns may finish for
--grace, then they are cancelled, and outpost exits once they are stored.`,
		Example: `  outpost acp --agent codex --sandbox docker
  outpost acp --agent claude --sandbox docker --budget 2000000 --egress gateway
  outpost --store postgres://db/outpost acp --agent echo`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return a.acp(c.Context(), f) },
	}
	fl := c.Flags()
	fl.StringVar(&f.agent, "agent", "echo", "agent preset of new sessions ("+strings.Join(presets.Names(), ", ")+"), or a preset file")
	fl.StringVar(&f.sandbox, "sandbox", "local", "sandbox provider ("+strings.Join(sandbox.Providers(), ", ")+")")
	fl.StringVar(&f.model, "model", "", "model to ask the agent for (default: the CLI's)")
	fl.StringVar(&f.image, "image", "", "container image (docker sandbox)")
	fl.StringArrayVar(&f.set, "set", nil, "sandbox provider setting KEY=VALUE; repeatable")
	fl.StringArrayVar(&f.options, "option", nil, "agent preset option KEY=VALUE; repeatable")
	fl.StringArrayVar(&f.env, "env", nil, "variable for the agent, NAME=VALUE or NAME (taken from the environment); repeatable")
	fl.Int64Var(&f.budget, "budget", 0, "each conversation's token budget over all its turns (a spent budget ends the prompt with stop reason max_tokens; docs/metering.md)")
	fl.Int64Var(&f.maxTokens, "max-tokens", 0, "each turn's token budget")
	fl.DurationVar(&f.timeout, "timeout", 0, "stop a turn after this long")
	fl.StringVar(&f.checkpoint, "checkpoint", "on", "record the workspace as a git commit after every turn (on) or not (off)")
	fl.DurationVar(&f.grace, "grace", acp.DefaultGrace, "at the end of input, how long running turns may finish before they are cancelled")
	fl.DurationVar(&f.sandboxIdle, "sandbox-idle", acp.DefaultSandboxIdle, "how long a session keeps its sandbox between prompts (0: a new sandbox every prompt)")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "log each turn's steps on standard error")
	keylessFlags(fl, &f.secrets, &f.egress, &f.egressAllow)
	return c
}

func (a *app) acp(ctx context.Context, f acpFlags) error {
	rf := runFlags{env: f.env, set: f.set, options: f.options, image: f.image}
	turn, settings, err := runTurn(rf, "", nil)
	if err != nil {
		return err
	}
	if f.budget < 0 || f.maxTokens < 0 || f.timeout < 0 || f.sandboxIdle < 0 {
		return usageError{errors.New("--max-tokens, --budget, --timeout and --sandbox-idle take positive values")}
	}
	store, err := a.store()
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if f.verbose {
		level = slog.LevelDebug
	}
	d := acp.Settings{Agent: f.agent, Model: f.model, Sandbox: f.sandbox, Settings: settings, Options: turn.Options,
		Secrets: f.secrets, Egress: f.egress, EgressAllow: f.egressAllow, Budget: f.budget, MaxTokens: f.maxTokens, Checkpoint: f.checkpoint}
	if f.timeout > 0 {
		d.Timeout = f.timeout.String()
	}
	ag, err := acp.New(acp.Options{Defaults: d, Store: store, Spool: a.spool, Env: turn.Env, Agents: lookupAgent, Version: version(), Grace: f.grace,
		SandboxIdle: idleOption(f.sandboxIdle),
		Logger:      slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: level}))})
	if err != nil {
		return err
	}
	return ag.Serve(ctx, a.stdin, a.stdout)
}

// idleOption is --sandbox-idle as acp.Options.SandboxIdle: 0 keeps no
// sandbox between prompts.
func idleOption(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
