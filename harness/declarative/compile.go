package declarative

import (
	"context"
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/claude"
	"github.com/outposthq/outpost/harness/kit"
	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// MaxArgPrompt is the largest prompt passed as an argument (kit's: Linux
// limits one argument to 128 KiB); use prompt "stdin" or "file" for more.
const MaxArgPrompt = kit.MaxArgPrompt

var (
	nameRE    = lazyre.New(`^[a-z][a-z0-9-]{0,31}$`)
	idRE      = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)
	modelRE   = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}$`)
	eventKind = map[string]harness.EventType{
		"session": harness.EventSession, "message": harness.EventMessage, "delta": harness.EventMessage,
		"reasoning": harness.EventReasoning, "notice": harness.EventNotice, "failure": harness.EventFailure,
		"finished": harness.EventFinished, "usage": harness.EventUsage, "ignore": "",
		"tool_call": harness.EventToolCall, "tool_result": harness.EventToolResult,
	}
)

func nameOK(n string) bool { return nameRE.MatchString(n) }

// ValidSessionID reports whether id can be a native conversation id of a
// declarative preset: a short token safe as a path segment and a glob.
func ValidSessionID(id string) bool { return idRE.MatchString(id) }

// preset is a compiled Spec.
type preset struct {
	s         *Spec
	args      argList
	model     argList
	newArgs   argList
	resume    argList
	forkArgs  argList
	forkCmd   argList
	schema    argList
	reserved  kit.Flags
	quota     []*regexp.Regexp
	unavail   []*regexp.Regexp
	misconfig []*regexp.Regexp
	retry     []*regexp.Regexp
	text      *textSpec
	rules     []rule
	files     []harness.File
	// resumeFiles are written before a resumed or forked turn.
	resumeFiles []resumeFile
	// resumePrepare are run before a resumed or forked turn.
	resumePrepare []argList
}

type textSpec struct {
	ignore, failure, notice []*regexp.Regexp
	usage                   *regexp.Regexp
}

type rule struct {
	when                        []condition
	typ                         harness.EventType
	delta, ignore               bool
	text, session, id, stop     fieldPath
	in, out, cacheRead, cacheWr fieldPath
	usage                       bool
	kind                        string
	each                        fieldPath
	eachWhen, errorWhen         []condition
	tool, input, output         fieldPath
	cont, sum                   bool
}

func fe(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

func regexps(field string, pats []string) ([]*regexp.Regexp, error) {
	var out []*regexp.Regexp
	for i, p := range pats {
		if p == "" {
			return nil, fe(fmt.Sprintf("%s[%d]", field, i), "empty regular expression")
		}
		re, err := regexp.Compile(p)
		if err != nil {
			return nil, fe(fmt.Sprintf("%s[%d]", field, i), "%v", err)
		}
		out = append(out, re)
	}
	return out, nil
}

// retried reports whether any line of a text is a retry notice: such a
// text is transient, never terminal.
func (p *preset) retried(text string) bool {
	for _, l := range strings.Split(text, "\n") {
		if anyMatch(p.retry, l) {
			return true
		}
	}
	return false
}

func anyMatch(res []*regexp.Regexp, s string) bool {
	for _, re := range res {
		if re.MatchString(s) {
			return true
		}
	}
	return false
}

// compile checks a spec and builds its harness, in the order a reader
// meets the fields: identity, command lines, fork, reserved flags,
// variables and credentials, classifiers and output, then the harness.
func compile(s *Spec, opts *Options) (*harness.Harness, error) {
	if s.Protocol != "" {
		return compileACP(s, opts)
	}
	p := &preset{s: s}
	if err := checkIdentity(s); err != nil {
		return nil, err
	}
	session, err := p.compileArgs()
	if err != nil {
		return nil, err
	}
	if err := p.compileFork(session); err != nil {
		return nil, err
	}
	if err := p.compileReserved(); err != nil {
		return nil, err
	}
	if err := checkVariables(s); err != nil {
		return nil, err
	}
	if err := checkCredentials(s.Credentials); err != nil {
		return nil, err
	}
	if err := p.compileFiles(); err != nil {
		return nil, err
	}
	if err := p.compileResumeFiles(); err != nil {
		return nil, err
	}
	if err := p.compileResumePrepare(); err != nil {
		return nil, err
	}
	if err := checkEndpoint(s); err != nil {
		return nil, err
	}
	if err := p.compileClassifiers(); err != nil {
		return nil, err
	}
	if err := p.compileOutput(); err != nil {
		return nil, err
	}
	if s.Session == "output" && p.text != nil {
		return nil, fe("session", `"output" needs output format "jsonl" with a session event rule`)
	}
	if s.Session == "output" && !p.hasSessionRule() {
		return nil, fe("session", `"output" needs an output.events rule of event "session" with a session path`)
	}
	var storage *harness.Storage
	if st := s.Storage; st != nil {
		if storage, err = p.compileStorage(st); err != nil {
			return nil, err
		}
	}
	h, err := p.harness(storage, opts)
	if err != nil {
		return nil, err
	}
	if err := p.capabilities(h, storage != nil); err != nil {
		return nil, err
	}
	if err := h.Validate(); err != nil {
		return nil, err
	}
	return h, nil
}

// checkIdentity checks kind, name and program.
func checkIdentity(s *Spec) error {
	switch s.Kind {
	case "cli":
	case "":
		return fe("kind", `required ("cli")`)
	default:
		return fe("kind", `unknown kind %q (only "cli")`, s.Kind)
	}
	if !nameOK(s.Name) {
		return fe("name", "%q must match %s", s.Name, nameRE)
	}
	if s.Program == "" {
		return fe("program", "required")
	}
	if strings.ContainsAny(s.Program, "\x00\n") || strings.HasPrefix(s.Program, "-") {
		return fe("program", "%q is not an executable name or path", s.Program)
	}
	return nil
}

// compileArgs parses the command lines (args, model_args, new_args,
// resume_args) against session and prompt, and returns the placeholders
// a new session's arguments may hold.
func (p *preset) compileArgs() ([]string, error) {
	s := p.s
	session := []string{"home", "workdir"}
	switch s.Session {
	case "", "output":
	case "generated":
		session = append(session, "session")
	default:
		return nil, fe("session", `want "generated" or "output", not %q`, s.Session)
	}
	argAllowed := []string{"home", "workdir"}
	switch s.Prompt {
	case "", "argument":
		argAllowed = append(argAllowed, "prompt")
	case "stdin":
	case "file":
		argAllowed = append(argAllowed, "prompt_file")
	default:
		return nil, fe("prompt", `want "argument", "stdin" or "file", not %q`, s.Prompt)
	}
	var err error
	if p.args, err = parseArgs("args", s.Args, true, argAllowed...); err != nil {
		return nil, err
	}
	switch s.Prompt {
	case "", "argument":
		if !p.args.has("prompt") {
			return nil, fe("args", "prompt %q needs {prompt} in args", "argument")
		}
	case "file":
		if !p.args.has("prompt_file") {
			return nil, fe("args", "prompt %q needs {prompt_file} in args", "file")
		}
	}
	if p.model, err = parseArgs("model_args", s.ModelArgs, false, "model", "home", "workdir"); err != nil {
		return nil, err
	}
	if len(s.ModelArgs) > 0 && !p.model.has("model") {
		return nil, fe("model_args", "needs {model}")
	}
	if p.schema, err = parseArgs("schema_args", s.SchemaArgs, false, "schema", "schema_file", "home", "workdir"); err != nil {
		return nil, err
	}
	if len(s.SchemaArgs) > 0 && !p.schema.has("schema") && !p.schema.has("schema_file") {
		return nil, fe("schema_args", "needs {schema} or {schema_file}")
	}
	if p.newArgs, err = parseArgs("new_args", s.NewArgs, false, session...); err != nil {
		return nil, err
	}
	if s.Session == "generated" && !p.newArgs.has("session") {
		return nil, fe("new_args", "a generated session needs {session} in new_args, to tell the CLI its id")
	}
	return session, p.compileResume()
}

func (p *preset) compileResume() error {
	s := p.s
	var err error
	if p.resume, err = parseArgs("resume_args", s.ResumeArgs, false, "session", "home", "workdir"); err != nil {
		return err
	}
	if len(s.ResumeArgs) > 0 {
		if s.Session == "" {
			return fe("resume_args", `resuming needs a session ("generated" or "output")`)
		}
		if !p.resume.has("session") {
			return fe("resume_args", "needs {session}")
		}
	}
	return nil
}

// compileFork parses fork: arguments of the CLI, or a command of its own.
func (p *preset) compileFork(session []string) error {
	s := p.s
	if s.Fork == nil {
		return nil
	}
	if s.Session == "" {
		return fe("fork", `forking needs a session ("generated" or "output")`)
	}
	if (len(s.Fork.Args) > 0) == (len(s.Fork.Command) > 0) {
		return fe("fork", "set exactly one of args and command")
	}
	var err error
	if len(s.Fork.Args) > 0 {
		if p.forkArgs, err = parseArgs("fork.args", s.Fork.Args, false, append(slices.Clone(session), "parent")...); err != nil {
			return err
		}
		if !p.forkArgs.has("parent") {
			return fe("fork.args", "needs {parent}")
		}
		return nil
	}
	allowed := []string{"parent"}
	if s.Session == "generated" {
		allowed = append(allowed, "child")
	}
	if p.forkCmd, err = parseArgs("fork.command", s.Fork.Command, false, allowed...); err != nil {
		return err
	}
	if !p.forkCmd.has("parent") {
		return fe("fork.command", "needs {parent}")
	}
	if s.Session == "generated" && !p.forkCmd.has("child") {
		return fe("fork.command", "a generated session needs {child}")
	}
	if _, ok := p.forkCmd.items[0].literal(); !ok {
		return fe("fork.command[0]", "the program cannot hold a placeholder")
	}
	return nil
}

// compileReserved collects the flags outpost controls: those of the
// command lines and reserved_args.
func (p *preset) compileReserved() error {
	for i, r := range p.s.ReservedArgs {
		if !strings.HasPrefix(r, "-") || strings.ContainsAny(r, "= \x00") {
			return fe(fmt.Sprintf("reserved_args[%d]", i), "%q is not a flag name", r)
		}
	}
	p.reserved = kit.Flags{}
	for _, f := range slices.Concat(p.args.flags(), p.model.flags(), p.schema.flags(), p.newArgs.flags(), p.resume.flags(), p.forkArgs.flags(), p.s.ReservedArgs) {
		p.reserved[f] = ""
	}
	return nil
}

// checkVariables checks the names of env and variables.
func checkVariables(s *Spec) error {
	for _, f := range []struct {
		field string
		m     map[string]string
	}{{"env", s.Env}, {"variables", s.Variables}} {
		for k := range f.m {
			if !harness.ValidVariableName(k) {
				return fe(f.field, "%q is not a variable name", k)
			}
		}
	}
	return nil
}

// checkCredentials checks credentials: variable names, relative host
// files, login commands.
func checkCredentials(c *CredentialSpec) error {
	if c == nil {
		return nil
	}
	for i, v := range c.Variables {
		if !harness.ValidVariableName(v) {
			return fe(fmt.Sprintf("credentials.variables[%d]", i), "%q is not a variable name", v)
		}
	}
	if c.Required && len(c.Variables) == 0 {
		return fe("credentials.required", "needs credentials.variables")
	}
	if c.Required && len(c.HostFiles) > 0 {
		return fe("credentials.required", "cannot be known with host_files (outpost does not look at host files before allocation)")
	}
	for i, f := range c.HostFiles {
		if !harness.RelativePath(f.Source) {
			return fe(fmt.Sprintf("credentials.host_files[%d].source", i), "%q must be a relative path under the host's home", f.Source)
		}
		if !harness.RelativePath(f.Target) {
			return fe(fmt.Sprintf("credentials.host_files[%d].target", i), "%q must be a relative path under the sandbox's home", f.Target)
		}
	}
	for i, l := range c.Login {
		if len(l) == 0 || l[0] == "" {
			return fe(fmt.Sprintf("credentials.login[%d]", i), "needs a program")
		}
		for j, a := range l {
			if strings.ContainsRune(a, 0) {
				return fe(fmt.Sprintf("credentials.login[%d][%d]", i, j), "NUL byte")
			}
		}
	}
	return nil
}

// compileClassifiers compiles the patterns of quota, unavailable,
// misconfigured and retry.
func (p *preset) compileClassifiers() error {
	for _, c := range []struct {
		field string
		src   []string
		dst   *[]*regexp.Regexp
	}{
		{"quota", p.s.Quota, &p.quota},
		{"unavailable", p.s.Unavailable, &p.unavail},
		{"misconfigured", p.s.Misconfigured, &p.misconfig},
		{"retry", p.s.Retry, &p.retry},
	} {
		res, err := regexps(c.field, c.src)
		if err != nil {
			return err
		}
		*c.dst = res
	}
	return nil
}

// harness builds the harness of the compiled spec: its decoder, its
// classifiers, credentials, usage, bootstrap and durations.
func (p *preset) harness(storage *harness.Storage, opts *Options) (*harness.Harness, error) {
	s := p.s
	h := &harness.Harness{
		Name:      s.Name,
		Version:   s.Version,
		Request:   p.request,
		Variables: maps.Clone(s.Variables),
		Storage:   storage,
	}
	if p.text != nil {
		h.NewDecoder = p.textDecoder
		h.DecodeEnd = true
	} else {
		if slices.ContainsFunc(p.rules, func(r rule) bool { return r.sum }) {
			h.NewDecoder = p.jsonDecoder
		} else {
			h.Events = p.jsonEvents
		}
		h.RequiresFinishedEvent = s.Output != nil && s.Output.RequireFinished
	}
	h.NativeSchema = p.schema.items != nil
	h.Quota = p.classifier(p.quota)
	h.Unavailable = p.classifier(p.unavail)
	h.Misconfigured = p.classifier(p.misconfig)
	if s.Credentials != nil {
		h.Credentials = p.credentials
	}
	h.Endpoints = endpoints(s.Endpoint)
	if p.files != nil || len(s.PassVariables) > 0 {
		h.Configuration = p.configuration
	}
	switch s.Usage {
	case "":
		h.Usage = usageUnset
	case "events":
		h.Usage = harness.UsageEvents
	case "unavailable":
		h.Usage = harness.UsageUnavailable
	default:
		return nil, fe("usage", `want "events" or "unavailable", not %q (a file cannot describe a session usage command)`, s.Usage)
	}
	if s.Bootstrap != "" && opts.Bootstrap != nil && !opts.Bootstrap(s.Bootstrap) {
		return nil, fe("bootstrap", "unknown bootstrap name %q", s.Bootstrap)
	}
	h.Bootstrap = s.Bootstrap
	return h, p.durations(h)
}

// classifier matches a line against res unless it is a retry; nil without
// patterns.
func (p *preset) classifier(res []*regexp.Regexp) func(string) bool {
	if len(res) == 0 {
		return nil
	}
	return func(t string) bool {
		t = harness.ClipText(t) // the engine's bound, for other callers of the hook
		return anyMatch(res, t) && !p.retried(t)
	}
}

// durations sets inactivity and retry_bound.
func (p *preset) durations(h *harness.Harness) error {
	if p.s.Inactivity != "" {
		d, err := time.ParseDuration(p.s.Inactivity)
		if err != nil || d < 0 {
			return fe("inactivity", "want a Go duration such as 15m, not %q", p.s.Inactivity)
		}
		h.Inactivity = d
	}
	if p.s.RetryBound != "" {
		d, err := time.ParseDuration(p.s.RetryBound)
		if err != nil || d <= 0 {
			return fe("retry_bound", "want a positive Go duration such as 3m, not %q", p.s.RetryBound)
		}
		setRetryBound(h, d)
	}
	return nil
}

// capabilities sets capture, resume and fork: absent flags keep the
// reference's meaning (a stored session with resume_args resumes).
func (p *preset) capabilities(h *harness.Harness, stored bool) error {
	s := p.s
	portable := stored && s.Session != ""
	canResume := portable && len(s.ResumeArgs) > 0
	resumable := canResume
	if s.Resumable != nil {
		if *s.Resumable && !canResume {
			return fe("resumable", "true needs session, storage and resume_args")
		}
		resumable = *s.Resumable
	}
	forkable := resumable && s.Fork != nil
	if s.Forkable != nil {
		if *s.Forkable && s.Fork == nil {
			return fe("forkable", "true needs fork")
		}
		forkable = *s.Forkable
	}
	capture := portable
	if s.Capture != nil {
		if *s.Capture && !portable {
			return fe("capture", "true needs storage and session")
		}
		capture = *s.Capture
	}
	setFlags(h, s, capture, resumable, forkable)
	if p.forkCmd.items != nil {
		h.Fork = p.fork
	}
	return nil
}

func (p *preset) hasSessionRule() bool {
	for _, r := range p.rules {
		if r.typ == harness.EventSession && r.session != nil {
			return true
		}
	}
	return false
}

func (p *preset) compileStorage(st *StorageSpec) (*harness.Storage, error) {
	if len(st.Roots) == 0 {
		return nil, fe("storage.roots", "required")
	}
	for i, r := range st.Roots {
		if !harness.RelativePath(r) || path.Clean(r) != r {
			return nil, fe(fmt.Sprintf("storage.roots[%d]", i), "%q must be a clean relative path inside the home", r)
		}
	}
	if len(st.Files) == 0 {
		return nil, fe("storage.files", "required")
	}
	pats := make([]tmpl, len(st.Files))
	for i, f := range st.Files {
		field := fmt.Sprintf("storage.files[%d]", i)
		t, err := parseTmpl(f, "session")
		if err != nil {
			return nil, fe(field, "%v", err)
		}
		if !t.has("session") && !st.Shared {
			return nil, fe(field, "needs {session} (or storage.shared)")
		}
		probe := t.expand(map[string]string{"session": "x"})
		if _, err := path.Match(probe, ""); err != nil || !harness.RelativePath(probe) {
			return nil, fe(field, "%q is not a relative glob pattern", f)
		}
		pats[i] = t
	}
	var place func(rel, native, workdir string) string
	switch st.Workdir {
	case "":
	case "slug":
		place = claude.Place
	default:
		return nil, fe("storage.workdir", `want "slug", not %q`, st.Workdir)
	}
	return &harness.Storage{
		Place: place,
		Roots: slices.Clone(st.Roots),
		Match: func(rel, native string) bool {
			if !ValidSessionID(native) {
				return false
			}
			for _, t := range pats {
				if ok, _ := path.Match(t.expand(map[string]string{"session": native}), rel); ok {
					return true
				}
			}
			return false
		},
	}, nil
}

// newID returns a random UUID (version 4).
func newID(preset string) (string, error) {
	id, err := kit.NewUUID()
	if err != nil {
		return "", fmt.Errorf("%s: generating an id: %w", preset, err)
	}
	return id, nil
}

// PromptDir is where prompt files go, relative to the sandbox's home.
const PromptDir = ".outpost/prompts"

func (p *preset) request(in harness.Input) (harness.Command, error) {
	s := p.s
	name := s.Name
	if err := (kit.Opening{Preset: name}).Check(in); err != nil {
		return harness.Command{}, err
	}
	if in.Fork && p.forkArgs.items == nil && p.forkCmd.items == nil {
		return harness.Command{}, fmt.Errorf("%s: conversations cannot be forked (the file describes no fork)", name)
	}
	if len(in.Options) > 0 {
		return harness.Command{}, fmt.Errorf("%s: a preset file takes no options (got %s)", name, strings.Join(slices.Sorted(maps.Keys(in.Options)), ", "))
	}
	vals := map[string]string{"home": in.Home, "workdir": in.Workdir}
	cmd := harness.Command{Path: s.Program, Env: maps.Clone(s.Env)}
	if err := p.prompt(in, vals, &cmd); err != nil {
		return harness.Command{}, err
	}
	var model []string
	if len(in.Schema) > 0 && p.schema.items != nil {
		vals["schema"], vals["schema_file"] = string(in.Schema), in.SchemaFile
		model = p.schema.expand(vals, nil)
	}
	if in.Model != "" {
		if !modelRE.MatchString(in.Model) {
			return harness.Command{}, fmt.Errorf("%s: invalid model name %q", name, in.Model)
		}
		vals["model"] = in.Model
		model = append(model, p.model.expand(vals, nil)...)
	}
	session, err := p.sessionArgs(in, vals, &cmd)
	if err != nil {
		return harness.Command{}, err
	}
	if err := kit.CheckExtraArgs(name, in.ExtraArgs, p.reserved.Check); err != nil {
		return harness.Command{}, err
	}
	splices := map[string][]string{"{model_args}": model, "{session_args}": session, "{extra_args}": in.ExtraArgs}
	cmd.Args = p.args.expand(vals, splices)
	for _, sp := range Splices {
		if !p.args.hasSplice(sp) {
			cmd.Args = append(cmd.Args, splices[sp]...)
		}
	}
	return cmd, nil
}

// prompt gives the prompt to the command the way the file says: an
// argument (bounded), standard input, or a file in the home.
func (p *preset) prompt(in harness.Input, vals map[string]string, cmd *harness.Command) error {
	name := p.s.Name
	switch p.s.Prompt {
	case "", "argument":
		if len(in.Prompt) > MaxArgPrompt {
			return fmt.Errorf("%s: the prompt is %d bytes; at most %d go on the command line (set prompt to stdin or file)", name, len(in.Prompt), MaxArgPrompt)
		}
		vals["prompt"] = in.Prompt
	case "stdin":
		cmd.Stdin = []byte(in.Prompt)
	case "file":
		id, err := newID(name)
		if err != nil {
			return err
		}
		rel := PromptDir + "/" + id + ".txt"
		vals["prompt_file"] = path.Join(in.Home, rel)
		cmd.Files = []harness.File{{Path: rel, Content: []byte(in.Prompt), Mode: 0o600}}
	}
	return nil
}

// sessionArgs are the arguments of a new, forked or resumed session.
func (p *preset) sessionArgs(in harness.Input, vals map[string]string, cmd *harness.Command) ([]string, error) {
	name := p.s.Name
	if in.Conversation != "" && !ValidSessionID(in.Conversation) {
		return nil, fmt.Errorf("%s: %q is not a conversation id", name, in.Conversation)
	}
	if in.Conversation == "" {
		if err := p.generate(vals, cmd); err != nil {
			return nil, err
		}
		return p.newArgs.expand(vals, nil), nil
	}
	files, err := p.resumeFilesFor(in.Conversation, in)
	if err != nil {
		return nil, err
	}
	cmd.Files = append(cmd.Files, files...)
	cmd.Prepare = p.prepareFor(in.Conversation, in)
	if in.Fork {
		if p.forkArgs.items == nil {
			return nil, fmt.Errorf("%s: conversations cannot be forked through the request", name)
		}
		vals["parent"] = in.Conversation
		if err := p.generate(vals, cmd); err != nil {
			return nil, err
		}
		return p.forkArgs.expand(vals, nil), nil
	}
	if p.resume.items == nil {
		return nil, fmt.Errorf("%s: conversations cannot be resumed", name)
	}
	vals["session"] = in.Conversation
	if p.s.Session == "generated" {
		cmd.Session = in.Conversation
	}
	return p.resume.expand(vals, nil), nil
}

// generate makes the id of a new generated session.
func (p *preset) generate(vals map[string]string, cmd *harness.Command) error {
	if p.s.Session != "generated" {
		return nil
	}
	id, err := newID(p.s.Name)
	if err != nil {
		return err
	}
	vals["session"], cmd.Session = id, id
	return nil
}

func (p *preset) credentials(vars harness.Vars) (harness.Plan, error) {
	c := p.s.Credentials
	var plan harness.Plan
	for _, v := range c.Variables {
		if val, ok := vars.Lookup(v); ok {
			if plan.Variables == nil {
				plan.Variables = map[string]string{}
			}
			plan.Variables[v] = val
		}
	}
	if c.Required && len(plan.Variables) == 0 {
		return plan, &harness.MissingVariableError{Names: slices.Clone(c.Variables), Why: p.s.Name + " has no credential without one"}
	}
	if home, ok := vars.Lookup("HOME"); ok && path.IsAbs(home) {
		for _, f := range c.HostFiles {
			plan.HostFiles = append(plan.HostFiles, harness.HostFile{Source: path.Join(path.Clean(home), f.Source), Target: f.Target, Mode: 0o600, Optional: f.Optional})
		}
	}
	for _, l := range c.Login {
		plan.Login = append(plan.Login, harness.Command{Path: l[0], Args: slices.Clone(l[1:])})
	}
	return plan, nil
}

func (p *preset) fork(ctx context.Context, parent string, run harness.Runner) (string, error) {
	if !ValidSessionID(parent) {
		return "", fmt.Errorf("%s: %q is not a conversation id", p.s.Name, parent)
	}
	vals := map[string]string{"parent": parent}
	if p.s.Session == "generated" {
		id, err := newID(p.s.Name)
		if err != nil {
			return "", err
		}
		vals["child"] = id
	}
	argv := p.forkCmd.expand(vals, nil)
	r, err := run(ctx, harness.Command{Path: argv[0], Args: argv[1:]})
	if err != nil {
		return "", err
	}
	if !r.Status.Success() {
		return "", fmt.Errorf("%s: the fork command exited with %d: %s", p.s.Name, r.Status.Code, firstLine(string(r.Stderr)))
	}
	child := vals["child"]
	if child == "" {
		child, _, _ = strings.Cut(strings.TrimSpace(string(r.Stdout)), "\n")
		child = strings.TrimSpace(child)
		if !ValidSessionID(child) {
			return "", fmt.Errorf("%s: the fork command printed no conversation id", p.s.Name)
		}
	}
	return child, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
