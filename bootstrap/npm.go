package bootstrap

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// NPMSource says how an agent's npm pin is made from the registry: the
// main package, and for each platform key the optional dependency that
// holds the native CLI and the executable's path inside that package.
type NPMSource struct {
	Package   string
	Program   string
	Platforms map[string]NPMPlatform
}

// NPMPlatform is one platform of an NPMSource.
type NPMPlatform struct {
	// Dependency is the name under the main package's optionalDependencies
	// (its value may be an npm: alias, as Codex's are).
	Dependency string
	// Bin is the executable inside the platform package (without npm's
	// "package/" prefix).
	Bin string
}

// NPMSources are the npm CLIs whose pins `go run ./bootstrap/cmd/pins`
// regenerates. Only linux-x64 is installed by the test suite; the other
// platforms' Bin paths follow each package's documented layout.
var NPMSources = map[string]NPMSource{
	"claude": {
		Package: "@anthropic-ai/claude-code",
		Program: "claude",
		Platforms: map[string]NPMPlatform{
			"linux-x64":        {"@anthropic-ai/claude-code-linux-x64", "claude"},
			"linux-x64-musl":   {"@anthropic-ai/claude-code-linux-x64-musl", "claude"},
			"linux-arm64":      {"@anthropic-ai/claude-code-linux-arm64", "claude"},
			"linux-arm64-musl": {"@anthropic-ai/claude-code-linux-arm64-musl", "claude"},
			"darwin-x64":       {"@anthropic-ai/claude-code-darwin-x64", "claude"},
			"darwin-arm64":     {"@anthropic-ai/claude-code-darwin-arm64", "claude"},
		},
	},
	"codex": {
		Package: "@openai/codex",
		Program: "codex",
		Platforms: map[string]NPMPlatform{
			// Static musl binaries: they run on any Linux.
			"linux-x64":    {"@openai/codex-linux-x64", "vendor/x86_64-unknown-linux-musl/bin/codex"},
			"linux-arm64":  {"@openai/codex-linux-arm64", "vendor/aarch64-unknown-linux-musl/bin/codex"},
			"darwin-x64":   {"@openai/codex-darwin-x64", "vendor/x86_64-apple-darwin/bin/codex"},
			"darwin-arm64": {"@openai/codex-darwin-arm64", "vendor/aarch64-apple-darwin/bin/codex"},
		},
	},
	"copilot": {
		Package: "@github/copilot",
		Program: "copilot",
		Platforms: map[string]NPMPlatform{
			"linux-x64":        {"@github/copilot-linux-x64", "copilot"},
			"linux-x64-musl":   {"@github/copilot-linuxmusl-x64", "copilot"},
			"linux-arm64":      {"@github/copilot-linux-arm64", "copilot"},
			"linux-arm64-musl": {"@github/copilot-linuxmusl-arm64", "copilot"},
			"darwin-x64":       {"@github/copilot-darwin-x64", "copilot"},
			"darwin-arm64":     {"@github/copilot-darwin-arm64", "copilot"},
		},
	},
}

// npmManifest is the part of a registry version document that pins use.
type npmManifest struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Dist    struct {
		Integrity string `json:"integrity"`
		Tarball   string `json:"tarball"`
	} `json:"dist"`
	OptionalDependencies map[string]string `json:"optionalDependencies"`
	OS                   []string          `json:"os"`
	CPU                  []string          `json:"cpu"`
	Libc                 []string          `json:"libc"`
}

var exactVersion = regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

// ResolveNPM makes the pin of an npm agent (a key of NPMSources) at
// version from the registry (default DefaultRegistry): the main package's
// tarball and integrity, and each platform package's, checked against its
// declared os, cpu and libc. It trusts the registry's integrity values as
// npm itself does; what it returns is meant to be reviewed as a diff.
func ResolveNPM(ctx context.Context, client *http.Client, registry, agent, version string) (*Pin, error) {
	src, ok := NPMSources[agent]
	if !ok {
		return nil, fmt.Errorf("%w %q: not an npm agent (npm agents: %v)", ErrUnknown, agent, sortedKeys(NPMSources))
	}
	if !exactVersion.MatchString(version) {
		return nil, fmt.Errorf("version %q is not an exact version", version)
	}
	if registry == "" {
		registry = DefaultRegistry
	}
	if client == nil {
		client = defaultClient
	}
	main, err := npmVersion(ctx, client, registry, src.Package, version)
	if err != nil {
		return nil, err
	}
	if _, err := ParseIntegrity(main.Dist.Integrity); err != nil {
		return nil, fmt.Errorf("%s@%s: %w", src.Package, version, err)
	}
	pin := &Pin{Kind: KindNPM, Version: version, Program: src.Program, Package: src.Package,
		Tarball: main.Dist.Tarball, Integrity: main.Dist.Integrity, Platforms: map[string]*Artifact{}}
	for _, key := range sortedKeys(src.Platforms) {
		sp := src.Platforms[key]
		spec, ok := main.OptionalDependencies[sp.Dependency]
		if !ok {
			return nil, fmt.Errorf("%s@%s has no optional dependency %s (for %s)", src.Package, version, sp.Dependency, key)
		}
		name, ver := sp.Dependency, spec
		if alias, ok := strings.CutPrefix(spec, "npm:"); ok {
			at := strings.LastIndex(alias, "@")
			if at <= 0 {
				return nil, fmt.Errorf("%s: alias %q has no version", sp.Dependency, spec)
			}
			name, ver = alias[:at], alias[at+1:]
		}
		if !exactVersion.MatchString(ver) {
			return nil, fmt.Errorf("%s: %q is not an exact version", sp.Dependency, spec)
		}
		m, err := npmVersion(ctx, client, registry, name, ver)
		if err != nil {
			return nil, err
		}
		want, err := ParsePlatformKey(key)
		if err != nil {
			return nil, err
		}
		if len(m.OS) > 0 && !slices.Contains(m.OS, want.OS) {
			return nil, fmt.Errorf("%s@%s is for os %v, not %s (%s)", name, ver, m.OS, want.OS, key)
		}
		if cpu := npmArch[want.Arch]; len(m.CPU) > 0 && !slices.Contains(m.CPU, cpu) {
			return nil, fmt.Errorf("%s@%s is for cpu %v, not %s (%s)", name, ver, m.CPU, cpu, key)
		}
		libc := ""
		if len(m.Libc) == 1 {
			libc = m.Libc[0]
		}
		if want.Libc == Musl && libc != Musl {
			return nil, fmt.Errorf("%s@%s declares libc %v, not musl (%s)", name, ver, m.Libc, key)
		}
		if _, err := ParseIntegrity(m.Dist.Integrity); err != nil {
			return nil, fmt.Errorf("%s@%s: %w", name, ver, err)
		}
		pin.Platforms[key] = &Artifact{Package: name, Version: ver, URL: m.Dist.Tarball, Integrity: m.Dist.Integrity, Bin: sp.Bin, Libc: libc}
	}
	return pin, pin.validate()
}

// npmVersion fetches a package's version document from the registry.
func npmVersion(ctx context.Context, client *http.Client, registry, name, version string) (*npmManifest, error) {
	u := strings.TrimSuffix(registry, "/") + "/" + strings.Replace(name, "/", "%2f", 1) + "/" + url.PathEscape(version)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "outpost-bootstrap")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s@%s: %w", name, version, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s@%s: %w", name, version, &statusError{url: u, code: resp.StatusCode})
	}
	var m npmManifest
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&m); err != nil {
		return nil, fmt.Errorf("%s@%s: %w", name, version, err)
	}
	if m.Name != name || m.Version != version {
		return nil, fmt.Errorf("%s@%s: the registry answered with %s@%s", name, version, m.Name, m.Version)
	}
	return &m, nil
}
