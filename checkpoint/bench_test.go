package checkpoint_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/outposthq/outpost/checkpoint"
)

// The workspace of the checkpoint benchmarks (docs/benchmarks.md): 10,000
// files in 100 directories, 200 MB, as issue #41 names it.
const (
	benchFiles = 10_000
	benchBytes = 200 << 20
)

// benchWorkspace lays out the workspace once per benchmark, as a git
// repository with everything committed (git's anchor needs it; the
// checkpoint leaves .git out).
func benchWorkspace(b *testing.B) (dir, git string) {
	b.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		b.Skip("SKIP: no git binary: the anchor cannot run")
	}
	dir = b.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, benchBytes/benchFiles)
	for i := range benchFiles {
		for j := range buf {
			buf[j] = byte('a' + rng.IntN(26))
			if j%80 == 79 {
				buf[j] = '\n'
			}
		}
		p := filepath.Join(dir, fmt.Sprintf("d%02d", i%100), fmt.Sprintf("f%05d.txt", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error { return os.Chtimes(p, old, old) })
	gitRun(b, git, dir, "init", "-q")
	// No background gc: it would race the directory's removal and time
	// itself into the anchor.
	gitRun(b, git, dir, "config", "gc.auto", "0")
	gitRun(b, git, dir, "config", "maintenance.auto", "false")
	gitRun(b, git, dir, "add", "-A")
	gitRun(b, git, dir, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "start")
	return dir, git
}

func gitRun(b *testing.B, git, dir string, args ...string) {
	b.Helper()
	if out, err := exec.Command(git, append([]string{"-C", dir}, args...)...).CombinedOutput(); err != nil {
		b.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// touch3 changes three files, a different three each time.
func touch3(b *testing.B, dir string, i int) {
	for k := range 3 {
		n := (i*3 + k) * 37 % benchFiles
		p := filepath.Join(dir, fmt.Sprintf("d%02d", n%100), fmt.Sprintf("f%05d.txt", n))
		f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(f, "change %d\n", i)
		f.Close()
	}
}

// BenchmarkCheckpoint: the checkpoint after a turn that changed 3 files
// (Snapshot with the stat cache, then Commit) against `git add -A && git
// commit` on the same tree. The store's growth per checkpoint is
// reported as stored-B/op.
func BenchmarkCheckpoint(b *testing.B) {
	dir, git := benchWorkspace(b)
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			touch3(b, dir, i)
			b.StartTimer()
			cmd := exec.Command("sh", "-c", git+" add -A && "+git+" -c user.name=b -c user.email=b@b commit -qm turn")
			cmd.Dir = dir
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
		}
	})
	b.Run("outpost", func(b *testing.B) {
		objs := checkpoint.NewDir(filepath.Join(b.TempDir(), "store.git"))
		o := &checkpoint.Options{Index: filepath.Join(b.TempDir(), "idx")}
		if _, err := checkpoint.Snapshot(ctx, objs, dir, o); err != nil {
			b.Fatal(err)
		}
		var stored int64
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			touch3(b, dir, 1_000_000+i)
			b.StartTimer()
			t, err := checkpoint.Snapshot(ctx, objs, dir, o)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := checkpoint.Commit(ctx, objs, checkpoint.CommitInfo{Tree: t.Hash, Title: "turn", When: time.Now()}); err != nil {
				b.Fatal(err)
			}
			stored += t.WrittenBytes
		}
		b.ReportMetric(float64(stored)/float64(b.N), "stored-B/op")
	})
}

// BenchmarkMaterialize: a checkpoint of that workspace written into a
// fresh directory for a fork, against `git worktree add` of the same
// commit.
func BenchmarkMaterialize(b *testing.B) {
	dir, git := benchWorkspace(b)
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			wt := filepath.Join(b.TempDir(), fmt.Sprintf("wt%d", i))
			cmd := exec.Command(git, "-C", dir, "worktree", "add", "-q", "--detach", wt, "HEAD")
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
			b.StopTimer()
			gitRun(b, git, dir, "worktree", "remove", "--force", wt)
			b.StartTimer()
		}
	})
	b.Run("outpost", func(b *testing.B) {
		objs := checkpoint.NewDir(filepath.Join(b.TempDir(), "store.git"))
		t, err := checkpoint.Snapshot(ctx, objs, dir, nil)
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; b.Loop(); i++ {
			out := filepath.Join(b.TempDir(), fmt.Sprintf("m%d", i))
			if _, err := checkpoint.Materialize(ctx, objs, t.Hash, out, &checkpoint.MaterializeOptions{Index: out + ".idx"}); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			os.RemoveAll(out)
			b.StartTimer()
		}
	})
}
