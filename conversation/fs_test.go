package conversation_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/conversation/storetest"
)

func TestMain(m *testing.M) {
	storetest.Main(func(dir string) (conversation.Store, error) { return conversation.NewFS(dir), nil })
	os.Exit(m.Run())
}

func TestFSConformance(t *testing.T) {
	storetest.RunConformanceTests(t, func(t *testing.T) conversation.Store {
		return conversation.NewFS(filepath.Join(t.TempDir(), "store"))
	}, &storetest.Options{Spec: func(s conversation.Store) string { return s.(*conversation.FS).Dir() }})
}

func TestMemoryConformance(t *testing.T) {
	storetest.RunConformanceTests(t, func(t *testing.T) conversation.Store {
		return storetest.NewMemory()
	}, nil)
}

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func testMeta(id string) conversation.Meta {
	return conversation.Meta{ID: id, Agent: "echo", Native: "n-" + id, Created: t0, Updated: t0}
}

func testFiles() []conversation.File {
	return []conversation.File{
		{Path: ".echo/sessions/a.jsonl", Mode: 0o600, Data: []byte(strings.Repeat("{\"turn\":1}\n", 100))},
		{Path: ".echo/sessions/b.jsonl", Mode: 0o644, Data: []byte("second file\n")},
	}
}

func TestFSPermissionsAndNoLeftovers(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	dir := filepath.Join(t.TempDir(), "a", "store")
	s := conversation.NewFS(dir)
	ctx := context.Background()
	for i := range 3 {
		m := testMeta("c01perm")
		m.Revision = int64(i)
		if err := s.Put(ctx, m, testFiles()); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o700 {
		t.Errorf("store directory mode = %#o, want 0700", got)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != 0o600 {
			t.Errorf("%s mode = %#o, want 0600", e.Name(), got)
		}
	}
	// .lock is the write lock Puts take (kept, empty).
	if d := cmp.Diff([]string{".lock", "c01perm.conv"}, names); d != "" {
		t.Errorf("store directory (-want +got):\n%s", d)
	}
}

func TestFSMissingDirIsEmpty(t *testing.T) {
	s := conversation.NewFS(filepath.Join(t.TempDir(), "never-created"))
	list, err := s.List(context.Background())
	if err != nil || len(list) != 0 {
		t.Errorf("List = %v, %v; want empty, nil", list, err)
	}
	damage, err := s.Check(context.Background())
	if err != nil || len(damage) != 0 {
		t.Errorf("Check = %v, %v; want empty, nil", damage, err)
	}
	if _, err := s.Resolve(context.Background(), "c01abc"); !errors.Is(err, conversation.ErrNotFound) {
		t.Errorf("Resolve: %v, want ErrNotFound", err)
	}
}

func TestFSNoDir(t *testing.T) {
	s := conversation.NewFS("")
	if err := s.Put(context.Background(), testMeta("c01x"), nil); err == nil {
		t.Error("Put into a store without a directory succeeded")
	}
}

// damage rewrites a stored file.
func damage(t *testing.T, s *conversation.FS, id string, f func([]byte) []byte) {
	t.Helper()
	name := filepath.Join(s.Dir(), id+".conv")
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, f(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestFSCorruptFiles(t *testing.T) {
	ctx := context.Background()
	s := conversation.NewFS(t.TempDir())
	if err := s.Put(ctx, testMeta("c01good"), testFiles()); err != nil {
		t.Fatal(err)
	}
	orig, err := os.ReadFile(filepath.Join(s.Dir(), "c01good.conv"))
	if err != nil {
		t.Fatal(err)
	}
	metaEnd := 512 * 3 // a PAX header, the meta.json header and at least one data block
	cases := map[string]func([]byte) []byte{
		"empty":          func(b []byte) []byte { return nil },
		"garbage":        func(b []byte) []byte { return []byte("this is not a tar file at all, not even close") },
		"zeros":          func(b []byte) []byte { return make([]byte, 4096) },
		"half header":    func(b []byte) []byte { return b[:256] },
		"in meta":        func(b []byte) []byte { return b[:metaEnd-100] },
		"last byte":      func(b []byte) []byte { return b[:len(b)-1] },
		"no end marker":  func(b []byte) []byte { return b[:len(b)-1024] },
		"half":           func(b []byte) []byte { return b[:len(b)/2] },
		"flipped data":   func(b []byte) []byte { return flip(b, bytes.Index(b, []byte("second file"))) },
		"flipped meta":   func(b []byte) []byte { return flip(b, bytes.Index(b, []byte(`"agent"`))+2) },
		"appended entry": func(b []byte) []byte { return append(b[:len(b)-1024:len(b)-1024], b[:512*4]...) },
	}
	// Truncation at every block boundary.
	for n := 0; n < len(orig); n += 512 {
		cases["truncated at "+strconv.Itoa(n)] = func(b []byte) []byte { return b[:n] }
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			s := conversation.NewFS(t.TempDir())
			if err := s.Put(ctx, testMeta("c01bad"), testFiles()); err != nil {
				t.Fatal(err)
			}
			damage(t, s, "c01bad", func([]byte) []byte { return f(append([]byte(nil), orig...)) })
			_, _, err := s.Get(ctx, "c01bad")
			if !errors.Is(err, conversation.ErrInvalid) {
				t.Fatalf("Get: %v, want ErrInvalid", err)
			}
			if _, err := s.Meta(ctx, "c01bad"); err != nil && !errors.Is(err, conversation.ErrInvalid) {
				t.Errorf("Meta: %v, want nil or ErrInvalid", err)
			}
			dmg, err := s.Check(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(dmg) != 1 || dmg[0].ID != "c01bad" || !errors.Is(dmg[0].Err, conversation.ErrInvalid) {
				t.Errorf("Check = %v, want c01bad with ErrInvalid", dmg)
			}
		})
	}
}

func flip(b []byte, i int) []byte {
	b[i] ^= 0x55
	return b
}

func TestFSListSkipsDamage(t *testing.T) {
	ctx := context.Background()
	s := conversation.NewFS(t.TempDir())
	for _, id := range []string{"c01one", "c01two", "c01three"} {
		if err := s.Put(ctx, testMeta(id), testFiles()); err != nil {
			t.Fatal(err)
		}
	}
	damage(t, s, "c01two", func(b []byte) []byte { return b[:100] })
	// A file renamed by hand holds another id.
	if err := os.Rename(filepath.Join(s.Dir(), "c01three.conv"), filepath.Join(s.Dir(), "c01moved.conv")); err != nil {
		t.Fatal(err)
	}
	// Stray files are ignored.
	for _, name := range []string{".put-c01one-123", "README", "UPPER.conv", "x.conv.bak"} {
		if err := os.WriteFile(filepath.Join(s.Dir(), name), []byte("junk"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(s.Dir(), "c01dir.conv"), 0o700); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list) != 1 || list[0].ID != "c01one" {
		t.Errorf("List = %v, want only c01one", list)
	}
	dmg, err := s.Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, d := range dmg {
		ids = append(ids, d.ID)
		if !errors.Is(d.Err, conversation.ErrInvalid) {
			t.Errorf("Check: %s: %v, want ErrInvalid", d.ID, d.Err)
		}
	}
	if d := cmp.Diff([]string{"c01moved", "c01two"}, ids); d != "" {
		t.Errorf("Check ids (-want +got):\n%s", d)
	}
	if _, err := s.Meta(ctx, "c01moved"); !errors.Is(err, conversation.ErrInvalid) {
		t.Errorf("Meta of a file holding another id: %v, want ErrInvalid", err)
	}
	// A damaged conversation still resolves by id, and can be deleted.
	if got, err := s.Resolve(ctx, "c01two"); err != nil || got != "c01two" {
		t.Errorf("Resolve(c01two) = %q, %v", got, err)
	}
	if err := s.Delete(ctx, "c01two"); err != nil {
		t.Errorf("Delete of a damaged conversation: %v", err)
	}
}

func TestFSResolveMatchesGeneric(t *testing.T) {
	ctx := context.Background()
	fs := conversation.NewFS(t.TempDir())
	mem := storetest.NewMemory()
	for _, id := range []string{"c01aaaa1", "c01aaaa2", "c01bbbb1"} {
		for _, s := range []conversation.Store{fs, mem} {
			if err := s.Put(ctx, testMeta(id), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, ref := range []string{"c01aaaa1", "c01a", "c01b", "n-c01aaaa2", "c01", "nope", ""} {
		a, aerr := fs.Resolve(ctx, ref)
		b, berr := conversation.Resolve(ctx, mem, ref)
		if a != b || errClass(aerr) != errClass(berr) {
			t.Errorf("Resolve(%q): FS %q, %v; Memory %q, %v", ref, a, aerr, b, berr)
		}
	}
}

func errClass(err error) string {
	for _, e := range []error{conversation.ErrNotFound, conversation.ErrAmbiguous, conversation.ErrInvalid} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if err != nil {
		return "other"
	}
	return ""
}

func TestDefaultDir(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, tc := range []struct {
		name, outpost, xdg, want string
	}{
		{"outpost home", "/srv/outpost", "/xdg", "/srv/outpost/conversations"},
		{"xdg", "", "/xdg", "/xdg/outpost/conversations"},
		{"relative xdg ignored", "", "rel/xdg", filepath.Join(home, ".local/share/outpost/conversations")},
		{"default", "", "", filepath.Join(home, ".local/share/outpost/conversations")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OUTPOST_HOME", tc.outpost)
			t.Setenv("XDG_DATA_HOME", tc.xdg)
			got, err := conversation.DefaultDir()
			if err != nil {
				t.Fatal(err)
			}
			if got != filepath.FromSlash(tc.want) {
				t.Errorf("DefaultDir() = %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("relative outpost home", func(t *testing.T) {
		t.Setenv("OUTPOST_HOME", "rel")
		got, err := conversation.DefaultDir()
		if err != nil {
			t.Fatal(err)
		}
		if !filepath.IsAbs(got) || !strings.HasSuffix(got, filepath.FromSlash("rel/conversations")) {
			t.Errorf("DefaultDir() = %q, want an absolute .../rel/conversations", got)
		}
	})
}

// TestFSConcurrentProcesses runs writers in several processes (this test
// binary re-executed) putting versions of one conversation while this
// process reads it: every read sees one whole version.
func TestFSConcurrentProcesses(t *testing.T) {
	if dir := os.Getenv("OUTPOST_TEST_PUT_DIR"); dir != "" {
		helperPut(t, dir, os.Getenv("OUTPOST_TEST_PUT_WRITER"))
		return
	}
	if testing.Short() {
		t.Skip("starts processes")
	}
	dir := t.TempDir()
	const writers = 4
	cmds := make([]*exec.Cmd, writers)
	for i := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestFSConcurrentProcesses$")
		cmd.Env = append(os.Environ(), "OUTPOST_TEST_PUT_DIR="+dir, "OUTPOST_TEST_PUT_WRITER="+strconv.Itoa(i))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("writer %d output:\n%s", i, out.String())
			}
		})
		cmds[i] = cmd
	}
	done := make(chan error, writers)
	for _, cmd := range cmds {
		go func() { done <- cmd.Wait() }()
	}
	s := conversation.NewFS(dir)
	ctx := context.Background()
	reads := 0
	for finished := 0; finished < writers; {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("writer: %v", err)
			}
			finished++
			continue
		default:
		}
		m, files, err := s.Get(ctx, "c01proc")
		if errors.Is(err, conversation.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("Get while writers run: %v", err)
		}
		checkVersion(t, m, files)
		reads++
	}
	m, files, err := s.Get(ctx, "c01proc")
	if err != nil {
		t.Fatal(err)
	}
	checkVersion(t, m, files)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 2 || ents[0].Name() != ".lock" {
		t.Errorf("store holds %d files after the writers, want the conversation and .lock", len(ents))
	}
	t.Logf("%d whole reads", reads)
}

func processVersion(writer string, n int) (conversation.Meta, []conversation.File) {
	m := testMeta("c01proc")
	m.Model = writer + "/" + strconv.Itoa(n)
	m.Revision = conversation.AnyRevision // the writers race on purpose
	var files []conversation.File
	for i := range 3 + n%4 {
		files = append(files, conversation.File{
			Path: ".echo/sessions/f" + strconv.Itoa(i),
			Mode: 0o600,
			Data: bytes.Repeat([]byte(m.Model+"|"), 2000*(i+1)),
		})
	}
	return m, files
}

func checkVersion(t *testing.T, m conversation.Meta, files []conversation.File) {
	t.Helper()
	w, n, ok := strings.Cut(m.Model, "/")
	num, err := strconv.Atoi(n)
	if !ok || err != nil {
		t.Fatalf("unexpected model %q", m.Model)
	}
	_, want := processVersion(w, num)
	if d := cmp.Diff(want, files, cmp.Comparer(bytes.Equal)); d != "" {
		t.Fatalf("read a mixed version (-want +got):\n%s", d)
	}
}

func helperPut(t *testing.T, dir, writer string) {
	s := conversation.NewFS(dir)
	for n := range 25 {
		m, files := processVersion(writer, n)
		if err := s.Put(context.Background(), m, files); err != nil {
			t.Fatal(err)
		}
	}
}
