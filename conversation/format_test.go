package conversation

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func seedConversation(t testing.TB) []byte {
	t.Helper()
	m := Meta{ID: "c01seed", Agent: "echo", Native: "n", Created: time.Unix(1, 0).UTC(), Updated: time.Unix(2, 0).UTC()}
	files := []File{
		{Path: "a/b.jsonl", Mode: 0o600, Data: []byte("{}\n")},
		{Path: "c", Mode: 0o644, Data: nil},
	}
	var buf bytes.Buffer
	if err := encode(&buf, m, files); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
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
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, withFiles := range []bool{false, true} {
			m, files, err := decode(bytes.NewReader(b), limits{size: 1 << 20, files: 100}, withFiles)
			if err != nil {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("decode error %v is not ErrInvalid", err)
				}
				continue
			}
			if err := Validate(m, files); err != nil {
				t.Fatalf("decode returned a conversation Validate refuses: %v", err)
			}
		}
	})
}
