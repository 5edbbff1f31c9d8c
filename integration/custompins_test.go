package integration

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/providers/local"
)

// fooArchive is a release archive, foo-1.0/bin/foo, whose program speaks
// the echo agent's JSON lines: a CLI nobody has but its pin.
func fooArchive(t testing.TB) []byte {
	t.Helper()
	script := "#!/bin/sh\n" +
		`printf '{"type":"init","session":"foo-1","model":"foo-model","turn":1}\n'` + "\n" +
		`printf '{"type":"text","id":"m1","text":"foo says: %s"}\n' "$1"` + "\n" +
		`printf '{"type":"done","usage":{"input":1,"output":3,"cache_read":0}}\n'` + "\n"
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range []struct {
		name string
		mode int64
		body string
	}{
		{"foo-1.0/README", 0o644, "foo 1.0\n"},
		{"foo-1.0/bin/foo", 0o755, script},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(f.body))
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

// fooPins pin bootstrap name "foo" — a name no built-in pin has — to an
// archive at url with the given SHA-512.
func fooPins(url string, sum [64]byte) *bootstrap.Pins {
	art := func() *bootstrap.Artifact {
		return &bootstrap.Artifact{URL: url, SHA512: hex.EncodeToString(sum[:]), Bin: "bin/foo", Strip: 1}
	}
	return &bootstrap.Pins{Schema: bootstrap.SchemaVersion, Registry: bootstrap.DefaultRegistry, Agents: map[string]*bootstrap.Pin{
		"foo": {Kind: bootstrap.KindArchive, Version: "1.0", Program: "foo", Platforms: map[string]*bootstrap.Artifact{"linux-x64": art(), "linux-arm64": art()}},
	}}
}

// fooPreset is a preset written outside outpost's registry: it runs "foo"
// and names the bootstrap "foo", which only the turn's installer knows.
func fooPreset() *harness.Harness {
	return &harness.Harness{
		Name: "foo",
		Request: func(in harness.Input) (harness.Command, error) {
			return harness.Command{Path: "foo", Args: []string{in.Prompt}}, nil
		},
		Events:                echo.Events,
		Bootstrap:             "foo",
		RequiresFinishedEvent: true,
	}
}

// TestBootstrapCustomPinsTurn: a turn whose preset names bootstrap "foo",
// with a RunOptions.Installer whose own Pins have "foo", is validated
// against that installer (not the global pins): the archive is downloaded
// from a loopback server, verified by SHA-512, installed, and the turn
// runs the installed program. The same turn with a wrong digest fails
// with code bootstrap and runs nothing; with the default installer, which
// has no "foo", it is refused before any sandbox is allocated.
func TestBootstrapCustomPinsTurn(t *testing.T) {
	t.Parallel()
	archive := fooArchive(t)
	srv := serveTarball(t, archive)
	run := func(inst *bootstrap.Installer) (*engine.Result, []harness.Event, error) {
		var mu sync.Mutex
		var events []harness.Event
		o := &engine.RunOptions{
			Provider:  local.New(&local.Options{BaseDir: t.TempDir()}),
			Environ:   []string{"PATH=" + os.Getenv("PATH")},
			Installer: inst,
			OnEvent: func(ev harness.Event) {
				mu.Lock()
				events = append(events, ev)
				mu.Unlock()
			},
		}
		res, err := engine.Run(context.Background(), engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: fooPreset()}, Prompt: "hello", Workdir: t.TempDir()}, o)
		return res, events, err
	}

	t.Run("installed", func(t *testing.T) {
		inst := &bootstrap.Installer{Pins: fooPins(srv.URL+"/foo-1.0.tar.gz", sha512.Sum512(archive)), CacheDir: t.TempDir()}
		if !inst.Known("foo") || !inst.Cached("foo") {
			t.Fatalf("the installer does not know its own pin: Known %v, Cached %v", inst.Known("foo"), inst.Cached("foo"))
		}
		res, events, err := run(inst)
		if err != nil {
			t.Fatal(err)
		}
		if res.Text != "foo says: hello" {
			t.Errorf("final text %q, want the installed program's answer", res.Text)
		}
		ps := bootstrapNotices(events)
		if len(ps) == 0 {
			t.Fatal("no bootstrap notices")
		}
		last := ps[len(ps)-1]
		if last.Phase != bootstrap.PhaseDone || last.Source != bootstrap.SourceDownload || last.Agent != "foo" || last.Version != "1.0" || !strings.HasSuffix(last.Path, "/bin/foo") {
			t.Errorf("done notice %+v", last)
		}
		if n := srv.hits.Load(); n != 1 {
			t.Errorf("%d downloads, want 1", n)
		}
	})

	t.Run("digest mismatch", func(t *testing.T) {
		cache := t.TempDir()
		inst := &bootstrap.Installer{Pins: fooPins(srv.URL+"/foo-1.0.tar.gz", sha512.Sum512([]byte("the reviewed archive"))), CacheDir: cache}
		_, events, err := run(inst)
		if outpost.CodeOf(err) != outpost.Bootstrap || !errors.Is(err, bootstrap.ErrDigestMismatch) {
			t.Fatalf("err = %v, want code bootstrap and a digest mismatch", err)
		}
		for _, ev := range events {
			if ev.Type != harness.EventNotice {
				t.Errorf("the agent ran: %+v", ev)
			}
		}
		assertNothingCached(t, cache)
	})

	t.Run("unknown to the installer", func(t *testing.T) {
		_, events, err := run(&bootstrap.Installer{CacheDir: t.TempDir()})
		if outpost.CodeOf(err) != outpost.Configuration || !strings.Contains(err.Error(), `unknown bootstrap "foo"`) {
			t.Fatalf("err = %v, want a configuration refusal naming the unknown bootstrap", err)
		}
		if len(events) != 0 {
			t.Errorf("events before the refusal: %+v", events)
		}
	})
}
