package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// A spare exec shim (--spec-stdin) is started before anyone knows what it
// will run: a provider keeps one waiting in a sandbox, so that a Start
// costs a write on a stream that is already open instead of a new exec.
// It reads its launch request (Spec) from its standard input, then runs
// the program exactly as an exec shim started with the request on its
// command line does. It writes ReadyLine first, once it runs. The token and the run directory stay on its command
// line: signal and reap recognize a shim by them, and they are chosen when
// the spare is made.

// ReadyLine is what a spare exec shim writes on stdout once it runs and
// waits for its request, before its handshake: a provider knows the spare
// is ready when it has read it (an exec's attach returns before the
// process starts).
const ReadyLine = handshake + "ready\n"

// Spec is the launch request a spare exec shim reads.
type Spec struct {
	Dir   string            `json:"dir,omitempty"`   // working directory; "" = the shim's
	Stdin bool              `json:"stdin,omitempty"` // the rest of stdin is the program's (else /dev/null)
	Path  string            `json:"path"`            // looked up on Env["PATH"] when it has no slash
	Args  []string          `json:"args,omitempty"`  // without the program name
	Env   map[string]string `json:"env,omitempty"`   // the complete environment
}

// maxSpec bounds the launch request's JSON. Linux bounds a command line
// and environment well below it.
const maxSpec = 16 << 20

// errNoSpec is readSpec's error when the stream ends before the request
// begins: the spare was discarded.
var errNoSpec = errors.New("no launch request")

// SpecLine encodes s as a spare shim reads it: the length of its JSON in
// decimal, a space, the JSON and a newline. The length lets the shim read
// exactly the request, and not a byte of what follows (the program's
// standard input), without reading it one byte at a time.
func SpecLine(s Spec) []byte {
	b, _ := json.Marshal(s) // strings: cannot fail
	line := make([]byte, 0, len(b)+12)
	line = strconv.AppendInt(line, int64(len(b)), 10)
	line = append(line, ' ')
	line = append(line, b...)
	return append(line, '\n')
}

// SpareExecArgs returns the command line of a spare exec shim at binary,
// with the token signal knows it by and the run directory where it
// records a death by signal.
func SpareExecArgs(binary, token, runDir string) []string {
	return []string{binary, Subcommand, "exec", "--spec-stdin", "--token=" + token, "--run=" + runDir}
}

// readSpec reads SpecLine's line from r, consuming nothing after it. A
// stream that ends before its first byte gives errNoSpec.
func readSpec(r io.Reader) (Spec, error) {
	n, digits := 0, 0
	var b [1]byte
	for {
		k, err := r.Read(b[:])
		if k == 1 {
			c := b[0]
			if c == ' ' && digits > 0 {
				break
			}
			if c < '0' || c > '9' {
				return Spec{}, fmt.Errorf("the launch request does not start with its length: byte %q", c)
			}
			n, digits = n*10+int(c-'0'), digits+1
			if n > maxSpec {
				return Spec{}, fmt.Errorf("the launch request is too long (more than %d bytes)", maxSpec)
			}
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if digits == 0 {
					return Spec{}, errNoSpec
				}
				err = io.ErrUnexpectedEOF
			}
			return Spec{}, fmt.Errorf("reading the launch request: %w", err)
		}
	}
	buf := make([]byte, n+1)
	if _, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return Spec{}, fmt.Errorf("reading the launch request: %w", err)
	}
	if buf[n] != '\n' {
		return Spec{}, errors.New("the launch request is longer than its length says")
	}
	var s Spec
	if err := json.Unmarshal(buf[:n], &s); err != nil {
		return Spec{}, fmt.Errorf("the launch request: %w", err)
	}
	if err := s.check(); err != nil {
		return Spec{}, err
	}
	return s, nil
}

// check refuses what no process can be started with.
func (s Spec) check() error {
	if s.Path == "" {
		return errors.New("the launch request names no program")
	}
	if strings.ContainsRune(s.Path, 0) || strings.ContainsRune(s.Dir, 0) {
		return errors.New("the launch request's program or directory holds a NUL byte")
	}
	for i, a := range s.Args {
		if strings.ContainsRune(a, 0) {
			return fmt.Errorf("argument %d holds a NUL byte", i+1)
		}
	}
	for k, v := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return fmt.Errorf("invalid variable %q", k)
		}
	}
	return nil
}

// environ is the program's environment as exec wants it.
func (s Spec) environ() []string {
	env := make([]string, 0, len(s.Env))
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	return env
}

// stoppedError: a signal ended a spare shim before its request came.
type stoppedError struct{ sig syscall.Signal }

func (e stoppedError) Error() string { return "stopped by " + e.sig.String() }

// awaitSpec reads the launch request from r, unless one of sigs comes
// first (the shim then exits: nothing runs yet).
func awaitSpec(r io.Reader, sigs <-chan os.Signal) (Spec, error) {
	type result struct {
		s   Spec
		err error
	}
	got := make(chan result, 1)
	go func() {
		s, err := readSpec(r)
		got <- result{s, err}
	}()
	select {
	case res := <-got:
		return res.s, res.err
	case sig := <-sigs:
		return Spec{}, stoppedError{sig.(syscall.Signal)}
	}
}
