package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// server is one `outpost serve` the harness drives, over its Unix socket.
type server struct {
	name   string
	pid    int
	sock   string
	client *http.Client // requests
	stream *http.Client // event streams (no timeout)
	cmd    *exec.Cmd    // nil when the harness did not start it
	exited chan struct{}
	log    string
}

// dialGate bounds the harness's connections that have not had an answer
// yet: outpost serve holds at most 128 connections on which no request
// has passed its peer check (Options.MaxUnauthConns) and closes the
// oldest beyond, so a burst of hundreds of new connections would lose
// requests that were never read.
var dialGate = make(chan struct{}, 64)

// gatedConn leaves the gate at its first read (the server answered, so
// it checked the peer) or when closed.
type gatedConn struct {
	net.Conn
	once sync.Once
}

func (c *gatedConn) leave() { c.once.Do(func() { <-dialGate }) }

func (c *gatedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.leave()
	return n, err
}

func (c *gatedConn) Close() error { c.leave(); return c.Conn.Close() }

func newClients(sock string) (*http.Client, *http.Client) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			select {
			case dialGate <- struct{}{}:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			c, err := (&net.Dialer{}).DialContext(ctx, "unix", sock)
			if err != nil {
				<-dialGate
				return nil, err
			}
			return &gatedConn{Conn: c}, nil
		},
		MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096,
	}
	return &http.Client{Transport: tr, Timeout: time.Minute}, &http.Client{Transport: tr}
}

// fleet are the servers of a run and the directory they keep their
// homes, work directories and logs in.
type fleet struct {
	dir     string
	servers []*server
}

// startFleet starts cfg.replicas servers (or attaches to --socket) and
// waits for each to answer /healthz.
func startFleet(ctx context.Context, cfg *config, store string) (*fleet, error) {
	if cfg.socket != "" {
		s := &server{name: "given", pid: cfg.pid, sock: cfg.socket}
		s.client, s.stream = newClients(s.sock)
		return &fleet{servers: []*server{s}}, waitHealthy(ctx, s)
	}
	dir, err := os.MkdirTemp("", "outpost-load-")
	if err != nil {
		return nil, err
	}
	f := &fleet{dir: dir}
	for i := range cfg.replicas {
		s, err := f.start(cfg, store, fmt.Sprintf("r%d", i+1))
		if err != nil {
			f.stop(cfg.keep)
			return nil, err
		}
		f.servers = append(f.servers, s)
	}
	for _, s := range f.servers {
		if err := waitHealthy(ctx, s); err != nil {
			f.stop(true)
			return nil, fmt.Errorf("%w (server log: %s)", err, s.log)
		}
	}
	return f, nil
}

// serveArgs are the flags of one replica: limits wide enough for the
// run's N turns and N × K streams, so that the harness measures the
// server's work and not its refusals.
func serveArgs(cfg *config, store, name, sock, work string) []string {
	n := max(cfg.conversations, 1)
	pool := cfg.poolSize
	if pool == 0 {
		pool = min(n, 64)
	}
	args := []string{serveSubcommand, "--socket", sock, "--workdir", work, "--sandbox", cfg.sandbox,
		"--max-concurrent", strconv.Itoa(n), "--max-queue", strconv.Itoa(n),
		"--max-streams", strconv.Itoa(n*cfg.watchers + 16), "--max-turn-streams", strconv.Itoa(cfg.watchers + 1),
		"--pool-size", strconv.Itoa(pool), "--log-format", "text", "--spool-push", "-1s"}
	if store != "" {
		args = append(args, "--store", store, "--replica", name, "--heartbeat", "1s")
	}
	return append(args, cfg.serveExtra...)
}

func (f *fleet) start(cfg *config, store, name string) (*server, error) {
	home := filepath.Join(f.dir, name)
	work := filepath.Join(home, "work")
	if err := os.MkdirAll(work, 0o700); err != nil {
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	s := &server{name: name, sock: filepath.Join(home, "serve.sock"), log: filepath.Join(home, "serve.log"), exited: make(chan struct{})}
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	s.cmd = exec.Command(self, serveArgs(cfg, store, name, s.sock, work)...)
	s.cmd.Env = append(os.Environ(), "OUTPOST_HOME="+filepath.Join(home, "outpost"), "OUTPOST_STORE=")
	if cfg.cpuProfile != "" {
		s.cmd.Env = append(s.cmd.Env, profileEnv+"="+filepath.Join(cfg.cpuProfile, name+".pprof"))
	}
	s.cmd.Stdout, s.cmd.Stderr = io.Discard, logf
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	s.pid = s.cmd.Process.Pid
	go func() { s.cmd.Wait(); logf.Close(); close(s.exited) }()
	s.client, s.stream = newClients(s.sock)
	return s, nil
}

// waitHealthy polls /healthz for up to a minute.
func waitHealthy(ctx context.Context, s *server) error {
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := s.client.Get("http://outpost/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.exited:
			return fmt.Errorf("server %s exited before it answered", s.name)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("server %s did not answer /healthz within a minute: %v", s.name, err)
		}
	}
}

// stop ends the servers the harness started (SIGTERM, then SIGKILL after
// 30 s) and removes their directory unless keep.
func (f *fleet) stop(keep bool) error {
	var errs []error
	for _, s := range f.servers {
		if s.cmd == nil {
			continue
		}
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
			s.cmd.Process.Kill()
			<-s.exited
			errs = append(errs, fmt.Errorf("server %s did not stop within 30 s of SIGTERM", s.name))
		}
	}
	if f.dir != "" && !keep {
		errs = append(errs, os.RemoveAll(f.dir))
	}
	return errors.Join(errs...)
}
