package conversation_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/tarsafe"
)

// hostSandbox is a Copier over a host directory standing for the
// sandbox's "/". CopyOut archives like `docker cp` (entries named relative
// to the path's parent, symbolic links as links, unfiltered); CopyIn
// extracts with tarsafe.
type hostSandbox struct {
	root string
	home string

	mu       sync.Mutex
	copyIns  int
	copyOuts []string
	failOut  error // returned by CopyOut when set
}

func newHostSandbox(t *testing.T) *hostSandbox {
	return &hostSandbox{root: t.TempDir(), home: "/home/agent"}
}

func (h *hostSandbox) Home() string { return h.home }

func (h *hostSandbox) host(p string) string {
	return filepath.Join(h.root, filepath.FromSlash(p))
}

func (h *hostSandbox) CopyIn(ctx context.Context, dir string, r io.Reader) error {
	h.mu.Lock()
	h.copyIns++
	h.mu.Unlock()
	d := h.host(dir)
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	return tarsafe.Extract(r, d)
}

func (h *hostSandbox) CopyOut(ctx context.Context, p string) (io.ReadCloser, error) {
	h.mu.Lock()
	h.copyOuts = append(h.copyOuts, p)
	h.mu.Unlock()
	if h.failOut != nil {
		return nil, h.failOut
	}
	hp := h.host(p)
	if _, err := os.Lstat(hp); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	parent := filepath.Dir(hp)
	err := filepath.WalkDir(hp, func(fp string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(parent, fp)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime()}
		switch {
		case d.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
		case d.Type()&fs.ModeSymlink != 0:
			hdr.Typeflag = tar.TypeSymlink
			if hdr.Linkname, err = os.Readlink(fp); err != nil {
				return err
			}
		case d.Type().IsRegular():
			hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		default:
			return nil
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			data, err := os.ReadFile(fp)
			if err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return io.NopCloser(&buf), nil
}

// write creates a file in the home.
func (h *hostSandbox) write(t *testing.T, rel, data string, mode fs.FileMode) {
	t.Helper()
	p := h.host(path.Join(h.home, rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func (h *hostSandbox) symlink(t *testing.T, rel, target string) {
	t.Helper()
	p := h.host(path.Join(h.home, rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

// tree lists the regular files under the sandbox's "/" with their
// contents.
func (h *hostSandbox) tree(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(h.root, func(fp string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(h.root, fp)
		data, err := os.ReadFile(fp)
		out["/"+filepath.ToSlash(rel)] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// echoStorage keeps <native>.jsonl and <native>/... under .echo/sessions;
// a line "parent: X" names an ancestor.
func echoStorage() *harness.Storage {
	return &harness.Storage{
		Roots: []string{".echo/sessions", ".echo/missing"},
		Match: func(rel, native string) bool {
			return rel == native+".jsonl" || strings.HasPrefix(rel, native+"/")
		},
		Ancestors: func(rel string, content []byte) []string {
			var out []string
			sc := bufio.NewScanner(bytes.NewReader(content))
			for sc.Scan() {
				if p, ok := strings.CutPrefix(sc.Text(), "parent: "); ok {
					out = append(out, p)
				}
			}
			return out
		},
	}
}

// claudeStorage mimics Claude Code: .claude/projects/<cwd slug>/<native>.jsonl,
// a line {"parentSession": X} names the session forked from.
func claudeStorage() *harness.Storage {
	return &harness.Storage{
		Roots: []string{".claude"},
		Match: func(rel, native string) bool {
			return strings.HasPrefix(rel, "projects/") && path.Base(rel) == native+".jsonl"
		},
		Place: func(rel, native, workdir string) string {
			return "projects/" + slug(workdir) + "/" + path.Base(rel)
		},
		Ancestors: func(rel string, content []byte) []string {
			var out []string
			for _, line := range bytes.Split(content, []byte("\n")) {
				var l struct {
					ParentSession string `json:"parentSession"`
				}
				if json.Unmarshal(line, &l) == nil && l.ParentSession != "" {
					out = append(out, l.ParentSession)
				}
			}
			return out
		},
	}
}

func slug(dir string) string { return strings.ReplaceAll(dir, "/", "-") }

func filePaths(files []conversation.File) []string {
	var out []string
	for _, f := range files {
		out = append(out, f.Path)
	}
	return out
}

func TestCaptureOnlyMatchingNative(t *testing.T) {
	ctx := context.Background()
	sb := newHostSandbox(t)
	sb.write(t, ".echo/sessions/a.jsonl", "a's session\n", 0o600)
	sb.write(t, ".echo/sessions/a/state.bin", "\x00\x01binary", 0o644)
	sb.write(t, ".echo/sessions/b.jsonl", "b's session\n", 0o600)
	sb.write(t, ".echo/sessions/ab.jsonl", "ab's session\n", 0o600)
	sb.write(t, ".echo/other/a.jsonl", "outside the roots\n", 0o600)
	sb.write(t, "secret", "outside\n", 0o600)
	// Links are never followed, in or out of the home.
	sb.symlink(t, ".echo/sessions/a/link-out", "/etc/passwd")
	sb.symlink(t, ".echo/sessions/a/link-in", "../b.jsonl")
	sb.symlink(t, ".echo/sessions/c.jsonl", "../../secret")

	got, err := conversation.Capture(ctx, sb, echoStorage(), "a")
	if err != nil {
		t.Fatal(err)
	}
	want := []conversation.File{
		{Path: ".echo/sessions/a.jsonl", Mode: 0o600, Data: []byte("a's session\n")},
		{Path: ".echo/sessions/a/state.bin", Mode: 0o644, Data: []byte("\x00\x01binary")},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Capture(a) (-want +got):\n%s", d)
	}
	wantOuts := []string{"/home/agent/.echo/missing", "/home/agent/.echo/sessions"}
	if d := cmp.Diff(wantOuts, sb.copyOuts); d != "" {
		t.Errorf("CopyOut calls (-want +got):\n%s", d)
	}

	for _, native := range []string{"c", "zzz", "a.jsonl"} {
		if _, err := conversation.Capture(ctx, sb, echoStorage(), native); !errors.Is(err, conversation.ErrNotFound) {
			t.Errorf("Capture(%s): %v, want ErrNotFound", native, err)
		}
	}
}

func TestCaptureNoRoots(t *testing.T) {
	sb := newHostSandbox(t) // empty home: every root is missing
	if _, err := conversation.Capture(context.Background(), sb, echoStorage(), "a"); !errors.Is(err, conversation.ErrNotFound) {
		t.Errorf("Capture in an empty home: %v, want ErrNotFound", err)
	}
}

func TestCaptureAncestors(t *testing.T) {
	ctx := context.Background()
	sb := newHostSandbox(t)
	sb.write(t, ".claude/projects/-work/a.jsonl", `{"parentSession":"b"}`+"\n"+`{"text":"a"}`+"\n", 0o600)
	sb.write(t, ".claude/projects/-work-old/b.jsonl", `{"parentSession":"c"}`+"\n"+`{"parentSession":"ghost"}`+"\n", 0o600)
	sb.write(t, ".claude/projects/-elsewhere/c.jsonl", `{"parentSession":"a"}`+"\n", 0o600) // a cycle back to a
	sb.write(t, ".claude/projects/-work/d.jsonl", `{"parentSession":"a"}`+"\n", 0o600)      // a child, not an ancestor
	sb.write(t, ".claude/settings.json", `{}`, 0o600)

	got, err := conversation.Capture(ctx, sb, claudeStorage(), "a")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		".claude/projects/-elsewhere/c.jsonl",
		".claude/projects/-work-old/b.jsonl",
		".claude/projects/-work/a.jsonl",
	}
	if d := cmp.Diff(want, filePaths(got)); d != "" {
		t.Errorf("Capture(a) with ancestors (-want +got):\n%s", d)
	}
	// One copy of the root per generation: a, b, c (and ghost with c).
	if n := len(sb.copyOuts); n != 3 {
		t.Errorf("%d CopyOut calls, want 3 (one per generation)", n)
	}
}

// chain writes n0 -> n1 -> ... -> n<length>.
func chain(t *testing.T, sb *hostSandbox, length int) {
	for i := range length + 1 {
		content := fmt.Sprintf(`{"text":"%d"}`, i)
		if i < length {
			content = fmt.Sprintf(`{"parentSession":"n%d"}`, i+1)
		}
		sb.write(t, fmt.Sprintf(".claude/projects/-w/n%d.jsonl", i), content+"\n", 0o600)
	}
}

func TestCaptureDepthCap(t *testing.T) {
	ctx := context.Background()
	sb := newHostSandbox(t)
	chain(t, sb, conversation.MaxAncestorDepth)
	got, err := conversation.Capture(ctx, sb, claudeStorage(), "n0")
	if err != nil {
		t.Fatalf("Capture of a chain of %d ancestors: %v", conversation.MaxAncestorDepth, err)
	}
	if len(got) != conversation.MaxAncestorDepth+1 {
		t.Errorf("captured %d files, want %d", len(got), conversation.MaxAncestorDepth+1)
	}

	sb = newHostSandbox(t)
	chain(t, sb, conversation.MaxAncestorDepth+1)
	if _, err := conversation.Capture(ctx, sb, claudeStorage(), "n0"); !errors.Is(err, conversation.ErrInvalid) {
		t.Errorf("Capture of a too long chain: %v, want ErrInvalid", err)
	}
}

func TestCaptureTooManyAncestors(t *testing.T) {
	sb := newHostSandbox(t)
	var b strings.Builder
	for i := range conversation.MaxAncestors + 1 {
		fmt.Fprintf(&b, `{"parentSession":"p%d"}`+"\n", i)
	}
	sb.write(t, ".claude/projects/-w/root.jsonl", b.String(), 0o600)
	if _, err := conversation.Capture(context.Background(), sb, claudeStorage(), "root"); !errors.Is(err, conversation.ErrInvalid) {
		t.Errorf("Capture with too many ancestors: %v, want ErrInvalid", err)
	}
}

func TestCaptureNestedRoots(t *testing.T) {
	sb := newHostSandbox(t)
	sb.write(t, ".codex/sessions/2025/01/rollout-x1.jsonl", "x1\n", 0o600)
	sb.write(t, ".codex/history/x1.txt", "history\n", 0o600)
	var mu sync.Mutex
	var rels []string
	st := &harness.Storage{
		Roots: []string{".codex", ".codex/sessions"},
		Match: func(rel, native string) bool {
			mu.Lock()
			rels = append(rels, rel)
			mu.Unlock()
			return strings.Contains(rel, native)
		},
	}
	got, err := conversation.Capture(context.Background(), sb, st, "x1")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{".codex/history/x1.txt", ".codex/sessions/2025/01/rollout-x1.jsonl"}, filePaths(got)); d != "" {
		t.Errorf("Capture (-want +got):\n%s", d)
	}
	slices.Sort(rels)
	if d := cmp.Diff([]string{"2025/01/rollout-x1.jsonl", "history/x1.txt"}, rels); d != "" {
		t.Errorf("Match saw rel (-want +got):\n%s", d)
	}
}

func TestCaptureErrors(t *testing.T) {
	ctx := context.Background()
	sb := newHostSandbox(t)
	sb.write(t, ".echo/sessions/a.jsonl", "a\n", 0o600)
	match := func(rel, native string) bool { return true }
	for _, tc := range []struct {
		name   string
		st     *harness.Storage
		native string
		want   error
	}{
		{"nil storage", nil, "a", conversation.ErrInvalid},
		{"no roots", &harness.Storage{Match: match}, "a", conversation.ErrInvalid},
		{"no match", &harness.Storage{Roots: []string{".echo"}}, "a", conversation.ErrInvalid},
		{"empty native", echoStorage(), "", conversation.ErrInvalid},
		{"escaping root", &harness.Storage{Roots: []string{"../etc"}, Match: match}, "a", conversation.ErrUnsafe},
		{"absolute root", &harness.Storage{Roots: []string{"/etc"}, Match: match}, "a", conversation.ErrUnsafe},
		{"dot root", &harness.Storage{Roots: []string{"."}, Match: match}, "a", conversation.ErrUnsafe},
		{"unclean root", &harness.Storage{Roots: []string{".echo/./sessions"}, Match: match}, "a", conversation.ErrUnsafe},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := conversation.Capture(ctx, sb, tc.st, tc.native); !errors.Is(err, tc.want) {
				t.Errorf("Capture: %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("copy fails", func(t *testing.T) {
		boom := errors.New("boom")
		sb := newHostSandbox(t)
		sb.failOut = boom
		if _, err := conversation.Capture(ctx, sb, echoStorage(), "a"); !errors.Is(err, boom) {
			t.Errorf("Capture: %v, want boom", err)
		}
	})
	t.Run("hook panics", func(t *testing.T) {
		st := echoStorage()
		st.Ancestors = func(string, []byte) []string { panic("bad preset") }
		if _, err := conversation.Capture(ctx, sb, st, "a"); err == nil || !strings.Contains(err.Error(), "panicked") {
			t.Errorf("Capture with a panicking hook: %v", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := conversation.Capture(ctx, sb, echoStorage(), "a"); !errors.Is(err, context.Canceled) {
			t.Errorf("Capture: %v, want context.Canceled", err)
		}
	})
	t.Run("relative home", func(t *testing.T) {
		sb := newHostSandbox(t)
		sb.home = "home/agent"
		if _, err := conversation.Capture(ctx, sb, echoStorage(), "a"); !errors.Is(err, conversation.ErrInvalid) {
			t.Errorf("Capture: %v, want ErrInvalid", err)
		}
	})
}

// unsafeCopier returns a fixed tar stream from CopyOut.
type unsafeCopier struct{ stream []byte }

func (u unsafeCopier) Home() string                                    { return "/home/agent" }
func (u unsafeCopier) CopyIn(context.Context, string, io.Reader) error { return errors.New("no") }
func (u unsafeCopier) CopyOut(context.Context, string) (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(u.stream)), nil
}

func TestCaptureUnsafeStream(t *testing.T) {
	for name, hdr := range map[string]*tar.Header{
		"dotdot":   {Name: "sessions/../../etc/passwd", Typeflag: tar.TypeReg},
		"absolute": {Name: "/etc/passwd", Typeflag: tar.TypeReg},
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			if err := tw.WriteHeader(hdr); err != nil {
				t.Fatal(err)
			}
			tw.Close()
			_, err := conversation.Capture(context.Background(), unsafeCopier{buf.Bytes()}, echoStorage(), "a")
			if !errors.Is(err, conversation.ErrUnsafe) {
				t.Errorf("Capture: %v, want ErrUnsafe", err)
			}
		})
	}
	t.Run("special files skipped", func(t *testing.T) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: "sessions/a.jsonl", Typeflag: tar.TypeChar})
		tw.WriteHeader(&tar.Header{Name: "sessions/a/x", Typeflag: tar.TypeLink, Linkname: "../../../etc/passwd"})
		tw.WriteHeader(&tar.Header{Name: "sessions/a/y", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"})
		tw.Close()
		_, err := conversation.Capture(context.Background(), unsafeCopier{buf.Bytes()}, echoStorage(), "a")
		if !errors.Is(err, conversation.ErrNotFound) {
			t.Errorf("Capture: %v, want ErrNotFound", err)
		}
	})
	t.Run("outside the root", func(t *testing.T) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		tw.WriteHeader(&tar.Header{Name: "elsewhere/a.jsonl", Typeflag: tar.TypeReg})
		tw.Close()
		_, err := conversation.Capture(context.Background(), unsafeCopier{buf.Bytes()}, echoStorage(), "a")
		if !errors.Is(err, conversation.ErrInvalid) {
			t.Errorf("Capture: %v, want ErrInvalid", err)
		}
	})
	t.Run("garbage", func(t *testing.T) {
		_, err := conversation.Capture(context.Background(), unsafeCopier{[]byte("not a tar stream, really not")}, echoStorage(), "a")
		if err == nil {
			t.Error("Capture of a garbage stream succeeded")
		}
	})
}

func TestRestoreRefusesUnsafe(t *testing.T) {
	ctx := context.Background()
	ok := conversation.File{Path: ".claude/projects/-w/ok.jsonl", Mode: 0o600, Data: []byte("fine")}
	for _, tc := range []struct {
		name string
		file conversation.File
		want error
	}{
		{"dotdot", conversation.File{Path: "../x"}, conversation.ErrUnsafe},
		{"dotdot inside", conversation.File{Path: ".claude/../../x"}, conversation.ErrUnsafe},
		{"dotdot to sibling", conversation.File{Path: ".claude/../.bashrc"}, conversation.ErrUnsafe},
		{"absolute", conversation.File{Path: "/etc/passwd"}, conversation.ErrUnsafe},
		{"absolute in home", conversation.File{Path: "/home/agent/.claude/x"}, conversation.ErrUnsafe},
		{"not clean", conversation.File{Path: ".claude/./x"}, conversation.ErrUnsafe},
		{"outside roots", conversation.File{Path: ".bashrc"}, conversation.ErrUnsafe},
		{"root itself", conversation.File{Path: ".claude"}, conversation.ErrUnsafe},
		{"prefix of root", conversation.File{Path: ".claudex/x"}, conversation.ErrUnsafe},
		{"symlink", conversation.File{Path: ".claude/link", Mode: uint32(fs.ModeSymlink | 0o777), Data: []byte("/etc/passwd")}, conversation.ErrUnsafe},
		{"setuid", conversation.File{Path: ".claude/run", Mode: uint32(fs.ModeSetuid | 0o755)}, conversation.ErrUnsafe},
		{"backslash", conversation.File{Path: `.claude\..\..\x`}, conversation.ErrUnsafe},
		{"duplicate", ok, conversation.ErrInvalid},
		{"file and directory", conversation.File{Path: ".claude/projects/-w/ok.jsonl/x"}, conversation.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := newHostSandbox(t)
			st := claudeStorage()
			st.Place = nil
			err := conversation.Restore(ctx, sb, st, "ok", "/w", []conversation.File{ok, tc.file})
			if !errors.Is(err, tc.want) {
				t.Errorf("Restore: %v, want %v", err, tc.want)
			}
			if sb.copyIns != 0 || len(sb.tree(t)) != 0 {
				t.Errorf("a refused Restore wrote %v", sb.tree(t))
			}
		})
	}
	t.Run("no files", func(t *testing.T) {
		sb := newHostSandbox(t)
		if err := conversation.Restore(ctx, sb, claudeStorage(), "ok", "/w", nil); !errors.Is(err, conversation.ErrInvalid) {
			t.Errorf("Restore of nothing: %v, want ErrInvalid", err)
		}
	})
	t.Run("unsafe root", func(t *testing.T) {
		sb := newHostSandbox(t)
		st := &harness.Storage{Roots: []string{"../up"}}
		if err := conversation.Restore(ctx, sb, st, "ok", "/w", []conversation.File{{Path: "../up/x"}}); !errors.Is(err, conversation.ErrUnsafe) {
			t.Errorf("Restore: %v, want ErrUnsafe", err)
		}
	})
}

func TestRestorePlace(t *testing.T) {
	ctx := context.Background()
	files := []conversation.File{
		{Path: ".claude/projects/-work-a/n1.jsonl", Mode: 0o600, Data: []byte("n1\n")},
		{Path: ".claude/projects/-old/n0.jsonl", Mode: 0o640, Data: []byte("n0\n")},
	}
	sb := newHostSandbox(t)
	if err := conversation.Restore(ctx, sb, claudeStorage(), "n1", "/srv/b", files); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"/home/agent/.claude/projects/-srv-b/n1.jsonl": "n1\n",
		"/home/agent/.claude/projects/-srv-b/n0.jsonl": "n0\n",
	}
	if d := cmp.Diff(want, sb.tree(t)); d != "" {
		t.Errorf("restored tree (-want +got):\n%s", d)
	}
	fi, err := os.Stat(sb.host("/home/agent/.claude/projects/-srv-b/n0.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("restored mode = %#o, want 0640", fi.Mode().Perm())
	}

	for name, placed := range map[string]string{
		"escape":   "../../.bashrc",
		"absolute": "/etc/passwd",
		"empty":    "",
		"unclean":  "projects/./x",
	} {
		t.Run(name, func(t *testing.T) {
			sb := newHostSandbox(t)
			st := claudeStorage()
			st.Place = func(rel, native, workdir string) string {
				if strings.HasSuffix(rel, "n0.jsonl") {
					return placed
				}
				return rel
			}
			if err := conversation.Restore(ctx, sb, st, "n1", "/srv/b", files); !errors.Is(err, conversation.ErrUnsafe) {
				t.Errorf("Restore with Place -> %q: %v, want ErrUnsafe", placed, err)
			}
			if len(sb.tree(t)) != 0 {
				t.Errorf("a refused Restore wrote %v", sb.tree(t))
			}
		})
	}
	t.Run("collision", func(t *testing.T) {
		sb := newHostSandbox(t)
		st := claudeStorage()
		st.Place = func(rel, native, workdir string) string { return "same" }
		if err := conversation.Restore(ctx, sb, st, "n1", "/srv/b", files); !errors.Is(err, conversation.ErrInvalid) {
			t.Errorf("Restore placing two files at one path: %v, want ErrInvalid", err)
		}
	})
}

func TestRestoreReplacesExisting(t *testing.T) {
	sb := newHostSandbox(t)
	sb.write(t, ".echo/sessions/a.jsonl", "old\n", 0o600)
	files := []conversation.File{{Path: ".echo/sessions/a.jsonl", Data: []byte("new\n")}}
	if err := conversation.Restore(context.Background(), sb, echoStorage(), "a", "/w", files); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string]string{"/home/agent/.echo/sessions/a.jsonl": "new\n"}, sb.tree(t)); d != "" {
		t.Errorf("tree (-want +got):\n%s", d)
	}
}

func TestRestoreCopyInFails(t *testing.T) {
	err := conversation.Restore(context.Background(), unsafeCopier{}, echoStorage(), "a", "/w",
		[]conversation.File{{Path: ".echo/sessions/a.jsonl", Data: bytes.Repeat([]byte("x"), 1<<20)}})
	if err == nil {
		t.Error("Restore succeeded although CopyIn failed")
	}
}

// TestRoundTripThroughStore captures from one sandbox, stores, exports,
// imports into a second store, restores into a fresh sandbox and captures
// again: the files are the same.
func TestRoundTripThroughStore(t *testing.T) {
	ctx := context.Background()
	sb1 := newHostSandbox(t)
	sb1.write(t, ".claude/projects/-work/a.jsonl", `{"parentSession":"b"}`+"\n", 0o600)
	sb1.write(t, ".claude/projects/-work/b.jsonl", `{"text":"b"}`+"\n", 0o644)
	sb1.write(t, ".claude/projects/-work/unrelated.jsonl", `{}`+"\n", 0o600)
	st := claudeStorage()

	files, err := conversation.Capture(ctx, sb1, st, "a")
	if err != nil {
		t.Fatal(err)
	}
	m := conversation.Meta{ID: conversation.NewID(), Agent: "claude", Native: "a", Workdir: "/work", Created: t0, Updated: t0}
	s1 := conversation.NewFS(t.TempDir())
	if err := s1.Put(ctx, m, files); err != nil {
		t.Fatal(err)
	}
	var exported bytes.Buffer
	if err := conversation.Export(ctx, s1, m.ID, &exported); err != nil {
		t.Fatal(err)
	}
	s2 := conversation.NewFS(t.TempDir())
	if _, err := conversation.Import(ctx, s2, &exported, nil); err != nil {
		t.Fatal(err)
	}
	m2, files2, err := s2.Get(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}

	sb2 := newHostSandbox(t)
	if err := conversation.Restore(ctx, sb2, st, m2.Native, m2.Workdir, files2); err != nil {
		t.Fatal(err)
	}
	again, err := conversation.Capture(ctx, sb2, st, "a")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(files, again); d != "" {
		t.Errorf("capture after restore (-first +again):\n%s", d)
	}
	tr := conversation.TranscriptOf("a", again)
	want := harness.Transcript{Native: "a", Files: map[string][]byte{
		".claude/projects/-work/a.jsonl": []byte(`{"parentSession":"b"}` + "\n"),
		".claude/projects/-work/b.jsonl": []byte(`{"text":"b"}` + "\n"),
	}}
	if d := cmp.Diff(want, tr); d != "" {
		t.Errorf("TranscriptOf (-want +got):\n%s", d)
	}
}

// filtered wraps CopyOut with tarsafe.Filter, as sandbox.Lease does.
type filtered struct{ *hostSandbox }

func (f filtered) CopyOut(ctx context.Context, p string) (io.ReadCloser, error) {
	rc, err := f.hostSandbox.CopyOut(ctx, p)
	if err != nil {
		return nil, err
	}
	return tarsafe.Filter(rc), nil
}

// TestCaptureThroughFilter documents Capture behind a Lease-like filter: a
// link inside the root is skipped, a link pointing out of it fails the
// copy (the filter ends the stream) with ErrUnsafe.
func TestCaptureThroughFilter(t *testing.T) {
	ctx := context.Background()
	sb := newHostSandbox(t)
	sb.write(t, ".echo/sessions/a.jsonl", "a\n", 0o600)
	sb.symlink(t, ".echo/sessions/a/link-in", "../a.jsonl")
	got, err := conversation.Capture(ctx, filtered{sb}, echoStorage(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{".echo/sessions/a.jsonl"}, filePaths(got)); d != "" {
		t.Errorf("Capture (-want +got):\n%s", d)
	}
	sb.symlink(t, ".echo/sessions/b.jsonl", "/etc/passwd")
	if _, err := conversation.Capture(ctx, filtered{sb}, echoStorage(), "a"); !errors.Is(err, conversation.ErrUnsafe) {
		t.Errorf("Capture with a link out of the home: %v, want ErrUnsafe", err)
	}
}
