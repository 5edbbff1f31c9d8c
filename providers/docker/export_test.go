package docker

import (
	"context"
	"time"

	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/snapshot"
)

// SpareRuns is how many requests s handed to a spare kept ahead (not
// counting those made on the init's connection for the request itself).
func SpareRuns(s *Sandbox) int64 { return s.spareRuns.Load() }

// Active is how many processes of s's lease run.
func Active(s *Sandbox) int64 { return s.active.Load() }

// DropSpare ends s's spare and makes no more, as Close does first.
func DropSpare(s *Sandbox) { s.dropSpare() }

// Processes lists the container's processes (busybox ps) with a helper
// exec, which never takes the spare.
func Processes(s *Sandbox) (string, error) {
	res, err := s.run(context.Background(), []string{"/bin/ps", "-o", "pid,args"}, nil)
	return string(res.stdout), err
}

// PristineSnapshot is the snapshot SnapshotWorkspace takes from what was
// copied in, without an exec; ok is false when it would walk instead.
func PristineSnapshot(s *Sandbox, limit int) (snapshot.Snapshot, bool) {
	return s.pristineSnapshot(limit)
}

// SetCopyBackIdle sets how long a release's copy back may go without a
// byte, until the test ends.
func SetCopyBackIdle(t interface{ Cleanup(func()) }, d time.Duration) {
	old := driver.CopyBackIdle
	driver.CopyBackIdle = d
	t.Cleanup(func() { driver.CopyBackIdle = old })
}

// Execs is how many execs s made through the engine.
func Execs(s *Sandbox) int64 { return s.execs.Load() }

// ServeOff makes p's sandboxes start every process with an exec: their
// init does not serve.
func ServeOff(p *Provider) { p.serveOff = true }

// Serving reports whether s's processes go through its init's connection.
func Serving(s *Sandbox) bool { return s.session(context.Background()) != nil }

// Puts is how many archives s copied in through the engine.
func Puts(s *Sandbox) int64 { return s.puts.Load() }

// SetUp reports whether s's init laid it out (setup.go).
func SetUp(s *Sandbox) bool { return s.setup }

// SetServeWait sets how long a lease waits for its init's hello, until
// the test ends.
func SetServeWait(t interface{ Cleanup(func()) }, d time.Duration) {
	old := serveWait
	serveWait = d
	t.Cleanup(func() { serveWait = old })
}

// ServedCopies is how many of s's workspace copies back the shim wrote
// (not the engine's archive endpoint).
func ServedCopies(s *Sandbox) int64 { return s.servedCopies.Load() }

// UID is the numeric id of s's user, owner of what is copied in.
func UID(s *Sandbox) int { return s.uid }
