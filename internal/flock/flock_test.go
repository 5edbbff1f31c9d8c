//go:build unix

package flock_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/outposthq/outpost/internal/flock"
)

func TestLock(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lock")
	open := func() *os.File {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	a, b := open(), open()
	if err := flock.Lock(a, p, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("first lock: %v", err)
	}
	if err := flock.Lock(b, p, syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, flock.ErrLocked) {
		t.Fatalf("second lock = %v, want ErrLocked", err)
	}
	if err := flock.Lock(a, p, syscall.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if err := flock.Lock(b, p, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	closed := open()
	closed.Close()
	var pe *fs.PathError
	if err := flock.Lock(closed, p, syscall.LOCK_EX); !errors.As(err, &pe) || pe.Path != p {
		t.Fatalf("lock of a closed file = %v, want a PathError naming %s", err, p)
	}
}
