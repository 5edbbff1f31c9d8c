package bootstrap

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
)

// PinsVariable names a JSON file whose agents replace the embedded pins of
// the same name (see docs/bootstrap.md): how a user points the antigravity
// pin at a newer archive, or any pin at an internal mirror, without
// rebuilding outpost.
const PinsVariable = "OUTPOST_PINS"

// RegistryVariable overrides the npm registry the npm pins download from
// (a mirror, or a test server); default the pin file's registry,
// https://registry.npmjs.org.
const RegistryVariable = "OUTPOST_NPM_REGISTRY"

// DefaultRegistry is the public npm registry.
const DefaultRegistry = "https://registry.npmjs.org"

// SchemaVersion is the pin file format this package reads.
const SchemaVersion = 1

//go:embed pins.json
var embeddedPins []byte

// Kind says how a pin is installed.
type Kind string

const (
	// KindNPM: npm packages. The main package's tarball and each platform
	// package's are pinned with the registry's sha512 integrity; the
	// platform package (the native CLI) is what gets installed.
	KindNPM Kind = "npm"
	// KindArchive: a tar (optionally gzip-compressed) archive per
	// platform, pinned by its hex SHA-512.
	KindArchive Kind = "archive"
	// KindSelf: outpost's own binary (the echo agent).
	KindSelf Kind = "self"
)

// Pins is the pin file: for each bootstrap name, the exact artifacts
// outpost installs and their SHA-512 digests. The built-in file is
// bootstrap/pins.json, embedded in the binary and regenerated from the npm
// registry by `go run ./bootstrap/cmd/pins`.
type Pins struct {
	// Schema is the format version (SchemaVersion).
	Schema int `json:"schema"`
	// Registry is the npm registry the npm pins' URLs point at. URLs under
	// it are rewritten to $OUTPOST_NPM_REGISTRY when that is set.
	Registry string `json:"registry,omitempty"`
	// Agents maps a bootstrap name to its pin.
	Agents map[string]*Pin `json:"agents"`
}

// Pin is one agent CLI at one version.
type Pin struct {
	Kind Kind `json:"kind"`
	// Version is the CLI's version (the main npm package's).
	Version string `json:"version"`
	// Program is the name the CLI is installed as, and the name its preset
	// runs ("claude", "agy", "outpost").
	Program string `json:"program"`
	// Package, Tarball and Integrity pin the main npm package. Only the
	// platform package is installed (the native binary needs neither node
	// nor the wrapper), but the wrapper is pinned too, so a bump reviews
	// both.
	Package   string `json:"package,omitempty"`
	Tarball   string `json:"tarball,omitempty"`
	Integrity string `json:"integrity,omitempty"`
	// Platforms maps a platform key ("linux-x64", "linux-x64-musl",
	// "linux-arm64", "darwin-arm64", ...) to what is installed there.
	Platforms map[string]*Artifact `json:"platforms,omitempty"`
	// Note says where the pin comes from when that needs saying.
	Note string `json:"note,omitempty"`
}

// Artifact is one downloadable file of a pin.
type Artifact struct {
	// Package and Version name the npm platform package (Version differs
	// from the CLI's for npm aliases: @openai/codex@0.171.0-linux-x64).
	Package string `json:"package,omitempty"`
	Version string `json:"version,omitempty"`
	// URL is where the file is downloaded from.
	URL string `json:"url"`
	// Integrity is npm's "sha512-<base64>"; SHA512 is the hex form used
	// for archives. Exactly one is set.
	Integrity string `json:"integrity,omitempty"`
	SHA512    string `json:"sha512,omitempty"`
	// Bin is the executable's path inside the package, after Strip.
	Bin string `json:"bin"`
	// Libc is the C library the executable needs: "glibc", "musl", or ""
	// for a static executable that runs on any Linux.
	Libc string `json:"libc,omitempty"`
	// Strip is how many leading path components of the archive's entries
	// are removed. npm tarballs always lose their first ("package/"),
	// whatever this says.
	Strip int `json:"strip,omitempty"`
}

// Digest returns the artifact's pinned digest.
func (a *Artifact) Digest() (Digest, error) {
	switch {
	case a.Integrity != "" && a.SHA512 != "":
		return Digest{}, errors.New("both integrity and sha512 are set")
	case a.Integrity != "":
		return ParseIntegrity(a.Integrity)
	case a.SHA512 != "":
		return ParseHex(a.SHA512)
	}
	return Digest{}, errors.New("no digest (integrity or sha512)")
}

// Name is how messages name the artifact: its npm package at its version,
// or its URL's file name.
func (a *Artifact) Name() string {
	if a.Package != "" {
		return a.Package + "@" + a.Version
	}
	if u, err := url.Parse(a.URL); err == nil && u.Path != "" {
		return path.Base(u.Path)
	}
	return a.URL
}

// ParsePins reads and validates a pin file.
func ParsePins(data []byte) (*Pins, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Pins
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("pin file: %w", err)
	}
	if p.Schema != SchemaVersion {
		return nil, fmt.Errorf("pin file: schema %d, this outpost reads %d", p.Schema, SchemaVersion)
	}
	if p.Registry == "" {
		p.Registry = DefaultRegistry
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Validate checks every pin: a known kind, a version, a program, and for
// each artifact a URL, exactly one well-formed SHA-512 digest and a clean
// relative Bin.
func (p *Pins) Validate() error {
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(p.Agents)) {
		if err := p.Agents[name].validate(); err != nil {
			errs = append(errs, fmt.Errorf("pin %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

func (p *Pin) validate() error {
	if p == nil {
		return errors.New("empty")
	}
	if p.Version == "" {
		return errors.New("no version")
	}
	if p.Program == "" || strings.ContainsAny(p.Program, "/\\") || p.Program == "." || p.Program == ".." {
		return fmt.Errorf("program %q is not a file name", p.Program)
	}
	switch p.Kind {
	case KindSelf:
		return nil
	case KindNPM:
		if p.Package == "" {
			return errors.New("npm pin without a package")
		}
		if p.Integrity != "" {
			if _, err := ParseIntegrity(p.Integrity); err != nil {
				return err
			}
		}
	case KindArchive:
	default:
		return fmt.Errorf("unknown kind %q (npm, archive, self)", p.Kind)
	}
	if len(p.Platforms) == 0 {
		return errors.New("no platforms")
	}
	for _, key := range slices.Sorted(maps.Keys(p.Platforms)) {
		a := p.Platforms[key]
		if a == nil {
			return fmt.Errorf("platform %s: empty", key)
		}
		if _, err := ParsePlatformKey(key); err != nil {
			return err
		}
		u, err := url.Parse(a.URL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("platform %s: url %q is not an http(s) URL", key, a.URL)
		}
		if _, err := a.Digest(); err != nil {
			return fmt.Errorf("platform %s: %w", key, err)
		}
		if a.Bin == "" || path.IsAbs(a.Bin) || path.Clean(a.Bin) != a.Bin || a.Bin == "." || strings.HasPrefix(a.Bin, "../") || a.Bin == ".." {
			return fmt.Errorf("platform %s: bin %q is not a clean relative path", key, a.Bin)
		}
		switch a.Libc {
		case "", "glibc", "musl":
		default:
			return fmt.Errorf("platform %s: libc %q (glibc, musl or empty)", key, a.Libc)
		}
		if a.Strip < 0 {
			return fmt.Errorf("platform %s: negative strip", key)
		}
	}
	return nil
}

// Marshal writes the pin file in its canonical form: indented, keys
// sorted, a final newline. Regeneration writes this, so a version bump is
// a small diff.
func (p *Pins) Marshal() ([]byte, error) {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Clone returns a deep copy.
func (p *Pins) Clone() *Pins {
	c := &Pins{Schema: p.Schema, Registry: p.Registry, Agents: make(map[string]*Pin, len(p.Agents))}
	for name, pin := range p.Agents {
		c.Agents[name] = pin.Clone()
	}
	return c
}

// Clone returns a deep copy.
func (p *Pin) Clone() *Pin {
	if p == nil {
		return nil
	}
	c := *p
	if p.Platforms != nil {
		c.Platforms = make(map[string]*Artifact, len(p.Platforms))
		for k, a := range p.Platforms {
			ac := *a
			c.Platforms[k] = &ac
		}
	}
	return &c
}

// Embedded returns the pins built into outpost (bootstrap/pins.json).
func Embedded() (*Pins, error) { return ParsePins(embeddedPins) }

// DefaultPins returns the embedded pins with the agents of the file named
// by $OUTPOST_PINS, when set, replacing those of the same name.
func DefaultPins() (*Pins, error) {
	p, err := Embedded()
	if err != nil {
		return nil, fmt.Errorf("embedded %w", err)
	}
	file := os.Getenv(PinsVariable)
	if file == "" {
		return p, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", PinsVariable, err)
	}
	over, err := ParsePins(data)
	if err != nil {
		return nil, fmt.Errorf("%s=%s: %w", PinsVariable, file, err)
	}
	p.Override(over)
	return p, nil
}

// Override replaces p's agents with over's of the same name, and adds
// over's others. Their URLs are used as written; $OUTPOST_NPM_REGISTRY
// rewrites only URLs under p's registry.
func (p *Pins) Override(over *Pins) {
	for name, pin := range over.Agents {
		p.Agents[name] = pin.Clone()
	}
}

// Lookup returns the pin of a bootstrap name.
func (p *Pins) Lookup(name string) (*Pin, bool) {
	pin, ok := p.Agents[name]
	return pin, ok && pin != nil
}

// Names lists the pinned bootstrap names, sorted.
func (p *Pins) Names() []string {
	return slices.Sorted(maps.Keys(p.Agents))
}

// rewrite points an npm URL under the pin file's registry at registry
// instead (a mirror or a test server). Other URLs are returned as is.
func rewrite(u, from, registry string) string {
	from = strings.TrimSuffix(from, "/")
	registry = strings.TrimSuffix(registry, "/")
	if registry == "" || registry == from || from == "" {
		return u
	}
	if rest, ok := strings.CutPrefix(u, from+"/"); ok {
		return registry + "/" + rest
	}
	return u
}
