package docker

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/pkg/jsonmessage"
	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/sandbox/driver"
)

// follow feeds a recorded pull stream to an imageProgress with the given
// interval and clock, and returns its reports and error.
func followFile(t *testing.T, file string, interval time.Duration, now func() time.Time) ([]driver.Progress, error) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []driver.Progress
	a := newImageProgress(driver.ProgressPull, "node:22-bookworm", func(p driver.Progress) { got = append(got, p) })
	a.interval, a.now = interval, now
	return got, a.follow(f)
}

// TestImageProgressPull: a recorded pull stream (the engine's jsonmessage
// lines) folds into reports of the layers named and in place and of the
// bytes downloaded of the sizes known; the repository's line and the
// closing status lines name no layer; the last report is Done.
func TestImageProgressPull(t *testing.T) {
	t.Parallel()
	got, err := followFile(t, "testdata/pull.jsonl", 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := func(layers, done int, bytes, total int64) driver.Progress {
		return driver.Progress{Step: driver.ProgressPull, Image: "node:22-bookworm", Layers: layers, LayersDone: done, Bytes: bytes, Total: total}
	}
	const big, small = 48491268, 2000000
	want := []driver.Progress{
		p(0, 0, 0, 0),
		p(1, 0, 0, 0),
		p(2, 0, 0, 0),
		p(3, 1, 0, 0), // already exists
		p(3, 1, 540672, big),
		p(3, 1, 24245634, big),
		p(3, 1, big, big),
		p(3, 1, big+small/2, big+small),
		p(3, 2, big+small/2, big+small), // the big one in place
		p(3, 2, big+small, big+small),
		p(3, 3, big+small, big+small),
	}
	last := p(3, 3, big+small, big+small)
	last.Done = true
	want = append(want, last)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reports (-want +got):\n%s", diff)
	}
}

// TestImageProgressThrottled: with a clock that does not move, a stream
// gives its first report and its last, whatever comes between; with one
// that moves an interval a message, a report per change.
func TestImageProgressThrottled(t *testing.T) {
	t.Parallel()
	still := time.Unix(1000, 0)
	got, err := followFile(t, "testdata/pull.jsonl", time.Second, func() time.Time { return still })
	if err != nil || len(got) != 2 || got[0].Layers != 0 || !got[1].Done || got[1].LayersDone != 3 {
		t.Errorf("reports %+v, %v: want the first and the last", got, err)
	}
	clock := still
	got, err = followFile(t, "testdata/pull.jsonl", time.Second, func() time.Time { clock = clock.Add(time.Second); return clock })
	if err != nil || len(got) != 12 {
		t.Errorf("%d reports, %v: want 12", len(got), err)
	}
}

// TestImageProgressError: the error the engine reports in the stream is
// follow's, and no Done report is made.
func TestImageProgressError(t *testing.T) {
	t.Parallel()
	got, err := followFile(t, "testdata/pull-denied.jsonl", 0, nil)
	var je *jsonmessage.JSONError
	if err == nil || !strings.Contains(err.Error(), "unexpected EOF") || !asJSONError(err, &je) {
		t.Errorf("error %v, want the stream's", err)
	}
	if len(got) == 0 || got[len(got)-1].Done {
		t.Errorf("reports %+v: want some, none done", got)
	}
	// A stream that is not JSON.
	a := newImageProgress(driver.ProgressBuild, MinimalImage, nil)
	if err := a.follow(strings.NewReader("{not json")); err == nil {
		t.Error("a broken stream was read without an error")
	}
}

func asJSONError(err error, je **jsonmessage.JSONError) bool {
	e, ok := err.(*jsonmessage.JSONError)
	*je = e
	return ok
}
