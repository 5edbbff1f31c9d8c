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
	"io"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/checkpoint/objectstest"
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
			return archive(t, envelope(t, 3, index("a/b", data)), entry{hdr: tar.Header{Name: "files/a/b"}, data: data})
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

// withCheckpoints stores in src (an ObjectStorer) a conversation of two
// turns with checkpoints: their workspace commits (the second parented on
// the first) and the memory tree of the conversation's files at the
// second. It also stores unrelated objects, which no export carries. It
// returns the conversation and every object its checkpoints reach.
func withCheckpoints(t *testing.T, src conversation.Store) (conversation.Meta, []checkpoint.Object) {
	t.Helper()
	ctx := context.Background()
	objs := src.(conversation.ObjectStorer).Objects()
	h := objectstest.NewHistory(t, "exported workspace")
	session := checkpoint.NewObject(plumbing.BlobObject, []byte("{\"turn\":2}\n"))
	sessions := objectstest.Tree(t, object.TreeEntry{Name: "a.jsonl", Mode: filemode.Regular, Hash: session.Hash})
	echo := objectstest.Tree(t, object.TreeEntry{Name: "sessions", Mode: filemode.Dir, Hash: sessions.Hash})
	memory := objectstest.Tree(t, object.TreeEntry{Name: ".echo", Mode: filemode.Dir, Hash: echo.Hash})
	reachable := slices.Concat(h.All(), []checkpoint.Object{session, sessions, echo, memory})
	unrelated := objectstest.NewHistory(t, "not this conversation's").All()
	if err := objs.Write(ctx, slices.Concat(reachable, unrelated)); err != nil {
		t.Fatal(err)
	}
	m := testMeta(conversation.NewID())
	m.Turns = 2
	m.Checkpoints = []conversation.Checkpoint{
		{Turn: 1, Commit: h.Commits[0].Hash.String(), Revision: 1, Files: 6, Bytes: 120, Changed: 6, Created: t0},
		{Turn: 2, Commit: h.Head().String(), Base: h.Commits[0].Hash.String(), Memory: memory.Hash.String(), Revision: 2, Files: 6, Bytes: 121, Changed: 1, Created: t0.Add(time.Minute)},
	}
	if err := src.Put(ctx, m, testFiles()); err != nil {
		t.Fatal(err)
	}
	m.Revision = 1
	m.Files = filePaths(testFiles())
	return m, reachable
}

// rawEntry is one entry of an archive as read back.
type rawEntry struct {
	name string
	data []byte
}

// unpack reads an exported archive: its envelope (as JSON values) and its
// entries after meta.json.
func unpack(t *testing.T, exported []byte) (map[string]any, []rawEntry) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(exported))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var env map[string]any
	var out []rawEntry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "meta.json" {
			if err := json.Unmarshal(data, &env); err != nil {
				t.Fatal(err)
			}
			continue
		}
		out = append(out, rawEntry{h.Name, data})
	}
	return env, out
}

// repack writes an archive of env and entries, as unpack returned them.
func repack(t *testing.T, env map[string]any, entries []rawEntry) []byte {
	t.Helper()
	js, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	es := []entry{{hdr: tar.Header{Name: "meta.json"}, data: js}}
	for _, e := range entries {
		es = append(es, entry{hdr: tar.Header{Name: e.name}, data: e.data})
	}
	return archive(t, es...)
}

// objectEntries returns the names of the object entries.
func objectEntries(entries []rawEntry) []string {
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.name, "objects/") {
			out = append(out, e.name)
		}
	}
	return out
}

// checkObjects checks that objs holds every object of want, as it is.
func checkObjects(t *testing.T, objs checkpoint.Objects, want []checkpoint.Object) {
	t.Helper()
	ctx := context.Background()
	for _, w := range want {
		got, err := objs.Read(ctx, w.Hash)
		if err != nil || got.Type != w.Type || !bytes.Equal(got.Data, w.Data) {
			t.Errorf("object %s %s: %v", w.Type, w.Hash, err)
		}
	}
}

func TestExportImportCheckpoints(t *testing.T) {
	ctx := context.Background()
	src := conversation.NewFS(t.TempDir())
	m, reachable := withCheckpoints(t, src)
	var buf bytes.Buffer
	if err := conversation.Export(ctx, src, m.ID, &buf); err != nil {
		t.Fatal(err)
	}
	exported := buf.Bytes()

	// The archive: version 2, declaring the objects that follow the
	// files, exactly those the checkpoints reach.
	env, entries := unpack(t, exported)
	if env["version"] != 2.0 {
		t.Errorf("an export with objects has version %v, want 2", env["version"])
	}
	var size int
	var want []string
	for _, o := range reachable {
		size += len(o.Data)
		want = append(want, "objects/"+o.Hash.String()+"."+o.Type.String())
	}
	if d := cmp.Diff(map[string]any{"count": float64(len(reachable)), "bytes": float64(size)}, env["objects"]); d != "" {
		t.Errorf("declared objects (-want +got):\n%s", d)
	}
	got := objectEntries(entries)
	slices.Sort(got)
	slices.Sort(want)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("object entries (-want +got):\n%s", d)
	}
	if n := len(entries) - len(got); n != len(testFiles()) || !strings.HasPrefix(entries[n-1].name, "files/") {
		t.Errorf("the archive holds %d entries before its objects, want the %d files", n, len(testFiles()))
	}

	for name, dst := range map[string]conversation.Store{
		"filesystem": conversation.NewFS(t.TempDir()),
		"memory":     storetest.NewMemory(),
	} {
		t.Run(name, func(t *testing.T) {
			got, err := conversation.Import(ctx, dst, bytes.NewReader(exported), nil)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(m, got); d != "" {
				t.Errorf("imported meta (-want +got):\n%s", d)
			}
			gm, gf, err := dst.Get(ctx, m.ID)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(m.Checkpoints, gm.Checkpoints); d != "" {
				t.Errorf("stored checkpoints (-want +got):\n%s", d)
			}
			if d := cmp.Diff(testFiles(), gf, cmp.Comparer(bytes.Equal)); d != "" {
				t.Errorf("imported files (-want +got):\n%s", d)
			}
			objs := dst.(conversation.ObjectStorer).Objects()
			checkObjects(t, objs, reachable)
			head := plumbing.NewHash(m.Checkpoints[1].Commit)
			if r, err := checkpoint.Reachable(ctx, objs, []plumbing.Hash{head}); err != nil || len(r) != len(reachable)-4 {
				t.Errorf("Reachable(head) in the imported store: %d objects, %v", len(r), err)
			}
			// And it exports again, the same objects.
			var again bytes.Buffer
			if err := conversation.Export(ctx, dst, m.ID, &again); err != nil {
				t.Fatal(err)
			}
			_, es := unpack(t, again.Bytes())
			names := objectEntries(es)
			slices.Sort(names)
			if d := cmp.Diff(want, names); d != "" {
				t.Errorf("objects of the second export (-want +got):\n%s", d)
			}
			// Replacing with the same archive writes nothing new and
			// succeeds.
			if _, err := conversation.Import(ctx, dst, bytes.NewReader(exported), &conversation.ImportOptions{Replace: true}); err != nil {
				t.Errorf("Import with Replace: %v", err)
			}
		})
	}

	// A conversation without checkpoints exports as before: version 1.
	plain := testMeta(conversation.NewID())
	if err := src.Put(ctx, plain, testFiles()); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := conversation.Export(ctx, src, plain.ID, &buf); err != nil {
		t.Fatal(err)
	}
	if env, entries := unpack(t, buf.Bytes()); env["version"] != 1.0 || env["objects"] != nil || len(objectEntries(entries)) != 0 {
		t.Errorf("an export without checkpoints: version %v, objects %v, %d object entries; want version 1 and none", env["version"], env["objects"], len(objectEntries(entries)))
	}
}

// storeOnly hides every method of a store but the Store interface's: a
// store that keeps no checkpoints.
type storeOnly struct{ conversation.Store }

func TestImportCheckpointsRefused(t *testing.T) {
	ctx := context.Background()
	src := storetest.NewMemory()
	m, reachable := withCheckpoints(t, src)
	var buf bytes.Buffer
	if err := conversation.Export(ctx, src, m.ID, &buf); err != nil {
		t.Fatal(err)
	}
	exported := buf.Bytes()
	env, entries := unpack(t, exported)

	// Refusals leave nothing: no conversation, no object.
	nothingStored := func(t *testing.T, dst conversation.Store) {
		t.Helper()
		if list, _ := dst.List(ctx); len(list) != 0 {
			t.Errorf("a refused Import stored %v", list)
		}
		if st, ok := dst.(conversation.ObjectStorer); ok {
			hs := objectstest.Hashes(reachable)
			if miss, err := st.Objects().Missing(ctx, hs); err != nil || len(miss) != len(hs) {
				t.Errorf("a refused Import stored %d objects (%v)", len(hs)-len(miss), err)
			}
		}
	}
	refused := func(t *testing.T, archive []byte, opts *conversation.ImportOptions) {
		t.Helper()
		dst := conversation.NewFS(t.TempDir())
		if _, err := conversation.Import(ctx, dst, bytes.NewReader(archive), opts); !errors.Is(err, conversation.ErrInvalid) {
			t.Fatalf("Import: %v, want ErrInvalid", err)
		}
		nothingStored(t, dst)
	}

	t.Run("store without objects", func(t *testing.T) {
		dst := storeOnly{storetest.NewMemory()}
		_, err := conversation.Import(ctx, dst, bytes.NewReader(exported), nil)
		if !errors.Is(err, conversation.ErrInvalid) || !strings.Contains(err.Error(), "cannot keep checkpoints") {
			t.Fatalf("Import into a store that keeps no objects: %v, want ErrInvalid saying it cannot keep checkpoints", err)
		}
		nothingStored(t, dst)
	})
	t.Run("over the object count", func(t *testing.T) {
		refused(t, exported, &conversation.ImportOptions{MaxObjects: len(reachable) - 1})
	})
	t.Run("over the object bytes", func(t *testing.T) {
		refused(t, exported, &conversation.ImportOptions{MaxObjectBytes: 100})
	})

	// Each case changes a copy of the archive.
	objIdx := len(entries) - len(reachable) // the first object entry
	clone := func() (map[string]any, []rawEntry) {
		var e2 map[string]any
		js, err := json.Marshal(env)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(js, &e2); err != nil {
			t.Fatal(err)
		}
		out := make([]rawEntry, len(entries))
		for i, e := range entries {
			out[i] = rawEntry{e.name, bytes.Clone(e.data)}
		}
		return e2, out
	}
	declare := func(env map[string]any, entries []rawEntry) {
		var n, size int
		for _, e := range entries {
			if strings.HasPrefix(e.name, "objects/") {
				n++
				size += len(e.data)
			}
		}
		env["objects"] = map[string]any{"count": n, "bytes": size}
	}
	for _, tc := range []struct {
		name   string
		change func(env map[string]any, entries []rawEntry) []rawEntry
	}{
		{"tampered object", func(env map[string]any, es []rawEntry) []rawEntry {
			for i := objIdx; i < len(es); i++ {
				if strings.HasSuffix(es[i].name, ".blob") && len(es[i].data) > 0 {
					es[i].data[0] ^= 0x20 // same size, other content
					break
				}
			}
			return es
		}},
		{"tampered commit", func(env map[string]any, es []rawEntry) []rawEntry {
			for i := objIdx; i < len(es); i++ {
				if strings.HasSuffix(es[i].name, ".commit") {
					es[i].data = bytes.Replace(es[i].data, []byte("turn"), []byte("TURN"), 1)
					break
				}
			}
			return es
		}},
		{"object under another id", func(env map[string]any, es []rawEntry) []rawEntry {
			es[objIdx].data, es[objIdx+1].data = es[objIdx+1].data, es[objIdx].data
			declare(env, es)
			return es
		}},
		{"object of another type", func(env map[string]any, es []rawEntry) []rawEntry {
			for i := objIdx; i < len(es); i++ {
				if n, ok := strings.CutSuffix(es[i].name, ".blob"); ok {
					es[i].name = n + ".tag"
					break
				}
			}
			return es
		}},
		{"object missing, count kept", func(env map[string]any, es []rawEntry) []rawEntry {
			return es[:len(es)-1]
		}},
		{"object missing, count changed", func(env map[string]any, es []rawEntry) []rawEntry {
			es = slices.Delete(es, objIdx+2, objIdx+3)
			declare(env, es)
			return es
		}},
		{"object left over", func(env map[string]any, es []rawEntry) []rawEntry {
			extra := checkpoint.NewObject(plumbing.BlobObject, []byte("smuggled in\n"))
			es = append(es, rawEntry{"objects/" + extra.Hash.String() + ".blob", extra.Data})
			declare(env, es)
			return es
		}},
		{"object twice", func(env map[string]any, es []rawEntry) []rawEntry {
			es = append(es, es[objIdx])
			declare(env, es)
			return es
		}},
		{"object of no known type", func(env map[string]any, es []rawEntry) []rawEntry {
			es[objIdx].name = strings.TrimSuffix(es[objIdx].name, path.Ext(es[objIdx].name)) + ".ofs-delta"
			return es
		}},
		{"object id in upper case", func(env map[string]any, es []rawEntry) []rawEntry {
			es[objIdx].name = "objects/" + strings.ToUpper(es[objIdx].name[len("objects/"):len("objects/")+40]) + path.Ext(es[objIdx].name)
			return es
		}},
		{"objects in version 1", func(env map[string]any, es []rawEntry) []rawEntry {
			env["version"] = 1
			return es
		}},
		{"bytes under-declared", func(env map[string]any, es []rawEntry) []rawEntry {
			env["objects"].(map[string]any)["bytes"] = 10
			return es
		}},
		{"bytes over-declared", func(env map[string]any, es []rawEntry) []rawEntry {
			declare(env, es)
			env["objects"].(map[string]any)["bytes"] = env["objects"].(map[string]any)["bytes"].(int) + 1
			return es
		}},
		{"negative count", func(env map[string]any, es []rawEntry) []rawEntry {
			env["objects"].(map[string]any)["count"] = -1
			return es
		}},
		{"objects before the files", func(env map[string]any, es []rawEntry) []rawEntry {
			return append(slices.Clone(es[objIdx:]), es[:objIdx]...)
		}},
		{"malformed checkpoint id", func(env map[string]any, es []rawEntry) []rawEntry {
			meta := env["meta"].(map[string]any)
			cps := meta["checkpoints"].([]any)
			cps[1].(map[string]any)["commit"] = "HEAD"
			return es
		}},
		{"checkpoint naming an object not carried", func(env map[string]any, es []rawEntry) []rawEntry {
			meta := env["meta"].(map[string]any)
			cps := meta["checkpoints"].([]any)
			cps[1].(map[string]any)["memory"] = plumbing.ComputeHash(plumbing.TreeObject, nil).String()
			return es
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, es := clone()
			refused(t, repack(t, env, tc.change(env, es)), nil)
		})
	}
	t.Run("control", func(t *testing.T) {
		env, es := clone()
		dst := conversation.NewFS(t.TempDir())
		if _, err := conversation.Import(ctx, dst, bytes.NewReader(repack(t, env, es)), nil); err != nil {
			t.Fatalf("Import of the archive unpacked and packed again: %v", err)
		}
	})
}

// TestImportCheckpointsWithoutObjects imports a conversation whose
// checkpoints came without their objects (an archive of a store that
// keeps none): it is refused unless the receiving store already has
// every object they reach.
func TestImportCheckpointsWithoutObjects(t *testing.T) {
	ctx := context.Background()
	src := storetest.NewMemory()
	m, reachable := withCheckpoints(t, src)
	var buf bytes.Buffer
	if err := conversation.Export(ctx, storeOnly{src}, m.ID, &buf); err != nil {
		t.Fatal(err)
	}
	env, entries := unpack(t, buf.Bytes())
	if env["version"] != 1.0 || len(objectEntries(entries)) != 0 {
		t.Fatalf("the export of a store without objects: version %v, %d objects", env["version"], len(objectEntries(entries)))
	}
	dst := storetest.NewMemory()
	if _, err := conversation.Import(ctx, dst, bytes.NewReader(buf.Bytes()), nil); !errors.Is(err, conversation.ErrInvalid) || !errors.Is(err, checkpoint.ErrNotFound) {
		t.Errorf("Import into a store without the objects: %v, want ErrInvalid and checkpoint.ErrNotFound", err)
	}
	if err := dst.Objects().Write(ctx, reachable); err != nil {
		t.Fatal(err)
	}
	if _, err := conversation.Import(ctx, dst, bytes.NewReader(buf.Bytes()), nil); err != nil {
		t.Errorf("Import into a store that has the objects: %v", err)
	}
}

// TestExportMissingObject: a conversation whose checkpoint names an object
// its store lost does not export (its archive could not be imported).
func TestExportMissingObject(t *testing.T) {
	ctx := context.Background()
	s := storetest.NewMemory()
	m := testMeta(conversation.NewID())
	lost := plumbing.ComputeHash(plumbing.CommitObject, []byte("never stored"))
	m.Checkpoints = []conversation.Checkpoint{{Turn: 1, Commit: lost.String(), Created: t0}}
	if err := s.Put(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	err := conversation.Export(ctx, s, m.ID, io.Discard)
	if !errors.Is(err, conversation.ErrInvalid) || !errors.Is(err, checkpoint.ErrNotFound) || !strings.Contains(err.Error(), lost.String()) {
		t.Errorf("Export: %v, want ErrInvalid and checkpoint.ErrNotFound naming %s", err, lost)
	}
}
