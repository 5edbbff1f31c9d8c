// Package selfbin finds the static Linux binary that isolated sandboxes
// (docker, kubernetes, ssh) run inside: the exec shim, the container's
// init and the echo agent. That is cmd/outpost-sandbox, a small main with
// only those two parts; the outpost CLI has the same subcommands, so a
// static build of the CLI serves too, at the cost of its size and start.
//
// A binary built with cgo is linked against the host's C library and does
// not run in an image without one (a scratch or busybox image), nor in
// one with another C library. Locate therefore accepts only static ELF
// executables for Linux:
//
//  1. the path in $OUTPOST_STATIC_BINARY, when set (an error when it is
//     not a static Linux executable: an explicit choice is never ignored);
//  2. outpost-sandbox or outpost-sandbox-linux-<arch> beside the running
//     executable (`go install ./cmd/...` puts it there);
//  3. the running executable itself, when it is static (build outpost
//     with CGO_ENABLED=0, as the release builds are);
//  4. outpost-static or outpost-linux-<arch> beside the running
//     executable.
//
// Otherwise it returns an error wrapping ErrNotFound that says how to
// build one. LocateOrBuild goes one step further for development builds:
// before steps 3 and 4 it builds cmd/outpost-sandbox from the checkout
// they came from.
package selfbin

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
)

// EnvVar names the variable that points at a static outpost binary.
const EnvVar = "OUTPOST_STATIC_BINARY"

// ErrNotFound is wrapped when no usable static binary is found.
var ErrNotFound = errors.New("no static outpost binary for the sandbox")

// ErrNotStatic is wrapped when a candidate is not a static Linux
// executable of the wanted architecture.
var ErrNotStatic = errors.New("not a static Linux executable")

// Hint is the command that builds a static binary, for error messages.
const Hint = "CGO_ENABLED=0 go build -o outpost-sandbox ./cmd/outpost-sandbox, then set " + EnvVar + " to its path or put it beside outpost"

// SandboxPackage is the command of the in-sandbox binary, relative to the
// module's root.
const SandboxPackage = "./cmd/outpost-sandbox"

// Locate returns the path of a static outpost binary for Linux on arch (a
// GOARCH name such as "amd64"; "" means the host's), following the order
// in the package documentation.
func Locate(arch string) (string, error) {
	if arch == "" {
		arch = runtime.GOARCH
	}
	return locate(executable(), arch)
}

// preferred is steps 1 and 2 of Locate for the executable self: ok when
// one of them decided.
func preferred(self, arch string) (p string, ok bool, err error) {
	if p := os.Getenv(EnvVar); p != "" {
		p, err := explicit(p, arch)
		return p, true, err
	}
	p, ok = beside(self, arch, sandboxNames(arch))
	return p, ok, nil
}

// locate is Locate for the executable self.
func locate(self, arch string) (string, error) {
	if p, ok, err := preferred(self, arch); ok || err != nil {
		return p, err
	}
	return locateCLI(self, arch)
}

// explicit checks the binary $OUTPOST_STATIC_BINARY names.
func explicit(p, arch string) (string, error) {
	if err := Check(p, arch); err != nil {
		return "", fmt.Errorf("%s=%s: %w", EnvVar, p, err)
	}
	return filepath.Abs(p)
}

// executable is the running executable with its links resolved; "" when
// unknown.
func executable() string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	if s, err := filepath.EvalSymlinks(self); err == nil {
		self = s
	}
	return self
}

// sandboxNames are the names of the in-sandbox binary beside outpost.
func sandboxNames(arch string) []string {
	return []string{"outpost-sandbox", "outpost-sandbox-linux-" + arch}
}

// beside returns the first of names in self's directory that is a static
// Linux binary for arch.
func beside(self, arch string, names []string) (string, bool) {
	if self == "" {
		return "", false
	}
	for _, name := range names {
		p := filepath.Join(filepath.Dir(self), name)
		if Check(p, arch) == nil {
			return p, true
		}
	}
	return "", false
}

// HostAgent returns outpost-sandbox beside the running executable when
// there is one that this machine can run (any linkage): the echo agent a
// sandbox sharing the host's filesystem runs, which starts in about a
// millisecond where the CLI takes a hundred.
func HostAgent() (string, bool) {
	return hostAgent(executable())
}

func hostAgent(self string) (string, bool) {
	if self == "" {
		return "", false
	}
	p := filepath.Join(filepath.Dir(self), "outpost-sandbox")
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", false
	}
	return p, true
}

// locateCLI is the fallback to a static build of the whole CLI: self, or
// outpost-static or outpost-linux-<arch> beside it.
func locateCLI(self, arch string) (string, error) {
	if self != "" && Check(self, arch) == nil {
		return self, nil
	}
	if p, ok := beside(self, arch, []string{"outpost-static", "outpost-linux-" + arch}); ok {
		return p, nil
	}
	return "", fmt.Errorf("%w (linux/%s); build one with: %s", ErrNotFound, arch, Hint)
}

// Check returns nil when path is a statically linked Linux ELF executable
// for arch (a GOARCH name), and an error wrapping ErrNotStatic (or the
// file's open error) otherwise.
func Check(path, arch string) error {
	f, err := elf.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrNotStatic, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("%w: ELF type %v", ErrNotStatic, f.Type)
	}
	if f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX {
		return fmt.Errorf("%w: OS ABI %v", ErrNotStatic, f.OSABI)
	}
	if want, ok := machines[arch]; !ok || f.Machine != want {
		return fmt.Errorf("%w: built for %v, not %s", ErrNotStatic, f.Machine, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%w: dynamically linked (it has a program interpreter)", ErrNotStatic)
		}
	}
	return nil
}

var machines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"386":     elf.EM_386,
	"arm":     elf.EM_ARM,
	"riscv64": elf.EM_RISCV,
	"ppc64le": elf.EM_PPC64,
	"s390x":   elf.EM_S390,
}

// Arch maps an engine's or kernel's architecture name ("x86_64",
// "aarch64", "amd64") to a GOARCH name; unknown names are returned as is.
func Arch(name string) string {
	switch name {
	case "x86_64", "amd64":
		return "amd64"
	case "aarch64", "arm64":
		return "arm64"
	case "i386", "i686", "386":
		return "386"
	case "armv7l", "armhf", "arm":
		return "arm"
	}
	return name
}
