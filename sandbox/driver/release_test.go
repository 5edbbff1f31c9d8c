package driver

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// TestReleaseContext: a cancelled turn's context still gives a live
// release context bounded by ReleaseTimeout; a deadline still ahead is kept.
func TestReleaseContext(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	ctx, stop := ReleaseContext(cancelled)
	defer stop()
	if ctx.Err() != nil {
		t.Fatalf("release context of a cancelled ctx is done: %v", ctx.Err())
	}
	if d, ok := ctx.Deadline(); !ok || time.Until(d) < ReleaseTimeout-time.Minute/2 {
		t.Errorf("deadline %v, %v; want about ReleaseTimeout from now", d, ok)
	}

	want := time.Now().Add(2 * time.Hour)
	bounded, cancel2 := context.WithDeadline(context.Background(), want)
	defer cancel2()
	ctx2, stop2 := ReleaseContext(bounded)
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

// slowReader returns one byte every gap, n times.
type slowReader struct {
	n   int
	gap time.Duration
}

func (r *slowReader) Read(b []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	time.Sleep(r.gap)
	r.n--
	b[0] = 'x'
	return 1, nil
}

// TestProgressBound: a copy back that keeps making progress outlives the
// caller's deadline (a large workspace is not lost for taking longer than
// the release); one that makes none fails with ErrStalled named, and ctx's
// values are kept.
func TestProgressBound(t *testing.T) {
	old := CopyBackIdle
	t.Cleanup(func() { CopyBackIdle = old })
	type key struct{}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, "v"), 5*time.Millisecond)
	defer cancel()

	CopyBackIdle = 200 * time.Millisecond
	var got []byte
	err := ProgressBound(ctx, func(pctx context.Context, wrap func(io.Reader) io.Reader) error {
		if pctx.Value(key{}) != "v" {
			t.Error("the copy's context lost ctx's values")
		}
		var err error
		// 30 bytes, 10 ms apart: 300 ms in all, past ctx's 5 ms and past
		// CopyBackIdle, but never that long without a byte.
		got, err = io.ReadAll(wrap(&slowReader{n: 30, gap: 10 * time.Millisecond}))
		if err == nil {
			err = pctx.Err()
		}
		return err
	})
	if err != nil || len(got) != 30 {
		t.Errorf("a copy making progress: %d bytes, %v", len(got), err)
	}

	CopyBackIdle = 20 * time.Millisecond
	err = ProgressBound(ctx, func(pctx context.Context, wrap func(io.Reader) io.Reader) error {
		_, err := io.ReadAll(wrap(&slowReader{n: 2, gap: 5 * time.Millisecond}))
		if err != nil {
			return err
		}
		<-pctx.Done() // then nothing more arrives
		return pctx.Err()
	})
	if !errors.Is(err, ErrStalled) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "no byte for 20ms") {
		t.Errorf("a stalled copy: %v, want ErrStalled named", err)
	}
}
