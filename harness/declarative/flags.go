package declarative

import (
	"time"

	"github.com/outposthq/outpost/harness"
)

// usageUnset is the harness usage mode of a file without "usage".
const usageUnset = harness.UsageUnset

func setRetryBound(h *harness.Harness, d time.Duration) { h.RetryBound = d }

// setFlags keeps a file's absent flags absent where the harness's default
// means the same, and says False where the file cannot do it.
func setFlags(h *harness.Harness, s *Spec, capture, resumable, forkable bool) {
	flag := func(given *bool, value bool) harness.Tristate {
		switch {
		case given != nil:
			return harness.TristateOf(*given)
		case value:
			return harness.Unset
		}
		return harness.False
	}
	h.Capture = flag(s.Capture, capture)
	h.Resumable = flag(s.Resumable, resumable)
	h.Forkable = flag(s.Forkable, forkable)
}
