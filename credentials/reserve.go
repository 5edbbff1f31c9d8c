package credentials

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/outposthq/outpost"
)

// errLocked is returned by tryLock when another process holds the lock.
var errLocked = errors.New("locked by another process")

// Registry tracks exclusive host files held by live leases, so that a file
// with single-use secrets (a ChatGPT auth.json whose refresh token is
// rotated on use) is never copied into two sandboxes at once: the two
// agents would each refresh the token and one of them, or the host, would
// be logged out.
//
// A reservation is held in the process (a set of paths) and across
// processes (an exclusive flock on a lock file per path, on Linux and the
// BSDs; elsewhere the reservation is per process only). Lock files are left
// in place after release: removing them would race with another process
// locking the same file.
//
// A Registry is safe for concurrent use.
type Registry struct {
	dir string // lock directory; "" = DefaultLockDir()

	mu   sync.Mutex
	held map[string]bool
}

// NewRegistry returns a registry whose lock files live in lockDir, created
// 0700 if missing. lockDir "" means DefaultLockDir(). Processes coordinate
// only through the same directory.
func NewRegistry(lockDir string) *Registry {
	return &Registry{dir: lockDir, held: map[string]bool{}}
}

// DefaultLockDir is where the process-wide registry keeps its lock files:
// <os.TempDir()>/outpost-locks-<uid>, one directory per user so that users
// sharing a temporary directory do not lock each other out.
func DefaultLockDir() string {
	return filepath.Join(os.TempDir(), "outpost-locks-"+strconv.Itoa(os.Getuid()))
}

var defaultRegistry = NewRegistry("")

// Reserve reserves path in the process-wide registry; see
// (*Registry).Reserve.
func Reserve(path string) (release func(), err error) {
	return defaultRegistry.Reserve(path)
}

// Reserve marks the host file at path as in use until release is called.
// The key is the absolute, cleaned path with symbolic links resolved when
// the file exists, so two spellings of one file collide. release is
// idempotent and safe to call from any goroutine; it is nil when err is not.
//
// A path already reserved, in this process or (through its lock file) in
// another, fails with an *outpost.Error of code configuration explaining
// why and naming the path; the same code is used when the lock file cannot
// be created. Op is left empty for the caller's step (outpost.Wrap fills
// it).
func (g *Registry) Reserve(path string) (release func(), err error) {
	key, err := reservationKey(path)
	if err != nil {
		return nil, &outpost.Error{Code: outpost.Configuration, Msg: fmt.Sprintf("exclusive host file %s: cannot resolve its path", path), Err: err}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held[key] {
		return nil, inUse(path, "by another live sandbox lease of this process")
	}
	dir := g.dir
	if dir == "" {
		dir = DefaultLockDir()
	}
	sum := sha256.Sum256([]byte(key))
	lockPath := filepath.Join(dir, hex.EncodeToString(sum[:])+".lock")
	unlock, err := tryLock(dir, lockPath)
	if errors.Is(err, errLocked) {
		return nil, inUse(path, "by another outpost process (lock file "+lockPath+")")
	}
	if err != nil {
		return nil, (&outpost.Error{
			Code: outpost.Configuration,
			Msg:  fmt.Sprintf("exclusive host file %s: cannot take its lock in %s", path, dir),
			Err:  err,
		}).Detail("path", path)
	}
	g.held[key] = true
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			delete(g.held, key)
			g.mu.Unlock()
			unlock()
		})
	}, nil
}

func inUse(path, where string) error {
	return (&outpost.Error{
		Code: outpost.Configuration,
		Msg: fmt.Sprintf("host file %s is already in use %s: it is exclusive (it holds single-use "+
			"credentials such as a refresh token that is rotated on use), so it is never copied into "+
			"two live sandboxes at once; release the other lease first", path, where),
	}).Detail("path", path)
}

func reservationKey(path string) (string, error) {
	if path == "" {
		return "", errors.New("empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	abs = filepath.Clean(abs)
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		return real, nil
	}
	return abs, nil
}
