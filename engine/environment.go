package engine

import (
	"github.com/outposthq/outpost/credentials"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// sources are the layers of a command's environment (the rules, precedence
// and checks are credentials.Environment's): the provider's, the plain
// settings of .outpost/.env, then configuration, credentials, preset
// variables, the command's own and the caller's --env.
func (e *turnRun) sources(pe driver.Environment, cmdEnv map[string]string) credentials.Sources {
	return credentials.Sources{
		Fixed:         pe.Fixed,
		Defaults:      pe.Defaults,
		DotEnv:        e.dotenv,
		Configuration: e.config.Variables,
		Plan:          e.plan.Variables,
		Harness:       e.h.Variables,
		Command:       cmdEnv,
		Explicit:      e.t.Env,
	}
}

// checkEnv checks, before a sandbox is known, that the environment of a
// command with cmdEnv builds: no source sets one of the provider's fixed
// names (Capabilities.FixedEnv), every name is valid, no value holds a
// NUL. Errors have code configuration.
func (e *turnRun) checkEnv(cmdEnv map[string]string) error {
	fixed := map[string]string{}
	for _, name := range e.caps().FixedEnv {
		fixed[name] = ""
	}
	_, err := credentials.Environment(e.sources(driver.Environment{Fixed: fixed}, cmdEnv))
	return err
}

// execRequest is the request running c in lease with its complete
// environment.
func (e *turnRun) execRequest(lease *sandbox.Lease, c harness.Command) (driver.ExecRequest, error) {
	env, err := credentials.Environment(e.sources(lease.Environment(), c.Env))
	if err != nil {
		return driver.ExecRequest{}, err
	}
	return driver.ExecRequest{Path: c.Path, Args: c.Args, Env: env, Dir: c.Dir}, nil
}
