package conversation_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/conversation/storetest"
)

func TestExportImportRoundTrip(t *testing.T) {
	ctx := context.Background()
	src := conversation.NewFS(t.TempDir())
	m := conversation.Meta{
		ID: conversation.NewID(), Agent: "claude", Native: "n1", Parent: "c01parent", Workdir: "/work",
		Sandbox: "docker", Model: "opus", Created: t0, Updated: t0.Add(time.Hour), Turns: 2,
	}
	files := append(testFiles(), conversation.File{Path: ".claude/big", Mode: 0o600, Data: bytes.Repeat([]byte("big\x00"), 1<<18)})
	if err := src.Put(ctx, m, files); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := conversation.Export(ctx, src, m.ID, &buf); err != nil {
		t.Fatal(err)
	}
	if _, err := gzip.NewReader(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatalf("export is not gzip: %v", err)
	}
	exported := buf.Bytes()

	dst := conversation.NewFS(t.TempDir())
	got, err := conversation.Import(ctx, dst, bytes.NewReader(exported), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := m
	want.Files = filePaths(files)
	want.Revision = 1 // a new history in dst
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Import meta (-want +got):\n%s", d)
	}
	gm, gf, err := dst.Get(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, gm); d != "" {
		t.Errorf("imported meta (-want +got):\n%s", d)
	}
	if d := cmp.Diff(files, gf, cmp.Comparer(bytes.Equal)); d != "" {
		t.Errorf("imported files differ (-want +got):\n%s", d)
	}

	// Importing again is refused unless asked to replace.
	if _, err := conversation.Import(ctx, dst, bytes.NewReader(exported), nil); !errors.Is(err, conversation.ErrExist) {
		t.Errorf("second Import: %v, want ErrExist", err)
	}
	if _, err := conversation.Import(ctx, dst, bytes.NewReader(exported), &conversation.ImportOptions{Replace: true}); err != nil {
		t.Errorf("Import with Replace: %v", err)
	}

	// Limits.
	for name, o := range map[string]*conversation.ImportOptions{
		"size":  {MaxSize: 1000},
		"files": {MaxFiles: 2},
	} {
		if _, err := conversation.Import(ctx, storetest.NewMemory(), bytes.NewReader(exported), o); !errors.Is(err, conversation.ErrInvalid) {
			t.Errorf("Import over the %s limit: %v, want ErrInvalid", name, err)
		}
	}

	if err := conversation.Export(ctx, src, "c01missing", &buf); !errors.Is(err, conversation.ErrNotFound) {
		t.Errorf("Export of a missing conversation: %v, want ErrNotFound", err)
	}
}

// entry is one raw tar entry of a hand-made archive.
type entry struct {
	hdr  tar.Header
	data []byte
	// headerOnly writes the header and stops the archive there, however
	// large hdr.Size says the data is.
	headerOnly bool
}

// archive makes a gzip'd tar of entries with no checks at all.
func archive(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, e := range entries {
		h := e.hdr
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Size == 0 && h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		if h.Mode == 0 {
			h.Mode = 0o600
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if e.headerOnly {
			break
		}
		if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if !entries[len(entries)-1].headerOnly {
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return gzipped(t, raw.Bytes())
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return z.Bytes()
}

type fileIndex struct {
	Path   string `json:"path"`
	Mode   uint32 `json:"mode"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// envelope makes meta.json for the given index.
func envelope(t *testing.T, version int, index ...fileIndex) entry {
	t.Helper()
	js, err := json.Marshal(map[string]any{
		"format":  "outpost.conversation",
		"version": version,
		"meta":    testMeta("c01hostile"),
		"files":   index,
	})
	if err != nil {
		t.Fatal(err)
	}
	return entry{hdr: tar.Header{Name: "meta.json"}, data: js}
}

func index(path string, data []byte) fileIndex {
	sum := sha256.Sum256(data)
	return fileIndex{Path: path, Mode: 0o600, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
}

func TestImportHostile(t *testing.T) {
	data := []byte("payload")
	huge := int64(10 << 30)
	cases := []struct {
		name    string
		archive func(t *testing.T) []byte
		want    error
	}{
		{"valid control", func(t *testing.T) []byte {
			return archive(t, envelope(t, 1, index("a/b", data)), entry{hdr: tar.Header{Name: "files/a/b"}, data: data})
		}, nil},
		{"entry escapes", func(t *testing.T) []byte {
			return archive(t, envelope(t, 1, index("a/b", data)), entry{hdr: tar.Header{Name: "files/../../../etc/cron.d/x"}, data: data})
		}, conversation.ErrUnsafe},
		{"absolute entry", func(t *testing.T) []byte {
			return archive(t, envelope(t, 1, index("a/b", data)), entry{hdr: tar.Header{Name: "/etc/passwd"}, data: data})
		}, conversation.ErrUnsafe},
		{"index escapes", func(t *testing.T) []byte {
			return archive(t, envelope(t, 1, index("../x", data)), entry{hdr: tar.Header{Name: "files/../x"}, data: data})
		}, conversation.ErrUnsafe},
		{"absolute index", func(t *testing.T) []byte {
			return archive(t, envelope(t, 1, index("/etc/passwd", data)), entry{hdr: tar.Header{Name: "files//etc/passwd"}, data: data})
		}, conversation.ErrUnsafe},
		{"symlink in place of a file", func(t *testing.T) []byte {
			return archive(t, envelope(t, 1, index("a/b", data)), entry{hdr: tar.Header{Name: "files/a/b", Typeflag: tar.TypeSymlink, Linkname: "../../x"}})
		}, conversation.ErrInvalid},
		{"escaping symlink", func(t *testing.T) []byte {
			return archive(t, envelope(t, 1, index("a/b", data)), entry{hdr: tar.Header{Name: "files/a/b", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}})
		}, conversation.ErrUnsafe},
		{"huge declared file", func(t *testing.T) []byte {
			big := index("a/b", data)
			big.Size = huge
			return archive(t, envelope(t, 1, big), entry{hdr: tar.Header{Name: "files/a/b", Size: huge}, headerOnly: true})
		}, conversation.ErrInvalid},
		{"huge entry, small index", func(t *testing.T) []byte {
			return archive(t, envelope(t, 1, index("a/b", data)), entry{hdr: tar.Header{Name: "files/a/b", Size: huge}, headerOnly: true})
		}, conversation.ErrInvalid},
		{"huge meta.json", func(t *testing.T) []byte {
			return archive(t, entry{hdr: tar.Header{Name: "meta.json", Size: huge}, headerOnly: true})
		}, conversation.ErrInvalid},
		{"negative size", func(t *testing.T) []byte {
			neg := index("a/b", data)
			neg.Size = -1
			return archive(t, envelope(t, 1, neg), entry{hdr: tar.Header{Name: "files/a/b"}, data: data})
		}, conversation.ErrInvalid},
		{"digest mismatch", func(t *testing.T) []byte {
			return archive(t, envelope(t, 1, index("a/b", data)), entry{hdr: tar.Header{Name: "files/a/b"}, data: []byte("PAYLOAD")})
		}, conversation.ErrInvalid},
		{"missing file", func(t *testing.T) []byte {
			return archive(t, envelope(t, 1, index("a/b", data), index("a/c", data)), entry{hdr: tar.Header{Name: "files/a/b"}, data: data})
		}, conversation.ErrInvalid},
		{"extra entry", func(t *testing.T) []byte {
			return archive(t, envelope(t, 1, index("a/b", data)), entry{hdr: tar.Header{Name: "files/a/b"}, data: data}, entry{hdr: tar.Header{Name: "files/.bashrc"}, data: data})
		}, conversation.ErrInvalid},
		{"future version", func(t *testing.T) []byte {
			return archive(t, envelope(t, 2, index("a/b", data)), entry{hdr: tar.Header{Name: "files/a/b"}, data: data})
		}, conversation.ErrInvalid},
		{"meta not first", func(t *testing.T) []byte {
			return archive(t, entry{hdr: tar.Header{Name: "files/a/b"}, data: data}, envelope(t, 1, index("a/b", data)))
		}, conversation.ErrInvalid},
		{"meta not JSON", func(t *testing.T) []byte {
			return archive(t, entry{hdr: tar.Header{Name: "meta.json"}, data: []byte("{not json")})
		}, conversation.ErrInvalid},
		{"empty tar", func(t *testing.T) []byte { return gzipped(t, make([]byte, 1024)) }, conversation.ErrInvalid},
		{"not gzip", func(t *testing.T) []byte { return []byte("plain text, not an export") }, conversation.ErrInvalid},
		{"empty input", func(t *testing.T) []byte { return nil }, conversation.ErrInvalid},
		{"trailing zeros bomb", func(t *testing.T) []byte {
			var raw bytes.Buffer
			tw := tar.NewWriter(&raw)
			e := envelope(t, 1, index("a/b", data))
			tw.WriteHeader(&tar.Header{Name: "meta.json", Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(e.data))})
			tw.Write(e.data)
			tw.WriteHeader(&tar.Header{Name: "files/a/b", Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(data))})
			tw.Write(data)
			tw.Close()
			raw.Write(make([]byte, 4<<20))
			return gzipped(t, raw.Bytes())
		}, conversation.ErrInvalid},
		{"truncated gzip", func(t *testing.T) []byte {
			b := archive(t, envelope(t, 1, index("a/b", data)), entry{hdr: tar.Header{Name: "files/a/b"}, data: data})
			return b[:len(b)-4]
		}, conversation.ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := conversation.NewFS(t.TempDir())
			_, err := conversation.Import(context.Background(), s, bytes.NewReader(tc.archive(t)), nil)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Import of the control archive: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Import: %v, want %v", err, tc.want)
			}
			if list, _ := s.List(context.Background()); len(list) != 0 {
				t.Errorf("a refused Import stored %v", list)
			}
		})
	}
}

func TestImportCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := storetest.NewMemory()
	if _, err := conversation.Import(ctx, s, strings.NewReader("x"), nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Import: %v, want context.Canceled", err)
	}
}
