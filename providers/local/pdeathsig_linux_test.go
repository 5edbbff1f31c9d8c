package local_test

import (
	"bufio"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outposthq/outpost/providers/local"
	"github.com/outposthq/outpost/sandbox/driver"
)

// TestParentDeathThread: the parent-death signal fires when the thread
// that forked the child ends (go.dev/issue/27505). A process started from
// a goroutine whose thread then ends must keep running.
func TestParentDeathThread(t *testing.T) {
	l := acquire(t, local.New(&local.Options{BaseDir: t.TempDir()}))
	type started struct {
		p   driver.Process
		tid int
		err error
	}
	ch := make(chan started)
	// A goroutine that lands on the main thread (which never ends) keeps
	// it, locked and waiting, until the test has its thread: the next
	// goroutine then runs on another one. (Unlocking it at once let every
	// retry land on the main thread again on a loaded machine.)
	release := make(chan struct{})
	defer close(release)
	var s started
	for i := 0; s.p == nil; i++ {
		if i == 100 {
			t.Fatal("every goroutine ran on the main thread")
		}
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			if syscall.Gettid() == os.Getpid() {
				ch <- started{}
				<-release
				runtime.UnlockOSThread()
				return
			}
			p, err := l.Start(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", "echo $$; exec sleep 100000"}, Env: env(l)})
			ch <- started{p, syscall.Gettid(), err}
		}()
		if s = <-ch; s.err != nil {
			t.Fatal(s.err)
		}
	}
	t.Cleanup(func() { s.p.Signal(driver.Kill); s.p.Wait(); s.p.Close() })
	go io.Copy(io.Discard, s.p.Stderr())
	line, err := bufio.NewReader(s.p.Stdout()).ReadString('\n')
	pid, err2 := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || err2 != nil {
		t.Fatalf("the process printed %q (%v, %v): it ended with the thread that started it?", line, err, err2)
	}
	task := "/proc/self/task/" + strconv.Itoa(s.tid)
	for i := 0; ; i++ {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			break
		}
		if i == 1000 {
			b, _ := os.ReadFile(task + "/stat")
			t.Fatalf("the thread %d that started the process does not end: %s", s.tid, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The signal, if sent, is sent as the thread ends: by now it is
	// delivered.
	if ended(pid) {
		t.Error("the process ended with the thread that started it")
	}
}
