package cli_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/outposthq/outpost/bootstrap"
)

// fakeCodex serves an npm platform package whose codex prints a version,
// and pins "codex" to it through $OUTPOST_PINS (with digest, when set,
// instead of the package's). It returns the download counter.
func fakeCodex(t *testing.T, digest *[64]byte) *atomic.Int64 {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	body := "#!/bin/sh\necho codex-cli 0.0.1-fake\n"
	tw.WriteHeader(&tar.Header{Name: "package/bin/codex", Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg})
	tw.Write([]byte(body))
	tw.Close()
	zw.Close()
	pkg := buf.Bytes()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write(pkg)
	}))
	t.Cleanup(srv.Close)
	d := sha512.Sum512(pkg)
	if digest != nil {
		d = *digest
	}
	pins := map[string]any{"schema": 1, "agents": map[string]any{"codex": map[string]any{
		"kind": "npm", "version": "0.0.1", "program": "codex", "package": "@fake/codex",
		"platforms": map[string]any{
			"linux-x64":   map[string]any{"url": srv.URL + "/codex.tgz", "integrity": bootstrap.Digest(d).SRI(), "bin": "bin/codex"},
			"linux-arm64": map[string]any{"url": srv.URL + "/codex.tgz", "integrity": bootstrap.Digest(d).SRI(), "bin": "bin/codex"},
		},
	}}}
	b, _ := json.Marshal(pins)
	file := filepath.Join(t.TempDir(), "pins.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(bootstrap.PinsVariable, file)
	t.Setenv(bootstrap.CacheVariable, t.TempDir())
	return &hits
}

func TestBootstrapCommand(t *testing.T) {
	hits := fakeCodex(t, nil)
	home, wd := t.TempDir(), t.TempDir()

	code, out, errOut := run(t, home, wd, "bootstrap", "codex")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"codex 0.0.1 installed (downloaded", "runs      codex-cli 0.0.1-fake", "sandbox   local"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	// Not a terminal: one line per phase, no bar.
	for _, want := range []string{"· bootstrap: codex 0.0.1: downloading", "verified", "unpacking"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if strings.Contains(errOut, "\r") {
		t.Errorf("a progress bar was drawn on a non-terminal: %q", errOut)
	}

	// Again, as JSON: from the cache, nothing downloaded.
	code, out, errOut = run(t, home, wd, "bootstrap", "--json", "codex")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var notice, res map[string]any
	json.Unmarshal([]byte(lines[0]), &notice)
	json.Unmarshal([]byte(lines[len(lines)-1]), &res)
	if notice["type"] != "notice" || notice["kind"] != "bootstrap" {
		t.Errorf("first line %s", lines[0])
	}
	if res["type"] != "result" || res["source"] != "cache" || res["check"] != "codex-cli 0.0.1-fake" || res["error"] != nil || res["exit_code"] != 0.0 {
		t.Errorf("result line %s", lines[len(lines)-1])
	}
	if hits.Load() != 1 {
		t.Errorf("%d downloads, want 1", hits.Load())
	}

	// --list shows the override.
	_, out, _ = run(t, home, wd, "bootstrap", "--list")
	if !strings.Contains(out, "codex        0.0.1") || !strings.Contains(out, "claude") {
		t.Errorf("--list:\n%s", out)
	}
}

func TestBootstrapCommandFailures(t *testing.T) {
	wrong := sha512.Sum512([]byte("the reviewed package"))
	fakeCodex(t, &wrong)
	home, wd := t.TempDir(), t.TempDir()
	code, out, _ := run(t, home, wd, "bootstrap", "--json", "codex")
	if code != 6 {
		t.Fatalf("exit %d, want 6 (bootstrap)", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var res struct {
		Error struct {
			Code    string
			Details map[string]any
		}
	}
	json.Unmarshal([]byte(lines[len(lines)-1]), &res)
	if res.Error.Code != "bootstrap" || res.Error.Details["expected"] != bootstrap.Digest(wrong).SRI() || res.Error.Details["actual"] == nil {
		t.Errorf("result line %s", lines[len(lines)-1])
	}
	code, _, errOut := run(t, home, wd, "bootstrap", "codex")
	if code != 6 || !strings.Contains(errOut, "expected: "+bootstrap.Digest(wrong).SRI()) || !strings.Contains(errOut, "nothing was installed") {
		t.Errorf("exit %d, stderr %s", code, errOut)
	}
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"bootstrap", "nope"}, 3},
		{[]string{"bootstrap"}, 2},
		{[]string{"bootstrap", "--list", "codex"}, 2},
		{[]string{"bootstrap", "codex", "--sandbox", "nope"}, 3},
	} {
		if code, _, errOut := run(t, home, wd, c.args...); code != c.code {
			t.Errorf("%v: exit %d, want %d (%s)", c.args, code, c.code, errOut)
		}
	}
}
