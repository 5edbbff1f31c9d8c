package sandboxtest

import (
	"bytes"
	"context"

	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/sandbox"
)

// WriteFiles writes in-memory files under dir inside l's sandbox, through
// Lease.CopyIn: a test's way to put files in place.
func WriteFiles(ctx context.Context, l *sandbox.Lease, dir string, files []tarsafe.File) error {
	var buf bytes.Buffer
	if err := tarsafe.Write(&buf, files); err != nil {
		return err
	}
	return l.CopyIn(ctx, dir, &buf)
}
