package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/credentials"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox"
)

// Output bounds of the commands the engine runs besides the agent.
const (
	loginOutputLimit  = 64 << 10 // a credential plan's login command
	usageOutputLimit  = 1 << 20  // a preset's UsageCommand
	runnerOutputLimit = 16 << 20 // a preset hook's commands (Fork)
)

// prepareTurn runs steps 4 to 6: the plans (once per harness per lease),
// the conversation restored for resume or fork (before the command: a Fork
// hook needs it in place), the structured answer's input, and the command
// with its CLI installed.
func (e *turnRun) prepareTurn(ctx context.Context, lease *sandbox.Lease, res *Result) (harness.Input, harness.Live, harness.Command, error) {
	var cmd harness.Command
	if err := e.applyPlans(ctx, lease); err != nil {
		return harness.Input{}, nil, cmd, err
	}
	e.clock.step("plans")
	in, err := e.restore(ctx, lease, res)
	if err != nil {
		return in, nil, cmd, err
	}
	e.clock.step("restore")
	if in, err = e.answerInput(ctx, lease, in); err != nil {
		return in, nil, cmd, err
	}
	live, cmd, err := e.command(ctx, lease, in)
	if err != nil {
		return in, nil, cmd, err
	}
	e.clock.step("bootstrap")
	return in, live, cmd, nil
}

// applyPlans is step 4: the credential and configuration plans' files, and
// the login commands, once per harness per lease.
func (e *turnRun) applyPlans(ctx context.Context, lease *sandbox.Lease) error {
	h := e.h
	if planned(lease, h.Name) {
		return nil
	}
	// Authentication first: the credential plan's files, then its login
	// commands. A provider that takes no host files (local) receives only
	// the plan's variables.
	hostFiles := lease.Capabilities().HostFiles
	plan := e.plan
	if !hostFiles {
		plan.Files, plan.HostFiles, plan.Login = nil, nil, nil
	}
	apply := func(op string, files []harness.File, hosts []harness.HostFile) error {
		if len(files) == 0 && len(hosts) == 0 {
			return nil
		}
		release, err := credentials.Apply(ctx, lease, files, hosts, credentials.ApplyOptions{HostFiles: hostFiles})
		if err != nil {
			return outpost.Wrap(outpost.Configuration, op, err)
		}
		if release != nil {
			lease.OnClose(release)
		}
		return nil
	}
	if err := apply("credentials", plan.Files, plan.HostFiles); err != nil {
		return err
	}
	for _, login := range plan.Login {
		req, err := e.execRequest(lease, login)
		if err != nil {
			return err
		}
		r, err := lease.Exec(ctx, req, loginOutputLimit)
		if err == nil && !r.Status.Success() {
			err = fmt.Errorf("login command %s exited with %d: %s", login.Path, r.Status.Code, bytes.TrimSpace(r.Stderr))
		}
		if err != nil {
			return outpost.Wrap(outpost.Configuration, "login", err)
		}
	}
	// Then the configuration, once authenticated.
	if err := apply("configuration", e.config.Files, e.config.HostFiles); err != nil {
		return err
	}
	markPlanned(lease, h.Name, e.plan)
	return nil
}

// restore is step 6: the stored conversation put back in place for resume
// or fork, and the preset's input naming it.
func (e *turnRun) restore(ctx context.Context, lease *sandbox.Lease, res *Result) (harness.Input, error) {
	h := e.h
	in := harness.Input{Prompt: e.t.Prompt, Model: e.model, Workdir: lease.Workdir(), Home: lease.Home(), Options: e.t.Options, ExtraArgs: e.t.ExtraArgs}
	if e.parent.ID == "" {
		return in, nil
	}
	if err := conversation.Restore(ctx, lease, h.Storage, e.parent.Native, lease.Workdir(), e.parentFs); err != nil {
		return in, outpost.Wrap(outpost.Conversation, "restore", err)
	}
	in.Conversation = e.parent.Native
	if e.t.Fork == "" {
		return in, nil
	}
	res.Parent = e.parent.ID
	if h.Fork == nil {
		in.Fork = true
		return in, nil
	}
	var last harness.RunResult
	child, err := h.Fork(ctx, e.parent.Native, e.runner(lease, &last))
	switch {
	case err != nil:
		return in, e.forkErr(err, last)
	case strings.TrimSpace(child) == "":
		return in, e.forkErr(errors.New("the fork hook returned no conversation id"), last)
	case child == e.parent.Native:
		return in, e.forkErr(fmt.Errorf("the fork hook returned the parent's id %s, not a new one", child), last)
	}
	in.Conversation = child
	return in, nil
}

// command builds the agent's command (with live input when the turn is
// steered and the preset and sandbox can) and is step 5: the CLI is
// installed when its executable is missing.
func (e *turnRun) command(ctx context.Context, lease *sandbox.Lease, in harness.Input) (harness.Live, harness.Command, error) {
	h := e.h
	var live harness.Live
	var cmd harness.Command
	var err error
	if h.LiveOnly && !lease.Capabilities().Stdin {
		return nil, cmd, outpost.Errorf(outpost.Configuration, "request", "agent %s is driven over its standard input (a live protocol), which this sandbox cannot give a process", h.Name)
	}
	if (e.o.Steer != nil || h.LiveOnly) && h.LiveInput != nil && lease.Capabilities().Stdin {
		if live, err = h.LiveInput(in); err != nil {
			return nil, cmd, outpost.Wrap(outpost.Configuration, "request", err)
		}
		cmd = live.Command()
		if err := e.checkEnv(cmd.Env); err != nil {
			return nil, cmd, err
		}
	} else if cmd, err = e.request(in); err != nil {
		return nil, cmd, err
	}
	program := cmd.Path
	if e.t.Command != "" {
		// The caller's executable replaces the preset's: no bootstrap.
		cmd.Path = e.t.Command
	} else {
		path, err := e.installer().Ensure(ctx, lease, h.Bootstrap, cmd.Path, &bootstrap.EnsureOptions{Progress: e.bootstrapProgress})
		if err != nil {
			return nil, cmd, outpost.Wrap(outpost.Bootstrap, "bootstrap", err)
		}
		cmd.Path = path
	}
	if len(cmd.Files) > 0 {
		// The command's own files (a prompt file), in the private home.
		if _, err := credentials.Apply(ctx, lease, cmd.Files, nil, credentials.ApplyOptions{}); err != nil {
			return nil, cmd, outpost.Wrap(outpost.Sandbox, "files", err)
		}
	}
	if err := e.runPrepare(ctx, lease, program, cmd); err != nil {
		return nil, cmd, err
	}
	return live, cmd, nil
}

// runPrepare runs the command's Prepare commands, the preset's own program
// being the installed CLI.
func (e *turnRun) runPrepare(ctx context.Context, lease *sandbox.Lease, program string, cmd harness.Command) error {
	for _, p := range cmd.Prepare {
		if p.Path == program {
			p.Path = cmd.Path
		}
		var last harness.RunResult
		r, err := e.runner(lease, &last)(ctx, p)
		if err == nil && !r.Status.Success() {
			err = fmt.Errorf("%s exited with %d: %s", path.Base(p.Path), r.Status.Code, bytes.TrimSpace(last.Stderr))
		}
		if err != nil {
			return outpost.Wrap(outpost.Conversation, "prepare", err)
		}
	}
	return nil
}

// runner runs a preset hook's commands in the sandbox. It keeps the
// last command's output (redacted) for the hook's error details.
func (e *turnRun) runner(lease *sandbox.Lease, last *harness.RunResult) harness.Runner {
	return func(ctx context.Context, c harness.Command) (harness.RunResult, error) {
		req, err := e.execRequest(lease, c)
		if err != nil {
			return harness.RunResult{}, err
		}
		r, err := lease.Exec(ctx, req, runnerOutputLimit)
		if err != nil {
			return harness.RunResult{}, err
		}
		out := harness.RunResult{Stdout: r.Stdout, Stderr: r.Stderr, Status: r.Status}
		*last = harness.RunResult{Stdout: e.red.Bytes(r.Stdout), Stderr: e.red.Bytes(r.Stderr), Status: r.Status}
		return out, nil
	}
}

// forkErr is the error of a Fork hook that failed or gave no distinct
// child id, with the output of its last command.
func (e *turnRun) forkErr(err error, last harness.RunResult) error {
	err = outpost.Wrap(outpost.Process, "fork", err)
	var oe *outpost.Error
	if !errors.As(err, &oe) || oe.Code != outpost.Process {
		return err
	}
	clip := func(b []byte) string {
		if len(b) > 4096 {
			b = b[len(b)-4096:]
		}
		return string(bytes.ToValidUTF8(b, []byte("\uFFFD")))
	}
	if last.Stdout != nil || last.Stderr != nil {
		oe.Detail("fork_stdout", clip(last.Stdout)).Detail("fork_stderr", clip(last.Stderr)).Detail("fork_exit_code", last.Status.Code)
	}
	return oe
}
