// Package shim is the part of the docker provider that runs inside each
// container, as the hidden `outpost sandbox-shim` subcommand of the static
// outpost binary the provider mounts (or copies) into the container. It
// needs nothing of the image: no shell, no C library, no ps or kill.
//
//   - init is the container's PID 1: it keeps the container alive between
//     turns, reaps orphans, and exits on SIGTERM or SIGINT. With --serve
//     it also starts the lease's processes for the provider, over its
//     attached stdin and stdout (serve.go), so that they cost no exec.
//   - exec runs one process of the lease (every Sandbox.Start) in a
//     process group of its own, with exactly the environment it is given.
//     It writes a one-line handshake on stdout before the process starts,
//     so the provider learns the shim's pid (for signals) or why the
//     program cannot start, without a race against the program's output.
//     When the program exits, the rest of its group is killed, so nothing
//     left behind holds the output open; the shim then exits with the
//     program's status, and when the program died of a signal it records
//     that in the run directory, where the provider reads it (the engine
//     reports both "exit 137" and "killed by SIGKILL" as 137). A spare
//     exec shim (--spec-stdin) is started ahead of its request and reads
//     it from stdin (spec.go).
//   - signal delivers SIGTERM or SIGKILL to the process group of an exec
//     shim: `docker exec` cannot signal an exec'd process, let alone its
//     group.
//   - lookpath finds an executable on a PATH, as exec would.
//   - tunnel carries connections made to a loopback address of the
//     sandbox back to the host over its stdin and stdout
//     (providers/tunnel); dial is a small client of such an address, for
//     tests.
//   - snapshot describes the workspace's files (snapshot.Walk) as
//     one JSON document, so the engine can tell which files a turn
//     changed without copying any content out.
//
// The handshake, the status file and the signal protocol are private to
// this package and the provider; both come from the same build.
//
// On the provider's side, Process (client.go) is the one client of the
// exec shim: a provider supplies a Transport for its streams.
package shim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/outposthq/outpost/internal/isolate"
	"github.com/outposthq/outpost/internal/lookpath"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/outposthq/outpost/internal/tunnel/inside"
	"github.com/outposthq/outpost/snapshot"
)

// Subcommand is the hidden outpost subcommand that runs the shim.
const Subcommand = "sandbox-shim"

// EnvNames is the variable through which the provider tells the exec shim
// which variables of its own environment make up the program's
// environment (a JSON array of names). The engine merges the image's
// environment into every exec; the shim drops everything not named.
const EnvNames = "OUTPOST_SHIM_ENV"

// handshake prefixes the first line the exec shim writes on stdout. The
// NUL byte keeps it from being mistaken for, or mistaken by, program
// output: nothing else is written before it.
const handshake = "\x00outpost-shim "

// Handshake results.
const (
	resultOK       = "ok"       // "ok <pid>"
	resultNotFound = "notfound" // the program is not found or not executable
	resultNoDir    = "nodir"    // the working directory is missing
	resultError    = "error"    // anything else
)

// Exit statuses of the exec shim when the program never ran.
const (
	ExitNotFound = 127
	ExitCannot   = 126
)

// MaybeRun runs the shim and exits when os.Args asks for it (os.Args[1] ==
// Subcommand). outpost's main calls it first, before any flag parsing or
// signal handling of the CLI.
func MaybeRun() {
	if len(os.Args) > 1 && os.Args[1] == Subcommand {
		os.Exit(Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
}

// Main runs the shim with args (after the subcommand) and returns the exit
// status.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "outpost sandbox-shim: want init, exec, signal or lookpath")
		return 2
	}
	switch args[0] {
	case "init":
		return initMain(args[1:])
	case ServeMode:
		return serveMain(args[1:], stdin, stdout, stderr)
	case "exec":
		return execMain(args[1:], stdout, stderr)
	case "signal":
		return signalMain(args[1:], stderr)
	case "lookpath":
		return lookpathMain(args[1:], stdout, stderr)
	case ProbeMode:
		return probeMain(args[1:], stdout, stderr)
	case "snapshot":
		return snapshotMain(args[1:], stdout, stderr)
	case "sum":
		return sumMain(args[1:], stdout, stderr)
	case "reap":
		return reapMain(args[1:], stdout, stderr)
	case inside.Mode:
		return inside.Serve(stdin, stdout, stderr)
	case inside.ForwardMode:
		return inside.Forward(args[1:], stdin, stdout, stderr)
	case inside.DialMode:
		if len(args) != 2 {
			fmt.Fprintln(stderr, "usage: outpost sandbox-shim dial HOST:PORT")
			return 2
		}
		return inside.Dial(args[1], stdin, stdout, stderr)
	}
	if f, ok := fileModes[args[0]]; ok {
		return f(args[1:], stdin, stdout, stderr)
	}
	fmt.Fprintf(stderr, "outpost sandbox-shim: unknown mode %q\n", args[0])
	return 2
}

// StatusFile is where the exec shim with token records that its program
// died of a signal, under the run directory runDir.
func StatusFile(runDir, token string) string { return filepath.Join(runDir, "exit-"+token) }

// ExecArgs returns the command line that runs path with args under the
// exec shim at binary. token identifies the shim for signal; runDir is
// where it records a death by signal; dir is the working directory.
func ExecArgs(binary, token, runDir, dir string, stdin bool, path string, args []string) []string {
	cmd := []string{binary, Subcommand, "exec", "--token=" + token, "--run=" + runDir, "--dir=" + dir}
	if stdin {
		cmd = append(cmd, "--stdin")
	}
	return append(append(cmd, "--", path), args...)
}

// SignalArgs returns the command line that sends sig ("TERM" or "KILL")
// to the group of the exec shim with pid and token.
func SignalArgs(binary string, pid int, token, sig string) []string {
	return []string{binary, Subcommand, "signal", "--pid=" + strconv.Itoa(pid), "--token=" + token, sig}
}

// LookPathArgs returns the command line that prints the path of name on
// the PATH of its environment.
func LookPathArgs(binary, name string) []string {
	return []string{binary, Subcommand, "lookpath", name}
}

// LookPathResult reads the answer of the command LookPathArgs built, by
// its exit code: the path on 0, *exec.Error wrapping exec.ErrNotFound on
// 1, else an error naming the provider (what) and the shim's stderr.
func LookPathResult(what, name string, code int, stdout, stderr []byte) (string, error) {
	switch code {
	case 0:
		if p := strings.TrimSpace(string(stdout)); p != "" {
			return p, nil
		}
	case 1:
		return "", &exec.Error{Name: name, Err: exec.ErrNotFound}
	}
	return "", fmt.Errorf("%s: looking up %s: exit %d: %s", what, name, code, strings.TrimSpace(string(stderr)))
}

func execMain(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("exec", flag.ContinueOnError)
	fl.SetOutput(stderr)
	token := fl.String("token", "", "identifies this shim for signal")
	runDir := fl.String("run", "", "directory for the status file")
	dir := fl.String("dir", "", "working directory")
	withStdin := fl.Bool("stdin", false, "give the program the shim's stdin")
	envStdin := fl.Bool("env-stdin", false, "read the program's environment from the first line of stdin")
	specStdin := fl.Bool("spec-stdin", false, "read the whole launch request from stdin (a spare shim)")
	isolated := fl.String("isolate", "", "run the program in bubblewrap (base64 JSON of Isolation)")
	if err := fl.Parse(args); err != nil || (fl.NArg() == 0) != *specStdin {
		fmt.Fprintln(stderr, "usage: outpost sandbox-shim exec --token=T --run=DIR --dir=DIR [--stdin] -- PROGRAM [ARG...]")
		fmt.Fprintln(stderr, "       outpost sandbox-shim exec --spec-stdin --token=T --run=DIR")
		return 2
	}
	// Signals sent to the shim before the program runs end it; after, they
	// are forwarded to the program's group.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	fail := func(result string, code int, format string, a ...any) int {
		msg := fmt.Sprintf(format, a...)
		fmt.Fprintf(stdout, "%s%s %s\n", handshake, result, strings.ReplaceAll(msg, "\n", " "))
		return code
	}
	var l launch
	if *specStdin {
		// The provider takes the spare for ready once it reads this.
		if _, err := io.WriteString(stdout, ReadyLine); err != nil {
			return ExitCannot
		}
		spec, err := awaitSpec(os.Stdin, sigs)
		var stopped stoppedError
		switch {
		case errors.Is(err, errNoSpec):
			return 0 // a spare nobody used
		case errors.As(err, &stopped):
			return fail(resultError, 128+int(stopped.sig), "stopped by %v before it started", stopped.sig)
		case err != nil:
			return fail(resultError, ExitCannot, "%v", err)
		}
		l = launch{dir: spec.Dir, stdin: spec.Stdin, program: spec.Path, args: spec.Args, env: spec.environ()}
	} else {
		env := environment()
		if *envStdin {
			var err error
			if env, err = readEnvLine(os.Stdin); err != nil {
				return fail(resultError, ExitCannot, "%v", err)
			}
		}
		l = launch{dir: *dir, stdin: *withStdin, program: fl.Arg(0), args: fl.Args()[1:], env: env}
	}
	if *isolated != "" {
		iso, err := DecodeIsolation(*isolated)
		if err != nil {
			return fail(resultError, ExitCannot, "--isolate: %v", err)
		}
		l.iso = &iso
	}
	return l.run(*token, *runDir, sigs, stdout, stderr, fail)
}

// launch is what the exec shim runs, from its command line or its spec.
type launch struct {
	dir     string
	stdin   bool // the program gets the shim's stdin (else /dev/null)
	program string
	args    []string
	env     []string
	iso     *Isolation // run the program in bubblewrap
}

func (l launch) run(token, runDir string, sigs chan os.Signal, stdout, stderr io.Writer, fail func(string, int, string, ...any) int) int {
	if l.dir != "" {
		if err := os.Chdir(l.dir); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return fail(resultNoDir, ExitCannot, "working directory %s: %v", l.dir, err)
			}
			return fail(resultError, ExitCannot, "working directory %s: %v", l.dir, err)
		}
	}
	if mode, ok := l.inProcess(); ok {
		return l.runInProcess(mode, token, runDir, sigs, stdout, stderr, fail)
	}
	path, err := lookpath.Find(l.program, lookupEnv(l.env, "PATH"))
	if err != nil {
		return fail(resultNotFound, ExitNotFound, "%v", err)
	}
	cmd := exec.Command(path, l.args...)
	cmd.Args[0] = l.program
	var rep *isolate.Reporter
	if l.iso != nil {
		// bubblewrap passes a death of its program by signal n on as the
		// exit status 128+n; the forwarder, where it runs the program,
		// reports the signal (rep), as on local's isolated leases.
		if cmd, rep, err = l.iso.command(path, l.args, l.dir, lookupEnv(l.env, "PATH")); err != nil {
			return fail(resultError, ExitCannot, "%v", err)
		}
		if rep != nil {
			defer rep.Close()
		}
	}
	cmd.Env = l.env
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if l.stdin {
		cmd.Stdin = os.Stdin
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if code, ok := announce(sigs, stdout, fail); !ok {
		return code
	}
	err = cmd.Start()
	if rep != nil {
		rep.Started()
	}
	if err != nil {
		fmt.Fprintf(stderr, "outpost: cannot start %s: %v\n", l.program, err)
		if errors.Is(err, fs.ErrNotExist) {
			return ExitNotFound
		}
		return ExitCannot
	}
	pgid := cmd.Process.Pid
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = syscall.Kill(-target(pgid, l.iso != nil), s.(syscall.Signal))
			case <-done:
				return
			}
		}
	}()
	_ = cmd.Wait()
	close(done)
	// Whatever the program left behind in its group is stopped, so that
	// the output ends with it (Sandbox.Start's contract: nothing of a
	// process outlives it unless it left its group).
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	sig, signaled := ws.Signal(), ws.Signaled()
	if rep != nil && !signaled {
		sig, signaled = rep.Signal(ws.ExitStatus())
	}
	if signaled {
		if token != "" && runDir != "" {
			_ = os.WriteFile(StatusFile(runDir, token), []byte("signal "+strconv.Itoa(int(sig))+"\n"), 0o600)
		}
		return 128 + int(sig)
	}
	return ws.ExitStatus()
}

// environment is the program's environment: the variables named in
// EnvNames, taken from the shim's own.
func environment() []string {
	var names []string
	_ = json.Unmarshal([]byte(os.Getenv(EnvNames)), &names)
	env := make([]string, 0, len(names))
	for _, n := range names {
		if n == EnvNames {
			continue
		}
		if v, ok := os.LookupEnv(n); ok {
			env = append(env, n+"="+v)
		}
	}
	return env
}

func lookupEnv(env []string, name string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			return v
		}
	}
	return ""
}

// signalMain sends a signal to the group of the exec shim --pid, after
// checking that the process is the shim with --token (a pid may have been
// reused). A shim or group that is gone is not an error.
func signalMain(args []string, stderr io.Writer) int {
	fl := flag.NewFlagSet("signal", flag.ContinueOnError)
	fl.SetOutput(stderr)
	pid := fl.Int("pid", 0, "pid of the exec shim")
	token := fl.String("token", "", "token of the exec shim")
	if err := fl.Parse(args); err != nil || fl.NArg() != 1 || *pid <= 1 || *token == "" {
		fmt.Fprintln(stderr, "usage: outpost sandbox-shim signal --pid=PID --token=T TERM|KILL")
		return 2
	}
	var sig syscall.Signal
	switch fl.Arg(0) {
	case "TERM":
		sig = syscall.SIGTERM
	case "KILL":
		sig = syscall.SIGKILL
	default:
		fmt.Fprintf(stderr, "outpost sandbox-shim signal: unknown signal %q\n", fl.Arg(0))
		return 2
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(*pid) + "/cmdline")
	if err != nil || !bytes.Contains(cmdline, []byte("\x00--token="+*token+"\x00")) {
		return 0 // the shim has exited (and killed its group)
	}
	child := childOf(*pid)
	if sig == syscall.SIGTERM && child != 0 && isolate.IsBwrap(child) {
		child = target(child, true)
	}
	if child == 0 {
		// The program has not started yet, or has ended and the shim is
		// finishing: the shim handles the signal itself.
		if sig == syscall.SIGKILL {
			sig = syscall.SIGTERM
		}
		if err := syscall.Kill(*pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			fmt.Fprintln(stderr, "outpost sandbox-shim signal:", err)
			return 1
		}
		return 0
	}
	err = syscall.Kill(-child, sig)
	if errors.Is(err, syscall.ESRCH) {
		// The child has not made its group yet.
		err = syscall.Kill(child, sig)
	}
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		fmt.Fprintln(stderr, "outpost sandbox-shim signal:", err)
		return 1
	}
	return 0
}

// childOf returns the pid of a child of pid, or 0.
func childOf(pid int) int {
	// Any thread of the (Go) shim may have forked the program: read the
	// children of every thread.
	p := strconv.Itoa(pid)
	if tasks, err := os.ReadDir("/proc/" + p + "/task"); err == nil {
		readable := false
		for _, t := range tasks {
			b, err := os.ReadFile("/proc/" + p + "/task/" + t.Name() + "/children")
			if err != nil {
				continue
			}
			readable = true
			if f := strings.Fields(string(b)); len(f) > 0 {
				n, _ := strconv.Atoi(f[0])
				return n
			}
		}
		if readable {
			return 0
		}
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(n); ok && ppid == pid {
			return n
		}
	}
	return 0
}

// parentOf reads the parent pid from /proc/PID/stat.
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	n, err := strconv.Atoi(f[1])
	return n, err == nil
}

// SnapshotArgs returns the command line that prints the snapshot of dir,
// bounded to limit files, as JSON (snapshot.Snapshot).
func SnapshotArgs(binary, dir string, limit int) []string {
	return []string{binary, Subcommand, "snapshot", "--limit=" + strconv.Itoa(limit), dir}
}

func snapshotMain(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	fl.SetOutput(stderr)
	limit := fl.Int("limit", 20000, "most files described")
	if err := fl.Parse(args); err != nil || fl.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: outpost sandbox-shim snapshot [--limit=N] DIR")
		return 2
	}
	s, err := snapshot.Walk(context.Background(), fl.Arg(0), *limit)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if err := json.NewEncoder(stdout).Encode(s); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

func lookpathMain(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: outpost sandbox-shim lookpath NAME")
		return 2
	}
	p, err := lookpath.Find(args[0], os.Getenv("PATH"))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintln(stdout, p)
	return 0
}

// Handshake is the parsed first line of an exec shim.
type Handshake struct {
	PID int    // the shim's pid inside the container, when OK
	Err error  // why the program could not start, when not OK
	raw string // the line, for diagnostics
}

// Handshake errors, wrapped by Handshake.Err.
var (
	ErrNotFound = errors.New("executable not found")
	ErrNoDir    = errors.New("working directory not found")
	ErrStart    = errors.New("cannot start the program")
)

// ReadHandshake reads the exec shim's handshake line from r, which must be
// the start of the shim's stdout. It returns an error when the stream ends
// or holds something else first.
func ReadHandshake(r *bufio.Reader) (Handshake, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return Handshake{}, fmt.Errorf("reading the exec shim's handshake: %w", err)
	}
	rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), handshake)
	if !ok {
		return Handshake{}, fmt.Errorf("the exec shim's output does not start with its handshake: %q", trimQ(line))
	}
	result, msg, _ := strings.Cut(rest, " ")
	h := Handshake{raw: line}
	switch result {
	case resultOK:
		pid, err := strconv.Atoi(msg)
		if err != nil || pid <= 0 {
			return Handshake{}, fmt.Errorf("bad exec shim handshake %q", trimQ(line))
		}
		h.PID = pid
	case resultNotFound:
		h.Err = fmt.Errorf("%w: %s", ErrNotFound, msg)
	case resultNoDir:
		h.Err = fmt.Errorf("%w: %s", ErrNoDir, msg)
	default:
		h.Err = fmt.Errorf("%w: %s", ErrStart, msg)
	}
	return h, nil
}

func trimQ(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// inProcessModes are the shim's own modes that an exec shim asked to run
// the shim's binary in one of them runs itself, without starting a
// process: they depend on nothing of the environment or of the process
// (not lookpath, which reads PATH), and they end with the program's
// status. A spare shim (already started, its binary initialised) so
// answers a workspace snapshot or a copy in or out in the time of the
// work itself.
var inProcessModes = map[string]bool{"snapshot": true, "tar": true, "untar": true, "sum": true}

// inProcess returns the mode l runs, when l runs the shim's own binary in
// one of inProcessModes.
func (l launch) inProcess() (string, bool) {
	if len(l.args) < 2 || l.args[0] != Subcommand || !inProcessModes[l.args[1]] || !filepath.IsAbs(l.program) {
		return "", false
	}
	self, err := os.Executable()
	if err != nil {
		return "", false
	}
	a, err := os.Stat(self)
	if err != nil {
		return "", false
	}
	b, err := os.Stat(l.program)
	if err != nil || !os.SameFile(a, b) {
		return "", false
	}
	return l.args[1], true
}

// runInProcess runs one of inProcessModes in the exec shim itself, as if
// it were the program: the same handshake (the shim's pid, which signal
// then finds without a child and signals directly), the program's output
// and status. A signal ends it as it would end the program, recorded in
// the status file.
func (l launch) runInProcess(mode, token, runDir string, sigs chan os.Signal, stdout, stderr io.Writer, fail func(string, int, string, ...any) int) int {
	if code, ok := announce(sigs, stdout, fail); !ok {
		return code
	}
	go func() {
		sig := (<-sigs).(syscall.Signal)
		if token != "" && runDir != "" {
			_ = os.WriteFile(StatusFile(runDir, token), []byte("signal "+strconv.Itoa(int(sig))+"\n"), 0o600)
		}
		os.Exit(128 + int(sig))
	}()
	var in io.Reader = strings.NewReader("")
	if l.stdin {
		in = os.Stdin
	}
	out := bufio.NewWriterSize(stdout, 64<<10)
	code := Main(append([]string{mode}, l.args[2:]...), in, out, stderr)
	if err := out.Flush(); err != nil && code == 0 {
		code = 1
	}
	return code
}

// announce writes the handshake that says the program runs, unless a
// signal came first (then it fails the start with the signal's status).
// It returns the shim's exit code and false when the start ends there.
func announce(sigs chan os.Signal, stdout io.Writer, fail func(string, int, string, ...any) int) (int, bool) {
	select {
	case s := <-sigs:
		return fail(resultError, 128+int(s.(syscall.Signal)), "stopped by %v before it started", s), false
	default:
	}
	if _, err := fmt.Fprintf(stdout, "%s%s %d\n", handshake, resultOK, os.Getpid()); err != nil {
		return ExitCannot, false
	}
	return 0, true
}
