package engine

import (
	"context"
	"sync"
	"time"

	"github.com/outposthq/outpost/harness"
)

// retryState is when the agent began to only retry (zero: it made
// progress since).
type retryState struct {
	retryMu    sync.Mutex
	retrySince time.Time
	retries    chan struct{} // a retry-only line was read
}

// watch stops the agent when the turn's context ends (cancellation or
// deadline), when it prints nothing but retry notices for the inactivity
// period, or when it makes no progress but retries for longer than the
// retry bound. It returns once the process has exited or been stopped.
func (s *stream) watch(ctx context.Context) {
	inactivity := s.e.t.Inactivity
	if inactivity == 0 {
		inactivity = s.e.h.Inactivity
	}
	bound := s.retryBound()
	var timer *time.Timer
	var fire <-chan time.Time
	if inactivity > 0 {
		timer = time.NewTimer(inactivity)
		defer timer.Stop()
		fire = timer.C
	}
	var retryTimer *time.Timer
	var retryFire <-chan time.Time
	stopRetry := func() {
		if retryTimer != nil {
			retryTimer.Stop()
			retryTimer, retryFire = nil, nil
		}
	}
	defer stopRetry()
	// armRetry starts (or re-arms) the retry bound from the first retry
	// since the last progress; none pending stops it.
	armRetry := func() {
		since := s.retryingSince()
		if bound <= 0 || since.IsZero() {
			stopRetry()
			return
		}
		left := bound - time.Since(since)
		if left < 0 {
			left = 0
		}
		stopRetry()
		retryTimer = time.NewTimer(left)
		retryFire = retryTimer.C
	}
	for {
		select {
		case <-s.exited:
			return
		case <-ctx.Done():
			s.cancelled()
			return
		case <-s.activity:
			if timer != nil {
				if !timer.Stop() {
					select {
					case <-timer.C:
					default:
					}
				}
				timer.Reset(inactivity)
			}
			armRetry()
		case <-s.retries:
			if retryFire == nil {
				armRetry()
			}
		case <-retryFire:
			if since := s.retryingSince(); !since.IsZero() && time.Since(since) >= bound {
				s.stop("retrying")
				return
			}
			armRetry()
		case <-fire:
			if s.questions.Load() > 0 {
				// The agent waits for the caller's answer to a permission.
				timer.Reset(inactivity)
				continue
			}
			s.stop("inactivity")
			return
		}
	}
}

// retryBound is the turn's, else the preset's, else the default; negative
// means none.
func (s *stream) retryBound() time.Duration {
	if b := s.e.t.RetryBound; b != 0 {
		return b
	}
	if b := s.e.h.RetryBound; b != 0 {
		return b
	}
	return harness.DefaultRetryBound
}

// retried records a line that only retried: the retry bound runs from the
// first such line since the last progress.
func (s *stream) retried() {
	s.retryMu.Lock()
	if s.retrySince.IsZero() {
		s.retrySince = time.Now()
	}
	s.retryMu.Unlock()
	select {
	case s.retries <- struct{}{}:
	default:
	}
}

func (s *stream) retryingSince() time.Time {
	s.retryMu.Lock()
	defer s.retryMu.Unlock()
	return s.retrySince
}

// cancelled stops the agent of a turn whose context ended. A live session
// is first asked to interrupt its turn, so the agent ends it cleanly (and
// records it); it is stopped anyway after the grace period.
func (s *stream) cancelled() {
	if s.live != nil && s.interrupt() {
		t := time.NewTimer(s.grace)
		defer t.Stop()
		select {
		case <-s.exited:
			return
		case <-t.C:
		}
	}
	s.stop("")
}

// touch records progress for the watchdog.
func (s *stream) touch() {
	s.retryMu.Lock()
	s.retrySince = time.Time{}
	s.retryMu.Unlock()
	s.alive()
}

// alive records output that is no progress: it feeds the inactivity
// watchdog only.
func (s *stream) alive() {
	select {
	case s.activity <- struct{}{}:
	default:
	}
}
