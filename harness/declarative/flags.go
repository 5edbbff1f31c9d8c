package declarative

import (
	"time"

	"github.com/outposthq/outpost/harness"
)

// usageUnset is the harness usage mode of a file without "usage".
const usageUnset = harness.UsageEvents

func setRetryBound(h *harness.Harness, d time.Duration) {}

func setFlags(h *harness.Harness, s *Spec, capture, resumable, forkable bool) {
	h.Capture, h.Resumable, h.Forkable = capture, resumable, forkable
}
