package engine

import (
	"errors"
	"maps"
	"os"
	"slices"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/credentials"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox"
)

// PreflightOptions are what Preflight checks a preset's credentials
// against: the variables a turn would resolve and the sandbox it would
// run on.
type PreflightOptions struct {
	// Environ is the host's environment (RunOptions.Environ; nil:
	// os.Environ()), with Workdir's .outpost/.env over it.
	Environ []string
	Workdir string
	// Env are the turn's explicit variables (Turn.Env, the CLI's --env):
	// a credential given there counts.
	Env map[string]string
	// HostFiles says whether the sandbox takes host files
	// (driver.Capabilities.HostFiles; local does not): only then do a
	// host login file, a generated file or a login command count.
	HostFiles bool
}

// Credential says where a preset's credential comes from, by name only:
// never a value.
type Credential struct {
	// Variables are the names of the variables that give it, sorted.
	Variables []string `json:"variables,omitempty"`
	// HostFiles are the host login files copied into the sandbox (those
	// that exist, on a sandbox that takes host files).
	HostFiles []string `json:"host_files,omitempty"`
	// Setup: the preset generates a credential file or runs a login
	// command in the sandbox.
	Setup bool `json:"setup,omitempty"`
}

// None reports whether the credential is nothing at all.
func (c Credential) None() bool { return len(c.Variables) == 0 && len(c.HostFiles) == 0 && !c.Setup }

// Preflight is the credential check every turn makes before anything is
// downloaded or allocated (step 1 of Run, which `outpost run`, the HTTP
// API and MCP all pass through), for callers that want it alone: a
// server refusing a request before it queues the turn, `outpost doctor`.
// It plans the preset's credentials (Harness.Credentials) from the
// variables and fails with code configuration when the preset needs a
// credential (Plan.Need, or a required variable) and none reaches the
// sandbox; the message names the variables to set. A preset that needs
// none (echo, aider) never fails here. Keyless turns are no exception:
// the credential gateway holds the same secret the plan selects.
func Preflight(h *harness.Harness, o *PreflightOptions) (Credential, error) {
	if o == nil {
		o = &PreflightOptions{}
	}
	if h == nil {
		return Credential{}, refuse(outpost.Configuration, "no agent preset")
	}
	environ := o.Environ
	if environ == nil {
		environ = os.Environ()
	}
	wd, err := sandbox.ResolveWorkdir(o.Workdir)
	if err != nil {
		return Credential{}, outpost.Errorf(outpost.Configuration, "env", "working directory: %w", err)
	}
	table, err := credentials.Resolve(environ, wd)
	if err != nil {
		return Credential{}, outpost.Wrap(outpost.Configuration, "env", err)
	}
	if h.Credentials == nil {
		return Credential{}, nil
	}
	plan, err := planCredentials(h, table.Vars, o.Env)
	if err != nil {
		return Credential{}, err
	}
	return checkCredential(h, plan, table.Vars, o.Env, o.HostFiles)
}

// planCredentials is the preset's credential plan from vars. A plan that
// fails for a missing variable (a required one) is an empty plan when the
// explicit variables give it: they reach the agent as they are.
func planCredentials(h *harness.Harness, vars harness.Vars, explicit map[string]string) (harness.Plan, error) {
	p, err := h.Credentials(vars)
	if err == nil {
		return p, nil
	}
	var mv *harness.MissingVariableError
	if !errors.As(err, &mv) {
		return p, outpost.Wrap(outpost.Configuration, "credentials", err)
	}
	if _, ok := explicitPlan(h, vars, explicit); ok {
		return harness.Plan{}, nil
	}
	return p, &outpost.Error{Code: outpost.Configuration, Op: "credentials", Agent: h.Name, Err: err}
}

// checkCredential says where the plan's credential comes from, and
// refuses a plan whose Need nothing meets: no variable, explicit or
// planned; no host file, generated file or login command on a sandbox
// that takes them.
func checkCredential(h *harness.Harness, p harness.Plan, vars harness.Vars, explicit map[string]string, hostFiles bool) (Credential, error) {
	var c Credential
	need := p.Need
	names := map[string]bool{}
	for n := range p.Variables {
		names[n] = true
	}
	// The explicit variables reach the agent over everything: the plan
	// they would make says whether they give (or make unneeded) a
	// credential, such as a base URL that needs no key.
	if xp, ok := explicitPlan(h, vars, explicit); ok {
		need = xp.Need
		for n := range xp.Variables {
			if explicit[n] != "" {
				names[n] = true
			}
		}
	}
	c.Variables = slices.Sorted(maps.Keys(names))
	var unused []string // host files that exist but do not reach the sandbox
	for _, f := range p.HostFiles {
		if _, err := os.Stat(f.Source); err != nil {
			continue
		}
		if hostFiles {
			c.HostFiles = append(c.HostFiles, f.Source)
		} else {
			unused = append(unused, f.Source)
		}
	}
	c.Setup = hostFiles && (len(p.Files) > 0 || len(p.Login) > 0)
	if need == "" || !c.None() {
		return c, nil
	}
	msg := need
	if len(unused) > 0 {
		msg += "; the host's " + unused[0] + " is not copied into this sandbox, which takes variables only"
	}
	return c, &outpost.Error{Code: outpost.Configuration, Op: "credentials", Agent: h.Name, Msg: msg}
}

// explicitPlan is the plan the preset would make with the explicit
// variables in the table; ok is false without explicit variables or when
// that plan fails.
func explicitPlan(h *harness.Harness, vars harness.Vars, explicit map[string]string) (harness.Plan, bool) {
	if len(explicit) == 0 || h.Credentials == nil {
		return harness.Plan{}, false
	}
	with := maps.Clone(vars)
	if with == nil {
		with = harness.Vars{}
	}
	maps.Copy(with, explicit)
	p, err := h.Credentials(with)
	return p, err == nil
}
