package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/harness"
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
