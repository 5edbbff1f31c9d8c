package bootstrap

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/outposthq/outpost/harness"
)

// Phase is a step of an install, as progress reports it.
type Phase string

const (
	// PhaseWait: another process is downloading the same artifact; this
	// one waits for it and then uses its copy.
	PhaseWait Phase = "wait"
	// PhaseDownload: bytes arriving (Bytes of Total; Total is 0 when the
	// server does not say).
	PhaseDownload Phase = "download"
	// PhaseVerified: the download's SHA-512 matched the pin.
	PhaseVerified Phase = "verified"
	// PhaseExtract: unpacking the verified archive into the host cache.
	PhaseExtract Phase = "extract"
	// PhaseCopy: copying the unpacked CLI into an isolated sandbox (Bytes
	// of Total).
	PhaseCopy Phase = "copy"
	// PhaseDone: the CLI is installed; Path says where, Source how.
	PhaseDone Phase = "done"
)

// Progress reports how an install is going. It serializes to JSON (the
// details of a notice event of kind "bootstrap").
type Progress struct {
	Agent   string `json:"agent"`
	Version string `json:"version,omitempty"`
	Phase   Phase  `json:"phase"`
	// Artifact is the package or file being handled
	// ("@anthropic-ai/claude-code-linux-x64@2.1.332").
	Artifact string `json:"artifact,omitempty"`
	Bytes    int64  `json:"bytes,omitempty"`
	Total    int64  `json:"total,omitempty"`
	// Path and Source are set when done.
	Path   string `json:"path,omitempty"`
	Source Source `json:"source,omitempty"`
}

// Fraction is Bytes/Total in [0,1], or -1 when the total is unknown.
func (p Progress) Fraction() float64 {
	if p.Total <= 0 {
		return -1
	}
	f := float64(p.Bytes) / float64(p.Total)
	return min(max(f, 0), 1)
}

// Text is a one-line description for people.
func (p Progress) Text() string {
	name := p.Agent
	if p.Version != "" {
		name += " " + p.Version
	}
	switch p.Phase {
	case PhaseWait:
		return fmt.Sprintf("%s: waiting for another process downloading %s", name, p.Artifact)
	case PhaseDownload:
		if p.Total > 0 {
			return fmt.Sprintf("%s: downloading %s: %s of %s (%d%%)", name, p.Artifact, Size(p.Bytes), Size(p.Total), int(100*p.Fraction()))
		}
		return fmt.Sprintf("%s: downloading %s: %s", name, p.Artifact, Size(p.Bytes))
	case PhaseVerified:
		return fmt.Sprintf("%s: %s verified (%s)", name, p.Artifact, Size(p.Bytes))
	case PhaseExtract:
		return fmt.Sprintf("%s: unpacking %s", name, p.Artifact)
	case PhaseCopy:
		if p.Total > 0 {
			return fmt.Sprintf("%s: copying into the sandbox: %s of %s (%d%%)", name, Size(p.Bytes), Size(p.Total), int(100*p.Fraction()))
		}
		return fmt.Sprintf("%s: copying into the sandbox", name)
	case PhaseDone:
		return fmt.Sprintf("%s: ready at %s (%s)", name, ShortPath(p.Path), p.Source)
	}
	return fmt.Sprintf("%s: %s", name, p.Phase)
}

// ShortPath is a path for people: the home directory as "~", and a
// digest's directory (the cache's "sha512-<128 hex digits>") cut to its
// first 12 digits and "…".
func ShortPath(path string) string {
	if home, err := os.UserHomeDir(); err == nil && home != "/" && home != "" {
		if rest, ok := strings.CutPrefix(path, home+"/"); ok {
			path = "~/" + rest
		}
	}
	parts := strings.Split(path, "/")
	for i, part := range parts {
		if algo, hex, ok := strings.Cut(part, "-"); ok && strings.HasPrefix(algo, "sha") && len(hex) > 16 {
			parts[i] = algo + "-" + hex[:12] + "…"
		}
	}
	return strings.Join(parts, "/")
}

// Event is the progress as a notice event of kind "bootstrap", the form
// `outpost run --json` and `outpost bootstrap --json` print.
func (p Progress) Event() harness.Event {
	d := map[string]any{"phase": string(p.Phase), "agent": p.Agent}
	if p.Version != "" {
		d["version"] = p.Version
	}
	if p.Artifact != "" {
		d["artifact"] = p.Artifact
	}
	if p.Bytes != 0 || p.Phase == PhaseDownload || p.Phase == PhaseCopy {
		d["bytes"] = p.Bytes
	}
	if p.Total > 0 {
		d["total"] = p.Total
	}
	if p.Path != "" {
		d["path"] = p.Path
	}
	if p.Source != "" {
		d["source"] = string(p.Source)
	}
	return harness.Event{Type: harness.EventNotice, Agent: p.Agent, Kind: NoticeKind, Text: p.Text(), Details: d, Time: time.Now().UTC()}
}

// NoticeKind is the Kind of bootstrap notice events.
const NoticeKind = "bootstrap"

// ProgressFromEvent reads back a bootstrap notice's progress (its Details
// as a Go value, or as decoded from JSON).
func ProgressFromEvent(ev harness.Event) (Progress, bool) {
	if ev.Type != harness.EventNotice || ev.Kind != NoticeKind || ev.Details == nil {
		return Progress{}, false
	}
	str := func(k string) string { s, _ := ev.Details[k].(string); return s }
	num := func(k string) int64 {
		switch v := ev.Details[k].(type) {
		case int64:
			return v
		case int:
			return int64(v)
		case float64:
			return int64(v)
		}
		return 0
	}
	p := Progress{Agent: str("agent"), Version: str("version"), Phase: Phase(str("phase")), Artifact: str("artifact"),
		Bytes: num("bytes"), Total: num("total"), Path: str("path"), Source: Source(str("source"))}
	return p, p.Phase != ""
}

// Size formats a byte count for people: "186.1 MB".
func Size(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTPE"[exp])
}

// DefaultProgressInterval is how often byte counts are reported at most.
const DefaultProgressInterval = 200 * time.Millisecond

// reporter forwards progress to a callback: phase changes always, byte
// counts at most once per interval, and the last count of a phase before
// the next one. Safe for concurrent use.
type reporter struct {
	mu       sync.Mutex
	f        func(Progress)
	interval time.Duration
	last     time.Time
	lastP    Progress
}

func newReporter(f func(Progress), interval time.Duration) *reporter {
	if interval <= 0 {
		interval = DefaultProgressInterval
	}
	return &reporter{f: f, interval: interval}
}

// report sends p when it starts a phase, ends one (final), or comes an
// interval after the last one sent; otherwise it drops it.
func (r *reporter) report(p Progress, final bool) {
	if r == nil || r.f == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	newPhase := p.Phase != r.lastP.Phase || p.Artifact != r.lastP.Artifact
	if !newPhase && !final && now.Sub(r.last) < r.interval {
		r.lastP = p
		return
	}
	r.lastP, r.last = p, now
	r.f(p)
}
