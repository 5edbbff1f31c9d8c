package declarative

import (
	"fmt"
	"strings"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/acp"
)

// compileACP checks and builds a preset file of protocol "acp": the
// fields of the agent's setup (credentials, files, classifiers, storage,
// bootstrap) as for any file, the command line literal, and the turn
// driven by harness/acp.
func compileACP(s *Spec, opts *Options) (*harness.Harness, error) {
	if s.Protocol != "acp" {
		return nil, fe("protocol", `want "acp" or nothing, not %q`, s.Protocol)
	}
	if err := checkIdentity(s); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"prompt", s.Prompt != ""}, {"session", s.Session != ""}, {"new_args", s.NewArgs != nil},
		{"resume_args", s.ResumeArgs != nil}, {"fork", s.Fork != nil}, {"schema_args", s.SchemaArgs != nil},
		{"output", s.Output != nil}, {"forkable", s.Forkable != nil && *s.Forkable},
	} {
		if f.set {
			return nil, fe(f.name, `not used with protocol "acp" (the protocol carries the prompt, the session and the output)`)
		}
	}
	for i, a := range s.Args {
		if strings.ContainsAny(a, "{}\x00") {
			return nil, fe(fmt.Sprintf("args[%d]", i), "%q: with protocol \"acp\" the arguments are literal", a)
		}
	}
	for i, a := range s.ModelArgs {
		if strings.ContainsAny(strings.ReplaceAll(a, "{model}", ""), "{}\x00") {
			return nil, fe(fmt.Sprintf("model_args[%d]", i), "%q: only {model} is replaced", a)
		}
	}
	p := &preset{s: s}
	if err := p.compileReserved(); err != nil {
		return nil, err
	}
	for _, check := range []func() error{
		func() error { return checkVariables(s) }, func() error { return checkCredentials(s.Credentials) },
		p.compileFiles, p.compileResumeFiles, p.compileResumePrepare,
		func() error { return checkEndpoint(s) }, p.compileClassifiers,
	} {
		if err := check(); err != nil {
			return nil, err
		}
	}
	var storage *harness.Storage
	if st := s.Storage; st != nil {
		var err error
		if storage, err = p.compileStorage(st); err != nil {
			return nil, err
		}
	}
	base, err := p.harness(storage, opts)
	if err != nil {
		return nil, err
	}
	stored := storage != nil
	if s.Resumable != nil && *s.Resumable && !stored {
		return nil, fe("resumable", "true needs storage")
	}
	if s.Capture != nil && *s.Capture && !stored {
		return nil, fe("capture", "true needs storage")
	}
	setFlags(base, s, stored, stored, false)
	h := acp.Preset(base, acp.Config{
		Name: s.Name, Program: s.Program, Args: s.Args, ModelArgs: s.ModelArgs, AllowArgs: s.AllowArgs,
		Env: s.Env, Reserved: s.ReservedArgs,
		Resume: func(in harness.Input) ([]harness.File, []harness.Command, error) {
			files, err := p.resumeFilesFor(in.Conversation, in)
			return files, p.prepareFor(in.Conversation, in), err
		},
	})
	if err := h.Validate(); err != nil {
		return nil, err
	}
	return h, nil
}
