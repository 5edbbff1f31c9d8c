package shim

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/internal/tunnel/inside"
)

// The init's serving mode (init --serve): PID 1 of a docker sandbox also
// starts the lease's processes, so that a turn costs the engine no exec.
// The provider attaches to the container's standard streams before it
// starts it; the init writes HelloLine on stdout, then runs a yamux
// server over its stdin and stdout. Every stream the provider opens is one
// process: a request line (ServeRequest, JSON), then the process's stdin
// from the provider, and back its stdout and stderr in frames, and last
// its exit status (Frame*). A process so started is the init's child, with
// the init's user, environment (the container's) and working directory,
// as an exec of the engine would have; what the provider starts this way
// is the exec shim and its helper modes, so the handshake, the process
// group, signals and status files are those of an exec. The init still
// reaps every orphan; it tells its own children's statuses to the streams
// that wait for them. When the stream ends (the provider is gone), it goes
// on as a plain init.

// With SetupFlag as well, the init starts as root (with CAP_CHOWN,
// CAP_SETUID and CAP_SETGID only) and its first stream is a Setup: it
// lays out the sandbox from the archive the provider sends, then becomes
// the sandbox's user for good, before it starts any process. So the
// layout that the engine's archive endpoint wrote before the start (a
// second process of the engine, about as long as the start itself)
// costs one stream.

// ServeFlag is the init's argument that turns its serving mode on. An
// init that does not know it ignores it, writes no HelloLine, and the
// provider falls back to the engine's execs.
const ServeFlag = "--serve"

// SetupFlag, after ServeFlag, makes the init's first stream a Setup.
const SetupFlag = "--setup"

// HelloLine is the first thing the serving init writes on stdout, before
// yamux begins.
const HelloLine = handshake + "serve 1\n"

// Frame types on a served stream: an 8-byte header (type, three zero
// bytes, the payload's length as a big-endian uint32), then the payload.
// The layout is the Engine's attach multiplexing (stdcopy), so that one
// reader serves both; FrameExit is ours: its payload is the exit code in
// decimal, the stream's last frame. A process killed by signal n exits
// 128+n, as the engine reports an exec's.
const (
	FrameStdout = 1
	FrameStderr = 2
	FrameExit   = 4
)

// maxRequest bounds a served stream's request line.
const maxRequest = 1 << 20

// ServeRequest is a served stream's first line: the command line (the
// program first, a path or a name looked up on the init's PATH) and
// variables added to the container's environment (NAME=VALUE; a name
// given again replaces the container's).
type ServeRequest struct {
	Args  []string `json:"args,omitempty"`
	Env   []string `json:"env,omitempty"`
	Setup *Setup   `json:"setup,omitempty"`
}

// Setup is the first request to an init started with SetupFlag, and the
// only one it takes until it has succeeded: the stream's input is a tar
// archive, extracted at / with its entries' owners and times
// (tarsafe.ExtractOwned); then the init drops its supplementary groups,
// becomes GID and UID (not root: the capabilities go with it) and adds
// Env to its environment, which its processes inherit. The answer is an
// exit frame: 0, or ExitUnsafe for an unsafe entry, 1 for any other
// failure, with the reason on stderr. After a failure the init serves no
// more.
type Setup struct {
	UID int      `json:"uid"`
	GID int      `json:"gid"`
	Env []string `json:"env,omitempty"`
}

// MuxConfig is yamux's configuration on both ends of the init's stream:
// no logging, no keep-alives (the attach stream's end is the signal that
// matters, and a loaded machine must not lose a lease to a late ping), and
// a half-closed stream waits for its peer as long as it takes (a process
// whose stdin ended may run for hours).
func MuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.LogOutput = io.Discard
	c.EnableKeepAlive = false
	c.StreamCloseTimeout = 0
	c.ConnectionWriteTimeout = time.Minute
	return c
}

// reaper is PID 1's wait loop: it reaps every child, and hands the status
// of those the init started itself to whoever waits for it.
type reaper struct {
	mu      sync.Mutex // held across a start and its registration, and each wait
	waiting map[int]chan syscall.WaitStatus
}

// loop reaps on every SIGCHLD, and returns on SIGTERM or SIGINT.
func (r *reaper) loop(sigs chan os.Signal) {
	for s := range sigs {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			var ws syscall.WaitStatus
			r.mu.Lock()
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid > 0 && err == nil {
				if c, ok := r.waiting[pid]; ok {
					c <- ws
					delete(r.waiting, pid)
				}
			}
			r.mu.Unlock()
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}

// start starts a child and registers it before the loop can reap it.
func (r *reaper) start(path string, args []string, attr *os.ProcAttr) (chan syscall.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := os.StartProcess(path, args, attr)
	if err != nil {
		return nil, err
	}
	c := make(chan syscall.WaitStatus, 1)
	r.waiting[p.Pid] = c
	_ = p.Release()
	return c, nil
}

// initMain is PID 1: it sleeps, reaps every child reparented to it, and
// exits on SIGTERM or SIGINT; with ServeFlag it also serves its stdin.
func initMain(args []string) int {
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)
	r := &reaper{waiting: map[int]chan syscall.WaitStatus{}}
	switch {
	case len(args) == 1 && args[0] == ServeFlag:
		go serve(r, os.Stdin, os.Stdout, false)
	case len(args) == 2 && args[0] == ServeFlag && args[1] == SetupFlag:
		go serve(r, os.Stdin, os.Stdout, true)
	}
	r.loop(sigs)
	return 0
}

// ServeMode is the shim's mode that serves its stdin as the init's
// serving mode does, without being PID 1: a kubernetes lease's one
// long-lived exec (`outpost sandbox-shim serve`), whose streams are the
// lease's processes. Exec output is not the container's log, which the
// init's stdout, the only stream a Kubernetes attach reaches, would be.
// It reaps its own children, and exits once its stdin ends or its
// connection breaks: what it started is then the init's to reap.
const ServeMode = "serve"

// ServeArgs is the command line of ServeMode.
func ServeArgs(binary string) []string { return []string{binary, Subcommand, ServeMode} }

func serveMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) != 0 {
		fmt.Fprintln(stderr, "usage: outpost sandbox-shim serve")
		return 2
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGCHLD)
	r := &reaper{waiting: map[int]chan syscall.WaitStatus{}}
	go r.loop(sigs)
	serve(r, stdin, stdout, false)
	return 0
}

// serve runs the yamux server over stdin and stdout until they end; with
// setup, its first stream must be a Setup that succeeds.
func serve(r *reaper, stdin io.Reader, stdout io.Writer, setup bool) {
	if _, err := io.WriteString(stdout, HelloLine); err != nil {
		return
	}
	sess, err := yamux.Server(inside.Stdio{Reader: stdin, Writer: stdout}, MuxConfig())
	if err != nil {
		return
	}
	defer sess.Close()
	if setup {
		st, err := sess.AcceptStream()
		if err != nil || !serveSetup(st) {
			// The provider sees the connection end (stdout first: the
			// session's Close waits for the provider to end its side):
			// the init serves no more, and goes on as a plain init.
			if c, ok := stdout.(io.Closer); ok {
				_ = c.Close()
			}
			return
		}
	}
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		go serveStream(r, st)
	}
}

// frameWriter writes frames to a served stream, one at a time.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *frameWriter) frame(typ byte, b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var hdr [8]byte
	hdr[0] = typ
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(b)))
	if _, err := f.w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := f.w.Write(b)
	return err
}

// pump copies r to frames of typ until r ends. A stream that can no longer
// be written still drains r, so that the process never blocks on it.
func (f *frameWriter) pump(typ byte, r io.Reader) {
	buf := make([]byte, 32<<10)
	broken := false
	for {
		n, err := r.Read(buf)
		if n > 0 && !broken {
			broken = f.frame(typ, buf[:n]) != nil
		}
		if err != nil {
			return
		}
	}
}

// serveStream runs one served stream's process.
func serveStream(r *reaper, st *yamux.Stream) {
	defer st.Close()
	fw := &frameWriter{w: st}
	fail := func(code int, format string, a ...any) {
		_ = fw.frame(FrameStderr, []byte("outpost sandbox-shim init: "+fmt.Sprintf(format, a...)+"\n"))
		_ = fw.frame(FrameExit, []byte(strconv.Itoa(code)))
	}
	br := bufio.NewReaderSize(st, 64<<10)
	req, err := readRequest(br)
	if err == nil && req.Setup != nil {
		err = errors.New("setup: the sandbox is set up already")
	}
	if err != nil {
		fail(ExitCannot, "%v", err)
		return
	}
	path := req.Args[0]
	if !strings.Contains(path, "/") {
		if path, err = exec.LookPath(path); err != nil {
			fail(ExitNotFound, "%v", err)
			return
		}
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		fail(ExitCannot, "%v", err)
		return
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		fail(ExitCannot, "%v", err)
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		fail(ExitCannot, "%v", err)
		return
	}
	wd, _ := os.Getwd()
	done, err := r.start(path, req.Args, &os.ProcAttr{Dir: wd, Env: mergeEnv(os.Environ(), req.Env), Files: []*os.File{inR, outW, errW}})
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		code := ExitCannot
		if errors.Is(err, os.ErrNotExist) {
			code = ExitNotFound
		}
		fail(code, "starting %s: %v", req.Args[0], err)
		return
	}
	// The process's stdin is what the provider writes after the request,
	// until it closes its side.
	go func() {
		_, _ = io.Copy(inW, br)
		inW.Close()
	}()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); defer outR.Close(); fw.pump(FrameStdout, outR) }()
	go func() { defer wg.Done(); defer errR.Close(); fw.pump(FrameStderr, errR) }()
	ws := <-done
	wg.Wait()
	code := ws.ExitStatus()
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	_ = fw.frame(FrameExit, []byte(strconv.Itoa(code)))
}

// readRequest reads a served stream's request line.
func readRequest(br *bufio.Reader) (ServeRequest, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxRequest {
			return ServeRequest{}, fmt.Errorf("request over %d bytes", maxRequest)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return ServeRequest{}, fmt.Errorf("reading the request: %w", err)
		}
	}
	var req ServeRequest
	if err := json.Unmarshal(line, &req); err != nil {
		return ServeRequest{}, fmt.Errorf("malformed request: %w", err)
	}
	if req.Setup != nil {
		if len(req.Args) != 0 {
			return ServeRequest{}, errors.New("malformed request: a setup runs no program")
		}
		if req.Setup.UID <= 0 || req.Setup.GID < 0 {
			return ServeRequest{}, fmt.Errorf("malformed request: setup as %d:%d (the user must not be root)", req.Setup.UID, req.Setup.GID)
		}
		if err := checkEnv(req.Setup.Env); err != nil {
			return ServeRequest{}, err
		}
	} else if len(req.Args) == 0 || req.Args[0] == "" {
		return ServeRequest{}, errors.New("malformed request: no program")
	}
	if err := checkEnv(req.Env); err != nil {
		return ServeRequest{}, err
	}
	return req, nil
}

// checkEnv refuses a variable that is not NAME=VALUE.
func checkEnv(env []string) error {
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsRune(kv, 0) {
			return fmt.Errorf("malformed request: variable %q", k)
		}
	}
	return nil
}

// serveSetup runs the Setup stream st, and reports whether it succeeded.
func serveSetup(st *yamux.Stream) bool {
	defer st.Close()
	fw := &frameWriter{w: st}
	br := bufio.NewReaderSize(st, 64<<10)
	// A failure is answered, and the rest of the archive read, so that
	// the provider's writes end and it reads the answer before the
	// connection closes.
	fail := func(code int, format string, a ...any) bool {
		_ = fw.frame(FrameStderr, []byte("outpost sandbox-shim init: setup: "+fmt.Sprintf(format, a...)+"\n"))
		_ = fw.frame(FrameExit, []byte(strconv.Itoa(code)))
		_, _ = io.Copy(io.Discard, br)
		return false
	}
	req, err := readRequest(br)
	if err == nil && req.Setup == nil {
		err = errors.New("the first request must be a setup")
	}
	if err != nil {
		return fail(ExitCannot, "%v", err)
	}
	if err := tarsafe.ExtractOwned(br, "/"); err != nil {
		code := 1
		if errors.Is(err, tarsafe.ErrUnsafe) {
			code = ExitUnsafe
		}
		return fail(code, "%v", err)
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return fail(1, "reading the archive: %v", err)
	}
	if err := becomeUser(req.Setup.UID, req.Setup.GID); err != nil {
		return fail(1, "%v", err)
	}
	for _, kv := range req.Setup.Env {
		k, v, _ := strings.Cut(kv, "=")
		_ = os.Setenv(k, v)
	}
	return fw.frame(FrameExit, []byte("0")) == nil
}

// becomeUser makes the process (every thread of it) uid and gid with no
// supplementary group, for good: a root process that changes its user
// loses its capabilities.
func becomeUser(uid, gid int) error {
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("dropping the supplementary groups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("becoming group %d: %w", gid, err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("becoming user %d: %w", uid, err)
	}
	if syscall.Getuid() != uid || syscall.Geteuid() != uid || syscall.Getgid() != gid || syscall.Getegid() != gid {
		return fmt.Errorf("still %d:%d after becoming %d:%d", syscall.Geteuid(), syscall.Getegid(), uid, gid)
	}
	return nil
}

// Serving is the provider's side of a serving connection being made
// (the init's ServeFlag on docker, ServeMode on kubernetes): Ready is
// closed once Finish has recorded its session, or why there is none.
type Serving struct {
	once  sync.Once
	ready chan struct{}
	sess  *yamux.Session
	err   error
}

// NewServing returns a serving connection whose handshake is under way.
func NewServing() *Serving { return &Serving{ready: make(chan struct{})} }

// Finish records the outcome, once; it reports whether this call did
// (a session it did not record is the caller's to close).
func (h *Serving) Finish(sess *yamux.Session, err error) bool {
	done := false
	h.once.Do(func() {
		h.sess, h.err, done = sess, err, true
		close(h.ready)
	})
	return done
}

// Ready is closed once the outcome is recorded.
func (h *Serving) Ready() <-chan struct{} { return h.ready }

// Session is the session once Ready is closed; nil when there is none.
func (h *Serving) Session() *yamux.Session { return h.sess }

// ErrReleased is the outcome a provider records when the lease is released
// before or after its serving connection was made.
var ErrReleased = errors.New("released")

// Failed returns why the connection could not be made: nil while the
// handshake is under way, when there is a session, or when the release
// ended it (ErrReleased).
func (h *Serving) Failed() error {
	select {
	case <-h.ready:
	default:
		return nil
	}
	if h.sess != nil || errors.Is(h.err, ErrReleased) {
		return nil
	}
	return h.err
}

// ServeClient reads the serving end's HelloLine from r, then starts the
// yamux client over r and w (closeW ends w).
func ServeClient(r *bufio.Reader, w io.Writer, closeW func() error) (*yamux.Session, error) {
	hello := make([]byte, len(HelloLine))
	if _, err := io.ReadFull(r, hello); err != nil {
		return nil, err
	}
	if string(hello) != HelloLine {
		return nil, fmt.Errorf("%q is not the serving hello", hello)
	}
	return yamux.Client(inside.Stdio{Reader: r, Writer: w, CloseFunc: closeW}, MuxConfig())
}

// ServeLine is the request line of a served stream.
func ServeLine(args, env []string) []byte {
	b, _ := json.Marshal(ServeRequest{Args: args, Env: env}) // strings: cannot fail
	return append(b, '\n')
}

// SetupLine is the request line of a Setup stream.
func SetupLine(s Setup) []byte {
	b, _ := json.Marshal(ServeRequest{Setup: &s}) // cannot fail
	return append(b, '\n')
}

// mergeEnv is base with add's variables, a name in add replacing base's.
func mergeEnv(base, add []string) []string {
	if len(add) == 0 {
		return base
	}
	names := map[string]bool{}
	for _, kv := range add {
		k, _, _ := strings.Cut(kv, "=")
		names[k] = true
	}
	out := make([]string, 0, len(base)+len(add))
	for _, kv := range base {
		if k, _, _ := strings.Cut(kv, "="); !names[k] {
			out = append(out, kv)
		}
	}
	return append(out, add...)
}

// ReadFrames reads a served stream's frames (or an engine attach stream's,
// which has no FrameExit) into stdout and stderr until FrameExit or the
// stream's end. A writer that fails is written no more, and the stream is
// still read to its exit. exited reports whether FrameExit came; err is
// the stream's, io.ErrUnexpectedEOF for an end without FrameExit.
func ReadFrames(r io.Reader, stdout, stderr io.Writer) (code int, exited bool, err error) {
	out, errw := &sticky{w: stdout}, &sticky{w: stderr}
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return 0, false, err
		}
		n := int64(binary.BigEndian.Uint32(hdr[4:]))
		switch hdr[0] {
		case FrameStdout:
			if _, err := io.CopyN(out, r, n); err != nil {
				return 0, false, unexpected(err)
			}
		case FrameStderr:
			if _, err := io.CopyN(errw, r, n); err != nil {
				return 0, false, unexpected(err)
			}
		case FrameExit:
			if n > 16 {
				return 0, false, fmt.Errorf("malformed exit frame (%d bytes)", n)
			}
			b := make([]byte, n)
			if _, err := io.ReadFull(r, b); err != nil {
				return 0, false, unexpected(err)
			}
			c, err := strconv.Atoi(string(b))
			if err != nil {
				return 0, false, fmt.Errorf("malformed exit frame %q", b)
			}
			return c, true, nil
		default:
			return 0, false, fmt.Errorf("unknown frame type %d", hdr[0])
		}
	}
}

// unexpected is err, an end of the stream inside a frame said so.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// sticky writes to w until a write fails, then discards.
type sticky struct {
	w      io.Writer
	broken bool
}

func (s *sticky) Write(b []byte) (int, error) {
	if !s.broken {
		if _, err := s.w.Write(b); err != nil {
			s.broken = true
		}
	}
	return len(b), nil
}
