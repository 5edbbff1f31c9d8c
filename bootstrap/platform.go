package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
)

// ErrPlatform is wrapped when a pin has nothing that runs on the sandbox's
// platform (an architecture it does not ship, or an image without the C
// library its binary needs).
var ErrPlatform = errors.New("bootstrap: no pinned build for the sandbox's platform")

// Libc values of a Platform.
const (
	Glibc = "glibc"
	Musl  = "musl"
	// NoLibc: the sandbox has no C library; only static executables run.
	NoLibc = "none"
)

// Platform is where an executable must run.
type Platform struct {
	OS   string `json:"os"`   // GOOS: "linux", "darwin"
	Arch string `json:"arch"` // GOARCH: "amd64", "arm64"
	// Libc is Glibc, Musl, NoLibc, or "" when unknown (taken as glibc).
	Libc string `json:"libc,omitempty"`
}

func (p Platform) String() string {
	s := p.OS + "/" + p.Arch
	if p.Libc != "" {
		s += " (" + p.Libc + ")"
	}
	return s
}

// npm's names for GOARCH values.
var npmArch = map[string]string{"amd64": "x64", "arm64": "arm64", "386": "ia32", "arm": "arm"}

// Key is the platform's key in a pin: npm's "<os>-<cpu>", with "-musl"
// for musl ("linux-x64", "linux-arm64-musl", "darwin-arm64").
func (p Platform) Key() string {
	a, ok := npmArch[p.Arch]
	if !ok {
		a = p.Arch
	}
	k := p.OS + "-" + a
	if p.Libc == Musl {
		k += "-musl"
	}
	return k
}

// ParsePlatformKey reads a pin's platform key.
func ParsePlatformKey(key string) (Platform, error) {
	parts := strings.Split(key, "-")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return Platform{}, fmt.Errorf("platform key %q: want <os>-<cpu>[-musl]", key)
	}
	p := Platform{OS: parts[0], Arch: parts[1]}
	for goarch, n := range npmArch {
		if n == parts[1] {
			p.Arch = goarch
		}
	}
	if len(parts) == 3 {
		if parts[2] != "musl" {
			return Platform{}, fmt.Errorf("platform key %q: want <os>-<cpu>[-musl]", key)
		}
		p.Libc = Musl
	}
	return p, nil
}

// Select returns the artifact of the pin that runs on pl, and its key. A
// musl sandbox takes the musl build, else a static one; a glibc (or
// unknown) one the glibc build or a static one; a sandbox without a C
// library only a static build. The error wraps ErrPlatform.
func (p *Pin) Select(pl Platform) (string, *Artifact, error) {
	base := Platform{OS: pl.OS, Arch: pl.Arch}.Key()
	var keys []string
	switch pl.Libc {
	case Musl:
		keys = []string{base + "-musl", base}
	case NoLibc:
		keys = []string{base, base + "-musl"}
	default:
		keys = []string{base}
	}
	for _, k := range keys {
		a := p.Platforms[k]
		if a == nil {
			continue
		}
		switch {
		case a.Libc == "", a.Libc == pl.Libc, a.Libc == Glibc && pl.Libc == "":
			return k, a, nil
		}
	}
	var have []string
	for _, k := range slices.Sorted(maps.Keys(p.Platforms)) {
		d := k
		if l := p.Platforms[k].Libc; l != "" {
			d += " (" + l + ")"
		} else {
			d += " (static)"
		}
		have = append(have, d)
	}
	hint := ""
	if pl.Libc == NoLibc {
		hint = "; the sandbox has no C library: use an image with one (e.g. Debian or Alpine)"
	}
	return "", nil, fmt.Errorf("%w: %s %s has no build for %s (pinned: %s)%s", ErrPlatform, p.Program, p.Version, pl, strings.Join(have, ", "), hint)
}

// loaders are the dynamic loaders that reveal a Linux system's C library
// and architecture.
var loaders = []struct {
	path, arch, libc string
}{
	{"/lib64/ld-linux-x86-64.so.2", "amd64", Glibc},
	{"/lib/ld-musl-x86_64.so.1", "amd64", Musl},
	{"/lib/ld-linux-aarch64.so.1", "arm64", Glibc},
	{"/lib/ld-musl-aarch64.so.1", "arm64", Musl},
}

// HostPlatform is the platform outpost runs on.
func HostPlatform() Platform {
	p := Platform{OS: runtime.GOOS, Arch: runtime.GOARCH}
	if p.OS == "linux" {
		p.Libc = probeLibc(p.Arch, func(name string) bool {
			_, err := os.Stat(name)
			return err == nil
		})
	}
	return p
}

// probeLibc returns the C library whose loader for arch exists, glibc
// first, or NoLibc.
func probeLibc(arch string, exists func(string) bool) string {
	for _, l := range loaders {
		if l.arch == arch && exists(l.path) {
			return l.libc
		}
	}
	return NoLibc
}

// Platformer is implemented by targets that know their platform.
type Platformer interface {
	Platform(ctx context.Context) (Platform, error)
}

// copyOuter is the part of *sandbox.Lease that lets the installer look at
// the sandbox's files without running anything in it (an image may have
// no shell).
type copyOuter interface {
	CopyOut(ctx context.Context, path string) (io.ReadCloser, error)
}

// detectPlatform finds the platform of t: its own answer (Platformer), the
// host's for a sandbox that shares the host's filesystem, otherwise Linux
// with the architecture and C library of the dynamic loaders found in it
// (the host's architecture and an unknown C library when it cannot be
// looked at).
func detectPlatform(ctx context.Context, t Target) (Platform, error) {
	if p, ok := t.(Platformer); ok {
		return p.Platform(ctx)
	}
	if !t.Isolated() {
		return HostPlatform(), nil
	}
	co, ok := t.(copyOuter)
	if !ok {
		return Platform{OS: "linux", Arch: runtime.GOARCH}, nil
	}
	var probeErr error
	exists := func(name string) bool {
		rc, err := co.CopyOut(ctx, name)
		if err == nil {
			rc.Close()
			return true
		}
		if !errors.Is(err, fs.ErrNotExist) && probeErr == nil {
			probeErr = err
		}
		return false
	}
	// The host's architecture first: a local engine runs it.
	arches := []string{runtime.GOARCH}
	for _, l := range loaders {
		if l.arch != runtime.GOARCH && !slices.Contains(arches, l.arch) {
			arches = append(arches, l.arch)
		}
	}
	for _, arch := range arches {
		if libc := probeLibc(arch, exists); libc != NoLibc {
			return Platform{OS: "linux", Arch: arch, Libc: libc}, nil
		}
		if ctx.Err() != nil {
			return Platform{}, ctx.Err()
		}
	}
	if probeErr != nil {
		return Platform{}, fmt.Errorf("looking for the sandbox's C library: %w", probeErr)
	}
	return Platform{OS: "linux", Arch: runtime.GOARCH, Libc: NoLibc}, nil
}
