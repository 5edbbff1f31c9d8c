package engine

import (
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/credentials"
)

// markDotDir leaves credentials.ChangedMark in the working directory when
// its .outpost/ changed while the turn ran (or can no longer be read), so
// the next turn refuses to read a .env the agent may have planted until
// the user removes the mark (issue 43). A docker bind workspace hides
// .outpost/ (made empty first when there is none) behind a read-only
// mount; a local (or any) sandbox that can write the directory is caught
// here. A mark that cannot be written is
// the turn's error (a configuration error), so it is not missed.
func (e *turnRun) markDotDir(start time.Time) error {
	if e.dotDir == nil {
		return nil
	}
	changed := []string{credentials.PrivateDirName}
	if now, err := credentials.ReadDotDirState(e.dotWd); err == nil {
		if changed = e.dotDir.Changed(now); len(changed) == 0 {
			return nil
		}
	}
	turn := e.convID
	if turn == "" {
		turn = start.UTC().Format(time.RFC3339)
	}
	if err := credentials.MarkChanged(e.dotWd, turn, changed); err != nil {
		return outpost.Errorf(outpost.Configuration, "env", "%s changed while the turn ran and cannot be marked so (review it before the next turn): %w",
			credentials.PrivateDirName, err)
	}
	return nil
}
