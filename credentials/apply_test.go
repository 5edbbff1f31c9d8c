package credentials

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/tarsafe"
)

// dirTarget is a Target whose sandbox file system is a host directory:
// sandbox path /x is root/x. It is a real implementation of the contract
// (tar in, tar out named relative to the parent, fs.ErrNotExist), like a
// provider's.
type dirTarget struct {
	root    string
	home    string
	copyIns int
	outErr  error // returned by CopyOut when set
	inErr   error // returned by CopyIn when set
}

func newDirTarget(t *testing.T) *dirTarget {
	t.Helper()
	d := &dirTarget{root: t.TempDir(), home: "/home/agent"}
	if err := os.MkdirAll(d.host(d.home), 0o700); err != nil {
		t.Fatal(err)
	}
	return d
}

func (d *dirTarget) host(p string) string { return filepath.Join(d.root, filepath.FromSlash(p)) }

func (d *dirTarget) Home() string { return d.home }

func (d *dirTarget) CopyIn(ctx context.Context, dir string, tar io.Reader) error {
	d.copyIns++
	if d.inErr != nil {
		return d.inErr
	}
	if err := os.MkdirAll(d.host(dir), 0o700); err != nil {
		return err
	}
	return tarsafe.Extract(tar, d.host(dir))
}

func (d *dirTarget) CopyOut(ctx context.Context, p string) (io.ReadCloser, error) {
	if d.outErr != nil {
		return nil, d.outErr
	}
	fi, err := os.Lstat(d.host(p))
	if err != nil {
		return nil, fmt.Errorf("copy out %s: %w", p, err)
	}
	f := tarsafe.File{Name: path.Base(p), Mode: fi.Mode().Perm()}
	switch {
	case fi.IsDir():
		f.Dir = true
	case fi.Mode()&fs.ModeSymlink != 0:
		f.Link, _ = os.Readlink(d.host(p))
	default:
		if f.Data, err = os.ReadFile(d.host(p)); err != nil {
			return nil, err
		}
	}
	var buf bytes.Buffer
	if err := tarsafe.Write(&buf, []tarsafe.File{f}); err != nil {
		return nil, err
	}
	return io.NopCloser(&buf), nil
}

// put writes a file in the sandbox home.
func (d *dirTarget) put(t *testing.T, rel, content string) {
	t.Helper()
	p := d.host(path.Join(d.home, rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// get reads a file of the sandbox home and its permission bits.
func (d *dirTarget) get(t *testing.T, rel string) (string, fs.FileMode) {
	t.Helper()
	p := d.host(path.Join(d.home, rel))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), fi.Mode().Perm()
}

func wantCode(t *testing.T, err error, code outpost.Code, contains ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want code %s", code)
	}
	var oe *outpost.Error
	if !errors.As(err, &oe) || oe.Code != code {
		t.Fatalf("error = %v, want code %s", err, code)
	}
	for _, c := range contains {
		if !strings.Contains(err.Error(), c) {
			t.Errorf("error %q does not contain %q", err, c)
		}
	}
}

func apply(t *testing.T, d *dirTarget, files []harness.File, hostFiles []harness.HostFile, opts ApplyOptions) error {
	t.Helper()
	if opts.Registry == nil {
		opts.Registry = NewRegistry(t.TempDir())
	}
	release, err := Apply(context.Background(), d, files, hostFiles, opts)
	if release == nil {
		t.Fatal("release is nil")
	}
	t.Cleanup(release)
	return err
}

func TestApplyReplace(t *testing.T) {
	d := newDirTarget(t)
	d.put(t, ".claude/old.json", "old")
	err := apply(t, d, []harness.File{
		{Path: ".claude/.credentials.json", Content: []byte(`{"token":"x"}`)},
		{Path: ".config/tool/deep/file", Content: []byte("v"), Mode: 0o644},
		{Path: ".claude/old.json", Content: []byte("new")},
		{Path: "twice", Content: []byte("first")},
		{Path: "twice", Content: []byte("second")},
	}, nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rel     string
		content string
		mode    fs.FileMode
	}{
		{".claude/.credentials.json", `{"token":"x"}`, 0o600},
		{".config/tool/deep/file", "v", 0o644},
		{".claude/old.json", "new", 0o600},
		{"twice", "second", 0o600},
	} {
		got, mode := d.get(t, c.rel)
		if got != c.content || mode != c.mode {
			t.Errorf("%s = %q %v, want %q %v", c.rel, got, mode, c.content, c.mode)
		}
	}
	fi, err := os.Stat(d.host("/home/agent/.config/tool/deep"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("created directory mode = %v, %v; want 0700", fi.Mode().Perm(), err)
	}
	if d.copyIns != 1 {
		t.Errorf("CopyIn called %d times, want 1", d.copyIns)
	}
}

func TestApplyNothing(t *testing.T) {
	d := newDirTarget(t)
	if err := apply(t, d, nil, nil, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if d.copyIns != 0 {
		t.Errorf("CopyIn called %d times for an empty plan", d.copyIns)
	}
}

func TestApplyBadPaths(t *testing.T) {
	for _, p := range []string{"", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/", `a\b`, "a/./b"} {
		t.Run(p, func(t *testing.T) {
			d := newDirTarget(t)
			err := apply(t, d, []harness.File{{Path: p, Content: []byte("x")}}, nil, ApplyOptions{})
			wantCode(t, err, outpost.Configuration, "clean relative path")
			err = apply(t, d, nil, []harness.HostFile{{Source: "/nonexistent", Target: p, Optional: true}}, ApplyOptions{HostFiles: true})
			wantCode(t, err, outpost.Configuration, "clean relative path")
		})
	}
	t.Run("file and directory", func(t *testing.T) {
		d := newDirTarget(t)
		err := apply(t, d, []harness.File{{Path: "a", Content: []byte("x")}, {Path: "a/b", Content: []byte("y")}}, nil, ApplyOptions{})
		wantCode(t, err, outpost.Configuration, `"a" is both a file and the directory`)
	})
	t.Run("unknown merge", func(t *testing.T) {
		d := newDirTarget(t)
		err := apply(t, d, []harness.File{{Path: "a", Content: []byte("x"), Merge: "yaml"}}, nil, ApplyOptions{})
		wantCode(t, err, outpost.Configuration, "unknown merge")
	})
}

func TestApplyMergeJSON(t *testing.T) {
	tests := []struct {
		name     string
		existing *string
		plan     string
		want     string
	}{
		{
			name: "absent: plan as is",
			plan: `{"b":1,  "a":2}`,
			want: `{"b":1,  "a":2}`,
		},
		{
			name:     "empty existing",
			existing: ptr("  \n"),
			plan:     `{"a":1}`,
			want:     `{"a":1}`,
		},
		{
			name:     "deep merge, plan wins, arrays replaced",
			existing: ptr(`{"theme":"dark","permissions":{"allow":["Read"],"deny":["Bash"]},"n":1.50,"env":{"A":"1"},"keep":{"x":true}}`),
			plan:     `{"permissions":{"allow":["Edit","Write"]},"n":2,"env":"replaced","new":{"k":"<v>"}}`,
			want: `{
  "env": "replaced",
  "keep": {
    "x": true
  },
  "n": 2,
  "new": {
    "k": "<v>"
  },
  "permissions": {
    "allow": [
      "Edit",
      "Write"
    ],
    "deny": [
      "Bash"
    ]
  },
  "theme": "dark"
}
`,
		},
		{
			name:     "object replaces scalar",
			existing: ptr(`{"a":"s","big":12345678901234567890}`),
			plan:     `{"a":{"b":null}}`,
			want:     "{\n  \"a\": {\n    \"b\": null\n  },\n  \"big\": 12345678901234567890\n}\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, mode := applyMerged(t, ".claude/settings.json", tt.existing, tt.plan, harness.MergeJSON)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("merged (-want +got):\n%s", d)
			}
			if mode != 0o600 {
				t.Errorf("mode = %v, want 0600", mode)
			}
		})
	}
}

func TestApplyMergeJSONErrors(t *testing.T) {
	const secret = "sk-merge-4242"
	tests := []struct {
		name     string
		existing string
		plan     string
		want     []string
	}{
		{"invalid existing", "{\n  \"token\": \"" + secret + "\",\n  oops\n}", `{"a":1}`, []string{"existing .claude/settings.json", "line 3", "fix or remove it"}},
		{"existing array", `["` + secret + `"]`, `{"a":1}`, []string{"existing .claude/settings.json", "not a JSON object"}},
		{"trailing data", `{"a":"` + secret + `"} {"b":2}`, `{"a":1}`, []string{"existing .claude/settings.json", "not a JSON object"}},
		{"invalid plan", `{}`, `{"token":"` + secret + `"`, []string{"generated .claude/settings.json", "not a JSON object"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDirTarget(t)
			d.put(t, ".claude/settings.json", tt.existing)
			err := apply(t, d, []harness.File{{Path: ".claude/settings.json", Content: []byte(tt.plan), Merge: harness.MergeJSON}}, nil, ApplyOptions{})
			wantCode(t, err, outpost.Configuration, tt.want...)
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "oops") {
				t.Errorf("error %q quotes the file", err)
			}
			if got, _ := d.get(t, ".claude/settings.json"); got != tt.existing {
				t.Error("the file was changed")
			}
		})
	}
	t.Run("directory", func(t *testing.T) {
		d := newDirTarget(t)
		d.put(t, "conf/inner", "x")
		err := apply(t, d, []harness.File{{Path: "conf", Content: []byte(`{}`), Merge: harness.MergeJSON}}, nil, ApplyOptions{})
		wantCode(t, err, outpost.Configuration, "conf", "is a directory")
	})
	t.Run("symlink", func(t *testing.T) {
		d := newDirTarget(t)
		if err := os.Symlink("elsewhere", d.host("/home/agent/link.json")); err != nil {
			t.Fatal(err)
		}
		err := apply(t, d, []harness.File{{Path: "link.json", Content: []byte(`{}`), Merge: harness.MergeJSON}}, nil, ApplyOptions{})
		wantCode(t, err, outpost.Configuration, "link.json", "symbolic link")
	})
	t.Run("sandbox error is not configuration", func(t *testing.T) {
		d := newDirTarget(t)
		boom := errors.New("container gone")
		d.outErr = boom
		err := apply(t, d, []harness.File{{Path: "a.json", Content: []byte(`{}`), Merge: harness.MergeJSON}}, nil, ApplyOptions{})
		if !errors.Is(err, boom) {
			t.Fatalf("error = %v, want it to wrap the target's", err)
		}
		var oe *outpost.Error
		if errors.As(err, &oe) {
			t.Errorf("target error was coded %s; the caller classifies it", oe.Code)
		}
	})
	t.Run("copy in error", func(t *testing.T) {
		d := newDirTarget(t)
		boom := errors.New("disk full")
		d.inErr = boom
		err := apply(t, d, []harness.File{{Path: "a", Content: []byte(`x`)}}, nil, ApplyOptions{})
		if !errors.Is(err, boom) {
			t.Fatalf("error = %v, want it to wrap the target's", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		d := newDirTarget(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		release, err := Apply(ctx, d, []harness.File{{Path: "a", Content: []byte(`x`)}}, nil, ApplyOptions{})
		release()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error = %v, want context.Canceled", err)
		}
	})
}

func TestApplyMergeTOML(t *testing.T) {
	tests := []struct {
		name     string
		existing *string
		plan     string
		want     string
	}{
		{
			name: "absent",
			plan: "model = \"o3\"\n",
			want: "model = \"o3\"\n",
		},
		{
			name:     "nothing missing: unchanged",
			existing: ptr("# mine\nmodel = \"gpt-5\"   # keep\n[mcp_servers.x]\ncommand = \"y\""),
			plan:     "model = \"o3\"\n[mcp_servers.z]\ncommand = \"z\"\n",
			want:     "# mine\nmodel = \"gpt-5\"   # keep\n[mcp_servers.x]\ncommand = \"y\"",
		},
		{
			name:     "keys before the first table, tables at the end",
			existing: ptr("model = \"gpt-5\"\n\n[profiles.fast]\nmodel = \"x\"\n"),
			plan:     "# plan comment\napproval_policy = \"never\"\nmodel = \"o3\"\nsandbox_mode = 'danger'\n\n[mcp_servers.x]\ncommand = \"y\"\nargs = [\n  \"a\",\n  \"b\",\n]\n\n[profiles.slow]\nmodel = \"z\"\n",
			want:     "model = \"gpt-5\"\n\n# plan comment\napproval_policy = \"never\"\nsandbox_mode = 'danger'\n\n[profiles.fast]\nmodel = \"x\"\n\n[mcp_servers.x]\ncommand = \"y\"\nargs = [\n  \"a\",\n  \"b\",\n]\n",
		},
		{
			name:     "no trailing newline, no tables",
			existing: ptr("a = 1"),
			plan:     "b = 2\n[t]\nc = 3",
			want:     "a = 1\nb = 2\n\n[t]\nc = 3\n",
		},
		{
			name:     "dotted and quoted keys",
			existing: ptr("\"quoted key\" = 1\nnested.inner = 2\n'lit' = 3\n"),
			plan:     "\"quoted key\" = 10\nnested.other = 20\nlit.x = 30\nfresh.a.b = 40\n",
			want:     "\"quoted key\" = 1\nnested.inner = 2\n'lit' = 3\nfresh.a.b = 40\n",
		},
		{
			name:     "multi-line strings do not hide or fake statements",
			existing: ptr("notes = \"\"\"\n[fake]\nmodel = 1\n\"\"\"\nraw = '''\nx = 1\n'''\n"),
			plan:     "model = \"m\"\nx = 2\n[fake]\ny = 1\n",
			want:     "notes = \"\"\"\n[fake]\nmodel = 1\n\"\"\"\nraw = '''\nx = 1\n'''\nmodel = \"m\"\nx = 2\n\n[fake]\ny = 1\n",
		},
		{
			name:     "array of tables and inline table",
			existing: ptr("[[servers]]\nname = \"a\"\n"),
			plan:     "[[servers]]\nname = \"b\"\nenv = { A = \"1\", B = [1,\n2] }\n[[hooks]]\nrun = \"x\"\n",
			want:     "[[servers]]\nname = \"a\"\n\n[[hooks]]\nrun = \"x\"\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := applyMerged(t, ".codex/config.toml", tt.existing, tt.plan, harness.MergeTOML)
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("merged (-want +got):\n%s", d)
			}
		})
	}
}

func TestApplyMergeTOMLErrors(t *testing.T) {
	const secret = "sk-toml-8080"
	tests := []struct {
		name     string
		existing string
		plan     string
		want     []string
	}{
		{"stray line in existing", "a = 1\n" + secret + "\n", "b = 2\n", []string{"existing .codex/config.toml", "line 2"}},
		{"unterminated string in existing", "a = 1\n\nkey = \"" + secret + "\n", "b = 2\n", []string{"existing .codex/config.toml", "line 3"}},
		{"unterminated multi-line", "key = '''" + secret + "\n", "b = 2\n", []string{"existing", "line 1"}},
		{"bad header", "[" + secret + "\n", "b = 2\n", []string{"existing", "line 1"}},
		{"bad plan", "a = 1\n", "b = [\n", []string{"generated .codex/config.toml", "line 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDirTarget(t)
			d.put(t, ".codex/config.toml", tt.existing)
			err := apply(t, d, []harness.File{{Path: ".codex/config.toml", Content: []byte(tt.plan), Merge: harness.MergeTOML}}, nil, ApplyOptions{})
			wantCode(t, err, outpost.Configuration, tt.want...)
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q quotes the file", err)
			}
		})
	}
}

// hostFile writes a host file and returns its path.
func hostFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "auth.json")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestApplyHostFiles(t *testing.T) {
	src := hostFile(t, `{"refresh":"rt-1"}`)
	missing := filepath.Join(t.TempDir(), "missing.json")

	t.Run("copied, merged over", func(t *testing.T) {
		d := newDirTarget(t)
		err := apply(t, d,
			[]harness.File{{Path: ".codex/auth.json", Content: []byte(`{"extra":true}`), Merge: harness.MergeJSON}},
			[]harness.HostFile{
				{Source: src, Target: ".codex/auth.json"},
				{Source: src, Target: "copy.json", Mode: 0o640},
				{Source: missing, Target: "skipped.json", Optional: true},
			}, ApplyOptions{HostFiles: true})
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := d.get(t, ".codex/auth.json"); got != "{\n  \"extra\": true,\n  \"refresh\": \"rt-1\"\n}\n" {
			t.Errorf("merged host file = %q", got)
		}
		if got, mode := d.get(t, "copy.json"); got != `{"refresh":"rt-1"}` || mode != 0o640 {
			t.Errorf("copy.json = %q %v", got, mode)
		}
		if _, err := os.Stat(d.host("/home/agent/skipped.json")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("optional missing file was written: %v", err)
		}
	})
	t.Run("required missing", func(t *testing.T) {
		d := newDirTarget(t)
		err := apply(t, d, nil, []harness.HostFile{{Source: missing, Target: "x.json"}}, ApplyOptions{HostFiles: true})
		wantCode(t, err, outpost.Configuration, missing, "does not exist")
	})
	t.Run("relative source", func(t *testing.T) {
		d := newDirTarget(t)
		err := apply(t, d, nil, []harness.HostFile{{Source: "auth.json", Target: "x.json"}}, ApplyOptions{HostFiles: true})
		wantCode(t, err, outpost.Configuration, "absolute")
	})
	t.Run("directory source", func(t *testing.T) {
		d := newDirTarget(t)
		dir := t.TempDir()
		err := apply(t, d, nil, []harness.HostFile{{Source: dir, Target: "x.json"}}, ApplyOptions{HostFiles: true})
		wantCode(t, err, outpost.Configuration, dir, "not a regular file")
	})
	t.Run("variables only: optional skipped", func(t *testing.T) {
		d := newDirTarget(t)
		err := apply(t, d, []harness.File{{Path: "gen", Content: []byte("g")}},
			[]harness.HostFile{{Source: src, Target: "x.json", Optional: true}}, ApplyOptions{HostFiles: false})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(d.host("/home/agent/x.json")); !errors.Is(err, fs.ErrNotExist) {
			t.Error("host file copied into a variables-only sandbox")
		}
		if got, _ := d.get(t, "gen"); got != "g" {
			t.Error("generated file missing")
		}
	})
	t.Run("variables only: required refused", func(t *testing.T) {
		d := newDirTarget(t)
		err := apply(t, d, []harness.File{{Path: "gen", Content: []byte("g")}},
			[]harness.HostFile{{Source: src, Target: "x.json"}, {Source: missing, Target: "y", Optional: true}}, ApplyOptions{HostFiles: false})
		wantCode(t, err, outpost.Configuration, "receives only variables", src)
		if d.copyIns != 0 {
			t.Error("something was written before the refusal")
		}
	})
}

func TestApplyExclusive(t *testing.T) {
	src := hostFile(t, `{"refresh":"rt-1"}`)
	reg := NewRegistry(t.TempDir())
	hf := []harness.HostFile{{Source: src, Target: ".codex/auth.json", Exclusive: true}}
	ctx := context.Background()

	release1, err := Apply(ctx, newDirTarget(t), nil, hf, ApplyOptions{HostFiles: true, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Apply(ctx, newDirTarget(t), nil, hf, ApplyOptions{HostFiles: true, Registry: reg})
	wantCode(t, err, outpost.Configuration, src, "already in use", "exclusive")

	release1()
	release1() // idempotent
	release2, err := Apply(ctx, newDirTarget(t), nil, hf, ApplyOptions{HostFiles: true, Registry: reg})
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	release2()

	t.Run("released when Apply fails", func(t *testing.T) {
		d := newDirTarget(t)
		d.inErr = errors.New("copy failed")
		if _, err := Apply(ctx, d, nil, hf, ApplyOptions{HostFiles: true, Registry: reg}); err == nil {
			t.Fatal("Apply succeeded")
		}
		r, err := reg.Reserve(src)
		if err != nil {
			t.Fatalf("reservation leaked by a failed Apply: %v", err)
		}
		r()
	})
	t.Run("missing optional is not held", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "gone.json")
		opt := []harness.HostFile{{Source: missing, Target: "a", Exclusive: true, Optional: true}}
		release, err := Apply(ctx, newDirTarget(t), nil, opt, ApplyOptions{HostFiles: true, Registry: reg})
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		r, err := reg.Reserve(missing)
		if err != nil {
			t.Fatalf("missing optional file stayed reserved: %v", err)
		}
		r()
	})
}

// applyMerged applies plan, merged with merge into the file p of a home
// that holds existing there (nil: no file), and returns the file's content
// and mode.
func applyMerged(t *testing.T, p string, existing *string, plan string, merge harness.Merge) (string, fs.FileMode) {
	t.Helper()
	d := newDirTarget(t)
	if existing != nil {
		d.put(t, p, *existing)
	}
	if err := apply(t, d, []harness.File{{Path: p, Content: []byte(plan), Merge: merge}}, nil, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	return d.get(t, p)
}
