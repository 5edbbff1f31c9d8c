package shim

import (
	"bytes"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/outposthq/outpost/internal/tarsafe"
)

// The modes below serve providers that reach their sandboxes over a
// transport that carries no environment and no signals (ssh): the exec
// shim's --env-stdin flag, sum and reap.

// maxEnvLine bounds the environment line --env-stdin reads.
const maxEnvLine = 4 << 20

// EnvLine encodes env as the first line the exec shim reads from its
// standard input with --env-stdin (a JSON object and a newline). Values
// never appear on a command line, where other users of the host could
// read them.
func EnvLine(env map[string]string) []byte {
	b, _ := json.Marshal(env) // strings: cannot fail
	return append(b, '\n')
}

// readEnvLine reads EnvLine's line from r one byte at a time, so that
// nothing after it is consumed: the rest of the stream is the program's
// standard input.
func readEnvLine(r io.Reader) ([]string, error) {
	var buf bytes.Buffer
	var b [1]byte
	for {
		n, err := r.Read(b[:])
		if n == 1 {
			if b[0] == '\n' {
				break
			}
			if buf.Len() >= maxEnvLine {
				return nil, errors.New("the environment line is too long")
			}
			buf.WriteByte(b[0])
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the environment line: %w", err)
		}
	}
	var m map[string]string
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		return nil, fmt.Errorf("the environment line: %w", err)
	}
	env := make([]string, 0, len(m))
	for k, v := range m {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("invalid variable %q", k)
		}
		env = append(env, k+"="+v)
	}
	return env, nil
}

// RemoteExecArgs is ExecArgs for a transport without environment: the
// shim reads the program's environment from the first line of its
// standard input (EnvLine) before anything else; the rest of the stream
// is the program's standard input when stdin is set, and the program gets
// /dev/null otherwise.
func RemoteExecArgs(binary, token, runDir, dir string, stdin bool, path string, args []string) []string {
	cmd := ExecArgs(binary, token, runDir, dir, stdin, path, args)
	return append(cmd[:3:3], append([]string{"--env-stdin"}, cmd[3:]...)...)
}

// SumArgs returns the command line that prints TreeSum of path.
func SumArgs(binary, path string) []string { return []string{binary, Subcommand, "sum", path} }

// ReapArgs returns the command line that kills the process groups of the
// exec shims whose run directory is runDir (their lease's owner died).
func ReapArgs(binary, runDir string) []string {
	return []string{binary, Subcommand, "reap", runDir}
}

// TreeSum is the hex SHA-512 of a file or directory tree: of every
// entry's path (relative, slash-separated, in lexical order), type,
// permission bits, and a file's content or a link's target. Owners and
// times are left out, so a copy of a tree has its original's sum. The
// sum of a regular file is the SHA-512 of its content.
func TreeSum(root string) (string, error) {
	h := sha512.New()
	if fi, err := os.Lstat(root); err == nil && fi.Mode().IsRegular() {
		f, err := os.Open(root)
		if err != nil {
			return "", err
		}
		defer f.Close()
		if _, err := io.Copy(h, f); err != nil {
			return "", err
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	}
	err := tarsafe.Walk(root, root, func(p, rel string, fi fs.FileInfo) error {
		rel = filepath.ToSlash(rel)
		if rel == "." && fi.IsDir() {
			// The root's mode is its parent's business: a copy's differs.
			fmt.Fprint(h, "d .\x00")
			return nil
		}
		switch {
		case fi.IsDir():
			fmt.Fprintf(h, "d %o %s\x00", fi.Mode().Perm(), rel)
		case fi.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "l %s\x00%s\x00", rel, link)
		case fi.Mode().IsRegular():
			fmt.Fprintf(h, "f %o %d %s\x00", fi.Mode().Perm(), fi.Size(), rel)
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
		default:
			fmt.Fprintf(h, "o %s\x00", rel)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func sumMain(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: outpost sandbox-shim sum PATH")
		return 2
	}
	s, err := TreeSum(args[0])
	if err != nil {
		fmt.Fprintln(stderr, "outpost sandbox-shim sum:", err)
		return 1
	}
	fmt.Fprintln(stdout, s)
	return 0
}

// reapMain kills every exec shim whose --run is the given directory, with
// its program's group, and prints how many it found.
func reapMain(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 || !filepath.IsAbs(args[0]) {
		fmt.Fprintln(stderr, "usage: outpost sandbox-shim reap RUNDIR")
		return 2
	}
	want := []byte("\x00--run=" + filepath.Clean(args[0]) + "\x00")
	entries, err := os.ReadDir("/proc")
	if err != nil {
		fmt.Fprintln(stderr, "outpost sandbox-shim reap:", err)
		return 1
	}
	n := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(cmdline, want) || !bytes.Contains(cmdline, []byte("\x00"+Subcommand+"\x00exec\x00")) {
			continue
		}
		n++
		// Stop the shim first so that it cannot start anything more,
		// then the program's group.
		_ = syscall.Kill(pid, syscall.SIGSTOP)
		if child := childOf(pid); child > 0 {
			_ = syscall.Kill(-child, syscall.SIGKILL)
			_ = syscall.Kill(child, syscall.SIGKILL)
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	fmt.Fprintln(stdout, n)
	return 0
}
