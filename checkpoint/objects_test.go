package checkpoint_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/checkpoint/objectstest"
)

var (
	_ checkpoint.Objects = (*checkpoint.Memory)(nil)
	_ checkpoint.Objects = (*checkpoint.Dir)(nil)
)

func TestMemoryConformance(t *testing.T) {
	objectstest.RunConformanceTests(t, func(t *testing.T) checkpoint.Objects { return checkpoint.NewMemory() })
}

func TestDirConformance(t *testing.T) {
	objectstest.RunConformanceTests(t, func(t *testing.T) checkpoint.Objects {
		return checkpoint.NewDir(filepath.Join(t.TempDir(), "checkpoints.git"))
	})
}

// looseFile is where git keeps the loose object h of the repository dir.
func looseFile(dir string, h plumbing.Hash) string {
	s := h.String()
	return filepath.Join(dir, "objects", s[:2], s[2:])
}

// overwrite replaces a loose object's file (git makes them read-only).
func overwrite(t *testing.T, file string, data []byte) {
	t.Helper()
	if err := os.Chmod(file, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestDirCorruptObject(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "checkpoints.git")
	h := objectstest.NewHistory(t, "corrupt")
	if err := checkpoint.NewDir(dir).Write(ctx, h.All()); err != nil {
		t.Fatal(err)
	}
	victim, other := h.Blobs[0], h.Blobs[1]
	file := looseFile(dir, victim.Hash)
	otherStream, err := os.ReadFile(looseFile(dir, other.Hash))
	if err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		// A valid zlib stream of a valid object, but not this one.
		{"another object's stream", otherStream},
		{"garbage", []byte("this is not a zlib stream at all\n")},
		{"truncated stream", good[:len(good)/2]},
		{"empty file", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			overwrite(t, file, tc.data)
			// A new Dir: nothing of the first one's cache.
			d := checkpoint.NewDir(dir)
			o, err := d.Read(ctx, victim.Hash)
			if !errors.Is(err, checkpoint.ErrCorrupt) {
				t.Fatalf("Read of a damaged object = %s %q, %v; want checkpoint.ErrCorrupt", o.Type, o.Data, err)
			}
			if !strings.Contains(err.Error(), victim.Hash.String()) {
				t.Errorf("the error %q does not name the object", err)
			}
			// The other objects are unharmed.
			if _, err := d.Read(ctx, other.Hash); err != nil {
				t.Errorf("Read of an intact object: %v", err)
			}
		})
	}
}

// git runs git on the repository dir, with no user or system
// configuration.
func git(t *testing.T, dir string, stdin []byte, args ...string) []byte {
	t.Helper()
	cmd := exec.Command("git", append([]string{"--git-dir", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+t.TempDir(), "LC_ALL=C")
	cmd.Stdin = bytes.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.Bytes())
	}
	return out
}

// TestDirReadByGit checks that git itself reads what Dir writes, and that
// Dir reads what git writes, loose and packed. git is not a dependency of
// outpost: without it the test is skipped, loudly.
func TestDirReadByGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("SKIPPED: no git on PATH (%v): Dir's compatibility with git is not checked here", err)
	}
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "checkpoints.git")
	d := checkpoint.NewDir(dir)
	h := objectstest.NewHistory(t, "git reads it")
	if err := d.Write(ctx, h.All()); err != nil {
		t.Fatal(err)
	}
	for _, o := range h.All() {
		if got := strings.TrimSpace(string(git(t, dir, nil, "cat-file", "-t", o.Hash.String()))); got != o.Type.String() {
			t.Errorf("git cat-file -t %s = %q, want %s", o.Hash, got, o.Type)
		}
		if o.Type == plumbing.BlobObject || o.Type == plumbing.CommitObject {
			if got := git(t, dir, nil, "cat-file", "-p", o.Hash.String()); !bytes.Equal(got, o.Data) {
				t.Errorf("git cat-file -p %s = %q, want %q", o.Hash, got, o.Data)
			}
		}
	}
	if got := string(git(t, dir, nil, "log", "--format=%s", h.Head().String())); got != "turn 2 of git reads it\nturn 1 of git reads it\n" {
		t.Errorf("git log = %q", got)
	}
	if got := string(git(t, dir, nil, "ls-tree", "-r", "--name-only", h.Head().String())); got != "README.md\nempty\nlink\nrun.sh\nsrc/main.go\nsrc/util.go\nvendor-lib\n" {
		t.Errorf("git ls-tree = %q", got)
	}
	git(t, dir, nil, "fsck", "--full", "--strict", "--no-dangling")

	// What git writes, Dir reads: loose, then packed.
	id := strings.TrimSpace(string(git(t, dir, []byte("written by git\n"), "hash-object", "-w", "--stdin")))
	gitBlob := plumbing.NewHash(id)
	for _, stage := range []string{"loose", "packed"} {
		if stage == "packed" {
			git(t, dir, nil, "update-ref", "refs/outpost/test", h.Head().String())
			git(t, dir, nil, "tag", "keep-blob", id)
			git(t, dir, nil, "repack", "-a", "-d", "-q")
			git(t, dir, nil, "prune-packed")
			if _, err := os.Stat(looseFile(dir, gitBlob)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("after repack the blob is still loose: %v", err)
			}
		}
		d := checkpoint.NewDir(dir)
		o, err := d.Read(ctx, gitBlob)
		if err != nil || o.Type != plumbing.BlobObject || string(o.Data) != "written by git\n" {
			t.Errorf("%s: Read of git's blob = %s %q, %v", stage, o.Type, o.Data, err)
		}
		if miss, err := d.Missing(ctx, append(objectstest.Hashes(h.All()), gitBlob)); err != nil || len(miss) != 0 {
			t.Errorf("%s: Missing = %v, %v; want none", stage, miss, err)
		}
		for _, want := range h.All() {
			got, err := d.Read(ctx, want.Hash)
			if err != nil || !bytes.Equal(got.Data, want.Data) {
				t.Errorf("%s: Read(%s): %v", stage, want.Hash, err)
			}
		}
		// Writing objects git already packed changes nothing.
		if err := d.Write(ctx, h.All()); err != nil {
			t.Errorf("%s: Write of stored objects: %v", stage, err)
		}
	}
	git(t, dir, nil, "fsck", "--full", "--strict", "--no-dangling")
}

// TestDirRemembersWhatItWrote: a Dir asks the disk only about objects it
// has not written or found before (a turn's checkpoint looked up every
// object of its trees again, a stat each, 35% of the server's CPU an echo
// turn with the loose writes: docs/benchmarks.md, "Scale"). Objects are
// never removed, so what it remembers stays true; a new Dir knows
// nothing and looks.
func TestDirRemembersWhatItWrote(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "checkpoints.git")
	d := checkpoint.NewDir(dir)
	h := objectstest.NewHistory(t, "known")
	objs := h.All()
	if err := d.Write(ctx, objs); err != nil {
		t.Fatal(err)
	}
	var hashes []plumbing.Hash
	for _, o := range objs {
		hashes = append(hashes, o.Hash)
		if fi, err := os.Stat(looseFile(dir, o.Hash)); err != nil || fi.Mode().Perm() != 0o444 {
			t.Fatalf("object %s: %v, %v; want a read-only loose file", o.Hash, fi, err)
		}
	}
	// Taken away behind its back (outpost never does): the Dir that
	// wrote them does not look again.
	if err := os.RemoveAll(filepath.Join(dir, "objects")); err != nil {
		t.Fatal(err)
	}
	if miss, err := d.Missing(ctx, hashes); err != nil || len(miss) != 0 {
		t.Errorf("the Dir that wrote them: %d missing, %v; want none (it remembers)", len(miss), err)
	}
	if miss, err := checkpoint.NewDir(dir).Missing(ctx, hashes); err != nil || len(miss) != len(hashes) {
		t.Errorf("a new Dir: %d of %d missing, %v; want all (it looks)", len(miss), len(hashes), err)
	}
}
