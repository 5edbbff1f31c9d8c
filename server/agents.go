package server

import (
	"github.com/outposthq/outpost/internal/lookpath"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/sandbox/driver"
)

// Sources of an agent preset (Agent.Source).
const (
	SourceBuiltIn = "built-in" // registered in this binary (harness/presets)
	SourceFile    = "file"     // a preset file in the agents directory
)

// Agent is one agent preset as every list shows it: `outpost agents`
// (and its --json), GET /v1/agents and MCP's list_agents, all made by
// Agents.
type Agent struct {
	Name string `json:"name"`
	// Version is the pinned version of the preset's CLI: its bootstrap
	// pin's, else the one the preset states ("" when neither does).
	Version string `json:"version"`
	// Source is SourceBuiltIn or SourceFile; File is the preset file.
	Source string `json:"source"`
	File   string `json:"file,omitempty"`
	// Installed says that a turn needs no download for the preset's CLI
	// on this host: its program is on the PATH (which the local sandbox
	// runs), its pinned build is unpacked in the bootstrap cache (which
	// every sandbox installs from), or it is outpost's own binary.
	Installed bool `json:"installed"`
	// Path is where Installed found it; never serialized, so that a
	// server does not tell its clients its file system (`outpost doctor`
	// prints it).
	Path      string `json:"-"`
	Resumable bool   `json:"resumable"`
	Forkable  bool   `json:"forkable"`
	Live      bool   `json:"live_input"`
	Bootstrap string `json:"bootstrap,omitempty"`
	// Keyless says whether the preset's secrets can stay out of the
	// sandbox (the credential gateway, docs/security.md): "yes", "base-url"
	// (when its base-URL variable is set on the host) or "no".
	Keyless string `json:"keyless"`
	// Kind, Package and Program come from the preset's bootstrap pin:
	// "npm", "archive" or "self" (outpost's own binary); the npm package;
	// the executable. A preset without a pin has only its Program.
	Kind    string `json:"kind,omitempty"`
	Package string `json:"package,omitempty"`
	Program string `json:"program,omitempty"`
	// Error says why a preset file does not load; only Name, Source and
	// File are set with it.
	Error string `json:"error,omitempty"`
}

// AgentsOptions say where Agents looks. nil means defaults.
type AgentsOptions struct {
	// Installer has the pins (and the bootstrap cache); nil: the default
	// pins (bootstrap/pins.json, $OUTPOST_PINS over it).
	Installer *bootstrap.Installer
	// Dir is an agents directory whose preset files are listed after the
	// built-in presets ("": none; a server runs built-in presets only). A
	// file named like a built-in preset is left out: it is never used.
	Dir string
	// PATH is where programs are looked for ("": the process's).
	PATH string
}

// Agents lists the agent presets: the registered ones by name, then the
// preset files of o.Dir.
func Agents(o *AgentsOptions) []Agent {
	if o == nil {
		o = &AgentsOptions{}
	}
	inst := o.Installer
	if inst == nil {
		inst = &bootstrap.Installer{}
	}
	path := o.PATH
	if path == "" {
		path = os.Getenv("PATH")
	}
	pl := bootstrap.HostPlatform()
	out := []Agent{}
	builtin := presets.Names()
	for _, n := range builtin {
		h, _ := presets.Lookup(n)
		out = append(out, agentOf(h, SourceBuiltIn, "", inst, pl, path))
	}
	for _, n := range declarative.List(o.Dir) {
		if slices.Contains(builtin, n) {
			continue
		}
		file := filepath.Join(o.Dir, n+".json")
		h, ok, err := declarative.Find(o.Dir, n, &declarative.Options{Bootstrap: bootstrap.Known})
		if err != nil || !ok {
			msg := "not found"
			if err != nil {
				msg = err.Error()
			}
			out = append(out, Agent{Name: n, Source: SourceFile, File: file, Error: msg})
			continue
		}
		out = append(out, agentOf(h, SourceFile, file, inst, pl, path))
	}
	return out
}

// agentOf is a preset's entry.
func agentOf(h *harness.Harness, source, file string, inst *bootstrap.Installer, pl bootstrap.Platform, path string) Agent {
	a := Agent{Name: h.Name, Version: h.Version, Source: source, File: file, Resumable: h.Resumes(), Forkable: h.Forks(),
		Live: h.LiveInput != nil, Bootstrap: h.Bootstrap, Keyless: engine.Keyless(h)}
	if h.Bootstrap != "" {
		if pin, ok := inst.Pin(h.Bootstrap); ok {
			a.Version, a.Kind, a.Package, a.Program = pin.Version, string(pin.Kind), pin.Package, pin.Program
		}
	}
	if a.Program == "" {
		// A preset without a pin: its program as its request names it.
		if cmd, err := h.Request(harness.Input{Prompt: "x"}); err == nil {
			a.Program = cmd.Path
		}
	}
	if p, err := lookpath.Find(a.Program, path); err == nil {
		a.Installed, a.Path = true, p
	} else if h.Bootstrap != "" {
		a.Path, a.Installed = inst.InCache(h.Bootstrap, pl)
	}
	return a
}

// agentList is the server's list (GET /v1/agents, list_agents): the
// presets it runs, with its installer's pins, programs looked for on the
// PATH of its environment.
func (s *Server) agentList() []Agent {
	var path string
	for _, kv := range s.o.Environ {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	return Agents(&AgentsOptions{Installer: s.o.Installer, PATH: path})
}

// Sandbox is one sandbox provider as `outpost agents` and GET /v1/agents
// show it beside the agents: the isolation its leases get on this host
// (the effective mode: local's auto shows namespaces or none), whether
// egress gateway is enforced there, and why the leases run less isolated
// than asked.
type Sandbox struct {
	Name string `json:"sandbox"`
	// Isolation is driver.Capabilities.Isolation: none, namespaces,
	// container, pod ("" where the provider does not say, or did not open).
	Isolation string `json:"isolation"`
	// Egress is "enforced" where egress gateway is (Capabilities.Egress),
	// else "unenforced".
	Egress string `json:"egress"`
	// Note says why the leases run less isolated than asked
	// (driver.IsolationNoter: isolation=auto without a working bubblewrap).
	Note string `json:"note,omitempty"`
	// Error says why the provider did not open with its settings.
	Error string `json:"error,omitempty"`
}

// SandboxOf is a provider's entry: p as opened under name, or the error
// of opening it.
func SandboxOf(name string, p driver.Provider, err error) Sandbox {
	sb := Sandbox{Name: name, Egress: "unenforced"}
	if err != nil {
		sb.Error = err.Error()
		return sb
	}
	c := p.Capabilities()
	sb.Isolation = c.Isolation
	if c.Egress {
		sb.Egress = "enforced"
	}
	if n, ok := p.(driver.IsolationNoter); ok {
		sb.Note = n.IsolationNote()
	}
	return sb
}

// sandboxList is the server's sandboxes as its pool opens them (with the
// operator's settings), the default first.
func (s *Server) sandboxList() []Sandbox {
	out := make([]Sandbox, 0, len(s.o.Sandboxes))
	for _, name := range s.o.Sandboxes {
		key, err := s.poolKey(name, nil, true)
		var p driver.Provider
		if err == nil {
			p, err = s.pool.Provider(key)
		}
		out = append(out, SandboxOf(name, p, err))
	}
	return out
}
