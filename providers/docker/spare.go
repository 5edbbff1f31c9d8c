package docker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/sandbox/driver"
)

// A warm sandbox keeps spares: execs of the shim created, started and
// attached (stdin included) before anyone asks for a process, running and
// waiting for their launch request on stdin (shim.SpareExecArgs; each is
// ready once it has said so with shim.ReadyLine). Start hands the oldest
// one the request instead of paying for an exec; the handshake and
// everything after are those of an ordinary exec. The workspace snapshot
// and copies out take one too (helper.go), so that a whole turn (the
// workspace described, the agent, described again, the conversation
// copied out) costs no exec at all with Options.Spares at its default.
// When the last one is taken, the next is made in the background once
// the process it launched is up (its first output), so Starts that
// follow one another each find one. A spare is not a process of the
// lease until it is taken: it does not count in active, and Close ends
// the waiting ones by closing their streams (the shim exits on the end of
// its stdin) before the container goes.

// spare is one exec of the shim waiting for its request.
type spare struct {
	token string
	made  chan struct{} // closed once the exec is attached, or failed

	// Set before made is closed.
	execID string
	conn   types.HijackedResponse
	served bool // a stream of the init's connection (serve.go), not an exec
	now    bool // made for the request at hand (servedSpare), not kept ahead
	err    error
}

// discard ends a spare nobody will use, once it is made.
func (sp *spare) discard() {
	<-sp.made
	if sp.err == nil {
		sp.conn.Close()
	}
}

// errSpareDead: the spare could not take the request, and nothing of it
// ran; Start makes an ordinary exec instead.
var errSpareDead = errors.New("docker: the spare exec is gone")

// Warm keeps spare execs of the shim in the sandbox from now on
// (Options.Spares of them), so that Start costs one write on an open
// stream instead of an exec (create, start, attach). It tops the spares
// up and returns once they are ready, or when ctx ends (they are still
// made); its error is the first spare's that failed, which costs nothing
// more: Start then falls back to an ordinary exec. It implements
// driver.Warmer.
func (s *Sandbox) Warm(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n := s.p.opts.Spares
	if n == 0 {
		n = DefaultSpares
	}
	if n < 0 {
		return nil
	}
	s.spareMu.Lock()
	if s.closing.Load() || s.spareOff {
		s.spareMu.Unlock()
		return fmt.Errorf("docker: %s is being released", s.id)
	}
	s.warm = true
	for len(s.spares) < n {
		s.makeSpareLocked()
	}
	waiting := slices.Clone(s.spares)
	s.spareMu.Unlock()
	var first error
	for _, sp := range waiting {
		select {
		case <-sp.made:
			if first == nil {
				first = sp.err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return first
}

// makeSpareLocked starts making a spare in the background and queues it
// for a later Start. Call with spareMu held.
func (s *Sandbox) makeSpareLocked() *spare {
	if s.spareCtx == nil {
		s.spareCtx, s.spareStop = context.WithCancel(context.Background())
	}
	ctx := s.spareCtx
	sp := &spare{token: shim.Token(), made: make(chan struct{})}
	s.spares = append(s.spares, sp)
	s.spareWG.Add(1)
	go func() {
		defer s.spareWG.Done()
		defer close(sp.made)
		if s.makeServed(ctx, sp) {
			return
		}
		if ctx.Err() != nil {
			sp.err = ctx.Err()
			return
		}
		s.execs.Add(1)
		ec, err := s.eng.cli.ContainerExecCreate(ctx, s.cid, container.ExecOptions{
			User:         s.user,
			AttachStdin:  true,
			AttachStdout: true,
			AttachStderr: true,
			Cmd:          shim.SpareExecArgs(layout.BinaryPath, sp.token, layout.RunDir),
		})
		if err != nil {
			sp.err = s.execErr(ctx, "making a spare process", err)
			return
		}
		resp, err := s.eng.cli.ContainerExecAttach(ctx, ec.ID, container.ExecAttachOptions{})
		if err != nil {
			sp.err = s.execErr(ctx, "making a spare process", err)
			return
		}
		// The attach returns before the process runs: the spare is ready
		// once the shim says so. Close unblocks the read.
		stop := context.AfterFunc(ctx, func() { resp.Close() })
		err = readReady(resp.Reader)
		if !stop() {
			sp.err = ctx.Err()
			return
		}
		if err != nil {
			resp.Close()
			sp.err = err
			return
		}
		sp.execID, sp.conn = ec.ID, resp
	}()
	return sp
}

// readReady reads the spare shim's shim.ReadyLine off the head of its
// attach stream (stdcopy frames), and nothing after it.
func readReady(r *bufio.Reader) error {
	const max = 64 << 10
	var out, errOut []byte
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return spareFailed(err, out, errOut)
		}
		n := int(binary.BigEndian.Uint32(hdr[4:]))
		if n > max || len(out)+len(errOut)+n > max {
			return spareFailed(errors.New("too much output"), out, errOut)
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return spareFailed(err, out, errOut)
		}
		switch stdcopy.StdType(hdr[0]) {
		case stdcopy.Stdout:
			out = append(out, b...)
		default: // the program's stderr, the engine's errors
			errOut = append(errOut, b...)
		}
		if bytes.IndexByte(out, '\n') >= 0 {
			if string(out) == shim.ReadyLine {
				return nil
			}
			return spareFailed(errors.New("no ready line"), out, errOut)
		}
	}
}

func spareFailed(err error, out, errOut []byte) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	if msg := strings.TrimSpace(string(out) + " " + string(errOut)); msg != "" {
		err = fmt.Errorf("%w: %q", err, trimMsg(msg))
	}
	return fmt.Errorf("docker: the spare exec of the shim did not start: %w", err)
}

func trimMsg(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// takeSpare returns the oldest spare (made or being made) for a Start
// to use, or nil.
func (s *Sandbox) takeSpare() *spare {
	s.spareMu.Lock()
	defer s.spareMu.Unlock()
	if len(s.spares) == 0 {
		return nil
	}
	sp := s.spares[0]
	s.spares[0] = nil
	s.spares = s.spares[1:]
	return sp
}

// refillSpare makes the next spare once the last was taken, while the
// sandbox is warm: a sandbox used for more processes than it has spares
// keeps one ready, without making more than it used.
func (s *Sandbox) refillSpare() {
	s.spareMu.Lock()
	defer s.spareMu.Unlock()
	if s.warm && len(s.spares) == 0 && !s.spareOff && !s.closing.Load() {
		s.makeSpareLocked()
	}
}

// dropSpare stops keeping spares and ends the waiting ones: their streams
// are closed and their shims exit on the end of their stdin. It returns
// once no spare is being made. Close calls it first.
func (s *Sandbox) dropSpare() {
	s.spareMu.Lock()
	s.spareOff = true
	s.warm = false
	sps := s.spares
	s.spares = nil
	stop := s.spareStop
	s.spareMu.Unlock()
	if stop != nil {
		stop()
	}
	s.spareWG.Wait()
	for _, sp := range sps {
		sp.discard()
	}
}

// startSpare starts req on sp. errSpareDead means nothing ran and Start
// should make an ordinary exec.
//
// A helper (helper.go) is no process of the lease: it does not count in
// active (one still ending, its result read, does not make Close stop the
// container), and taking the last spare for it makes no new one.
func (s *Sandbox) startSpare(ctx context.Context, sp *spare, req driver.ExecRequest, dir string, helper bool) (driver.Process, error) {
	select {
	case <-sp.made:
	case <-ctx.Done():
		go sp.discard()
		return nil, ctx.Err()
	}
	if sp.err != nil {
		return nil, errSpareDead
	}
	line := shim.SpecLine(shim.Spec{Dir: dir, Stdin: req.Stdin, Path: req.Path, Args: req.Args, Env: req.Env})
	// ctx ending cuts a write that blocks (a stream nobody reads).
	unblock := context.AfterFunc(ctx, func() { _ = sp.conn.Conn.SetWriteDeadline(time.Unix(1, 0)) })
	_, err := sp.conn.Conn.Write(line)
	unblock()
	if err != nil {
		// A request cut short is refused by the shim: nothing runs.
		sp.conn.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, errSpareDead
	}
	// A request written in full runs: from here on, ctx ending stops the
	// program (await), as for an ordinary exec.
	if !sp.now {
		s.spareRuns.Add(1)
	}
	if !req.Stdin {
		// The program has /dev/null; the shim reads no more.
		_ = sp.conn.CloseWrite()
	}
	// The next spare is made once this program is up: making it sooner
	// would slow the program's start, on a machine with few cores.
	var up func()
	if !helper {
		up = s.refillSpare
	}
	p := newProcess(s, sp.execID, sp.token, req.Path, sp.conn, req.Stdin, up)
	p.helper = helper
	pr, err := s.await(ctx, p)
	if err != nil && p.NoShim() && !errors.Is(err, driver.ErrVanished) {
		// The shim never answered: it was gone before it read the request
		// (killed), or never ran (the runtime could not start it). Nothing
		// ran: an exec of its own does what the spare could not.
		return nil, errSpareDead
	}
	return pr, err
}
