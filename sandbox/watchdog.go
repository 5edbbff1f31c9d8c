package sandbox

import (
	"context"
	"time"
)

// watch stops the agent when the turn's context ends (cancellation or
// deadline) or when it prints nothing for the inactivity period. It
// returns once the process has exited or been stopped.
func (s *stream) watch(ctx context.Context) {
	inactivity := s.e.t.Inactivity
	if inactivity == 0 {
		inactivity = s.e.h.Inactivity
	}
	var timer *time.Timer
	var fire <-chan time.Time
	if inactivity > 0 {
		timer = time.NewTimer(inactivity)
		defer timer.Stop()
		fire = timer.C
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
		case <-fire:
			s.stop("inactivity")
			return
		}
	}
}

// cancelled stops the agent of a turn whose context ended. A live session
// is first asked to interrupt its turn, so the agent ends it cleanly (and
// records it); it is stopped anyway after the grace period.
func (s *stream) cancelled() {
	if s.live != nil && s.interrupt() {
		t := time.NewTimer(s.job.grace)
		defer t.Stop()
		select {
		case <-s.exited:
			return
		case <-t.C:
		}
	}
	s.stop("")
}

// touch records activity for the watchdog.
func (s *stream) touch() {
	select {
	case s.activity <- struct{}{}:
	default:
	}
}
