package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outposthq/outpost/internal/testenv"
)

// User is the system user the server runs as when the tests run as root.
const User = "outpost-pg"

// Server is a PostgreSQL server started for the tests.
type Server struct {
	dir  string // private root: data/, sock/, log
	bin  string // directory of initdb, pg_ctl, postgres
	port int
	cred *syscall.Credential // nil: run as ourselves
	host string              // TCP listen address; "" for none

	mu      sync.Mutex
	running bool
}

var (
	once    sync.Once
	shared  *Server
	errOnce error
	dbSeq   atomic.Int64
)

// Run runs the package's tests and stops the server if one was started:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Run(m)) }
func Run(m *testing.M) int {
	code := m.Run()
	Stop()
	return code
}

// Stop stops the shared server, if started, and removes its files.
func Stop() {
	if shared != nil {
		shared.stop("fast")
		os.RemoveAll(shared.dir)
	}
}

// Shared returns the package's server, starting it on first use; a
// missing PostgreSQL fails the test under CI and skips it elsewhere.
func Shared(t testing.TB) *Server {
	t.Helper()
	once.Do(func() { shared, errOnce = start() })
	if errors.Is(errOnce, errNotInstalled) {
		testenv.Missing(t, "PostgreSQL (initdb, pg_ctl)", "scripts/postgres-up.sh (as root)")
	}
	if errOnce != nil {
		t.Fatalf("pgtest: %v", errOnce)
	}
	if err := shared.Start(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return shared
}

// NewDB creates a database for this test on the shared server and returns
// its URL (postgres://...?host=<socket dir>&port=...). It is dropped when
// the test ends.
func NewDB(t testing.TB) string {
	t.Helper()
	s := Shared(t)
	name := fmt.Sprintf("t%d_%d", os.Getpid(), dbSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.exec(ctx, `CREATE DATABASE "`+name+`"`); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if !s.Running() {
			return // the test stopped it; the files go with the server
		}
		if err := s.exec(ctx, `DROP DATABASE IF EXISTS "`+name+`" WITH (FORCE)`); err != nil {
			t.Errorf("pgtest: drop database: %v", err)
		}
	})
	return s.URL(name)
}

// Listening starts a private server for this test that also listens on
// TCP at host (an address of this machine, such as the test cluster's
// bridge), with trust authentication for clients in cidr only (pg_hba.conf;
// every other TCP client is refused), for clients that cannot reach the
// Unix socket, such as pods. It is stopped and removed when the test ends.
// Its URLs: URL (the socket) and TCPURL.
func Listening(t testing.TB, host, cidr string) *Server {
	t.Helper()
	if _, err := binDir(); errors.Is(err, errNotInstalled) {
		testenv.Missing(t, "PostgreSQL (initdb, pg_ctl)", "scripts/postgres-up.sh (as root)")
	}
	if _, _, err := net.ParseCIDR(cidr); err != nil || net.ParseIP(host) == nil {
		t.Fatalf("pgtest: Listening(%q, %q): want an IP address and a CIDR", host, cidr)
	}
	s, err := start()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		s.stop("fast")
		os.RemoveAll(s.dir)
	})
	s.host = host
	hba := fmt.Sprintf("host all all %s trust\n", cidr)
	if out, err := s.cmd("sh", "-c", `printf '%s' "$1" >>"$2"`, "sh", hba, filepath.Join(s.dataDir(), "pg_hba.conf")).CombinedOutput(); err != nil {
		t.Fatalf("pgtest: pg_hba.conf: %v\n%s", err, out)
	}
	if err := s.Start(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return s
}

// Private starts a server of this test alone, on its own Unix socket and
// with no TCP listener, that the test may stop and start (Stop, Start) as
// an outage does without touching the package's shared server, which
// other tests (parallel ones among them) use. It is stopped and removed
// when the test ends. Its URL: URL("postgres") or a database the test
// creates.
func Private(t testing.TB) *Server {
	t.Helper()
	if _, err := binDir(); errors.Is(err, errNotInstalled) {
		testenv.Missing(t, "PostgreSQL (initdb, pg_ctl)", "scripts/postgres-up.sh (as root)")
	}
	s, err := start()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		s.stop("immediate")
		os.RemoveAll(s.dir)
	})
	if err := s.Start(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return s
}

// TCPURL returns the URL of database db over TCP (a server of Listening).
func (s *Server) TCPURL(db string) string {
	return "postgres://postgres@" + net.JoinHostPort(s.host, strconv.Itoa(s.port)) + "/" + db + "?sslmode=disable"
}

// URL returns the URL of database db.
func (s *Server) URL(db string) string {
	q := url.Values{"host": {s.sockDir()}, "port": {strconv.Itoa(s.port)}, "sslmode": {"disable"}}
	return "postgres://postgres@/" + db + "?" + q.Encode()
}

func (s *Server) sockDir() string { return filepath.Join(s.dir, "sock") }
func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }

func (s *Server) exec(ctx context.Context, sql string) error {
	c, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, sql)
	return err
}

var errNotInstalled = errors.New("PostgreSQL is not installed")

// binDir finds initdb: on PATH, else the newest /usr/lib/postgresql/*/bin.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(dirs[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(dirs[j]))))
		return vi > vj
	})
	if len(dirs) == 0 {
		return "", errNotInstalled
	}
	return filepath.Dir(dirs[0]), nil
}

func start() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "outpost-pgtest-")
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		u, err := user.Lookup(User)
		if err != nil {
			u, err = user.Lookup("nobody")
		}
		if err != nil {
			return nil, fmt.Errorf("no user to run PostgreSQL as (run scripts/postgres-up.sh): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, err
	}
	if out, err := s.cmd("initdb", "-D", s.dataDir(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if out, err := s.cmd("mkdir", "-m", "0755", s.sockDir()).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("mkdir: %v\n%s", err, out)
	}
	// A port nobody listens on, though no TCP listener is opened: the
	// port names the socket file.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	return s, nil
}

func (s *Server) cmd(name string, args ...string) *exec.Cmd {
	path := filepath.Join(s.bin, name)
	if name == "mkdir" || name == "sh" {
		path = name
	}
	c := exec.Command(path, args...)
	c.Dir = s.dir
	c.Env = append(os.Environ(), "LC_ALL=C")
	if s.cred != nil {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	return c
}

// Start starts the server if it is not running (again, after Stop).
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return nil
	}
	opts := strings.Join([]string{
		"-k", s.sockDir(), "-p", strconv.Itoa(s.port), "-c", "listen_addresses=" + s.host,
		"-c", "max_connections=300", "-c", "unix_socket_permissions=0777",
	}, " ")
	if os.Getenv("OUTPOST_PGTEST_FSYNC") != "on" {
		// Test databases are thrown away: durability only slows
		// CREATE DATABASE. Benchmarks set OUTPOST_PGTEST_FSYNC=on.
		opts += " -c fsync=off -c full_page_writes=off"
	}
	out, err := s.cmd("pg_ctl", "-D", s.dataDir(), "-l", filepath.Join(s.dir, "log"), "-w", "-t", "120", "-o", opts, "start").CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		return fmt.Errorf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	s.running = true
	return nil
}

// Stop stops the server the way an outage does: mode "immediate" kills
// every backend at once (connections drop), "fast" shuts down cleanly.
func (s *Server) Stop(mode string) error { return s.stop(mode) }

func (s *Server) stop(mode string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return nil
	}
	out, err := s.cmd("pg_ctl", "-D", s.dataDir(), "-m", mode, "-w", "-t", "120", "stop").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
	s.running = false
	return nil
}

// Running reports whether the server was started and not stopped.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running
}
