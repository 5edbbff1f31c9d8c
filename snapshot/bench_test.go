package snapshot_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/outposthq/outpost/snapshot"
)

// BenchmarkWalk: one snapshot of a workspace of 5000 files in 50
// directories (metadata only).
func BenchmarkWalk(b *testing.B) {
	wd := b.TempDir()
	for i := 0; i < 5000; i++ {
		p := filepath.Join(wd, fmt.Sprintf("d%02d", i%50), fmt.Sprintf("f%04d.go", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("package x\n"), 0o644)
	}
	for b.Loop() {
		s, err := snapshot.Walk(context.Background(), wd, 20000)
		if err != nil || len(s.Files) != 5000 {
			b.Fatal(len(s.Files), err)
		}
	}
}
