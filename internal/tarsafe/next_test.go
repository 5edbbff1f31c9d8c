package tarsafe

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
)

func TestNext(t *testing.T) {
	archive := func(globals int) *tar.Reader {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for range globals {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"comment": "x"}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		tw.Close()
		return tar.NewReader(&buf)
	}
	tr := archive(MaxGlobalHeaders)
	h, err := Next(tr)
	if err != nil || h.Name != "f" {
		t.Fatalf("Next after %d global headers = %v, %v; want f", MaxGlobalHeaders, h, err)
	}
	if _, err := Next(tr); err != io.EOF {
		t.Fatalf("Next at the end = %v, want io.EOF", err)
	}
	if _, err := Next(archive(MaxGlobalHeaders + 1)); !errors.Is(err, ErrGlobalHeaders) || !errors.Is(err, ErrUnsafe) {
		t.Fatalf("Next after %d global headers = %v, want ErrGlobalHeaders and ErrUnsafe", MaxGlobalHeaders+1, err)
	}
	if _, err := Next(tar.NewReader(bytes.NewReader([]byte("not a tar archive, but long enough to be read as a header block")))); err == nil || err == io.EOF {
		t.Fatalf("Next of garbage = %v, want a read error", err)
	}
}

func TestEntries(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range []string{"a", "b"} {
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	var names []string
	for h, err := range Entries(t.Context(), tar.NewReader(bytes.NewReader(buf.Bytes()))) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if len(names) != 2 || names[0] != "a" || names[1] != "b" {
		t.Errorf("entries %v, want a and b", names)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	n := 0
	for h, err := range Entries(ctx, tar.NewReader(bytes.NewReader(buf.Bytes()))) {
		if n++; h != nil || !errors.Is(err, context.Canceled) {
			t.Errorf("after cancel: %v, %v; want only ctx's error", h, err)
		}
	}
	if n != 1 {
		t.Errorf("%d yields after cancel, want 1", n)
	}
}
