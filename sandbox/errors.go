package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"os/exec"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/sandbox/driver"
)

// ctxError codes the end of ctx: timeout for a deadline (the turn's or the
// caller's), cancelled otherwise.
func ctxError(ctx context.Context, op string, cause error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &outpost.Error{Code: outpost.Timeout, Op: op, Msg: "deadline reached", Err: cause}
	}
	return &outpost.Error{Code: outpost.Cancelled, Op: op, Msg: "cancelled", Err: cause}
}

// wrap codes a driver's error, once: an error that already has a code
// keeps it; one caused by the end of ctx is cancelled or timeout; a tar
// stream CopyIn refused is configuration; any other is sandbox, with
// details.vanished when the error wraps driver.ErrVanished or
// driver.ErrDisconnected, or the provider (driver.Vanisher) says the
// sandbox is gone. Answers rather than failures (a missing file or executable, an
// unsupported listing, a released lease) are not worth the question.
func (l *Lease) wrap(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	var oe *outpost.Error
	switch {
	case errors.As(err, &oe):
		return err
	case ctx.Err() != nil:
		return ctxError(ctx, op, err)
	case errors.Is(err, tarsafe.ErrUnsafe):
		return &outpost.Error{Code: outpost.Configuration, Op: op, Err: err}
	}
	e := &outpost.Error{Code: outpost.Sandbox, Op: op, Err: err}
	if errors.Is(err, driver.ErrVanished) || errors.Is(err, driver.ErrDisconnected) ||
		!isAnswer(err) && l.Vanished(context.WithoutCancel(ctx)) {
		MarkVanished(e, "the sandbox vanished")
	}
	return e
}

// isAnswer reports whether err answers the question asked rather than
// reporting a failure of the sandbox.
func isAnswer(err error) bool {
	for _, target := range []error{fs.ErrNotExist, exec.ErrNotFound, errors.ErrUnsupported, ErrClosed} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// MarkVanished records on e that the sandbox is gone, and that its
// connection dropped when the cause says so (driver.ErrDisconnected: a
// remote host's).
func MarkVanished(e *outpost.Error, msg string) *outpost.Error {
	e.Msg = msg
	if errors.Is(e.Err, driver.ErrDisconnected) {
		e.Detail("disconnected", true)
	}
	return e.Detail("vanished", true)
}

// IsVanished reports whether err records a vanished sandbox (MarkVanished):
// the turn engine tells a sandbox that went away from one that failed.
func IsVanished(err error) bool {
	var oe *outpost.Error
	if !errors.As(err, &oe) {
		return false
	}
	v, _ := oe.Details["vanished"].(bool)
	return v
}
