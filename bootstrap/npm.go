package bootstrap

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// NPMSource says how an agent's npm pin is made from the registry: the
// main package, and for each platform key the package that holds the
// native CLI and the executable's path inside that package. It is derived
// from the pin itself (NPMSourceOf): pins.json is the only place that
// names an agent's npm packages.
type NPMSource struct {
	Package   string
	Program   string
	Platforms map[string]NPMPlatform
}

// NPMPlatform is one platform of an NPMSource.
type NPMPlatform struct {
	// Package is the platform package's name, as the pin has it (for an
	// npm: alias, the alias's target: Codex's are versions of @openai/codex
	// itself).
	Package string
	// Suffix is what the platform package's version adds to the CLI's
	// ("-linux-x64" for Codex's aliases, "" when the versions are equal).
	Suffix string
	// Bin is the executable inside the platform package (without npm's
	// "package/" prefix).
	Bin string
}

// NPMSourceOf derives the npm source of an npm pin: what `go run
// ./bootstrap/cmd/pins` needs to regenerate it at another version. Only
// linux-x64 is installed by the test suite; the other platforms' Bin
// paths follow each package's documented layout.
func NPMSourceOf(pin *Pin) (NPMSource, bool) {
	if pin == nil || pin.Kind != KindNPM {
		return NPMSource{}, false
	}
	src := NPMSource{Package: pin.Package, Program: pin.Program, Platforms: map[string]NPMPlatform{}}
	for key, a := range pin.Platforms {
		suffix, _ := strings.CutPrefix(a.Version, pin.Version)
		if a.Version == "" {
			suffix = ""
		}
		src.Platforms[key] = NPMPlatform{Package: a.Package, Suffix: suffix, Bin: a.Bin}
	}
	return src, true
}

// NPMSources are the npm agents of the embedded pins, by bootstrap name.
func NPMSources() map[string]NPMSource {
	out := map[string]NPMSource{}
	p, err := Embedded()
	if err != nil {
		return out
	}
	for name, pin := range p.Agents {
		if src, ok := NPMSourceOf(pin); ok {
			out[name] = src
		}
	}
	return out
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

var exactVersion = lazyre.New(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

// ResolveNPM makes the pin of an npm agent of the embedded pins at
// version from the registry (default DefaultRegistry); see ResolvePin.
func ResolveNPM(ctx context.Context, client *http.Client, registry, agent, version string) (*Pin, error) {
	sources := NPMSources()
	src, ok := sources[agent]
	if !ok {
		return nil, fmt.Errorf("%w %q: not an npm agent (npm agents: %v)", ErrUnknown, agent, slices.Sorted(maps.Keys(sources)))
	}
	return resolveNPM(ctx, client, registry, src, version)
}

// ResolvePin makes the pin of the npm agent that from pins (its packages,
// program and platforms, NPMSourceOf) at version from the registry
// (default DefaultRegistry): the main package's tarball and integrity, and
// each platform package's, checked against its declared os, cpu and libc.
// It trusts the registry's integrity values as npm itself does; what it
// returns is meant to be reviewed as a diff.
func ResolvePin(ctx context.Context, client *http.Client, registry string, from *Pin, version string) (*Pin, error) {
	src, ok := NPMSourceOf(from)
	if !ok {
		return nil, fmt.Errorf("%w: not an npm pin", ErrUnknown)
	}
	return resolveNPM(ctx, client, registry, src, version)
}

func resolveNPM(ctx context.Context, client *http.Client, registry string, src NPMSource, version string) (*Pin, error) {
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
	for _, key := range slices.Sorted(maps.Keys(src.Platforms)) {
		sp := src.Platforms[key]
		name, ver, err := optionalDependency(main, sp, version)
		if err != nil {
			return nil, fmt.Errorf("%s@%s: %w (for %s)", src.Package, version, err, key)
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

// optionalDependency finds the platform package sp among the main
// package's optional dependencies: a dependency of that name, or an npm:
// alias to it at the CLI's version plus sp.Suffix. It returns the package
// and exact version to fetch.
//
// A platform "package" that is the main package itself is a JavaScript
// CLI the same for every platform (Qwen Code's): it needs node in the
// sandbox.
func optionalDependency(main *npmManifest, sp NPMPlatform, version string) (name, ver string, err error) {
	if sp.Package == main.Name && sp.Suffix == "" {
		return main.Name, version, nil
	}
	for _, dep := range slices.Sorted(maps.Keys(main.OptionalDependencies)) {
		spec := main.OptionalDependencies[dep]
		name, ver := dep, spec
		if alias, ok := strings.CutPrefix(spec, "npm:"); ok {
			at := strings.LastIndex(alias, "@")
			if at <= 0 {
				return "", "", fmt.Errorf("%s: alias %q has no version", dep, spec)
			}
			name, ver = alias[:at], alias[at+1:]
		}
		if name != sp.Package || (sp.Suffix != "" && ver != version+sp.Suffix) {
			continue
		}
		if !exactVersion.MatchString(ver) {
			return "", "", fmt.Errorf("%s: %q is not an exact version", dep, spec)
		}
		return name, ver, nil
	}
	want := sp.Package
	if sp.Suffix != "" {
		want += "@" + version + sp.Suffix
	}
	return "", "", fmt.Errorf("no optional dependency %s", want)
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
