package driver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// OpenDir is how an Open that copies or mounts the caller's working
// directory begins, before it asks anything of its engine or cluster: ctx
// must not be done, and Options.Workdir must pass HostDir. It returns the
// directory made absolute.
func OpenDir(ctx context.Context, opts Options) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	return HostDir(opts.Workdir)
}

// HostDir checks the caller's working directory (Options.Workdir) as a
// provider that copies or mounts it does: made absolute (empty is the
// current directory), it must exist and be a directory.
func HostDir(workdir string) (string, error) {
	wd, err := filepath.Abs(workdir)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(wd)
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("working directory %s is not a directory", wd)
	}
	return wd, nil
}
