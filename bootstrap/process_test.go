package bootstrap_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outposthq/outpost/bootstrap"
)

// The helper process of TestTwoProcessesOneDownload: installs the pin
// described by its environment and prints its progress phases and result,
// one per line.
const helperVar = "OUTPOST_BOOTSTRAP_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperVar) == "1" {
		os.Exit(helper())
	}
	os.Exit(m.Run())
}

func helper() int {
	d, err := bootstrap.ParseIntegrity(os.Getenv("HELPER_DIGEST"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	inst := &bootstrap.Installer{Pins: pinFor("fakecli", os.Getenv("HELPER_URL"), d, ""), CacheDir: os.Getenv("HELPER_CACHE")}
	res, err := inst.Install(context.Background(), &target{platform: linuxGlibc}, "fakecli", &bootstrap.EnsureOptions{Progress: func(p bootstrap.Progress) {
		fmt.Printf("phase %s\n", p.Phase)
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("result %s %s\n", res.Source, res.Path)
	return 0
}

// TestTwoProcessesOneDownload: two outpost processes install the same pin
// at once into one cache. One downloads; the other waits on the digest's
// lock and then uses the first one's copy.
func TestTwoProcessesOneDownload(t *testing.T) {
	srv := newServer(t)
	pkg := npmPackage(t, "fakecli", "9.9.9")
	url := srv.add("/fakecli.tgz", pkg)
	srv.mu.Lock() // the server's goroutines read it under the lock
	srv.gate = make(chan struct{})
	srv.mu.Unlock()
	cache := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	type proc struct {
		cmd   *exec.Cmd
		lines []string
		done  chan struct{}
	}
	waiting := make(chan struct{}, 2)
	var mu sync.Mutex
	procs := make([]*proc, 2)
	for i := range procs {
		cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), helperVar+"=1", "HELPER_URL="+url, "HELPER_DIGEST="+digestOf(pkg).SRI(), "HELPER_CACHE="+cache)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &proc{cmd: cmd, done: make(chan struct{})}
		procs[i] = p
		go func() {
			defer close(p.done)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				mu.Lock()
				p.lines = append(p.lines, sc.Text())
				mu.Unlock()
				if sc.Text() == "phase wait" {
					waiting <- struct{}{}
				}
			}
		}()
	}
	// One process is blocked in its download, the other on the lock.
	deadline := time.After(time.Minute)
	for srv.count("/fakecli.tgz") < 1 {
		select {
		case <-deadline:
			t.Fatal("no download started")
		case <-time.After(10 * time.Millisecond):
		}
	}
	select {
	case <-waiting:
	case <-deadline:
		t.Fatal("neither process waited for the other")
	}
	close(srv.gate)
	var results []string
	for i, p := range procs {
		<-p.done
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("process %d: %v (output %q)", i, err, p.lines)
		}
		last := p.lines[len(p.lines)-1]
		if !strings.HasPrefix(last, "result ") {
			t.Fatalf("process %d printed %q", i, p.lines)
		}
		results = append(results, strings.TrimPrefix(last, "result "))
	}
	if n := srv.count("/fakecli.tgz"); n != 1 {
		t.Errorf("%d downloads, want 1", n)
	}
	sources := map[string]bool{}
	for _, r := range results {
		src, path, _ := strings.Cut(r, " ")
		sources[src] = true
		if path != strings.SplitN(results[0], " ", 2)[1] {
			t.Errorf("paths differ: %q", results)
		}
		if got := run(t, newTarget(t, false), path); got != "fakecli 9.9.9" {
			t.Errorf("output = %q", got)
		}
	}
	if !sources["download"] || !sources["cache"] {
		t.Errorf("sources %v, want one download and one cache", results)
	}
}
