package driver

import (
	"fmt"
	"os"
	"path/filepath"
)

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
