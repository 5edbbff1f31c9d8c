package checkpoint

import "errors"

// Sentinel errors. Every function of this package wraps them with %w; test
// with errors.Is. The engine and the CLI code them as outpost errors
// (docs/workspaces.md lists which).
var (
	// ErrNotFound: no such object, checkpoint or turn.
	ErrNotFound = errors.New("checkpoint: not found")
	// ErrCorrupt: a stored object does not hash to its id, or cannot be
	// decoded.
	ErrCorrupt = errors.New("checkpoint: corrupt object")
	// ErrTooLarge: a file, or the whole checkpoint, is over its limit.
	ErrTooLarge = errors.New("checkpoint: too large")
	// ErrUnsafe: a path that would leave its directory (absolute, "..",
	// or through a symbolic link), or a directory to materialise into
	// that is not empty.
	ErrUnsafe = errors.New("checkpoint: unsafe path")
	// ErrConflict: apply found changes on both sides that do not merge;
	// the error is a *ConflictError listing them, and nothing was written.
	ErrConflict = errors.New("checkpoint: conflict")
	// ErrStore: the object store failed to take objects (a database that
	// is down), or the host had no room to record the checkpoint (no
	// writable temporary directory): the workspace itself is fine.
	ErrStore = errors.New("checkpoint: the object store failed")
)
