package conversation

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"

	"github.com/outposthq/outpost/checkpoint"
)

func seedConversation(t testing.TB) []byte {
	t.Helper()
	m := Meta{ID: "c01seed", Agent: "echo", Native: "n", Created: time.Unix(1, 0).UTC(), Updated: time.Unix(2, 0).UTC()}
	files := []File{
		{Path: "a/b.jsonl", Mode: 0o600, Data: []byte("{}\n")},
		{Path: "c", Mode: 0o644, Data: nil},
	}
	var buf bytes.Buffer
	if err := encode(&buf, m, files, nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// seedWithObjects is seedConversation with two objects after its files,
// as Export writes a conversation with checkpoints.
func seedWithObjects(t testing.TB) []byte {
	t.Helper()
	m := Meta{ID: "c01seedobj", Agent: "echo", Created: time.Unix(1, 0).UTC(), Updated: time.Unix(2, 0).UTC()}
	files := []File{{Path: "a", Mode: 0o600, Data: []byte("a\n")}}
	blob := checkpoint.NewObject(plumbing.BlobObject, []byte("hello\n"))
	tree := checkpoint.NewObject(plumbing.TreeObject, append([]byte("100644 hello\x00"), blob.Hash[:]...))
	var buf bytes.Buffer
	if err := encode(&buf, m, files, []checkpoint.Object{tree, blob}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// objectLimits are the limits of an import, small.
var objectLimits = limits{size: 1 << 20, files: 100, objects: 100, objectBytes: 1 << 20}

func TestDecodeObjects(t *testing.T) {
	b := seedWithObjects(t)
	m, files, objs, err := decodeArchive(bytes.NewReader(b), objectLimits, true)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "c01seedobj" || len(files) != 1 || len(objs) != 2 || objs[0].Type != plumbing.TreeObject || string(objs[1].Data) != "hello\n" {
		t.Errorf("decodeArchive = %+v, %+v, %+v", m, files, objs)
	}
	// A stored conversation holds no objects: decode refuses them.
	if _, _, err := decode(bytes.NewReader(b), defaultLimits, true); !errors.Is(err, ErrInvalid) {
		t.Errorf("decode of an archive with objects: %v, want ErrInvalid", err)
	}
	// Without objects, encode writes version 1, which an older outpost
	// reads.
	if _, _, objs, err := decodeArchive(bytes.NewReader(seedConversation(t)), objectLimits, true); err != nil || objs != nil {
		t.Errorf("decodeArchive of version 1 = %v, %v", objs, err)
	}
}

func TestDecodeSeed(t *testing.T) {
	m, files, err := decode(bytes.NewReader(seedConversation(t)), defaultLimits, true)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "c01seed" || len(files) != 2 || len(m.Files) != 2 || files[1].Mode != 0o644 {
		t.Errorf("decode = %+v, %+v", m, files)
	}
}

// FuzzDecode checks that decoding never panics and that every failure is
// ErrInvalid.
func FuzzDecode(f *testing.F) {
	seed := seedConversation(f)
	f.Add(seed)
	f.Add(seed[:len(seed)/2])
	f.Add([]byte{})
	f.Add(seedWithObjects(f))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, withFiles := range []bool{false, true} {
			m, files, err := decode(bytes.NewReader(b), limits{size: 1 << 20, files: 100}, withFiles)
			if err != nil {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("decode error %v is not ErrInvalid", err)
				}
			} else if err := Validate(m, files); err != nil {
				t.Fatalf("decode returned a conversation Validate refuses: %v", err)
			}
			m, files, objs, err := decodeArchive(bytes.NewReader(b), objectLimits, withFiles)
			if err != nil {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("decodeArchive error %v is not ErrInvalid", err)
				}
				continue
			}
			if err := Validate(m, files); err != nil {
				t.Fatalf("decodeArchive returned a conversation Validate refuses: %v", err)
			}
			for _, o := range objs {
				if err := o.Verify(); err != nil {
					t.Fatalf("decodeArchive returned an object that does not verify: %v", err)
				}
			}
		}
	})
}
