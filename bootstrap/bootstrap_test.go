package bootstrap_test

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/internal/tarsafe"
)

func TestEnsureUnknownName(t *testing.T) {
	inst := &bootstrap.Installer{CacheDir: t.TempDir()}
	_, err := inst.Ensure(context.Background(), newTarget(t, false), "nope", "nope", nil)
	if !errors.Is(err, bootstrap.ErrUnknown) {
		t.Fatalf("err = %v, want ErrUnknown", err)
	}
	if bootstrap.Known("nope") || !bootstrap.Known("claude") || !bootstrap.Known("antigravity") {
		t.Error("Known is wrong")
	}
}

func TestEnsureEchoIsSelfOnTheHost(t *testing.T) {
	inst := &bootstrap.Installer{Self: "/opt/outpost", CacheDir: t.TempDir()}
	p, err := inst.Ensure(context.Background(), newTarget(t, false), "echo", "outpost", nil)
	if err != nil || p != "/opt/outpost" {
		t.Fatalf("Ensure = %q, %v", p, err)
	}
}

func TestEnsureNoBootstrapNoExecutable(t *testing.T) {
	inst := &bootstrap.Installer{CacheDir: t.TempDir()}
	_, err := inst.Ensure(context.Background(), newTarget(t, false), "", "missing-cli", nil)
	if !errors.Is(err, bootstrap.ErrMissing) {
		t.Fatalf("err = %v, want ErrMissing", err)
	}
}

// TestInstallHostThenCache installs on a sandbox sharing the host's
// filesystem (it runs from the cache), then again: no second download.
func TestInstallHostThenCache(t *testing.T) {
	srv := newServer(t)
	pkg := npmPackage(t, "fakecli", "9.9.9")
	url := srv.add("/@fake/fakecli-linux-x64/-/fakecli-linux-x64-9.9.9.tgz", pkg)
	cache := t.TempDir()
	inst := &bootstrap.Installer{Pins: pinFor("fakecli", url, digestOf(pkg), bootstrap.Glibc), CacheDir: cache}
	ctx := context.Background()

	var phases []bootstrap.Phase
	res, err := inst.Install(ctx, newTarget(t, false), "fakecli", &bootstrap.EnsureOptions{Progress: func(p bootstrap.Progress) {
		if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
			phases = append(phases, p.Phase)
		}
		if p.Agent != "fakecli" || p.Version != "9.9.9" {
			t.Errorf("progress names %s %s", p.Agent, p.Version)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bootstrap.Phase{bootstrap.PhaseDownload, bootstrap.PhaseVerified, bootstrap.PhaseExtract, bootstrap.PhaseDone}; !slices.Equal(phases, want) {
		t.Errorf("phases = %v, want %v", phases, want)
	}
	if res.Source != bootstrap.SourceDownload || res.Downloaded != int64(len(pkg)) || res.Platform != "linux-x64" || res.Digest != digestOf(pkg).SRI() {
		t.Errorf("result = %+v", res)
	}
	if !strings.HasPrefix(res.Path, cache) {
		t.Errorf("path %s is not in the cache %s", res.Path, cache)
	}
	if got := run(t, newTarget(t, false), res.Path, "--version"); got != "fakecli 9.9.9 --version" {
		t.Errorf("output = %q", got)
	}
	// The cache holds the verified download and its tree, nothing else.
	key := "sha512-" + digestOf(pkg).Hex()
	want := []string{"blobs/" + key, "trees/" + key + "/pkg/README.md", "trees/" + key + "/pkg/bin/fakecli", "trees/" + key + "/pkg/package.json"}
	got := slices.DeleteFunc(cacheFiles(t, cache), func(s string) bool {
		return strings.Contains(s, "/bin/fakecli") && strings.HasPrefix(s, "trees/"+key+"/bin/")
	})
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("cache (-want +got):\n%s", d)
	}
	if fi, err := os.Stat(filepath.Join(cache, "trees", key, "pkg", "bin", "fakecli")); err != nil || fi.Mode().Perm()&0o222 != 0 {
		t.Errorf("cached executable is writable or missing: %v %v", fi.Mode(), err)
	}

	// Again, with a fresh installer (another process): from the cache.
	inst2 := &bootstrap.Installer{Pins: inst.Pins, CacheDir: cache}
	p, err := inst2.Ensure(ctx, newTarget(t, false), "fakecli", "fakecli", nil)
	if err != nil || p != res.Path {
		t.Fatalf("Ensure = %q, %v; want %q", p, err, res.Path)
	}
	if n := srv.count("/@fake/fakecli-linux-x64/-/fakecli-linux-x64-9.9.9.tgz"); n != 1 {
		t.Errorf("%d downloads, want 1", n)
	}
}

// TestInCache: a pinned CLI is in the cache once a first install
// unpacked it, and InCache neither downloads nor creates anything before;
// outpost's own binary (kind self) needs no download.
func TestInCache(t *testing.T) {
	srv := newServer(t)
	pkg := npmPackage(t, "fakecli", "9.9.9")
	url := srv.add("/@fake/fakecli-linux-x64/-/fakecli-linux-x64-9.9.9.tgz", pkg)
	cache := filepath.Join(t.TempDir(), "cache")
	inst := &bootstrap.Installer{Pins: pinFor("fakecli", url, digestOf(pkg), bootstrap.Glibc), CacheDir: cache, Self: "/opt/outpost"}
	if p, ok := inst.InCache("fakecli", linuxGlibc); ok {
		t.Fatalf("in the cache before any install: %s", p)
	}
	if _, err := os.Stat(cache); err == nil || srv.count("/@fake/fakecli-linux-x64/-/fakecli-linux-x64-9.9.9.tgz") != 0 {
		t.Fatalf("InCache created the cache or downloaded (%v)", err)
	}
	res, err := inst.Install(context.Background(), newTarget(t, false), "fakecli", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := inst.InCache("fakecli", linuxGlibc); !ok || p != res.Path {
		t.Errorf("after the install: %q %v, want %q", p, ok, res.Path)
	}
	if _, ok := inst.InCache("fakecli", bootstrap.Platform{OS: "darwin", Arch: "arm64"}); ok {
		t.Error("in the cache for a platform the pin has no build for")
	}
	if p, ok := inst.InCache("echo", linuxGlibc); !ok || p != "/opt/outpost" {
		t.Errorf("echo (kind self): %q %v", p, ok)
	}
	if _, ok := inst.InCache("nosuch", linuxGlibc); ok {
		t.Error("an unknown name is in the cache")
	}
}

// TestInstallIsolated copies the CLI into an isolated sandbox's home; the
// same lease finds it there next time, and another lease installs it from
// the cache.
func TestInstallIsolated(t *testing.T) {
	srv := newServer(t)
	pkg := npmPackage(t, "fakecli", "9.9.9")
	url := srv.add("/fakecli.tgz", pkg)
	inst := &bootstrap.Installer{Pins: pinFor("fakecli", url, digestOf(pkg), ""), CacheDir: t.TempDir()}
	ctx := context.Background()
	tg := newTarget(t, true)
	var copyBytes, copyTotal int64
	res, err := inst.Install(ctx, tg, "fakecli", &bootstrap.EnsureOptions{Progress: func(p bootstrap.Progress) {
		if p.Phase == bootstrap.PhaseCopy {
			copyBytes, copyTotal = p.Bytes, p.Total
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "/home/agent/.outpost/bootstrap/fakecli@9.9.9/bin/fakecli"; res.Path != want {
		t.Errorf("path = %s, want %s", res.Path, want)
	}
	if copyTotal == 0 || copyBytes != copyTotal {
		t.Errorf("copy progress %d of %d", copyBytes, copyTotal)
	}
	if got := run(t, tg, res.Path, "hi"); got != "fakecli 9.9.9 hi" {
		t.Errorf("output = %q", got)
	}
	again, err := inst.Install(ctx, tg, "fakecli", nil)
	if err != nil || again.Source != bootstrap.SourceSandbox || again.Path != res.Path || tg.copies.Load() != 1 {
		t.Fatalf("second install on the lease = %+v, %v (copies %d)", again, err, tg.copies.Load())
	}
	tg2 := newTarget(t, true)
	other, err := inst.Install(ctx, tg2, "fakecli", nil)
	if err != nil || other.Source != bootstrap.SourceCache || other.Downloaded != 0 {
		t.Fatalf("install on another lease = %+v, %v", other, err)
	}
	if got := run(t, tg2, other.Path); got != "fakecli 9.9.9" {
		t.Errorf("output = %q", got)
	}
	if n := srv.count("/fakecli.tgz"); n != 1 {
		t.Errorf("%d downloads, want 1", n)
	}
}

// TestRegistryOverride: npm URLs under the pin file's registry go to
// $OUTPOST_NPM_REGISTRY (or Installer.Registry) instead.
func TestRegistryOverride(t *testing.T) {
	srv := newServer(t)
	pkg := npmPackage(t, "fakecli", "9.9.9")
	const p = "/@fake/fakecli-linux-x64/-/fakecli-linux-x64-9.9.9.tgz"
	srv.add(p, pkg)
	pins := pinFor("fakecli", bootstrap.DefaultRegistry+p, digestOf(pkg), "")
	t.Setenv(bootstrap.RegistryVariable, srv.URL+"/")
	inst := &bootstrap.Installer{Pins: pins, CacheDir: t.TempDir()}
	if _, err := inst.Install(context.Background(), newTarget(t, false), "fakecli", nil); err != nil {
		t.Fatal(err)
	}
	if srv.count(p) != 1 {
		t.Error("the registry override was not used")
	}
}

// TestDigestMismatch: the server's bytes are not the pinned ones. Nothing
// is installed or cached, the error is coded bootstrap with both digests,
// and it is not retried.
func TestDigestMismatch(t *testing.T) {
	srv := newServer(t)
	good := npmPackage(t, "fakecli", "9.9.9")
	evil := npmPackage(t, "fakecli", "6.6.6")
	url := srv.add("/fakecli.tgz", evil)
	cache := t.TempDir()
	inst := &bootstrap.Installer{Pins: pinFor("fakecli", url, digestOf(good), ""), CacheDir: cache, Attempts: 3}
	tg := newTarget(t, true)
	_, err := inst.Ensure(context.Background(), tg, "fakecli", "fakecli", nil)
	if !errors.Is(err, bootstrap.ErrDigestMismatch) {
		t.Fatalf("err = %v, want ErrDigestMismatch", err)
	}
	var oe *outpost.Error
	if !errors.As(err, &oe) || oe.Code != outpost.Bootstrap {
		t.Fatalf("err = %#v, want an *outpost.Error of code bootstrap", err)
	}
	if oe.Details["expected"] != digestOf(good).SRI() || oe.Details["actual"] != digestOf(evil).SRI() || oe.Details["url"] != url {
		t.Errorf("details = %v", oe.Details)
	}
	for _, s := range []string{digestOf(good).SRI(), digestOf(evil).SRI(), "nothing was installed"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("message %q lacks %q", err, s)
		}
	}
	if files := cacheFiles(t, cache); len(files) != 0 {
		t.Errorf("the cache holds %v", files)
	}
	if tg.copies.Load() != 0 {
		t.Error("something was copied into the sandbox")
	}
	if n := srv.count("/fakecli.tgz"); n != 1 {
		t.Errorf("%d attempts, want 1 (a mismatch is not retried)", n)
	}
}

// TestArchiveHexDigest: archive pins use the hex form, in their errors too.
func TestArchiveHexDigest(t *testing.T) {
	srv := newServer(t)
	good := tgz(t, entry{name: "antigravity", mode: 0o755, body: script("agy", "1.2.11")})
	url := srv.add("/cli_linux_x64.tar.gz", good)
	pins := &bootstrap.Pins{Schema: 1, Agents: map[string]*bootstrap.Pin{"antigravity": {Kind: bootstrap.KindArchive, Version: "1.2.11", Program: "agy",
		Platforms: map[string]*bootstrap.Artifact{"linux-x64": {URL: url, SHA512: digestOf(good).Hex(), Bin: "antigravity"}}}}}
	inst := &bootstrap.Installer{Pins: pins, CacheDir: t.TempDir()}
	tg := newTarget(t, true)
	p, err := inst.Ensure(context.Background(), tg, "antigravity", "agy", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(p, "/antigravity@1.2.11/bin/agy") {
		t.Errorf("path = %s: the archive's executable is installed under the program's name", p)
	}
	if got := run(t, tg, p, "-p", "x"); got != "agy 1.2.11 -p x" {
		t.Errorf("output = %q", got)
	}

	pins.Agents["antigravity"].Platforms["linux-x64"].SHA512 = digestOf([]byte("other")).Hex()
	inst = &bootstrap.Installer{Pins: pins, CacheDir: t.TempDir()}
	_, err = inst.Install(context.Background(), newTarget(t, true), "antigravity", nil)
	var oe *outpost.Error
	if !errors.As(err, &oe) || oe.Details["actual"] != digestOf(good).Hex() || oe.Details["expected"] != digestOf([]byte("other")).Hex() {
		t.Fatalf("err = %v (details %v)", err, oe)
	}
}

// TestTruncated: the body ends before its Content-Length, on every
// attempt. Nothing is installed; the error says so, with the digests.
func TestTruncated(t *testing.T) {
	srv := newServer(t)
	pkg := npmPackage(t, "fakecli", "9.9.9")
	url := srv.add("/fakecli.tgz", pkg)
	srv.truncate["/fakecli.tgz"] = len(pkg) / 2
	cache := t.TempDir()
	inst := &bootstrap.Installer{Pins: pinFor("fakecli", url, digestOf(pkg), ""), CacheDir: cache, Attempts: 2}
	_, err := inst.Install(context.Background(), newTarget(t, false), "fakecli", nil)
	if !errors.Is(err, bootstrap.ErrTruncated) {
		t.Fatalf("err = %v, want ErrTruncated", err)
	}
	var oe *outpost.Error
	if !errors.As(err, &oe) || oe.Code != outpost.Bootstrap {
		t.Fatalf("err = %#v", err)
	}
	if oe.Details["expected"] != digestOf(pkg).SRI() || oe.Details["actual"] != digestOf(pkg[:len(pkg)/2]).SRI() || oe.Details["truncated"] != true {
		t.Errorf("details = %v", oe.Details)
	}
	if files := cacheFiles(t, cache); len(files) != 0 {
		t.Errorf("the cache holds %v", files)
	}
	if n := srv.count("/fakecli.tgz"); n != 2 {
		t.Errorf("%d attempts, want 2", n)
	}
}

func TestNotFound(t *testing.T) {
	srv := newServer(t)
	inst := &bootstrap.Installer{Pins: pinFor("fakecli", srv.URL+"/missing.tgz", digestOf(nil), ""), CacheDir: t.TempDir(), Attempts: 3}
	_, err := inst.Install(context.Background(), newTarget(t, false), "fakecli", nil)
	if !errors.Is(err, bootstrap.ErrDownload) || !strings.Contains(err.Error(), "404") {
		t.Fatalf("err = %v, want ErrDownload with the status", err)
	}
}

// TestStalledDownload: a server that stops sending fails the attempt after
// Idle, not never.
func TestStalledDownload(t *testing.T) {
	srv := newServer(t)
	pkg := npmPackage(t, "fakecli", "9.9.9")
	url := srv.add("/fakecli.tgz", pkg)
	srv.stall["/fakecli.tgz"] = 10
	cache := t.TempDir()
	inst := &bootstrap.Installer{Pins: pinFor("fakecli", url, digestOf(pkg), ""), CacheDir: cache, Attempts: 1, Idle: 200 * time.Millisecond}
	_, err := inst.Install(context.Background(), newTarget(t, false), "fakecli", nil)
	if !errors.Is(err, bootstrap.ErrTruncated) || !strings.Contains(err.Error(), "no data for") {
		t.Fatalf("err = %v, want a truncated download after the idle timeout", err)
	}
	if files := cacheFiles(t, cache); len(files) != 0 {
		t.Errorf("the cache holds %v", files)
	}
}

func TestCancelledDownload(t *testing.T) {
	srv := newServer(t)
	pkg := npmPackage(t, "fakecli", "9.9.9")
	url := srv.add("/fakecli.tgz", pkg)
	srv.stall["/fakecli.tgz"] = 10
	cache := t.TempDir()
	inst := &bootstrap.Installer{Pins: pinFor("fakecli", url, digestOf(pkg), ""), CacheDir: cache}
	ctx, cancel := context.WithCancel(context.Background())
	_, err := inst.Install(ctx, newTarget(t, false), "fakecli", &bootstrap.EnsureOptions{ProgressInterval: time.Nanosecond, Progress: func(p bootstrap.Progress) {
		if p.Phase == bootstrap.PhaseDownload && p.Bytes > 0 {
			cancel()
		}
	}})
	if err != context.Canceled {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if files := cacheFiles(t, cache); len(files) != 0 {
		t.Errorf("the cache holds %v", files)
	}
}

// TestHostileArchives: archives whose digest is right (the pin trusts
// them) but whose content tries to escape. Nothing is installed.
func TestHostileArchives(t *testing.T) {
	bin := entry{name: "package/bin/fakecli", mode: 0o755, body: script("fakecli", "9.9.9")}
	cases := []struct {
		name    string
		entries []entry
	}{
		{"dot-dot", []entry{bin, {name: "package/../../escaped", body: "x"}}},
		{"absolute", []entry{bin, {name: "/tmp/escaped", body: "x"}}},
		{"symlink absolute", []entry{bin, {name: "package/link", typ: tar.TypeSymlink, linkname: "/etc/passwd"}}},
		{"symlink up", []entry{bin, {name: "package/link", typ: tar.TypeSymlink, linkname: "../../../etc"}}},
		{"symlink chain", []entry{bin,
			{name: "package/d/", typ: tar.TypeDir, mode: 0o755},
			{name: "package/d/e", typ: tar.TypeSymlink, linkname: ".."},
			{name: "package/out", typ: tar.TypeSymlink, linkname: "d/e/.."}}},
		{"write through symlink", []entry{bin,
			{name: "package/up", typ: tar.TypeSymlink, linkname: "."},
			{name: "package/up/../../x", body: "x"}}},
		{"hard link out", []entry{bin, {name: "package/hl", typ: tar.TypeLink, linkname: "../../etc/passwd"}}},
		{"char device", []entry{bin, {name: "package/null", typ: tar.TypeChar, devmajor: 1}}},
		{"block device", []entry{bin, {name: "package/sda", typ: tar.TypeBlock, devmajor: 8}}},
		{"fifo", []entry{bin, {name: "package/fifo", typ: tar.TypeFifo}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := newServer(t)
			pkg := tgz(t, c.entries...)
			url := srv.add("/evil.tgz", pkg)
			cache := t.TempDir()
			inst := &bootstrap.Installer{Pins: pinFor("fakecli", url, digestOf(pkg), ""), CacheDir: cache}
			tg := newTarget(t, true)
			_, err := inst.Install(context.Background(), tg, "fakecli", nil)
			if !errors.Is(err, tarsafe.ErrUnsafe) {
				t.Fatalf("err = %v, want tarsafe.ErrUnsafe", err)
			}
			for _, f := range cacheFiles(t, cache) {
				if strings.HasPrefix(f, "trees/") {
					t.Errorf("the cache holds %s", f)
				}
			}
			if _, err := os.Lstat(filepath.Join(filepath.Dir(cache), "escaped")); err == nil {
				t.Error("an entry escaped the cache")
			}
			if tg.copies.Load() != 0 {
				t.Error("something was copied into the sandbox")
			}
		})
	}
}

// TestSetuidDropped: setuid, setgid and sticky bits never survive.
func TestSetuidDropped(t *testing.T) {
	srv := newServer(t)
	pkg := tgz(t, entry{name: "package/bin/fakecli", mode: 0o4755, body: script("fakecli", "1")}, entry{name: "package/sg", mode: 0o2755, body: "x"})
	url := srv.add("/suid.tgz", pkg)
	inst := &bootstrap.Installer{Pins: pinFor("fakecli", url, digestOf(pkg), ""), CacheDir: t.TempDir()}
	tg := newTarget(t, true)
	res, err := inst.Install(context.Background(), tg, "fakecli", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{res.Cached + "/pkg/bin/fakecli", res.Cached + "/pkg/sg", tg.host("/home/agent/.outpost/bootstrap/fakecli@9.9.9/pkg/bin/fakecli")} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0 {
			t.Errorf("%s has mode %v", p, fi.Mode())
		}
	}
}

// TestMissingBin: a package without the pinned executable is refused.
func TestMissingBin(t *testing.T) {
	srv := newServer(t)
	pkg := tgz(t, entry{name: "package/README.md", body: "no binary here"})
	url := srv.add("/empty.tgz", pkg)
	cache := t.TempDir()
	inst := &bootstrap.Installer{Pins: pinFor("fakecli", url, digestOf(pkg), ""), CacheDir: cache}
	_, err := inst.Install(context.Background(), newTarget(t, false), "fakecli", nil)
	if err == nil || !strings.Contains(err.Error(), "no executable bin/fakecli") {
		t.Fatalf("err = %v", err)
	}
	for _, f := range cacheFiles(t, cache) {
		if strings.HasPrefix(f, "trees/") {
			t.Errorf("the cache holds %s", f)
		}
	}
}

// TestCorruptCachedDownload: a cached download damaged on disk is noticed
// when it is unpacked, dropped and downloaded again.
func TestCorruptCachedDownload(t *testing.T) {
	srv := newServer(t)
	pkg := npmPackage(t, "fakecli", "9.9.9")
	url := srv.add("/fakecli.tgz", pkg)
	cache := t.TempDir()
	inst := &bootstrap.Installer{Pins: pinFor("fakecli", url, digestOf(pkg), ""), CacheDir: cache}
	res, err := inst.Install(context.Background(), newTarget(t, false), "fakecli", nil)
	if err != nil {
		t.Fatal(err)
	}
	key := "sha512-" + digestOf(pkg).Hex()
	os.RemoveAll(res.Cached)
	if err := os.WriteFile(filepath.Join(cache, "blobs", key), npmPackage(t, "fakecli", "6.6.6"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err = inst.Install(context.Background(), newTarget(t, false), "fakecli", nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Source != bootstrap.SourceDownload || srv.count("/fakecli.tgz") != 2 {
		t.Errorf("source %s after %d downloads", res.Source, srv.count("/fakecli.tgz"))
	}
	if got := run(t, newTarget(t, false), res.Path); got != "fakecli 9.9.9" {
		t.Errorf("output = %q", got)
	}
}

// TestConcurrentInstallsOneDownload: goroutines installing the same pin
// share one download.
func TestConcurrentInstallsOneDownload(t *testing.T) {
	srv := newServer(t)
	pkg := npmPackage(t, "fakecli", "9.9.9")
	url := srv.add("/fakecli.tgz", pkg)
	srv.gate = make(chan struct{})
	cache := t.TempDir()
	pins := pinFor("fakecli", url, digestOf(pkg), "")
	const n = 6
	var wg sync.WaitGroup
	var mu sync.Mutex
	var waited int
	errs := make([]error, n)
	paths := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst := &bootstrap.Installer{Pins: pins, CacheDir: cache}
			res, err := inst.Install(context.Background(), newTarget(t, true), "fakecli", &bootstrap.EnsureOptions{Progress: func(p bootstrap.Progress) {
				if p.Phase == bootstrap.PhaseWait {
					mu.Lock()
					waited++
					if waited == n-1 {
						close(srv.gate) // everyone is in: let the one download go
					}
					mu.Unlock()
				}
			}})
			errs[i] = err
			if res != nil {
				paths[i] = res.Path
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("install %d: %v", i, err)
		}
	}
	if waited != n-1 {
		t.Errorf("%d installs waited, want %d", waited, n-1)
	}
	if c := srv.count("/fakecli.tgz"); c != 1 {
		t.Errorf("%d downloads, want 1", c)
	}
}

func TestSelectPlatform(t *testing.T) {
	pin := &bootstrap.Pin{Program: "x", Version: "1", Platforms: map[string]*bootstrap.Artifact{
		"linux-x64":      {Libc: bootstrap.Glibc},
		"linux-x64-musl": {Libc: bootstrap.Musl},
		"linux-arm64":    {Libc: ""},
		"darwin-arm64":   {},
	}}
	cases := []struct {
		pl   bootstrap.Platform
		want string // key, or "" for ErrPlatform
	}{
		{bootstrap.Platform{OS: "linux", Arch: "amd64", Libc: bootstrap.Glibc}, "linux-x64"},
		{bootstrap.Platform{OS: "linux", Arch: "amd64"}, "linux-x64"},
		{bootstrap.Platform{OS: "linux", Arch: "amd64", Libc: bootstrap.Musl}, "linux-x64-musl"},
		{bootstrap.Platform{OS: "linux", Arch: "amd64", Libc: bootstrap.NoLibc}, ""},
		{bootstrap.Platform{OS: "linux", Arch: "arm64", Libc: bootstrap.NoLibc}, "linux-arm64"},
		{bootstrap.Platform{OS: "linux", Arch: "arm64", Libc: bootstrap.Musl}, "linux-arm64"},
		{bootstrap.Platform{OS: "darwin", Arch: "arm64"}, "darwin-arm64"},
		{bootstrap.Platform{OS: "darwin", Arch: "amd64"}, ""},
		{bootstrap.Platform{OS: "linux", Arch: "riscv64", Libc: bootstrap.Glibc}, ""},
	}
	for _, c := range cases {
		key, _, err := pin.Select(c.pl)
		if c.want == "" {
			if !errors.Is(err, bootstrap.ErrPlatform) {
				t.Errorf("%v: got %q, %v; want ErrPlatform", c.pl, key, err)
			}
			continue
		}
		if err != nil || key != c.want {
			t.Errorf("%v: got %q, %v; want %q", c.pl, key, err, c.want)
		}
	}
}

func TestPlatformKeys(t *testing.T) {
	for _, key := range []string{"linux-x64", "linux-x64-musl", "linux-arm64", "linux-arm64-musl", "darwin-x64", "darwin-arm64"} {
		pl, err := bootstrap.ParsePlatformKey(key)
		if err != nil || pl.Key() != key {
			t.Errorf("%s: %v %v", key, pl, err)
		}
	}
	for _, bad := range []string{"linux", "linux-x64-glibc", "-x64", "linux-x64-musl-extra"} {
		if _, err := bootstrap.ParsePlatformKey(bad); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}

func TestDigestForms(t *testing.T) {
	d := digestOf([]byte("hello"))
	for _, s := range []string{d.SRI(), "sha1-abc " + d.SRI(), d.SRI() + "?opt"} {
		got, err := bootstrap.ParseIntegrity(s)
		if err != nil || got != d {
			t.Errorf("ParseIntegrity(%q) = %v, %v", s, got, err)
		}
	}
	if got, err := bootstrap.ParseHex(strings.ToUpper(d.Hex())); err != nil || got != d {
		t.Errorf("ParseHex = %v, %v", got, err)
	}
	for _, bad := range []string{"", "sha1-abc", "sha512-!!", "sha512-YWJj"} {
		if _, err := bootstrap.ParseIntegrity(bad); err == nil {
			t.Errorf("ParseIntegrity(%q) accepted", bad)
		}
	}
	if _, err := bootstrap.ParseHex("abcd"); err == nil {
		t.Error("short hex accepted")
	}
}

// mountTarget is an isolated target that sees the cache's trees through a
// read-only mount at bootstrap.MountPath.
type mountTarget struct {
	*target
	trees string
}

func (m mountTarget) HostPath(p string) (string, bool) {
	if p == m.trees {
		return bootstrap.MountPath, true
	}
	if rest, ok := strings.CutPrefix(p, m.trees+"/"); ok {
		return bootstrap.MountPath + "/" + rest, true
	}
	return "", false
}

// TestInstallMounted: an isolated sandbox that mounts the cache runs the
// CLI from the mount; nothing is copied into it.
func TestInstallMounted(t *testing.T) {
	srv := newServer(t)
	pkg := npmPackage(t, "fakecli", "9.9.9")
	url := srv.add("/fakecli.tgz", pkg)
	inst := &bootstrap.Installer{Pins: pinFor("fakecli", url, digestOf(pkg), ""), CacheDir: t.TempDir()}
	host, target, err := inst.SharedCache()
	if err != nil || target != bootstrap.MountPath || host != filepath.Join(inst.CacheDir, "trees") {
		t.Fatalf("SharedCache = %s, %s, %v", host, target, err)
	}
	tg := mountTarget{target: newTarget(t, true), trees: host}
	res, err := inst.Install(context.Background(), tg, "fakecli", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Mounted || !strings.HasPrefix(res.Path, bootstrap.MountPath+"/sha512-") || tg.copies.Load() != 0 {
		t.Fatalf("install %+v (copies %d)", res, tg.copies.Load())
	}
	host2 := filepath.Join(host, strings.TrimPrefix(res.Path, bootstrap.MountPath+"/"))
	if got := run(t, newTarget(t, false), host2); got != "fakecli 9.9.9" {
		t.Errorf("output = %q", got)
	}
}

// failingMount is a mounting target whose mirror of a tree failed (a
// remote host's connection lost while copying it).
type failingMount struct {
	mountTarget
	err error
}

func (m failingMount) HostPath(p string) (string, bool) {
	if p == m.trees {
		return bootstrap.MountPath, true
	}
	return "", false
}

func (m failingMount) HostPathError(context.Context) error { return m.err }

// TestInstallMountFailedSaysWhy: when the sandbox cannot show a cached
// tree, the install fails with the sandbox's reason (here a lost
// connection, which keeps its code and cause), not only "the mount does
// not show it": a loaded CI run's lost SSH connection read as a missing
// executable.
func TestInstallMountFailedSaysWhy(t *testing.T) {
	srv := newServer(t)
	pkg := npmPackage(t, "fakecli", "9.9.9")
	url := srv.add("/fakecli.tgz", pkg)
	inst := &bootstrap.Installer{Pins: pinFor("fakecli", url, digestOf(pkg), ""), CacheDir: t.TempDir()}
	host, _, err := inst.SharedCache()
	if err != nil {
		t.Fatal(err)
	}
	lost := &outpost.Error{Code: outpost.Sandbox, Op: "mount", Err: errors.New("connection to the sandbox's host lost")}
	tg := failingMount{mountTarget{target: newTarget(t, true), trees: host}, lost}
	_, err = inst.Install(context.Background(), tg, "fakecli", nil)
	if outpost.CodeOf(err) != outpost.Sandbox || !strings.Contains(fmt.Sprint(err), "connection to the sandbox's host lost") {
		t.Fatalf("install through a failed mirror: %v; want code sandbox with the cause", err)
	}
}

// TestModesNormalized: directories an archive leaves implicit, and files
// it makes private, end up readable by anyone (a sandbox's user is not the
// cache's owner when the provider mounts the cache) and writable by none.
func TestModesNormalized(t *testing.T) {
	srv := newServer(t)
	pkg := tgz(t, entry{name: "package/vendor/x/bin/fakecli", mode: 0o700, body: script("fakecli", "1")}, entry{name: "package/vendor/x/data", mode: 0o600, body: "d"})
	url := srv.add("/modes.tgz", pkg)
	inst := &bootstrap.Installer{Pins: pinFor("fakecli", url, digestOf(pkg), ""), CacheDir: t.TempDir()}
	inst.Pins.Agents["fakecli"].Platforms["linux-x64"].Bin = "vendor/x/bin/fakecli"
	res, err := inst.Install(context.Background(), newTarget(t, false), "fakecli", nil)
	if err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]os.FileMode{"pkg/vendor": 0o755, "pkg/vendor/x/bin": 0o755, "pkg/vendor/x/bin/fakecli": 0o555, "pkg/vendor/x/data": 0o444} {
		fi, err := os.Stat(filepath.Join(res.Cached, rel))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", rel, fi.Mode().Perm(), err, want)
		}
	}
}
