package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/credentials"
	"github.com/outposthq/outpost/harness"
)

// This file keeps a turn's conversation safe from other turns and from a
// failing store: the hold a resume takes for its whole duration, and the
// store write that retries, then spools (docs/stores.md).

// DefaultStoreRetry bounds how long a turn retries a store write that
// fails (a store that is down, a full disk) before it spools.
const DefaultStoreRetry = 10 * time.Second

// holdConversation takes the conversation a resume continues, waiting up
// to wait while another turn holds it (telling emit, once, with a notice
// of kind "waiting"). A busy conversation is refused with code
// conversation, details busy, holder and since (exit status
// outpost.ExitBusy).
func holdConversation(ctx context.Context, s conversation.Store, id string, wait time.Duration, lease string, emit func(harness.Event)) (conversation.Hold, error) {
	owner := conversation.Self(lease)
	h, err := conversation.HoldWait(ctx, s, id, owner, wait, func(b *conversation.BusyError) {
		if emit == nil {
			return
		}
		ev := harness.Event{Type: harness.EventNotice, Kind: "waiting", Text: fmt.Sprintf("waiting up to %s: %s", wait, busyText(b)), Details: busyDetails(b)}
		ev.Details["wait_ms"] = wait.Milliseconds()
		emit(ev)
	})
	switch e, busy := BusyError("hold", err); {
	case err == nil:
		return h, nil
	case busy:
		if wait > 0 {
			e.Detail("waited_ms", wait.Milliseconds())
		}
		return nil, e
	case ctx.Err() != nil:
		return nil, ctxError(ctx, "hold", err)
	}
	return nil, outpost.Wrap(outpost.Conversation, "hold", err)
}

// BusyError codes err as the engine codes a busy conversation: when err
// is a *conversation.BusyError, code conversation at op with the details
// busy, conversation, holder and since (exit status outpost.ExitBusy),
// and true.
func BusyError(op string, err error) (*outpost.Error, bool) {
	var busy *conversation.BusyError
	if !errors.As(err, &busy) {
		return nil, false
	}
	e := outpost.Errorf(outpost.Conversation, op, "%s", busyText(busy))
	e.Err = err
	for k, v := range busyDetails(busy) {
		e.Detail(k, v)
	}
	return e, true
}

func busyText(b *conversation.BusyError) string {
	if b.Holder.Since.IsZero() {
		return fmt.Sprintf("conversation %s is busy: another turn holds it", b.ID)
	}
	return fmt.Sprintf("conversation %s is busy: another turn holds it (pid %d on %s, since %s)", b.ID, b.Holder.PID, b.Holder.Host, b.Holder.Since.UTC().Format(time.RFC3339))
}

func busyDetails(b *conversation.BusyError) map[string]any {
	d := map[string]any{"busy": true, "conversation": b.ID}
	if !b.Holder.Since.IsZero() {
		holder := map[string]any{"host": b.Holder.Host, "pid": b.Holder.PID}
		if b.Holder.Lease != "" {
			holder["lease"] = b.Holder.Lease
		}
		d["holder"] = holder
		d["since"] = b.Holder.Since.UTC().Format(time.RFC3339Nano)
	}
	return d
}

// maskFiles replaces every secret the turn's redactor knows, byte for
// byte, in the captured files (credentials.Redactor.Mask), so no secret
// reaches a store, an export or another machine, and the CLI can still
// read its files.
func maskFiles(red *credentials.Redactor, files []conversation.File) []conversation.File {
	out := files
	for i, f := range files {
		if m := red.Mask(f.Data); len(m) > 0 && &m[0] != &f.Data[0] {
			if &out[0] == &files[0] {
				out = append([]conversation.File(nil), files...)
			}
			out[i].Data = m
		}
	}
	return out
}

// storeTurn stores a turn's conversation: Put, retried with a backoff for
// up to retry while the store fails (not when it refuses: a stale
// revision or an invalid conversation is final). When the store still
// cannot take it and spool is set, the conversation goes to the spool and
// the error (code conversation) carries details.spooled, the file.
func storeTurn(ctx context.Context, s conversation.Store, spool *conversation.Spool, retry time.Duration, m conversation.Meta, files []conversation.File) error {
	if retry <= 0 {
		retry = DefaultStoreRetry
	}
	deadline := time.Now().Add(retry)
	delay := 100 * time.Millisecond
	attempts := 0
	var err error
	for {
		attempts++
		err = s.Put(ctx, m, files)
		if err == nil || errors.Is(err, conversation.ErrStale) || errors.Is(err, conversation.ErrInvalid) || errors.Is(err, conversation.ErrUnsafe) || ctx.Err() != nil {
			break
		}
		if time.Now().Add(delay).After(deadline) {
			break
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		delay = min(delay*2, 2*time.Second)
	}
	if err == nil {
		return nil
	}
	e := outpost.Errorf(outpost.Conversation, "store", "storing conversation %s failed after %d attempts: %w", m.ID, attempts, err)
	if errors.Is(err, conversation.ErrStale) {
		e = outpost.Errorf(outpost.Conversation, "store", "conversation %s moved on while this turn ran: %w", m.ID, err)
		e.Detail("stale", true)
	}
	if spool == nil || errors.Is(err, conversation.ErrInvalid) || errors.Is(err, conversation.ErrUnsafe) {
		return e
	}
	name, serr := spool.Save(m, files)
	if serr != nil {
		e.Detail("spool_error", serr.Error())
		return e
	}
	e.Msg += "; the turn is spooled in " + name + " (outpost conversations sync stores it)"
	e.Detail("spooled", name)
	return e
}

// holdResumed takes the hold of the conversation a resume continues (step
// 1, before it is read), unless this engine continues a turn that holds it
// already (resumeWith).
func (e *turnRun) holdResumed(ctx context.Context) error {
	if e.t.Resume == "" || e.hold != nil {
		return nil
	}
	lease := ""
	if e.o.Lease != nil {
		lease = e.o.Lease.Provider().Name() + " lease " + e.o.Lease.ID()
	} else if e.o.Provider != nil {
		lease = e.o.Provider.Name()
	}
	h, err := holdConversation(ctx, e.o.Store, e.t.Resume, e.t.Wait, lease, func(ev harness.Event) {
		if e.o.OnEvent != nil {
			ev.Agent = e.h.Name
			ev.Time = time.Now().UTC()
			e.o.OnEvent(ev)
		}
	})
	if err != nil {
		return err
	}
	e.hold = h
	return nil
}

// releaseHold frees the conversation once the turn is stored (or not).
func (e *turnRun) releaseHold() {
	if e.hold != nil {
		_ = e.hold.Release()
		e.hold = nil
	}
}

// keepSpooled copies details.spooled of a store error onto the turn's own
// error, so a failed turn still says where its conversation went.
func keepSpooled(dst *outpost.Error, storeErr error) {
	var se *outpost.Error
	if errors.As(storeErr, &se) {
		if f, ok := se.Details["spooled"]; ok {
			dst.Detail("spooled", f)
		}
	}
}
