package driver

import (
	"context"
	"testing"
	"time"
)

// TestReleaseContext: a cancelled turn's context still gives a live
// release context bounded by the fallback; a deadline still ahead is kept.
func TestReleaseContext(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ctx, stop := ReleaseContext(cancelled, time.Hour)
	defer stop()
	if ctx.Err() != nil {
		t.Fatalf("release context of a cancelled ctx is done: %v", ctx.Err())
	}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) < 59*time.Minute {
		t.Errorf("deadline %v, %v; want the fallback's", d, ok)
	}

	want := time.Now().Add(2 * time.Hour)
	bounded, cancel2 := context.WithDeadline(context.Background(), want)
	defer cancel2()
	ctx2, stop2 := ReleaseContext(bounded, time.Minute)
	defer stop2()
	if d, ok := ctx2.Deadline(); !ok || !d.Equal(want) {
		t.Errorf("deadline %v, %v; want the caller's %v", d, ok, want)
	}
}
