package selfbin

import (
	"bufio"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"
)

// Module is outpost's module path.
const Module = "github.com/outposthq/outpost"

// CacheVariable overrides where built binaries are kept (default
// $OUTPOST_CACHE/bin, else ~/.cache/outpost/bin).
const CacheVariable = "OUTPOST_CACHE"

var buildMu sync.Mutex

// LocateOrBuild is Locate, and for a development build of outpost (go run
// or go build from a checkout) it builds the in-sandbox binary before
// falling back to a static build of the CLI: when the checkout this binary
// was compiled from is still there and a Go toolchain is at hand, it runs
// `CGO_ENABLED=0 GOOS=linux GOARCH=<arch> go build ./cmd/outpost-sandbox`
// there, once per distinct running binary, into the cache (the first time
// takes as long as a build, a few seconds). An installation with a static
// outpost-sandbox beside outpost never gets here.
func LocateOrBuild(ctx context.Context, arch string) (string, error) {
	if arch == "" {
		arch = runtime.GOARCH
	}
	self := executable()
	if p, ok, err := preferred(self, arch); ok || err != nil {
		return p, err
	}
	src, ok := checkout()
	if !ok {
		return locateCLI(self, arch)
	}
	built, berr := build(ctx, src, arch)
	if berr == nil {
		return built, nil
	}
	if p, err := locateCLI(self, arch); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w (linux/%s); building one from %s failed: %w", ErrNotFound, arch, src, berr)
}

// checkout returns the module root this binary was built from, when it is
// a development build whose sources are still on disk.
func checkout() (string, bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok || bi.Main.Path != Module || (bi.Main.Version != "" && bi.Main.Version != "(devel)") {
		return "", false
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok || !filepath.IsAbs(file) {
		return "", false // built with -trimpath
	}
	root := filepath.Dir(filepath.Dir(filepath.Dir(file))) // internal/selfbin/build.go
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "module ") {
			return root, strings.TrimSpace(strings.TrimPrefix(line, "module ")) == Module
		}
	}
	return "", false
}

// build compiles the in-sandbox binary for arch from src, cached by the
// running executable's digest.
func build(ctx context.Context, src, arch string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	sum, err := identity(self)
	if err != nil {
		return "", err
	}
	dir, err := cacheDir()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "outpost-sandbox-"+arch+"-"+sum)
	buildMu.Lock()
	defer buildMu.Unlock()
	if Check(out, arch) == nil {
		touch(out, time.Now())
		return out, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, serr := os.Stat(goTool); serr != nil {
			return "", fmt.Errorf("no Go toolchain on PATH: %w", err)
		}
	}
	tmp := out + ".building-" + fmt.Sprint(os.Getpid())
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", tmp, SandboxPackage)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("go build: %w: %s", err, strings.TrimSpace(string(b)))
	}
	if err := Check(tmp, arch); err != nil {
		os.Remove(tmp)
		return "", err
	}
	if err := os.Rename(tmp, out); err != nil {
		os.Remove(tmp)
		return "", err
	}
	prune(dir, arch, out, time.Now())
	return out, nil
}

// staleAfter is how long a cached build may go unused before a build for
// another executable removes it. Several executables share the cache at
// once (the CLI, a test binary, an older CLI still serving turns), and
// each mounts its own build into every container it starts: removing a
// build another process still uses made that process's next container
// fail to start ("bind source path does not exist").
const staleAfter = 24 * time.Hour

// touch marks a cached build as used, at most once an hour.
func touch(p string, now time.Time) {
	if fi, err := os.Stat(p); err == nil && now.Sub(fi.ModTime()) > time.Hour {
		os.Chtimes(p, now, now)
	}
}

// prune removes the cached builds for arch, other than keep, that went
// unused for staleAfter (and abandoned partial builds), and the static builds of the whole CLI that
// earlier versions cached here.
func prune(dir, arch, keep string, now time.Time) {
	old, _ := filepath.Glob(filepath.Join(dir, "outpost-sandbox-"+arch+"-*"))
	cli, _ := filepath.Glob(filepath.Join(dir, "outpost-static-"+arch+"-*"))
	for _, o := range append(old, cli...) {
		if o == keep {
			continue
		}
		// A build in progress is fresh; one a day old was abandoned.
		if fi, err := os.Stat(o); err == nil && now.Sub(fi.ModTime()) > staleAfter {
			os.Remove(o)
		}
	}
}

// identity names the executable at p for the cache: a digest of the Go
// build ID the linker wrote into it (a hash of its content, read from one
// ELF note) or, for a file without one, of the whole file. Hashing the
// whole CLI (45 MB) cost tens of milliseconds in every process that ran
// a turn on docker, kubernetes or ssh.
func identity(p string) (string, error) {
	if id, ok := goBuildID(p); ok {
		sum := sha256.Sum256([]byte("go-build-id:" + id))
		return hex.EncodeToString(sum[:])[:16], nil
	}
	return digest(p)
}

// goBuildID reads the Go build ID from an ELF executable's
// .note.go.buildid note (name "Go", type 4), as the toolchain writes it.
func goBuildID(p string) (string, bool) {
	f, err := elf.Open(p)
	if err != nil {
		return "", false
	}
	defer f.Close()
	sec := f.Section(".note.go.buildid")
	if sec == nil || sec.Size > 4096 {
		return "", false
	}
	b, err := sec.Data()
	if err != nil || len(b) < 16 {
		return "", false
	}
	bo := f.ByteOrder
	namesz, descsz, typ := bo.Uint32(b[0:]), bo.Uint32(b[4:]), bo.Uint32(b[8:])
	name := (namesz + 3) &^ 3
	if namesz != 4 || typ != 4 || string(b[12:15]) != "Go\x00" || uint64(12+name)+uint64(descsz) > uint64(len(b)) || descsz == 0 {
		return "", false
	}
	return string(b[12+name : 12+name+descsz]), true
}

func digest(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

func cacheDir() (string, error) {
	if c := os.Getenv(CacheVariable); c != "" {
		return filepath.Join(c, "bin"), nil
	}
	c, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(c, "outpost", "bin"), nil
}
