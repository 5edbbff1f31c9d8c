package conversation_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/conversation"
)

// listing is a hostSandbox that can also list, as the local provider does.
type listing struct {
	*hostSandbox
	lists int
}

func (l *listing) List(ctx context.Context, dir string) ([]string, error) {
	l.lists++
	root := l.host(dir)
	if _, err := os.Lstat(root); err != nil {
		return nil, err
	}
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	return out, err
}

// unsupported is a Lister that cannot list.
type unsupported struct{ *hostSandbox }

func (unsupported) List(context.Context, string) ([]string, error) {
	return nil, errors.ErrUnsupported
}

// TestCaptureListsFirst: with a Lister, Capture copies out only the files
// it keeps, however many other conversations share the home, and captures
// exactly what a full copy captures.
func TestCaptureListsFirst(t *testing.T) {
	ctx := context.Background()
	sb := newHostSandbox(t)
	sb.write(t, ".claude/projects/-work/a.jsonl", `{"parentSession":"b"}`+"\n", 0o600)
	sb.write(t, ".claude/projects/-work-old/b.jsonl", `{"text":"b"}`+"\n", 0o600)
	for i := range 50 {
		sb.write(t, ".claude/projects/-other/x"+strings.Repeat("y", i%5)+string(rune('a'+i%26))+".jsonl", `{"text":"other"}`, 0o600)
	}
	full, err := conversation.Capture(ctx, sb, claudeStorage(), "a")
	if err != nil {
		t.Fatal(err)
	}
	l := &listing{hostSandbox: newHostSandbox(t)}
	l.root = sb.root
	got, err := conversation.Capture(ctx, l, claudeStorage(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(full, got); d != "" {
		t.Errorf("listing capture differs from a full copy (-full +listing):\n%s", d)
	}
	if len(l.copyOuts) != 2 {
		t.Errorf("CopyOut calls %v, want one per kept file", l.copyOuts)
	}
	for _, p := range l.copyOuts {
		if !strings.HasSuffix(p, "a.jsonl") && !strings.HasSuffix(p, "b.jsonl") {
			t.Errorf("copied out %s, which is not kept", p)
		}
	}

	// A Lister that cannot list falls back to copying the root.
	u := unsupported{newHostSandbox(t)}
	u.root = sb.root
	got, err = conversation.Capture(ctx, u, claudeStorage(), "a")
	if err != nil || len(got) != 2 {
		t.Fatalf("fallback: %v, %d files", err, len(got))
	}

	// A missing root is no error; an absent conversation is ErrNotFound.
	if _, err := conversation.Capture(ctx, l, claudeStorage(), "nobody"); !errors.Is(err, conversation.ErrNotFound) {
		t.Errorf("absent conversation: %v", err)
	}
}
