package bootstrap_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/internal/tarsafe"
)

// entry is one member of a test archive.
type entry struct {
	name     string
	typ      byte
	mode     int64
	body     string
	linkname string
	devmajor int64
}

// tgz builds a gzip-compressed tar archive.
func tgz(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Mode: mode, Linkname: e.linkname, ModTime: time.Unix(1e9, 0), Devmajor: e.devmajor, Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := io.WriteString(tw, e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// script is a tiny CLI: it prints its name and version, and its arguments.
func script(name, version string) string {
	return fmt.Sprintf("#!/bin/sh\necho %s %s \"$@\"\n", name, version)
}

// npmPackage is an npm platform package tarball holding a fake CLI.
func npmPackage(t testing.TB, name, version string) []byte {
	return tgz(t,
		entry{name: "package/package.json", body: fmt.Sprintf(`{"name":%q,"version":%q}`, name, version)},
		entry{name: "package/README.md", body: "fake\n"},
		entry{name: "package/bin/" + name, mode: 0o755, body: script(name, version)},
	)
}

func digestOf(b []byte) bootstrap.Digest { return bootstrap.Digest(sha512.Sum512(b)) }

// server serves files by path and counts requests.
type server struct {
	*httptest.Server
	mu    sync.Mutex
	files map[string][]byte
	// truncate serves only this many bytes of a file while announcing its
	// full length; stall stops after this many bytes and waits.
	truncate map[string]int
	stall    map[string]int
	hits     map[string]*atomic.Int64
	// gate, when set, holds every file response until closed.
	gate chan struct{}
	done chan struct{}
}

func newServer(t testing.TB) *server {
	s := &server{files: map[string][]byte{}, truncate: map[string]int{}, stall: map[string]int{}, hits: map[string]*atomic.Int64{}, done: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(func() {
		close(s.done)
		s.Close()
	})
	return s
}

func (s *server) add(p string, body []byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[p] = body
	s.hits[p] = &atomic.Int64{}
	return s.URL + p
}

func (s *server) count(p string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.hits[p]; h != nil {
		return h.Load()
	}
	return 0
}

func (s *server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	body, ok := s.files[r.URL.Path]
	hits := s.hits[r.URL.Path]
	cut, truncated := s.truncate[r.URL.Path]
	stop, stalls := s.stall[r.URL.Path]
	gate := s.gate
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	hits.Add(1)
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	switch {
	case truncated:
		w.Write(body[:cut])
	case stalls:
		w.Write(body[:stop])
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
	default:
		w.Write(body)
	}
}

// pinFor is a one-agent pin file for an npm-like artifact at url.
func pinFor(name, url string, d bootstrap.Digest, libc string) *bootstrap.Pins {
	return &bootstrap.Pins{Schema: bootstrap.SchemaVersion, Registry: bootstrap.DefaultRegistry, Agents: map[string]*bootstrap.Pin{
		name: {Kind: bootstrap.KindNPM, Version: "9.9.9", Program: name, Package: "@fake/" + name, Platforms: map[string]*bootstrap.Artifact{
			"linux-x64": {Package: "@fake/" + name + "-linux-x64", Version: "9.9.9", URL: url, Integrity: d.SRI(), Bin: "bin/" + name, Libc: libc},
		}},
	}}
}

var linuxGlibc = bootstrap.Platform{OS: "linux", Arch: "amd64", Libc: bootstrap.Glibc}

// target is a test sandbox. Not isolated, it is the host (paths are the
// host's). Isolated, its filesystem is a host directory, root, that its
// paths are relative to; CopyIn extracts through tarsafe like the local
// provider.
type target struct {
	isolated bool
	root     string
	home     string
	platform bootstrap.Platform
	copies   atomic.Int64
}

func newTarget(t testing.TB, isolated bool) *target {
	tg := &target{isolated: isolated, platform: linuxGlibc, home: "/home/agent"}
	if isolated {
		tg.root = t.TempDir()
	}
	return tg
}

func (tg *target) Isolated() bool { return tg.isolated }
func (tg *target) Home() string   { return tg.home }
func (tg *target) Platform(context.Context) (bootstrap.Platform, error) {
	return tg.platform, nil
}

// host maps a sandbox path to the host.
func (tg *target) host(p string) string {
	if !tg.isolated {
		return p
	}
	return filepath.Join(tg.root, filepath.FromSlash(p))
}

func (tg *target) LookPath(ctx context.Context, name string) (string, error) {
	if !strings.Contains(name, "/") {
		return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
	}
	fi, err := os.Stat(tg.host(name))
	if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
	}
	return name, nil
}

func (tg *target) CopyIn(ctx context.Context, dir string, r io.Reader) error {
	if !path.IsAbs(dir) {
		return fmt.Errorf("relative dir %q", dir)
	}
	tg.copies.Add(1)
	if err := os.MkdirAll(tg.host(dir), 0o755); err != nil {
		return err
	}
	f := tarsafe.Filter(r)
	defer f.Close()
	return tarsafe.Extract(f, tg.host(dir))
}

// run runs an installed executable (a host path, or a sandbox path of an
// isolated target) and returns its output.
func run(t testing.TB, tg *target, p string, args ...string) string {
	t.Helper()
	out, err := exec.Command(tg.host(p), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("running %s: %v\n%s", p, err, out)
	}
	return strings.TrimSpace(string(out))
}

// cacheFiles lists what a cache directory holds (relative, slash
// separated, lock files left out).
func cacheFiles(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." || d.IsDir() || strings.HasPrefix(rel, "locks/") {
			return nil
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	return out
}
