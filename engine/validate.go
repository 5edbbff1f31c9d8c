package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/credentials"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

func refuse(code outpost.Code, format string, args ...any) error {
	return outpost.Errorf(code, "validate", format, args...)
}

// validate is step 1 and 2: everything that can be refused without a
// sandbox.
func (e *turnRun) validate(ctx context.Context) error {
	if err := e.checkTurn(); err != nil {
		return err
	}
	// 2. Resolve variables: the process env with .outpost/.env over it.
	if err := e.resolve(); err != nil {
		return err
	}
	e.planKeyless()
	if err := e.gatewayOnly(); err != nil {
		return err
	}
	// The environment must build, clear of the provider's fixed names.
	if err := e.checkEnv(nil); err != nil {
		return err
	}
	// The request must build; it is built again once the sandbox is known.
	t := e.t
	if _, err := e.request(harness.Input{Prompt: t.Prompt, Model: t.Agent.Model, Workdir: e.workdir, Options: t.Options, ExtraArgs: t.ExtraArgs}); err != nil {
		return err
	}
	if err := e.locate(ctx); err != nil {
		return err
	}
	if err := e.forkTurn(ctx); err != nil {
		return err
	}
	return e.prepareWorkspace(ctx)
}

// checkTurn refuses a turn that cannot run whatever the sandbox.
func (e *turnRun) checkTurn() error {
	t := e.t
	h := t.Agent.Harness
	if h == nil {
		return refuse(outpost.Configuration, "no agent preset")
	}
	e.h = h
	if err := h.Validate(); err != nil {
		return outpost.Wrap(outpost.Configuration, "validate", err)
	}
	if t.Agent.Kind != harness.KindCLI {
		if t.Agent.Kind == "" {
			return refuse(outpost.Configuration, "agent kind is required (%q)", harness.KindCLI)
		}
		return refuse(outpost.Configuration, "agent kind %q is not supported (only %q)", t.Agent.Kind, harness.KindCLI)
	}
	if e.o.Lease == nil && e.o.Provider == nil {
		return refuse(outpost.Configuration, "no sandbox: set driver.Options.Lease or driver.Options.Provider")
	}
	if err := e.checkWorkspace(); err != nil {
		return err
	}
	if strings.TrimSpace(t.Prompt) == "" {
		return refuse(outpost.Configuration, "empty prompt")
	}
	if t.Command != "" && (strings.TrimSpace(t.Command) != t.Command || strings.ContainsAny(t.Command, "\x00\n")) {
		return refuse(outpost.Configuration, "invalid command %q", t.Command)
	}
	if t.Resume != "" && t.Fork != "" {
		return refuse(outpost.Configuration, "resume and fork are exclusive")
	}
	if t.ID != "" && (t.Resume != "" || t.Fork != "" || !conversation.ValidID(t.ID)) {
		return refuse(outpost.Configuration, "conversation id %q: a new conversation's id must be a valid id (conversation.NewID), without resume or fork", t.ID)
	}
	if t.Resume != "" && !h.Resumes() {
		return refuse(outpost.Refused, "agent %s cannot resume conversations", h.Name)
	}
	if t.Fork != "" && !h.Resumes() {
		return refuse(outpost.Refused, "agent %s cannot fork conversations: it cannot continue them", h.Name)
	}
	if t.Fork != "" && !h.Forks() {
		return refuse(outpost.Refused, "agent %s cannot fork conversations", h.Name)
	}
	if h.Bootstrap != "" && !e.installer().Known(h.Bootstrap) {
		return refuse(outpost.Configuration, "agent %s names unknown bootstrap %q (known: %v)", h.Name, h.Bootstrap, e.installer().Names())
	}
	if (t.Resume != "" || t.Fork != "") && e.o.Store == nil {
		return refuse(outpost.Configuration, "resume and fork need a conversation store")
	}
	return e.checkKeyless()
}

// resolve is step 2: the variables of the host environment and the
// workdir's .outpost/.env, the secrets to redact (a .outpost/.env or
// explicit value whose name or value looks secret: credentials.IsSecret),
// and the preset's credential and configuration plans.
func (e *turnRun) resolve() error {
	environ := e.o.Environ
	if environ == nil {
		environ = os.Environ()
	}
	wd, err := sandbox.ResolveWorkdir(e.t.Workdir)
	if err != nil {
		return outpost.Wrap(outpost.Configuration, "env", fmt.Errorf("working directory: %w", err))
	}
	e.workdir = wd
	if st, err := credentials.ReadDotDirState(wd); err == nil {
		e.dotDir, e.dotWd = st, wd
	}
	table, err := credentials.Resolve(environ, wd)
	if err != nil {
		return outpost.Wrap(outpost.Configuration, "env", err)
	}
	e.vars = table.Vars
	e.dotenv = table.DotEnvVars()
	for name, v := range e.dotenv {
		e.red.Add(credentials.SecretValues(name, v)...)
	}
	for name, v := range e.t.Env {
		e.red.Add(credentials.SecretValues(name, v)...)
	}
	h := e.h
	if h.Credentials != nil {
		// Once per preset per lease: a caller's lease that ran this preset
		// keeps its plan.
		var kept bool
		if e.o.Lease != nil {
			e.plan, kept = planOf(e.o.Lease, h.Name)
		}
		if !kept {
			if e.plan, err = planCredentials(h, e.vars, e.t.Env); err != nil {
				return err
			}
		}
		for _, v := range e.plan.Variables {
			e.red.Add(v)
		}
		// The preflight (Preflight): a preset that needs a credential and
		// gets none fails here, before any download or sandbox.
		if _, err := checkCredential(h, e.plan, e.vars, e.t.Env, e.caps().HostFiles); err != nil {
			return err
		}
	}
	if h.Configuration != nil {
		if e.config, err = h.Configuration(e.vars); err != nil {
			return e.planErr("configuration", err)
		}
	}
	return nil
}

// locate checks that the conversation to continue exists and belongs to
// this agent, and picks the turn's conversation id.
func (e *turnRun) locate(ctx context.Context) error {
	t := e.t
	if ref := t.Resume + t.Fork; ref != "" {
		if err := e.holdResumed(ctx); err != nil {
			return err
		}
		id, turn, err := SplitRef(ref)
		if err != nil {
			return err
		}
		ref, e.ws.forkAt = id, turn
		m, files, err := e.o.Store.Get(ctx, ref)
		if errors.Is(err, conversation.ErrNotFound) {
			// The store's own text names the id again: "conversation
			// nope: conversation: conversation: not found: nope".
			return outpost.Errorf(outpost.Conversation, "locate", "%s: %w", ref, conversation.ErrNotFound)
		}
		if err != nil {
			return outpost.Wrap(outpost.Conversation, "locate", fmt.Errorf("conversation %s: %w", ref, err))
		}
		if m.Agent != e.h.Name {
			return refuse(outpost.Configuration, "conversation %s belongs to agent %s, not %s", ref, m.Agent, e.h.Name)
		}
		e.parent, e.parentFs = m, files
	}
	// The model is frozen for the conversation: a continuation without one
	// keeps it, one with another changes it (recorded in the metadata).
	e.model = t.Agent.Model
	if e.parent.ID != "" && e.model == "" {
		e.model = e.parent.Model
	}
	switch {
	case t.Resume != "":
		e.convID = e.parent.ID
	case t.ID != "":
		return e.chosenID(ctx)
	default:
		e.convID = conversation.NewID()
	}
	return nil
}

// chosenID takes the caller's id for the new conversation (Turn.ID), which
// no stored conversation may have.
func (e *turnRun) chosenID(ctx context.Context) error {
	if e.o.Store != nil {
		_, err := e.o.Store.Meta(ctx, e.t.ID)
		if err == nil {
			return refuse(outpost.Configuration, "conversation %s exists: resume it", e.t.ID)
		}
		if ctx.Err() != nil {
			return ctxError(ctx, "locate", err)
		}
		if !errors.Is(err, conversation.ErrNotFound) {
			return outpost.Wrap(outpost.Conversation, "locate", err)
		}
	}
	e.convID = e.t.ID
	return nil
}

func (e *turnRun) caps() driver.Capabilities {
	if e.o.Lease != nil {
		return e.o.Lease.Capabilities()
	}
	return e.o.Provider.Capabilities()
}

func (e *turnRun) planErr(op string, err error) error {
	var mv *harness.MissingVariableError
	if errors.As(err, &mv) {
		return &outpost.Error{Code: outpost.Configuration, Op: op, Agent: e.h.Name, Err: err}
	}
	return outpost.Wrap(outpost.Configuration, op, err)
}

// request builds the agent's command and checks its environment.
func (e *turnRun) request(in harness.Input) (harness.Command, error) {
	cmd, err := e.h.Request(in)
	if err != nil {
		return cmd, outpost.Wrap(outpost.Configuration, "request", err)
	}
	if cmd.Path == "" {
		return cmd, refuse(outpost.Configuration, "agent %s built a command without a program", e.h.Name)
	}
	return cmd, e.checkEnv(cmd.Env)
}
