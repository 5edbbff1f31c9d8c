package integration

import (
	"context"
	"encoding/json"
	"errors"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/cmd/outpost/cli"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/providers/local"
	sshp "github.com/outposthq/outpost/providers/ssh"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/sandboxtest"
)

// The ssh provider against a real OpenSSH server: the image
// outpost/sshd:test (scripts/build-images.sh), one container shared by
// the package's tests (sshtest.Shared), started by testcontainers-go with
// fresh keys and a known_hosts file the test writes.

// sshProvider is an ssh provider for srv with the test's static outpost
// binary.
func sshProvider(t testing.TB, srv *sshtest.Server, mod ...func(*sshp.Options)) *sshp.Provider {
	t.Helper()
	bin := outpostBinary(t)
	return sshtest.Provider(t, srv, append([]func(*sshp.Options){func(o *sshp.Options) { o.Binary = bin }}, mod...)...)
}

// sshSettings are the CLI's --set flags for srv.
func sshSettings(t testing.TB, srv *sshtest.Server) []string {
	return []string{"--set", "host=" + srv.Addr(), "--set", "identity=" + srv.Identity, "--set", "known_hosts=" + srv.KnownHosts, "--set", "config=none", "--set", "binary=" + outpostBinary(t)}
}

// TestSSHConformance runs the provider conformance suite on the real
// sshd.
func TestSSHConformance(t *testing.T) {
	t.Parallel()
	srv := sshtest.Shared(t)
	sandboxtest.RunConformanceTests(t, sandboxtest.Harness{
		NewProvider: func(t *testing.T) driver.Provider { return sshProvider(t, srv) },
	})
}

// TestSSHEchoTurns: echo turns on ssh with resume and fork (each turn a
// fresh lease), and failed turns on a held lease that survives them.
func TestSSHEchoTurns(t *testing.T) {
	t.Parallel()
	srv := sshtest.Shared(t)
	p := sshProvider(t, srv)
	f := &turns{t: t, store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
	res := f.ok(p, engine.Turn{Prompt: "hello"})
	wantTurn(t, res, 1)
	if res.Sandbox != "ssh" || res.Conversation == "" || !res.Usage.Complete {
		t.Errorf("result %+v", res)
	}
	res2 := f.ok(p, engine.Turn{Prompt: "again", Resume: res.Conversation})
	wantTurn(t, res2, 2)
	if res2.Conversation != res.Conversation {
		t.Errorf("resume changed the conversation: %s", res2.Conversation)
	}
	fork := f.ok(p, engine.Turn{Prompt: "forked", Fork: res.Conversation})
	wantTurn(t, fork, 3)
	if fork.Parent != res.Conversation || fork.Session == res2.Session {
		t.Errorf("fork %+v", fork)
	}
	wantTurn(t, f.ok(p, engine.Turn{Prompt: "fork again", Resume: fork.Conversation}), 4)

	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: f.workdir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	for _, c := range []struct {
		prompt string
		code   outpost.Code
		turn   engine.Turn
	}{
		{prompt: "#crash", code: outpost.Process},
		{prompt: "#slow=100000", code: outpost.Timeout, turn: engine.Turn{Timeout: 2 * time.Second}},
	} {
		turn := c.turn
		turn.Prompt = c.prompt
		_, err := f.run(nil, l, turn)
		var oe *outpost.Error
		if !errors.As(err, &oe) || oe.Code != c.code || oe.Details["vanished"] != nil {
			t.Errorf("%s: %v, want code %s without vanished", c.prompt, err, c.code)
		}
	}
	wantTurn(t, f.ok2(l, engine.Turn{Prompt: "still here"}), 1)
}

// TestSSHConversationsAcrossSandboxes: a conversation started on local is
// resumed on ssh, then on docker.
func TestSSHConversationsAcrossSandboxes(t *testing.T) {
	t.Parallel()
	srv := sshtest.Shared(t)
	dockertest.Require(t, dockertest.Busybox)
	s := sshProvider(t, srv)
	d := dockerProvider(t, dockertest.Busybox)
	lp := local.New(&local.Options{BaseDir: t.TempDir()})
	f := &turns{t: t, store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
	c := f.ok(lp, engine.Turn{Prompt: "born on local"})
	wantTurn(t, c, 1)
	r := f.ok(s, engine.Turn{Prompt: "over ssh", Resume: c.Conversation})
	wantTurn(t, r, 2)
	r = f.ok(d, engine.Turn{Prompt: "in docker", Resume: c.Conversation})
	wantTurn(t, r, 3)
	m, err := f.store.Meta(t.Context(), c.Conversation)
	if err != nil || m.Turns != 3 || m.Sandbox != "docker" {
		t.Errorf("meta %+v, %v", m, err)
	}
}

// TestSSHRealClaude bootstraps the real pinned Claude Code on the remote
// host (mirrored from the host cache into the provider's tree directory
// there, verified by SHA-512 on the host) and runs turns with it against
// the fake Anthropic API, which the container reaches through a relay on
// the Docker bridge's gateway. The second turn finds the tree on the
// host and copies nothing. Not parallel: another test's mirror of the
// same tree in progress would show in the host's listing it checks.
func TestSSHRealClaude(t *testing.T) {
	h := claudePreset(t)
	srv := sshtest.Shared(t)
	api := anthropic.New(t, anthropic.Options{})
	relay := srv.Relay(t, api.Addr())
	p := sshProvider(t, srv)
	environ := []string{"PATH=/usr/bin:/bin", "ANTHROPIC_API_KEY=sk-fake", "ANTHROPIC_BASE_URL=http://" + relay}
	f := &turns{t: t, store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
	var conv string
	for i, prompt := range []string{"say hi", "again"} {
		res, err := f.run(p, nil, engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: h}, Prompt: prompt, Resume: conv}, func(o *engine.RunOptions) { o.Environ = environ })
		if err != nil {
			t.Fatalf("turn %d: %v\nevents: %+v", i+1, err, f.events)
		}
		conv = res.Conversation
		if res.Text != anthropic.DefaultText || res.Sandbox != "ssh" {
			t.Errorf("turn %d: result %+v", i+1, res)
		}
		ps := bootstrapNotices(f.events)
		if len(ps) == 0 {
			t.Fatalf("turn %d: no bootstrap: the host already has claude?", i+1)
		}
		done := ps[len(ps)-1]
		if done.Phase != bootstrap.PhaseDone || !strings.Contains(done.Path, "/.outpost/trees/sha512-") || done.Version != testenv.CLIVersion("claude") {
			t.Errorf("turn %d: done notice %+v: want the pinned claude run from the host's tree", i+1, done)
		}
	}
	if n := len(api.Requests()); n < 2 {
		t.Errorf("the fake API saw %d requests", n)
	}
	// The shared host holds other tests' trees too: claude's, named in
	// the done notices, is there once, verified.
	ps := bootstrapNotices(f.events)
	tree, _, _ := strings.Cut(strings.TrimPrefix(ps[len(ps)-1].Path[strings.Index(ps[len(ps)-1].Path, "/.outpost/trees/")+len("/.outpost/trees/"):], "/"), "/")
	out := srv.MustExec(t, "sh", "-c", "ls /home/agent/.outpost/trees")
	if lines := strings.Fields(out); !slices.Contains(lines, tree) || !slices.Contains(lines, tree+".sum") || strings.Count(out, tree) != 2 {
		t.Errorf("trees on the host: %q, want claude's %s once, verified", out, tree)
	}
}

// leasesOf lists the lease directories on srv whose owner is pid.
func leasesOf(t *testing.T, srv *sshtest.Server, pid int) []string {
	t.Helper()
	out := srv.MustExec(t, "sh", "-c", `for d in /home/agent/.outpost/leases/*/; do [ -f "$d/owner" ] && printf '%s\t%s\n' "$d" "$(cat "$d/owner")"; done; true`)
	var dirs []string
	for _, line := range strings.Split(out, "\n") {
		dir, js, ok := strings.Cut(line, "\t")
		if !ok {
			continue
		}
		var rec sshp.Record
		if json.Unmarshal([]byte(js), &rec) == nil && rec.Owner.PID == pid {
			dirs = append(dirs, path.Clean(dir))
		}
	}
	return dirs
}

// processesIn lists the host's processes whose command line names dir.
func processesIn(t *testing.T, srv *sshtest.Server, dir string) []string {
	t.Helper()
	var left []string
	for _, l := range strings.Split(srv.MustExec(t, "ps", "-eo", "pid,args"), "\n") {
		if strings.Contains(l, dir) && !strings.Contains(l, "ps -eo") {
			left = append(left, strings.TrimSpace(l))
		}
	}
	return left
}

// TestSSHSIGKILLLeavesNoOrphan kills outpost with SIGKILL in the middle
// of an ssh turn: its lease directory and processes survive it on the
// host, and the next outpost invocation (a new turn, or outpost gc)
// removes them. Not parallel: a sweep by another test's ssh lease on the
// shared sshd would take the dead owner's lease before the gc whose
// report this reads.
func TestSSHSIGKILLLeavesNoOrphan(t *testing.T) {
	srv := sshtest.Shared(t)
	home := t.TempDir()
	set := sshSettings(t, srv)
	for _, next := range [][]string{
		append(append([]string{"run", "--sandbox", "ssh"}, set...), "after the kill"),
		append([]string{"gc", "--sandbox", "ssh", "--json"}, set...),
	} {
		t.Run(next[0], func(t *testing.T) {
			cmd, sc := startOutpost(t, home, append(append([]string{"run", "--sandbox", "ssh", "--json"}, set...), "#slow=100000")...)
			untilDelta(t, sc)
			pid := cmd.Process.Pid
			dirs := leasesOf(t, srv, pid)
			if len(dirs) != 1 {
				t.Fatalf("outpost (pid %d) mid-turn owns leases %v, want one", pid, dirs)
			}
			if len(processesIn(t, srv, dirs[0])) == 0 {
				t.Fatalf("no process of the lease %s runs on the host", dirs[0])
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			cmd.Wait()
			code, out, errOut := runOutpost(t, home, t.TempDir(), next...)
			if code != 0 {
				t.Fatalf("outpost %v: exit %d\n%s%s", next, code, out, errOut)
			}
			if next[0] == "gc" {
				var rep sshp.GCReport
				if err := json.Unmarshal([]byte(out), &rep); err != nil {
					t.Fatalf("gc --json: %v\n%s", err, out)
				}
				found := false
				for _, l := range rep.Leases {
					found = found || (l.Owner.PID == pid && l.Removed)
				}
				if !found {
					t.Errorf("gc report lacks the dead owner's lease: %+v", rep)
				}
			}
			if got := leasesOf(t, srv, pid); len(got) != 0 {
				t.Errorf("after `outpost %s` the dead owner (pid %d) still has leases %v", next[0], pid, got)
			}
			if left := processesIn(t, srv, dirs[0]); len(left) != 0 {
				t.Errorf("after `outpost %s` processes of the dead owner survive:\n%s", next[0], strings.Join(left, "\n"))
			}
		})
	}
}

// TestSSHHostGoneMidTurn stops the sshd container (the host goes away)
// in the middle of a turn: the turn fails with code sandbox, reporting
// the sandbox vanished and the connection lost, within the keepalive
// bound. Not parallel. outpost's binary is copied to the host first,
// over a connection with the default keepalive: copied under the 2 s
// keepalive, on a loaded machine it could outlast three keepalives (the
// fresh-clone suite's "connection lost copying outpost's binary").
func TestSSHHostGoneMidTurn(t *testing.T) {
	srv := sshtest.New(t)
	if _, err := sshProvider(t, srv).GC(t.Context(), sshp.GCOptions{DryRun: true}); err != nil {
		t.Fatalf("copying outpost's binary to the host: %v", err)
	}
	p := sshProvider(t, srv, func(o *sshp.Options) { o.KeepAlive = 2 * time.Second; o.StartTimeout = 5 * time.Second })
	f := &turns{t: t, store: conversation.NewFS(t.TempDir()), workdir: t.TempDir()}
	var once sync.Once
	stopped := make(chan error, 1)
	_, err := f.run(p, nil, engine.Turn{Prompt: "#slow=100000"}, func(o *engine.RunOptions) {
		inner := o.OnEvent
		o.OnEvent = func(ev harness.Event) {
			inner(ev)
			if ev.Type == harness.EventMessage && ev.Delta {
				once.Do(func() { go func() { stopped <- srv.Stop(context.Background()) }() })
			}
		}
	})
	fired := false
	once.Do(func() { fired = true }) // a no-op when the stop was fired
	if fired {
		t.Fatalf("the turn ended before the agent printed anything: %v", err)
	}
	if serr := <-stopped; serr != nil {
		t.Fatal(serr)
	}
	var oe *outpost.Error
	if !errors.As(err, &oe) || oe.Code != outpost.Sandbox {
		t.Fatalf("turn on a host that went away: %v, want code sandbox", err)
	}
	if oe.Details["vanished"] != true || oe.Details["disconnected"] != true {
		t.Errorf("details %v, want vanished and disconnected", oe.Details)
	}
	if !errors.Is(err, driver.ErrDisconnected) {
		t.Errorf("the error does not wrap ErrDisconnected: %v", err)
	}
	t.Logf("error: %v", err)
}

var _ = strconv.Itoa

// TestSSHDoctorIsolation: `outpost doctor --sandbox ssh` says how the
// host's leases run: in bubblewrap's namespaces on the test host (it has
// bubblewrap), as the host's user with isolation=none, and, in capitals
// with a fix, why isolation=auto runs without them where bwrap is not.
func TestSSHDoctorIsolation(t *testing.T) {
	t.Parallel()
	srv := sshtest.Shared(t)
	set := sshSettings(t, srv)
	for _, c := range []struct {
		extra  []string
		status string
		want   string
	}{
		{nil, "ok", "namespaces on the host"},
		{[]string{"--set", "isolation=none"}, "info", "isolation=none"},
		{[]string{"--set", "bwrap=/nonexistent/bwrap"}, "warn", "NOT ISOLATED"},
	} {
		args := append(append([]string{"doctor", "--sandbox", "ssh", "--json"}, set...), c.extra...)
		_, out, errOut := runOutpost(t, t.TempDir(), t.TempDir(), args...)
		var got *cli.DoctorCheck
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var ch cli.DoctorCheck
			if json.Unmarshal([]byte(line), &ch) == nil && ch.Check == "isolation" {
				got = &ch
			}
		}
		if got == nil || got.Status != c.status || !strings.Contains(got.Message, c.want) {
			t.Errorf("doctor %v: isolation check %+v\n%s%s", c.extra, got, out, errOut)
		}
	}
}
