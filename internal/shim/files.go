package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/outposthq/outpost/internal/tarsafe"
)

// The file modes serve providers whose only way into a sandbox is a
// command's standard streams (a Kubernetes exec): they need neither a
// shell nor tar in the image.
//
//   - install DST [DIR...] copies the shim's own executable to DST (mode
//     0555) and makes each DIR (mode 0700): an init container seeding a
//     volume with outpost's binary and the sandbox's layout.
//   - untar DIR extracts the tar stream on stdin into DIR (made, with its
//     parents, mode 0700) through an os.Root, so no entry and no link met
//     on the way writes outside it; setuid, setgid and sticky bits are
//     dropped.
//   - tar [--whole] PATH writes PATH (a file or a tree) as a tar stream on
//     stdout, entries named relative to PATH's parent as `docker cp` does;
//     a missing PATH exits ExitMissing. With --whole it first checks that
//     it can archive all of it as it is (every file readable, every
//     directory listable, nothing but files, directories and links), and
//     exits ExitPartial before writing anything when it cannot: for a
//     caller that must not take part of a tree for the whole (a
//     workspace's copy back, which deletes what the tree lacks).
var fileModes = map[string]func(args []string, stdin io.Reader, stdout, stderr io.Writer) int{
	"install": installMain,
	"untar":   untarMain,
	"tar":     tarMain,
}

// Exit statuses of the file modes.
const (
	// ExitMissing: tar's PATH does not exist.
	ExitMissing = 3
	// ExitUnsafe: untar refused an entry (tarsafe.ErrUnsafe).
	ExitUnsafe = 4
	// ExitPartial: tar --whole could not have archived all of PATH.
	ExitPartial = 5
)

// InstallArgs returns the command line that copies the binary at binary
// to dst and makes dirs.
func InstallArgs(binary, dst string, dirs ...string) []string {
	return append([]string{binary, Subcommand, "install", dst}, dirs...)
}

// UntarArgs returns the command line that extracts stdin into dir.
func UntarArgs(binary, dir string) []string {
	return []string{binary, Subcommand, "untar", dir}
}

// TarArgs returns the command line that writes p as tar on stdout,
// leaving out each path in skip (absolute, under p) unread.
func TarArgs(binary, p string, skip ...string) []string {
	return tarArgs(binary, "", p, skip)
}

// WholeTarArgs is TarArgs with --whole: all of p (but skip), or nothing.
func WholeTarArgs(binary, p string, skip ...string) []string {
	return tarArgs(binary, WholeFlag, p, skip)
}

func tarArgs(binary, flag, p string, skip []string) []string {
	args := []string{binary, Subcommand, "tar"}
	if flag != "" {
		args = append(args, flag)
	}
	for _, s := range skip {
		args = append(args, SkipFlag, s)
	}
	return append(args, p)
}

// WholeFlag is tar's flag for all of PATH or nothing.
const WholeFlag = "--whole"

// SkipFlag is tar's flag for a path (absolute) to leave out, unread.
const SkipFlag = "--skip"

func installMain(args []string, _ io.Reader, _, stderr io.Writer) int {
	if len(args) < 1 || !filepath.IsAbs(args[0]) {
		fmt.Fprintln(stderr, "usage: outpost sandbox-shim install DST [DIR...]")
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "outpost sandbox-shim install:", err)
		return 1
	}
	self, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	src, err := os.Open(self)
	if err != nil {
		return fail(err)
	}
	defer src.Close()
	dst := args[0]
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fail(err)
	}
	tmp := dst + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return fail(err)
	}
	_, err = io.Copy(f, src)
	if err = errors.Join(err, f.Chmod(0o555), f.Close()); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fail(err)
	}
	for _, d := range args[1:] {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fail(err)
		}
	}
	return 0
}

func untarMain(args []string, stdin io.Reader, _, stderr io.Writer) int {
	if len(args) != 1 || !filepath.IsAbs(args[0]) {
		fmt.Fprintln(stderr, "usage: outpost sandbox-shim untar DIR")
		return 2
	}
	if err := os.MkdirAll(args[0], 0o700); err != nil {
		fmt.Fprintln(stderr, "outpost sandbox-shim untar:", err)
		return 1
	}
	if err := tarsafe.Extract(stdin, args[0]); err != nil {
		fmt.Fprintln(stderr, "outpost sandbox-shim untar:", err)
		_, _ = io.Copy(io.Discard, stdin)
		if errors.Is(err, tarsafe.ErrUnsafe) {
			return ExitUnsafe
		}
		return 1
	}
	return 0
}

func tarMain(args []string, _ io.Reader, stdout, stderr io.Writer) int {
	whole, skip, args := tarFlags(args)
	if len(args) != 1 || !filepath.IsAbs(args[0]) {
		fmt.Fprintln(stderr, "usage: outpost sandbox-shim tar [--whole] [--skip ABSPATH]... PATH")
		return 2
	}
	if _, err := os.Lstat(args[0]); err != nil {
		fmt.Fprintln(stderr, "outpost sandbox-shim tar:", err)
		if errors.Is(err, fs.ErrNotExist) {
			return ExitMissing
		}
		return 1
	}
	if whole {
		if err := tarsafe.Whole(args[0], skip...); err != nil {
			fmt.Fprintln(stderr, "outpost sandbox-shim tar:", err)
			return ExitPartial
		}
	}
	if err := tarsafe.WriteDir(context.Background(), stdout, args[0], skip...); err != nil {
		fmt.Fprintln(stderr, "outpost sandbox-shim tar:", err)
		return 1
	}
	return 0
}

// tarFlags splits tar's flags (--whole, then any --skip ABSPATH) from
// its operand; a --skip path that is not absolute is left in the operands,
// so the usage error names it.
func tarFlags(args []string) (whole bool, skip, rest []string) {
	if len(args) > 0 && args[0] == WholeFlag {
		whole, args = true, args[1:]
	}
	for len(args) > 2 && args[0] == SkipFlag && filepath.IsAbs(args[1]) {
		skip, args = append(skip, args[1]), args[2:]
	}
	return whole, skip, args
}
