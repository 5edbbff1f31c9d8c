// Command pins regenerates the npm pins of bootstrap/pins.json from the
// npm registry, so a CLI version bump is one reviewed diff:
//
//	go run ./bootstrap/cmd/pins claude@2.1.333     # bump one agent
//	go run ./bootstrap/cmd/pins                    # re-resolve every npm agent at its pinned version
//	go run ./bootstrap/cmd/pins -check             # exit 1 if the file differs from the registry
//	go run ./bootstrap/cmd/pins -verify linux-x64 claude
//	                                              # also download, verify and unpack into the cache
//
// Pins of kind archive (antigravity) and self (echo) are kept as they are: edit them by
// hand. The registry is $OUTPOST_NPM_REGISTRY or -registry, default
// https://registry.npmjs.org; the file keeps the public registry's URLs
// unless -registry is given explicitly.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/outposthq/outpost/bootstrap"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pins", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("file", "bootstrap/pins.json", "the pin file to rewrite")
	registry := fs.String("registry", "", "npm registry to resolve from (default $"+bootstrap.RegistryVariable+" or "+bootstrap.DefaultRegistry+")")
	check := fs.Bool("check", false, "do not write: exit 1 when the file differs from what the registry says")
	verify := fs.String("verify", "", "also download, verify and unpack each regenerated pin's artifact for this platform key (e.g. linux-x64) into the bootstrap cache")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./bootstrap/cmd/pins [flags] [AGENT[@VERSION]...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := regenerate(ctx, *file, *registry, *check, *verify, fs.Args(), stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "pins:", err)
		return 1
	}
	return 0
}

var errDiffers = errors.New("the pin file differs from the registry")

func regenerate(ctx context.Context, file, registry string, check bool, verify string, targets []string, stdout, stderr io.Writer) error {
	old, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	pins, err := bootstrap.ParsePins(old)
	if err != nil {
		return err
	}
	explicit := registry != ""
	if registry == "" {
		registry = os.Getenv(bootstrap.RegistryVariable)
	}
	if registry == "" {
		registry = pins.Registry
	}
	changed, err := resolvePins(ctx, pins, file, registry, targets, stderr)
	if err != nil {
		return err
	}
	if explicit {
		pins.Registry = registry
	}
	if err := writePins(pins, file, old, check, changed, stdout); err != nil {
		return err
	}
	if verify == "" {
		return nil
	}
	return verifyPins(ctx, pins, registry, verify, changed, stdout, stderr)
}

// resolvePins resolves each target (AGENT or AGENT@VERSION; none: every
// npm pin at its version) from the registry into pins, and returns their
// names.
func resolvePins(ctx context.Context, pins *bootstrap.Pins, file, registry string, targets []string, stderr io.Writer) ([]string, error) {
	if len(targets) == 0 {
		for _, name := range pins.Names() {
			if pin, _ := pins.Lookup(name); pin.Kind == bootstrap.KindNPM {
				targets = append(targets, name)
			}
		}
	}
	var changed []string
	for _, t := range targets {
		name, version, _ := strings.Cut(t, "@")
		from, ok := pins.Lookup(name)
		if version == "" {
			if !ok {
				return nil, fmt.Errorf("%s has no pin yet: name a version (%s@VERSION)", name, name)
			}
			version = from.Version
		}
		fmt.Fprintf(stderr, "pins: resolving %s@%s from %s\n", name, version, registry)
		if !ok {
			return nil, fmt.Errorf("%s has no pin in %s: write one first (kind npm, its package and program, and for each platform its package and bin; see docs/bootstrap.md)", name, file)
		}
		pin, err := bootstrap.ResolvePin(ctx, nil, registry, from, version)
		if err != nil {
			return nil, err
		}
		if from.Note != "" {
			pin.Note = from.Note
		}
		pins.Agents[name] = pin
		changed = append(changed, name)
	}
	return changed, nil
}

// writePins writes pins over file when they differ from old (check: only
// says whether they do, errDiffers).
func writePins(pins *bootstrap.Pins, file string, old []byte, check bool, changed []string, stdout io.Writer) error {
	out, err := pins.Marshal()
	if err != nil {
		return err
	}
	if _, err := bootstrap.ParsePins(out); err != nil {
		return fmt.Errorf("the regenerated file does not parse: %w", err)
	}
	switch {
	case check && !bytes.Equal(old, out):
		return errDiffers
	case check:
		fmt.Fprintln(stdout, "pins: up to date")
	case bytes.Equal(old, out):
		fmt.Fprintf(stdout, "pins: %s unchanged\n", file)
	default:
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, out, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, file); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "pins: wrote %s (%s); review the diff\n", file, strings.Join(changed, ", "))
	}
	return nil
}

// verifyPins downloads, verifies and unpacks each changed pin's artifact
// for the platform key verify into the bootstrap cache.
func verifyPins(ctx context.Context, pins *bootstrap.Pins, registry, verify string, changed []string, stdout, stderr io.Writer) error {
	pl, err := bootstrap.ParsePlatformKey(verify)
	if err != nil {
		return err
	}
	inst := &bootstrap.Installer{Pins: pins, Registry: registry}
	for _, name := range changed {
		res, err := inst.Prefetch(ctx, name, pl, &bootstrap.EnsureOptions{Progress: func(p bootstrap.Progress) {
			if p.Phase != bootstrap.PhaseDownload || p.Bytes == 0 || p.Bytes == p.Total {
				fmt.Fprintln(stderr, "pins:", p.Text())
			}
		}})
		if err != nil {
			return fmt.Errorf("verifying %s for %s: %w", name, verify, err)
		}
		fmt.Fprintf(stdout, "pins: %s %s %s verified: %s (%s)\n", name, res.Version, res.Platform, res.Path, res.Source)
	}
	return nil
}
