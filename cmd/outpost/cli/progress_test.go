package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	b := &progressBar{w: &buf, tty: true, done: true, width: 10}
	p := bootstrap.Progress{Agent: "claude", Version: "2.1.332", Artifact: "pkg", Phase: bootstrap.PhaseDownload, Total: 1000}
	for _, n := range []int64{0, 500, 1000} {
		p.Bytes = n
		b.update(p)
	}
	b.update(bootstrap.Progress{Agent: "claude", Version: "2.1.332", Artifact: "pkg", Phase: bootstrap.PhaseVerified, Bytes: 1000})
	if !b.event(bootstrap.Progress{Agent: "claude", Version: "2.1.332", Phase: bootstrap.PhaseDone, Path: "/x/claude", Source: bootstrap.SourceDownload}.Event()) {
		t.Fatal("a bootstrap notice was not drawn")
	}
	if b.event(harness.Event{Type: harness.EventNotice, Kind: "retry"}) {
		t.Error("another notice was taken for progress")
	}
	got := buf.String()
	for _, want := range []string{
		"\r\x1b[Kclaude downloading [..........]   0% 0 B/1.0 kB",
		"\r\x1b[Kclaude downloading [#####.....]  50% 500 B/1.0 kB",
		"[##########] 100% 1.0 kB/1.0 kB\n· bootstrap: claude 2.1.332: pkg verified (1.0 kB)\n",
		"· bootstrap: claude 2.1.332: ready at /x/claude (download)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%q", want, got)
		}
	}

	// Not a terminal: one line per phase, no bar, and no done line for
	// `outpost bootstrap` (it prints a summary).
	buf.Reset()
	b = newProgressBar(&buf, false)
	for _, n := range []int64{0, 500, 1000} {
		p.Bytes = n
		b.update(p)
	}
	b.update(bootstrap.Progress{Phase: bootstrap.PhaseDone, Agent: "claude"})
	b.finish()
	if got := buf.String(); strings.Count(got, "\n") != 1 || strings.Contains(got, "\r") {
		t.Errorf("non-terminal output %q", got)
	}
}

// TestProgressBarQuietCache: a CLI found in the cache or on the PATH is no
// news: a turn shows no line for it; a downloaded one's path is short.
func TestProgressBarQuietCache(t *testing.T) {
	var buf bytes.Buffer
	b := &progressBar{w: &buf, tty: false, done: true, width: 10}
	long := "/root/.cache/outpost/bootstrap/trees/sha512-" + strings.Repeat("7f", 64) + "/bin/claude"
	for _, src := range []bootstrap.Source{bootstrap.SourceCache, bootstrap.SourcePath} {
		b.event(bootstrap.Progress{Agent: "claude", Version: "2.1.332", Phase: bootstrap.PhaseDone, Path: long, Source: src}.Event())
	}
	if buf.Len() != 0 {
		t.Errorf("a CLI in place printed %q", buf.String())
	}
	b.event(bootstrap.Progress{Agent: "claude", Version: "2.1.332", Phase: bootstrap.PhaseDone, Path: long, Source: bootstrap.SourceDownload}.Event())
	if got, want := buf.String(), "/.cache/outpost/bootstrap/trees/sha512-7f7f7f7f7f7f…/bin/claude (download)\n"; !strings.HasPrefix(got, "· bootstrap: claude 2.1.332: ready at ") || !strings.HasSuffix(got, want) {
		t.Errorf("downloaded: %q, want the path cut to %q", got, want)
	}
}

// TestProgressBarImage: an image pull's notices, on a terminal, are a line
// when it starts, a bar of its bytes with its layers, and a line when it
// is done; elsewhere the two lines alone.
func TestProgressBarImage(t *testing.T) {
	pull := func(layers, done int, bytes, total int64, end bool) harness.Event {
		return sandbox.ProgressEvent(driver.Progress{Step: driver.ProgressPull, Image: "node:22-bookworm", Layers: layers, LayersDone: done, Bytes: bytes, Total: total, Done: end})
	}
	evs := []harness.Event{pull(0, 0, 0, 0, false), pull(7, 1, 0, 0, false), pull(7, 3, 500, 1000, false), pull(7, 7, 1000, 1000, false), pull(7, 7, 1000, 1000, true)}
	var buf bytes.Buffer
	b := &progressBar{w: &buf, tty: true, done: true, width: 10}
	for _, ev := range evs {
		if !b.event(ev) {
			t.Fatalf("an image notice was not drawn: %+v", ev)
		}
	}
	got := buf.String()
	for _, want := range []string{
		"· image: pulling node:22-bookworm\n",
		"\r\x1b[Knode:22-bookworm pulling [#####.....]  50% 500 B/1.0 kB 3/7 layers",
		"\r\x1b[Knode:22-bookworm pulling [##########] 100% 1.0 kB/1.0 kB 7/7 layers\n· image: pulled node:22-bookworm (7 layers, 1.0 kB downloaded)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%q", want, got)
		}
	}

	buf.Reset()
	b = newProgressBar(&buf, true)
	for _, ev := range evs {
		b.event(ev)
	}
	if got, want := buf.String(), "· image: pulling node:22-bookworm\n· image: pulled node:22-bookworm (7 layers, 1.0 kB downloaded)\n"; got != want {
		t.Errorf("non-terminal output %q, want %q", got, want)
	}
}
