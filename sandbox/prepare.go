package sandbox

import (
	"bytes"
	"context"
	"fmt"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/credentials"
	"github.com/outposthq/outpost/harness"
)

// Output bounds of the commands the engine runs besides the agent.
const (
	loginOutputLimit  = 64 << 10 // a credential plan's login command
	usageOutputLimit  = 1 << 20  // a preset's UsageCommand
	runnerOutputLimit = 16 << 20 // a preset hook's commands (Fork)
)

// applyPlans is step 4: the credential and configuration plans' files, and
// the login commands, once per harness per lease.
func (e *engine) applyPlans(ctx context.Context, lease *Lease) error {
	h := e.h
	if lease.planned(h.Name) {
		return nil
	}
	files := append(append([]harness.File{}, e.plan.Files...), e.config.Files...)
	hostFiles := append(append([]harness.HostFile{}, e.plan.HostFiles...), e.config.HostFiles...)
	if len(files) > 0 || len(hostFiles) > 0 {
		release, err := credentials.Apply(ctx, lease, files, hostFiles, credentials.ApplyOptions{HostFiles: lease.Capabilities().HostFiles})
		if err != nil {
			return e.stepErr(ctx, outpost.Configuration, "credentials", err)
		}
		if release != nil {
			lease.OnClose(release)
		}
	}
	for _, login := range e.plan.Login {
		req, err := e.execRequest(lease, login)
		if err != nil {
			return err
		}
		r, err := lease.Exec(ctx, req, loginOutputLimit)
		if err == nil && !r.Status.Success() {
			err = fmt.Errorf("login command %s exited with %d: %s", login.Path, r.Status.Code, bytes.TrimSpace(r.Stderr))
		}
		if err != nil {
			return e.stepErr(ctx, outpost.Configuration, "login", err)
		}
	}
	lease.markPlanned(h.Name)
	return nil
}

// restore is step 6: the stored conversation put back in place for resume
// or fork, and the preset's input naming it.
func (e *engine) restore(ctx context.Context, lease *Lease, res *Result) (harness.Input, error) {
	h := e.h
	in := harness.Input{Prompt: e.t.Prompt, Model: e.t.Agent.Model, Workdir: lease.Workdir(), Home: lease.Home(), Options: e.t.Options, ExtraArgs: e.t.ExtraArgs}
	if e.parent.ID == "" {
		return in, nil
	}
	if err := conversation.Restore(ctx, lease, h.Storage, e.parent.Native, lease.Workdir(), e.parentFs); err != nil {
		return in, e.stepErr(ctx, outpost.Conversation, "restore", err)
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
	child, err := h.Fork(ctx, e.parent.Native, e.runner(lease))
	if err != nil {
		return in, e.stepErr(ctx, outpost.Process, "fork", err)
	}
	in.Conversation = child
	return in, nil
}

// command builds the agent's command (with live input when the turn is
// steered and the preset and sandbox can) and is step 5: the CLI is
// installed when its executable is missing.
func (e *engine) command(ctx context.Context, lease *Lease, in harness.Input) (harness.Live, harness.Command, error) {
	h := e.h
	var live harness.Live
	var cmd harness.Command
	var err error
	if e.o.Steer != nil && h.LiveInput != nil && lease.Capabilities().Stdin {
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
	path, err := e.installer().Ensure(ctx, lease, h.Bootstrap, cmd.Path, &bootstrap.EnsureOptions{Progress: e.bootstrapProgress})
	if err != nil {
		return nil, cmd, e.stepErr(ctx, outpost.Bootstrap, "bootstrap", err)
	}
	cmd.Path = path
	return live, cmd, nil
}

// runner runs a preset hook's commands in the sandbox.
func (e *engine) runner(lease *Lease) harness.Runner {
	return func(ctx context.Context, c harness.Command) ([]byte, error) {
		req, err := e.execRequest(lease, c)
		if err != nil {
			return nil, err
		}
		r, err := lease.Exec(ctx, req, runnerOutputLimit)
		if err != nil {
			return nil, err
		}
		if !r.Status.Success() {
			return r.Stdout, fmt.Errorf("%s exited with %d: %s", c.Path, r.Status.Code, bytes.TrimSpace(e.red.Bytes(r.Stderr)))
		}
		return r.Stdout, nil
	}
}
