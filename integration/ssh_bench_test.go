package integration

import (
	"context"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/internal/isolate"
	"github.com/outposthq/outpost/internal/testenv"
	sshp "github.com/outposthq/outpost/providers/ssh"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// The ssh provider's costs against OpenSSH's own client on the same
// server (docs/benchmarks.md, "SSH"). Run with
//
//	COUNT=6 BENCHTIME=20x PKGS=./integration scripts/bench.sh 'BenchmarkSSH(Lease|EchoTurn)'
//	go test ./integration -run '^$' -bench SSHBootstrap -benchtime 5x

// sshCmd is OpenSSH's client for srv running argv on the host: a new
// connection, the same key and known_hosts, strict host key checking.
func sshCmd(srv *sshtest.Server, argv ...string) *exec.Cmd {
	args := []string{"-F", "none", "-i", srv.Identity, "-o", "UserKnownHostsFile=" + srv.KnownHosts, "-o", "StrictHostKeyChecking=yes",
		"-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-p", strconv.Itoa(srv.Port), sshtest.User + "@" + srv.Host}
	return exec.Command("ssh", append(args, argv...)...)
}

func needSSHClient(b *testing.B) {
	if _, err := exec.LookPath("ssh"); err != nil {
		testenv.Missing(b, "OpenSSH's client (ssh), the baseline", "apt-get install openssh-client")
	}
}

// remoteOutpost is the path of outpost's binary on the host.
func remoteOutpost(b *testing.B, p *sshp.Provider) string {
	l, err := sandbox.Acquire(context.Background(), p, driver.Options{Workdir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close(context.Background())
	bin, err := l.Sandbox().(driver.PathLooker).LookPath(context.Background(), "outpost", "")
	if err != nil {
		b.Fatal(err)
	}
	return bin
}

// BenchmarkSSHLease: from nothing to the echo agent's first byte on the
// host.
//
//   - direct: `ssh host true` (OpenSSH's client, a new connection).
//   - outpost: a new provider (a new connection: handshake, key check,
//     the host probe), a lease (its directory, owner record and an empty
//     workspace copied in), the echo agent started under the shim, its
//     first byte read.
//   - outpost-held-connection: the same on a provider already connected,
//     as every lease after a provider's first is.
func BenchmarkSSHLease(b *testing.B) {
	needSSHClient(b)
	srv := sshtest.Shared(b)
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			if out, err := sshCmd(srv, "true").CombinedOutput(); err != nil {
				b.Fatalf("ssh: %v\n%s", err, out)
			}
		}
	})
	firstByte := func(b *testing.B, p *sshp.Provider, bin string) {
		l, err := sandbox.Acquire(ctx, p, driver.Options{Workdir: b.TempDir()})
		if err != nil {
			b.Fatal(err)
		}
		env := map[string]string{}
		for k, v := range l.Environment().Defaults {
			env[k] = v
		}
		for k, v := range l.Environment().Fixed {
			env[k] = v
		}
		pr, err := l.Start(ctx, driver.ExecRequest{Path: bin, Args: []string{"echo-agent", "--", "hello"}, Env: env})
		if err != nil {
			b.Fatal(err)
		}
		var one [1]byte
		if _, err := io.ReadFull(pr.Stdout(), one[:]); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		io.Copy(io.Discard, pr.Stdout())
		pr.Wait()
		pr.Close()
		l.Close(ctx)
		b.StartTimer()
	}
	bin := remoteOutpost(b, sshProvider(b, srv))
	b.Run("outpost", func(b *testing.B) {
		for b.Loop() {
			p := sshProvider(b, srv)
			firstByte(b, p, bin)
			b.StopTimer()
			p.Close()
			b.StartTimer()
		}
	})
	b.Run("outpost-held-connection", func(b *testing.B) {
		p := sshProvider(b, srv)
		remoteOutpost(b, p)
		for b.Loop() {
			firstByte(b, p, bin)
		}
	})
}

// BenchmarkSSHEchoTurn: a whole echo turn on the host.
//
//   - direct: `ssh host outpost echo-agent -- hello`, output read to the
//     end (OpenSSH's client, a new connection; the agent's session file
//     stays on the host).
//   - outpost: engine.Run on a provider whose connection is up: a lease,
//     the preset's checks, the agent under the shim, capture of its
//     session file into a filesystem store, the workspace copied back,
//     the lease removed.
//   - outpost-new-connection: the same with a new provider each turn.
//   - outpost-isolation-none: outpost's turn with isolation=none: the
//     agent runs as the host's user, not in bubblewrap's namespaces
//     (outpost is isolation=auto, namespaces on the test host).
func BenchmarkSSHEchoTurn(b *testing.B) {
	needSSHClient(b)
	srv := sshtest.Shared(b)
	held := sshProvider(b, srv)
	bin := remoteOutpost(b, held)
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			out, err := sshCmd(srv, bin, "echo-agent", "--", "hello").Output()
			if err != nil || !strings.Contains(string(out), "hello") {
				b.Fatalf("ssh: %v\n%s", err, out)
			}
		}
	})
	f := &turns{t: &testing.T{}, store: conversation.NewFS(b.TempDir()), workdir: b.TempDir()}
	turn := func(b *testing.B, p driver.Provider) {
		res, err := f.run(p, nil, engine.Turn{Prompt: "hello"})
		if err != nil || !strings.Contains(res.Text, "hello") {
			b.Fatal(res, err)
		}
	}
	b.Run("outpost", func(b *testing.B) {
		for b.Loop() {
			turn(b, held)
		}
	})
	b.Run("outpost-new-connection", func(b *testing.B) {
		for b.Loop() {
			p := sshProvider(b, srv)
			turn(b, p)
			b.StopTimer()
			p.Close()
			b.StartTimer()
		}
	})
	plain := sshProvider(b, srv, func(o *sshp.Options) { o.Isolation = isolate.None })
	b.Run("outpost-isolation-none", func(b *testing.B) {
		for b.Loop() {
			turn(b, plain)
		}
	})
}

// BenchmarkSSHBootstrap: installing the pinned Claude Code on the host as
// a turn's step 5 does (Installer.Ensure on a lease asking for the
// bootstrap cache), against `npm install` of the same version.
//
//   - direct: `npm install` into a fresh prefix with a fresh npm cache
//     (what a fresh host installing with npm pays), run locally.
//   - second-lease: the host already holds the verified tree (a lease
//     before made it): a PATH lookup and one check on the host.
//   - first-lease: the host's tree is removed before each install: the
//     402 MB binary is copied over the connection and its SHA-512 checked
//     on the host.
func BenchmarkSSHBootstrap(b *testing.B) {
	srv := sshtest.Shared(b)
	ctx := context.Background()
	inst := &bootstrap.Installer{}
	if _, err := inst.Prefetch(ctx, "claude", bootstrap.HostPlatform(), nil); err != nil {
		b.Fatal(err)
	}
	host, target, err := inst.SharedCache()
	if err != nil {
		b.Fatal(err)
	}
	p := sshProvider(b, srv)
	install := func(b *testing.B, before func()) {
		for b.Loop() {
			b.StopTimer()
			if before != nil {
				before()
			}
			l, err := sandbox.Acquire(ctx, p, driver.Options{Workdir: b.TempDir(), Mounts: []driver.Mount{{Source: host, Target: target}}})
			if err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			res, err := inst.Ensure(ctx, l, "claude", "claude", nil)
			b.StopTimer()
			if err != nil || !strings.Contains(res, "/trees/sha512-") {
				b.Fatal(res, err)
			}
			l.Close(ctx)
			b.StartTimer()
		}
	}
	b.Run("second-lease", func(b *testing.B) {
		// A first lease on the host mirrors the tree (untimed).
		l, err := sandbox.Acquire(ctx, p, driver.Options{Workdir: b.TempDir(), Mounts: []driver.Mount{{Source: host, Target: target}}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := inst.Ensure(ctx, l, "claude", "claude", nil); err != nil {
			b.Fatal(err)
		}
		l.Close(ctx)
		install(b, nil)
	})
	b.Run("first-lease", func(b *testing.B) {
		install(b, func() { srv.MustExec(b, "sh", "-c", "rm -rf /home/agent/.outpost/trees/*") })
	})
	if _, err := exec.LookPath("npm"); err != nil {
		b.Log("no npm: skipping the npm baseline")
		return
	}
	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			prefix, cache := b.TempDir(), b.TempDir()
			b.StartTimer()
			out, err := exec.Command("npm", "install", "--prefix", prefix, "--cache", cache, "--no-save", "--no-audit", "--no-fund",
				"--loglevel=error", "@anthropic-ai/claude-code@"+testenv.CLIVersion("claude")).CombinedOutput()
			if err != nil {
				b.Fatalf("npm install: %v\n%s", err, out)
			}
		}
	})
}
