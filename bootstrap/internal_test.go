package bootstrap

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"runtime"
	"strings"
	"testing"
)

// loaderTarget is an isolated sandbox whose only files are the given
// paths, seen through CopyOut.
type loaderTarget struct {
	files map[string]bool
	err   error
}

func (loaderTarget) Isolated() bool { return true }
func (loaderTarget) LookPath(context.Context, string) (string, error) {
	return "", errors.New("not found")
}
func (loaderTarget) CopyIn(context.Context, string, io.Reader) error { return nil }
func (l loaderTarget) CopyOut(_ context.Context, p string) (io.ReadCloser, error) {
	if l.err != nil {
		return nil, l.err
	}
	if l.files[p] {
		return io.NopCloser(strings.NewReader("")), nil
	}
	return nil, &fs.PathError{Op: "copy out", Path: p, Err: fs.ErrNotExist}
}

func TestDetectPlatform(t *testing.T) {
	cases := []struct {
		files []string
		want  Platform
	}{
		{[]string{"/lib64/ld-linux-x86-64.so.2"}, Platform{"linux", "amd64", Glibc}},
		{[]string{"/lib/ld-musl-x86_64.so.1"}, Platform{"linux", "amd64", Musl}},
		{[]string{"/lib/ld-linux-aarch64.so.1"}, Platform{"linux", "arm64", Glibc}},
		{[]string{"/lib/ld-musl-aarch64.so.1"}, Platform{"linux", "arm64", Musl}},
		{nil, Platform{"linux", runtime.GOARCH, NoLibc}},
	}
	for _, c := range cases {
		files := map[string]bool{}
		for _, f := range c.files {
			files[f] = true
		}
		got, err := detectPlatform(context.Background(), loaderTarget{files: files})
		if err != nil || got != c.want {
			t.Errorf("%v: got %v, %v; want %v", c.files, got, err, c.want)
		}
	}
	boom := errors.New("engine down")
	if _, err := detectPlatform(context.Background(), loaderTarget{err: boom}); !errors.Is(err, boom) {
		t.Errorf("a failing sandbox gave %v", err)
	}
}

func TestStripName(t *testing.T) {
	cases := []struct {
		in   string
		n    int
		want string
		ok   bool
	}{
		{"package/bin/x", 1, "bin/x", true},
		{"./package/bin/x", 1, "bin/x", true},
		{"package/", 1, "", false},
		{"package", 1, "", false},
		{"x", 0, "x", true},
		{"a/b/c", 2, "c", true},
	}
	for _, c := range cases {
		got, ok := stripName(c.in, c.n)
		if got != c.want || ok != c.ok {
			t.Errorf("stripName(%q, %d) = %q, %v", c.in, c.n, got, ok)
		}
	}
}

func TestRewrite(t *testing.T) {
	const from = "https://registry.npmjs.org"
	u := from + "/@a/b/-/b-1.tgz"
	if got := rewrite(u, from, "http://127.0.0.1:9/npm/"); got != "http://127.0.0.1:9/npm/@a/b/-/b-1.tgz" {
		t.Errorf("rewrite = %s", got)
	}
	if got := rewrite("https://elsewhere/x.tgz", from, "http://mirror"); got != "https://elsewhere/x.tgz" {
		t.Errorf("a URL outside the registry was rewritten: %s", got)
	}
	if got := rewrite(u, from, ""); got != u {
		t.Errorf("no registry rewrote: %s", got)
	}
}
