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

// TestRemovalContext: the removal at the end of a release gets a
// ReleaseTimeout of its own, whatever is left of the caller's deadline
// (the copy back before it may have used it all), and ctx's values.
func TestRemovalContext(t *testing.T) {
	type key struct{}
	spent, cancel := context.WithDeadline(context.WithValue(context.Background(), key{}, "v"), time.Now().Add(time.Millisecond))
	defer cancel()
	<-spent.Done()
	ctx, stop := RemovalContext(spent)
	defer stop()
	if ctx.Err() != nil {
		t.Fatalf("removal context of a spent release is done: %v", ctx.Err())
	}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) < ReleaseTimeout-time.Minute/2 {
		t.Errorf("deadline %v, %v; want about ReleaseTimeout from now", d, ok)
	}
	if ctx.Value(key{}) != "v" {
		t.Error("the caller's values are lost")
	}
	short, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	ctx2, stop2 := RemovalContext(short)
	defer stop2()
	if d, _ := ctx2.Deadline(); time.Until(d) < ReleaseTimeout-time.Minute/2 {
		t.Errorf("a caller's deadline 1 s ahead cut the removal's to %v", time.Until(d))
	}
}
