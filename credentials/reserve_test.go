package credentials

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/outposthq/outpost"
)

// The test binary doubles as a helper process that holds a reservation
// (the os/exec helper-process pattern): run with OUTPOST_CREDENTIALS_HELPER
// set to "reserve", it reserves OUTPOST_HELPER_PATH in a registry on
// OUTPOST_HELPER_LOCKDIR, prints "held" (or "refused <code>"), and releases
// when its standard input closes.
func TestMain(m *testing.M) {
	if os.Getenv("OUTPOST_CREDENTIALS_HELPER") == "reserve" {
		os.Exit(reserveHelper())
	}
	os.Exit(m.Run())
}

func reserveHelper() int {
	reg := NewRegistry(os.Getenv("OUTPOST_HELPER_LOCKDIR"))
	release, err := reg.Reserve(os.Getenv("OUTPOST_HELPER_PATH"))
	if err != nil {
		fmt.Printf("refused %s\n", outpost.CodeOf(err))
		return 0
	}
	fmt.Println("held")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // until EOF
	release()
	return 0
}

func TestReserveInProcess(t *testing.T) {
	dir := t.TempDir()
	reg := NewRegistry(filepath.Join(dir, "locks"))
	p := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(p, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}

	release, err := reg.Reserve(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{p, link, filepath.Join(dir, ".", "sub", "..", "auth.json")} {
		_, err := reg.Reserve(other)
		wantCode(t, err, outpost.Configuration, other, "already in use", "by another live sandbox lease", "single-use")
	}
	// Another registry of this process on the same lock directory is
	// refused by the lock file.
	_, err = NewRegistry(filepath.Join(dir, "locks")).Reserve(p)
	wantCode(t, err, outpost.Configuration, "already in use")

	// A different path is independent.
	other := filepath.Join(dir, "other.json")
	r2, err := reg.Reserve(other)
	if err != nil {
		t.Fatal(err)
	}
	r2()

	release()
	release()
	r3, err := reg.Reserve(link)
	if err != nil {
		t.Fatalf("after release: %v", err)
	}
	r3()

	if fi, err := os.Stat(filepath.Join(dir, "locks")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("lock directory: %v, %v", fi.Mode().Perm(), err)
	}
}

func TestReserveConcurrent(t *testing.T) {
	reg := NewRegistry(t.TempDir())
	p := filepath.Join(t.TempDir(), "auth.json")
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		won      int
		releases []func()
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := reg.Reserve(p)
			if err != nil {
				if outpost.CodeOf(err) != outpost.Configuration {
					t.Errorf("error %v", err)
				}
				return
			}
			mu.Lock()
			won++
			releases = append(releases, r)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d reservations succeeded, want 1", won)
	}
	for _, r := range releases {
		r()
	}
}

func TestReserveLockDirError(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "windows" {
		t.Skip("no lock files on windows")
	}
	_, err := NewRegistry(file).Reserve("/some/file")
	wantCode(t, err, outpost.Configuration, "cannot take its lock")
}

func TestReserveCrossProcess(t *testing.T) {
	switch runtime.GOOS {
	case "linux", "darwin", "freebsd", "netbsd", "openbsd", "dragonfly":
	default:
		t.Skip("reservations are per process on " + runtime.GOOS)
	}
	lockDir := t.TempDir()
	p := filepath.Join(t.TempDir(), "auth.json")

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		"OUTPOST_CREDENTIALS_HELPER=reserve",
		"OUTPOST_HELPER_LOCKDIR="+lockDir,
		"OUTPOST_HELPER_PATH="+p,
	)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	t.Cleanup(func() {
		if !waited {
			stdin.Close()
			_ = cmd.Wait()
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "held" {
		t.Fatalf("helper said %q, %v", line, err)
	}

	reg := NewRegistry(lockDir)
	_, err = reg.Reserve(p)
	wantCode(t, err, outpost.Configuration, p, "already in use", "by another outpost process")

	// The helper releases when its stdin closes, and exits.
	stdin.Close()
	waited = true
	if err := cmd.Wait(); err != nil {
		t.Fatalf("helper: %v", err)
	}
	release, err := reg.Reserve(p)
	if err != nil {
		t.Fatalf("after the helper released: %v", err)
	}

	// Now this process holds it: a helper is refused.
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = cmd.Env
	got, err := helper.Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(got)) != "refused configuration" {
		t.Errorf("helper while held here said %q", got)
	}
	release()
}

func TestReserveDefault(t *testing.T) {
	p := filepath.Join(t.TempDir(), "auth.json")
	release, err := Reserve(p)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	_, err = Reserve(p)
	wantCode(t, err, outpost.Configuration, "already in use")
	if !strings.HasPrefix(DefaultLockDir(), os.TempDir()) {
		t.Errorf("DefaultLockDir = %q, want it under %q", DefaultLockDir(), os.TempDir())
	}
}
