package conversation

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestHoldBusyWhileWriting: a hold found locked before its holder has
// written who it is still names the holder, once written.
func TestHoldBusyWhileWriting(t *testing.T) {
	s := NewFS(t.TempDir())
	id := "c01test0000000000000000"
	if !ValidID(id) {
		t.Skipf("%q is no valid id", id)
	}
	dir := filepath.Join(s.dir, ".holds")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(dir, id+".hold")
	l, err := lockFile(name, false) // locked, nothing written yet
	if err != nil {
		t.Fatal(err)
	}
	defer l.unlock(true)
	go func() {
		time.Sleep(10 * time.Millisecond)
		writeAt0(l.f, []byte(`{"pid":42,"host":"h","since":"2026-12-01T00:00:00Z"}`))
	}()
	_, err = s.Hold(t.Context(), id, Owner{PID: 7, Host: "me"})
	var be *BusyError
	if !errors.As(err, &be) {
		t.Fatalf("Hold: %v, want BusyError", err)
	}
	if be.Holder.PID != 42 || be.Holder.Host != "h" || be.Holder.Since.IsZero() {
		t.Errorf("holder %+v, want the one written after the lock", be.Holder)
	}
}
