package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
)

// TestRmHonoursHolds: `conversations rm` does not remove a conversation a
// turn holds (here a hold of this process, as another process's would
// be): busy, exit status 75, and the conversation stays; once free, rm
// removes it.
func TestRmHonoursHolds(t *testing.T) {
	home, wd, dir := t.TempDir(), t.TempDir(), t.TempDir()
	_, out, _ := run(t, home, wd, "run", "--json", "--store", dir, "seed")
	id := resultOf(t, out)["conversation"].(string)
	store := conversation.NewFS(dir)
	h, err := store.Hold(context.Background(), id, conversation.Owner{Host: "elsewhere", PID: 4242})
	if err != nil {
		t.Fatal(err)
	}
	exit, _, errOut := run(t, home, wd, "conversations", "--store", dir, "rm", id)
	if exit != outpost.ExitBusy || !strings.Contains(errOut, "busy") {
		t.Fatalf("rm of a held conversation: exit %d (want %d), stderr %q", exit, outpost.ExitBusy, errOut)
	}
	if _, _, err := store.Get(context.Background(), id); err != nil {
		t.Fatalf("the held conversation was removed: %v", err)
	}
	h.Release()
	if exit, _, errOut := run(t, home, wd, "conversations", "--store", dir, "rm", id); exit != 0 {
		t.Fatalf("rm once free: exit %d, stderr %q", exit, errOut)
	}
}
