package sandbox

import "time"

// SetDrainLimit shortens drainLimit for a test; the returned function
// restores it.
func SetDrainLimit(d time.Duration) (restore func()) {
	old := drainLimit
	drainLimit = d
	return func() { drainLimit = old }
}
