package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outposthq/outpost/sandbox/driver"

	"github.com/spf13/cobra"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/sandbox"
)

// BootstrapLine is the last line of `outpost bootstrap --json`, after the
// progress notices (docs/bootstrap.md).
type BootstrapLine struct {
	Type string `json:"type"` // "result"
	bootstrap.Installed
	Sandbox string `json:"sandbox"`
	// Check is what the installed CLI printed when asked for its version.
	Check    string     `json:"check,omitempty"`
	ExitCode int        `json:"exit_code"`
	Error    *ErrorJSON `json:"error"`
}

type bootstrapFlags struct {
	sandbox, image string
	set            []string
	json, list     bool
}

func (a *app) bootstrapCmd() *cobra.Command {
	var f bootstrapFlags
	c := &cobra.Command{
		Use:   "bootstrap [flags] AGENT",
		Short: "Install an agent's pinned CLI into a sandbox, verified by SHA-512",
		Long: `Install the pinned CLI of AGENT (a preset, or a bootstrap name: claude, codex, copilot,
qwen, opencode, antigravity, echo) into a fresh sandbox, the way a turn does when the
sandbox lacks it, then check that it runs and release the sandbox.

The download is verified against its pinned SHA-512 before anything is
installed and kept in the host cache ($OUTPOST_CACHE/bootstrap, default
~/.cache/outpost/bootstrap), so later turns install it without downloading.
On a terminal a progress bar shows the download; --json prints progress as
notice events of kind "bootstrap" and a result line last. --list shows the
pins (docs/bootstrap.md).`,
		Example: `  outpost bootstrap claude --sandbox docker --image outpost/debian:test
  outpost bootstrap codex
  outpost bootstrap --list`,
		Args: func(c *cobra.Command, args []string) error {
			if f.list {
				return cobra.NoArgs(c, args)
			}
			return cobra.ExactArgs(1)(c, args)
		},
		RunE: func(c *cobra.Command, args []string) error {
			if f.list {
				return a.listPins(f.json)
			}
			return a.bootstrap(c.Context(), f, args[0])
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.sandbox, "sandbox", "local", "sandbox provider ("+strings.Join(sandbox.Providers(), ", ")+")")
	fl.StringVar(&f.image, "image", "", "container image (docker sandbox)")
	fl.StringArrayVar(&f.set, "set", nil, "sandbox provider setting KEY=VALUE; repeatable")
	fl.BoolVar(&f.json, "json", false, "print progress notices and the result as JSON lines")
	fl.BoolVar(&f.list, "list", false, "list the pinned CLIs instead")
	return c
}

// bootstrapName maps AGENT to its bootstrap name: a preset's Bootstrap,
// or AGENT itself when inst can install it.
func bootstrapName(inst *bootstrap.Installer, agent string) (string, error) {
	if h, ok := presets.Lookup(agent); ok {
		if h.Bootstrap == "" {
			return "", outpost.Errorf(outpost.Configuration, "bootstrap", "agent %s has no pinned CLI to install", agent)
		}
		return h.Bootstrap, nil
	}
	if inst.Known(agent) {
		return agent, nil
	}
	return "", outpost.Errorf(outpost.Configuration, "bootstrap", "unknown agent %q (presets: %s; bootstrap names: %s)", agent, strings.Join(presets.Names(), ", "), strings.Join(inst.Names(), ", "))
}

func (a *app) bootstrap(ctx context.Context, f bootstrapFlags, agent string) error {
	res := &BootstrapLine{Type: "result", Sandbox: f.sandbox}
	res.Agent = agent
	err := a.doBootstrap(ctx, f, agent, res)
	if f.json {
		res.ExitCode = outpost.ExitCode(err)
		res.Error = ErrorToJSON(err)
		enc := json.NewEncoder(a.stdout)
		enc.SetEscapeHTML(false)
		if encErr := enc.Encode(res); encErr != nil && err == nil {
			return encErr
		}
		return err
	}
	if err != nil {
		var oe *outpost.Error
		if errors.As(err, &oe) {
			fmt.Fprintf(a.stderr, "outpost: %s\n", oe.Error())
			for _, k := range oe.DetailKeys() {
				fmt.Fprintf(a.stderr, "  %s: %v\n", k, oe.Details[k])
			}
			a.reported = true
		}
		return err
	}
	how := "from the cache, nothing downloaded"
	switch res.Source {
	case bootstrap.SourceDownload:
		how = "downloaded " + bootstrap.Size(res.Downloaded)
	case bootstrap.SourcePath:
		how = "already on the sandbox's PATH"
	case bootstrap.SourceSelf:
		how = "outpost's own binary"
	case bootstrap.SourceSandbox:
		how = "already in the sandbox"
	}
	if res.Mounted {
		how += "; the sandbox runs it from the cache, mounted read-only"
	}
	fmt.Fprintf(a.stdout, "%s %s installed (%s)\n", res.Agent, res.Version, how)
	tw := newTable(a.stdout, "  sandbox", res.Sandbox)
	tw.row("  path", res.Path)
	if res.Digest != "" {
		tw.row("  verified", res.Digest)
		tw.row("  artifact", res.Artifact+" ("+res.Platform+")")
	}
	if res.Cached != "" {
		tw.row("  cache", res.Cached)
	}
	if res.Check != "" {
		tw.row("  runs", res.Check)
	}
	return tw.flush()
}

func (a *app) doBootstrap(ctx context.Context, f bootstrapFlags, agent string, res *BootstrapLine) error {
	inst := &bootstrap.Installer{}
	name, err := bootstrapName(inst, agent)
	if err != nil {
		return err
	}
	res.Agent = name
	settings, err := parsePairs(f.set, "--set", nil)
	if err != nil {
		return err
	}
	if f.image != "" {
		if settings == nil {
			settings = map[string]string{}
		}
		settings["image"] = f.image
	}
	provider, err := openProvider(f.sandbox, settings)
	if err != nil {
		return err
	}
	defer provider.Close()
	// Bootstrap needs no workspace: an empty one (the docker provider
	// would copy the current directory in).
	wd, err := os.MkdirTemp("", "outpost-bootstrap-")
	if err != nil {
		return outpost.Wrap(outpost.Sandbox, "lease", err)
	}
	defer os.RemoveAll(wd)
	// As a turn would: the cache's unpacked CLIs mounted read-only where
	// the provider can (then nothing is copied into the sandbox).
	// The image's pull and the install show their progress.
	progress, finish := a.progressSink(f.json)
	defer finish()
	opts := driver.Options{Workdir: wd, Mounts: sandbox.CacheMounts(inst, provider.Capabilities(), name),
		Progress: func(p driver.Progress) { progress(sandbox.ProgressEvent(p)) }}
	lease, err := sandbox.Acquire(ctx, provider, opts)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		lease.Close(cctx)
	}()

	installed, err := sandbox.Install(ctx, lease, inst, name, &bootstrap.EnsureOptions{Progress: func(p bootstrap.Progress) { progress(p.Event()) }})
	finish()
	if installed != nil {
		res.Installed, res.Check = installed.Installed, installed.Check
	}
	return err
}

// progressSink returns where the progress notices of an install and of
// its image go: on stdout with --json; a progress bar on stderr when it
// is a terminal; otherwise one line per phase. finish ends the bar's line.
func (a *app) progressSink(asJSON bool) (func(harness.Event), func()) {
	if asJSON {
		return newJSONWriter(a.stdout).event, func() {}
	}
	b := newProgressBar(a.stderr, false)
	return func(ev harness.Event) { b.event(ev) }, b.finish
}

func (a *app) listPins(asJSON bool) error {
	pins, err := bootstrap.DefaultPins()
	if err != nil {
		return outpost.Wrap(outpost.Configuration, "pins", err)
	}
	if asJSON {
		b, err := pins.Marshal()
		if err != nil {
			return err
		}
		_, err = a.stdout.Write(b)
		return err
	}
	tw := newTable(a.stdout, "NAME", "VERSION", "KIND", "PLATFORMS")
	for _, n := range pins.Names() {
		p, _ := pins.Lookup(n)
		keys := slices.Sorted(maps.Keys(p.Platforms))
		tw.row(n, p.Version, string(p.Kind), strings.Join(keys, " "))
	}
	return tw.flush()
}

// progressBar draws install progress and image pulls for a person: on a
// terminal, one line redrawn in place with a bar for byte counts;
// elsewhere, one line per phase. The done phase gets a line when done is
// set (a turn's output) and the CLI was downloaded, not otherwise
// (`outpost bootstrap` prints a summary; a CLI found in place, in the
// cache or on the PATH, is no news). It is safe for concurrent use.
type progressBar struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	done  bool
	width int
	open  bool   // a bar line is drawn and not yet ended
	last  string // the phase of the last report, and what it was about
}

func newProgressBar(w io.Writer, done bool) *progressBar {
	return &progressBar{w: w, tty: isTerminal(w), done: done, width: 30}
}

func (b *progressBar) update(p bootstrap.Progress) {
	b.mu.Lock()
	defer b.mu.Unlock()
	newPhase := b.phase(string(p.Phase) + " " + p.Artifact)
	if p.Phase == bootstrap.PhaseDone {
		b.endLine()
		if b.done && p.Source == bootstrap.SourceDownload {
			b.line(bootstrap.NoticeKind, p.Text())
		}
		return
	}
	if b.tty && (p.Phase == bootstrap.PhaseDownload || p.Phase == bootstrap.PhaseCopy) && p.Total > 0 {
		verb := "downloading"
		if p.Phase == bootstrap.PhaseCopy {
			verb = "copying"
		}
		b.draw(p.Agent+" "+verb, p.Fraction(), p.Bytes, p.Total, "")
		return
	}
	if newPhase {
		b.endLine()
		b.line(bootstrap.NoticeKind, p.Text())
	}
}

// image draws an image pull's or build's progress: its start and its end
// on a line each, the bytes of a pull as a bar between on a terminal.
func (b *progressBar) image(p driver.Progress) {
	b.mu.Lock()
	defer b.mu.Unlock()
	newPhase := b.phase(p.Step + " " + p.Image)
	switch {
	case p.Done:
		b.endLine()
		b.line(sandbox.ImageNoticeKind, sandbox.ProgressText(p))
	case b.tty && p.Total > 0:
		b.draw(p.Image+" pulling", sandbox.ProgressFraction(p), p.Bytes, p.Total, fmt.Sprintf(" %d/%d layers", p.LayersDone, p.Layers))
	case newPhase:
		b.endLine()
		b.line(sandbox.ImageNoticeKind, sandbox.ProgressText(p))
	}
}

// phase records what a report is about and reports whether it differs
// from the last one's.
func (b *progressBar) phase(key string) bool {
	changed := key != b.last
	b.last = key
	return changed
}

// line prints one notice line.
func (b *progressBar) line(kind, text string) {
	fmt.Fprintf(b.w, "· %s: %s\n", kind, text)
}

// draw redraws the bar line: what, the bar of fraction f, the percentage,
// bytes of total, and extra.
func (b *progressBar) draw(what string, f float64, bytes, total int64, extra string) {
	n := int(f * float64(b.width))
	fmt.Fprintf(b.w, "\r\x1b[K%s [%s%s] %3d%% %s/%s%s", what, strings.Repeat("#", n), strings.Repeat(".", b.width-n), int(100*f), bootstrap.Size(bytes), bootstrap.Size(total), extra)
	b.open = true
}

func (b *progressBar) endLine() {
	if b.open {
		fmt.Fprintln(b.w)
		b.open = false
	}
}

func (b *progressBar) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.endLine()
}

// event draws a bootstrap or image notice event of a turn; it reports
// false for other events.
func (b *progressBar) event(ev harness.Event) bool {
	if p, ok := bootstrap.ProgressFromEvent(ev); ok {
		b.update(p)
		return true
	}
	if p, ok := sandbox.ProgressFromEvent(ev); ok {
		b.image(p)
		return true
	}
	return false
}

// isTerminal reports whether w is a terminal (a character device that is
// not /dev/null) and TERM is not "dumb".
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	if null, err := os.Stat(os.DevNull); err == nil && os.SameFile(fi, null) {
		return false
	}
	return true
}
