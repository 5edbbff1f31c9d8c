package conversation

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"
)

// AnyRevision as Meta.Revision makes Put replace whatever revision is
// stored. Turns never use it: they give the revision they restored.
const AnyRevision int64 = -1

// StaleError is Put's refusal of a revision that is not the stored one.
type StaleError struct {
	ID string
	// Base is the revision given to Put; Current the one stored (0: none).
	Base, Current int64
}

func (e *StaleError) Error() string {
	if e.Base == 0 {
		return fmt.Sprintf("conversation: %s: stale revision: a new conversation, but the store already holds revision %d", e.ID, e.Current)
	}
	if e.Current == 0 {
		return fmt.Sprintf("conversation: %s: stale revision: continues revision %d, but the conversation is no longer stored", e.ID, e.Base)
	}
	return fmt.Sprintf("conversation: %s: stale revision: continues revision %d, but the store holds revision %d", e.ID, e.Base, e.Current)
}

// Unwrap makes errors.Is(err, ErrStale) true.
func (e *StaleError) Unwrap() error { return ErrStale }

// checkRevision returns the StaleError of a Put of base over current
// (0: nothing stored), or nil and the revision to store.
func checkRevision(id string, base, current int64) (int64, error) {
	switch {
	case base == AnyRevision:
		return current + 1, nil
	case base != current:
		return 0, &StaleError{ID: id, Base: base, Current: current}
	}
	return current + 1, nil
}

// Owner says who holds a conversation. Field names are stable JSON.
type Owner struct {
	Host string `json:"host"`
	PID  int    `json:"pid"`
	// Lease names the holder's turn or sandbox lease, for people reading a
	// busy error; optional.
	Lease string `json:"lease,omitempty"`
}

// Holder is an Owner and the time it took its hold.
type Holder struct {
	Owner
	Since time.Time `json:"since"`
}

// Hold is a conversation held for one turn (Store.Hold).
type Hold interface {
	// Release frees the conversation. Releasing twice is harmless. An
	// error means the store could not say so; the hold then frees itself
	// as if its holder had died.
	Release() error
}

// BusyError is Hold's refusal of a conversation another turn holds.
type BusyError struct {
	ID string
	// Holder is the current holder; zero when the store could not tell
	// (the hold was being taken or freed at that instant).
	Holder Holder
}

func (e *BusyError) Error() string {
	if e.Holder.Since.IsZero() {
		return fmt.Sprintf("conversation: %s is busy: another turn holds it", e.ID)
	}
	who := fmt.Sprintf("pid %d on %s", e.Holder.PID, e.Holder.Host)
	if e.Holder.Lease != "" {
		who += " (" + e.Holder.Lease + ")"
	}
	return fmt.Sprintf("conversation: %s is busy: held by %s since %s", e.ID, who, e.Holder.Since.UTC().Format(time.RFC3339))
}

// Unwrap makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Unwrap() error { return ErrBusy }

// Self returns the Owner of this process: its host name and pid, with
// lease.
func Self(lease string) Owner {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown"
	}
	return Owner{Host: host, PID: os.Getpid(), Lease: lease}
}

// HoldWait takes conversation id like s.Hold, waiting up to wait while it
// is busy (wait <= 0: not at all). onBusy, when not nil, is called once,
// with the first BusyError, before waiting (the engine turns it into a
// notice of kind "waiting"). Waiting polls with a backoff from 10ms to
// 250ms: waiters are not served in order, but each one ends by wait. When
// wait runs out it returns the last BusyError; when ctx is done, an error
// wrapping ctx.Err().
func HoldWait(ctx context.Context, s Store, id string, o Owner, wait time.Duration, onBusy func(*BusyError)) (Hold, error) {
	h, err := s.Hold(ctx, id, o)
	var busy *BusyError
	if err == nil || wait <= 0 || !errors.As(err, &busy) {
		return h, err
	}
	if onBusy != nil {
		onBusy(busy)
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	delay := 10 * time.Millisecond
	for {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("conversation: waiting for %s: %w", id, ctx.Err())
		case <-deadline.C:
			t.Stop()
			return nil, err
		case <-t.C:
		}
		h, err = s.Hold(ctx, id, o)
		if err == nil || !errors.As(err, &busy) {
			return h, err
		}
		delay = min(delay*2, 250*time.Millisecond)
	}
}

// AwaitHolder returns the holder of a hold found taken, as read tells it
// (ok once it names one). A store's holder records itself just after
// taking the hold, so a contender can look in between: read is called
// again for a short while (about 100 ms at most) until it answers. After
// that, or when ctx ends, it returns the zero Holder: the hold is being
// taken or freed right now.
func AwaitHolder(ctx context.Context, read func() (Holder, bool)) Holder {
	delay := time.Millisecond
	for waited := time.Duration(0); ; waited += delay {
		if h, ok := read(); ok {
			return h
		}
		if waited >= 100*time.Millisecond || ctx.Err() != nil {
			return Holder{}
		}
		time.Sleep(delay)
		delay = min(2*delay, 20*time.Millisecond)
	}
}

// DeleteUnheld deletes conversation id unless a turn holds it, in this
// process or any other: it takes the hold itself, without waiting (a held
// conversation gets Hold's *BusyError, errors.Is ErrBusy), deletes while
// holding it, then frees it.
func DeleteUnheld(ctx context.Context, s Store, id string, o Owner) error {
	h, err := s.Hold(ctx, id, o)
	if err != nil {
		return err
	}
	defer h.Release()
	return s.Delete(ctx, id)
}
