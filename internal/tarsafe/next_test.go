package tarsafe

import (
	"archive/tar"
	"bytes"
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
