package outpost_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDebianMirror runs scripts/lib/debian-mirror.sh's debian_mirror on
// apt configurations written here: the image build takes its debootstrap
// mirror from the machine's own apt sources and names no default host.
func TestDebianMirror(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		env   string // OUTPOST_DEBIAN_MIRROR
		want  string // "" : none found, the function fails
	}{
		{name: "deb822", files: map[string]string{"sources.list.d/debian.sources": `Types: deb
# a comment
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://src.example/debian

Types: deb
Enabled: no
URIs: http://disabled.example/debian

Types: deb deb-src
URIs: https://mirror.example/debian
Suites: bookworm
`}, want: "https://mirror.example/debian"},
		{name: "one-line", files: map[string]string{"sources.list": `# deb http://commented.example/debian bookworm main
deb-src http://src.example/debian bookworm main
deb http://security.example/debian-security bookworm-security main
deb [arch=amd64 signed-by=/k.gpg] http://line.example/debian bookworm main
`}, want: "http://line.example/debian"},
		{name: "list.d", files: map[string]string{"sources.list.d/x.list": "deb http://listd.example/debian bookworm main\n", "sources.list.d/y.list.disabled": "deb http://no.example/debian bookworm main\n"}, want: "http://listd.example/debian"},
		{name: "deb822 first", files: map[string]string{"sources.list.d/a.sources": "Types: deb\nURIs: http://a.example/debian\n", "sources.list": "deb http://b.example/debian bookworm main\n"}, want: "http://a.example/debian"},
		{name: "environment wins", files: map[string]string{"sources.list": "deb http://b.example/debian bookworm main\n"}, env: "http://env.example/debian", want: "http://env.example/debian"},
		{name: "none", files: map[string]string{"sources.list": "deb file:/srv/debian bookworm main\n", "sources.list.d/c.sources": "Types: deb\nURIs: cdrom:/media\n"}},
		{name: "empty", files: map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, "sources.list.d"), 0o755)
			for name, body := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("bash", "-c", `source scripts/lib/debian-mirror.sh && debian_mirror "$1"`, "test", dir)
			cmd.Env = append(os.Environ(), "OUTPOST_DEBIAN_MIRROR="+tc.env)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			got := strings.TrimSpace(out.String())
			if got != tc.want || (err == nil) != (tc.want != "") {
				t.Errorf("debian_mirror = %q, %v (stderr %q); want %q", got, err, errb.String(), tc.want)
			}
		})
	}
}

// TestNoDefaultDebianHost: the scripts name no Debian mirror of their own.
func TestNoDefaultDebianHost(t *testing.T) {
	files, err := filepath.Glob("scripts/*.sh")
	if err != nil {
		t.Fatal(err)
	}
	lib, _ := filepath.Glob("scripts/lib/*.sh")
	for _, f := range append(files, lib...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("deb.debian.org")) {
			t.Errorf("%s names deb.debian.org", f)
		}
	}
}

// TestNoEarlyExitPipes: the scripts run under `set -o pipefail`, where a
// reader that stops early (`head`, `grep -q`, `grep -m`) can end the writer
// with SIGPIPE and fail the whole pipeline with exit 141. A fresh-clone CI
// run once stopped after 12 s on `docker run … | head -1`.
func TestNoEarlyExitPipes(t *testing.T) {
	var files []string
	for _, dir := range []string{"scripts", "scripts/lib", ".ci"} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				files = append(files, filepath.Join(dir, e.Name()))
			}
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("pipefail")) {
			continue
		}
		for i, line := range strings.Split(string(b), "\n") {
			code := strings.TrimSpace(line)
			if strings.HasPrefix(code, "#") {
				continue
			}
			for _, bad := range []string{"| head", "|head", "| grep -q", "| grep -m"} {
				if strings.Contains(code, bad) {
					t.Errorf("%s:%d: %q under pipefail can exit 141 (SIGPIPE); read the whole output instead: %s", f, i+1, bad, code)
				}
			}
		}
	}
}
