package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/coder/acp-go-sdk"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/outposthq/outpost/acp/acptest"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
)

// These tests run `outpost acp` (the built binary) as an editor starts it,
// with the Go SDK's client over its standard input and output. The
// TypeScript SDK's client is in clients/typescript/test/acp.test.ts
// (TestServeTypeScriptClient); the protocol's cases are package acp's.

// acpProcess is one `outpost acp` process and the Go SDK's client of it.
type acpProcess struct {
	*sdk.ClientSideConnection
	c      *acptest.Client
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *lockedBuffer
}

func startACP(t testing.TB, store, home string, args ...string) *acpProcess {
	t.Helper()
	cmd := exec.Command(outpostBinary(t), append([]string{"--store", store, "acp"}, args...)...)
	cmd.Env = append(os.Environ(), "OUTPOST_HOME="+home)
	p := &acpProcess{c: acptest.New(), cmd: cmd, stderr: &lockedBuffer{}}
	cmd.Stderr = p.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.stdin = in
	p.ClientSideConnection = sdk.NewClientSideConnection(p.c, in, out)
	p.SetLogger(slog.New(slog.DiscardHandler))
	t.Cleanup(func() { p.stop(t) })
	return p
}

// stop ends the process's input and waits for it to exit 0.
func (p *acpProcess) stop(t testing.TB) {
	t.Helper()
	if p.cmd.ProcessState != nil {
		return
	}
	p.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("outpost acp: %v\n%s", err, p.stderr.String())
		}
	case <-time.After(2 * time.Minute):
		p.cmd.Process.Kill()
		t.Fatalf("outpost acp did not exit within 2 minutes of the end of its input\n%s", p.stderr.String())
	}
}

func (p *acpProcess) prompt(t testing.TB, sid sdk.SessionId, text string) sdk.PromptResponse {
	t.Helper()
	r, err := p.Prompt(context.Background(), sdk.PromptRequest{SessionId: sid, Prompt: []sdk.ContentBlock{sdk.TextBlock(text)}})
	if err != nil {
		t.Fatalf("prompt %q: %v\n%s", text, err, p.stderr.String())
	}
	return r
}

// session initializes the connection and opens a session in cwd.
func (p *acpProcess) session(tb testing.TB, cwd string) sdk.SessionId {
	tb.Helper()
	ctx := context.Background()
	if _, err := p.Initialize(ctx, sdk.InitializeRequest{ProtocolVersion: sdk.ProtocolVersionNumber}); err != nil {
		tb.Fatal(err)
	}
	s, err := p.NewSession(ctx, sdk.NewSessionRequest{Cwd: cwd, McpServers: []sdk.McpServer{}})
	if err != nil {
		tb.Fatalf("session/new: %v\n%s", err, p.stderr.String())
	}
	return s.SessionId
}

// TestACPProcess: an editor's session with `outpost acp`, then the same
// session loaded by a second `outpost acp` process on the same store, its
// history replayed before it continues.
func TestACPProcess(t *testing.T) {
	t.Parallel()
	store, home, work := t.TempDir(), t.TempDir(), t.TempDir()
	ctx := context.Background()
	p := startACP(t, store, home, "--agent", "echo", "--sandbox", "local")
	sid := p.session(t, work)
	if r := p.prompt(t, sid, "hello from the editor"); r.StopReason != sdk.StopReasonEndTurn {
		t.Fatalf("stop reason %s", r.StopReason)
	}
	if got := acptest.Text(p.c.Take(), false); !strings.Contains(got, "echo: hello from the editor (turn 1)") {
		t.Fatalf("answer %q", got)
	}
	p.stop(t)

	p2 := startACP(t, store, home)
	if _, err := p2.Initialize(ctx, sdk.InitializeRequest{ProtocolVersion: sdk.ProtocolVersionNumber}); err != nil {
		t.Fatal(err)
	}
	if _, err := p2.LoadSession(ctx, sdk.LoadSessionRequest{SessionId: sid, Cwd: work, McpServers: []sdk.McpServer{}}); err != nil {
		t.Fatalf("load: %v\n%s", err, p2.stderr.String())
	}
	replayed := p2.c.Take()
	if got := acptest.Text(replayed, true); got != "hello from the editor\n" {
		t.Errorf("replayed user text %q", got)
	}
	p2.prompt(t, sid, "and again")
	if got := acptest.Text(p2.c.Take(), false); !strings.Contains(got, "(turn 2)") {
		t.Errorf("answer after load %q", got)
	}
}

// TestACPProcessKeepsDockerSandbox: a session's prompts on docker run in
// one container, which the end of the connection removes.
func TestACPProcessKeepsDockerSandbox(t *testing.T) {
	t.Parallel()
	dockertest.Require(t)
	store, home, work := t.TempDir(), t.TempDir(), t.TempDir()
	p := startACP(t, store, home, "--agent", "echo", "--sandbox", "docker")
	sid := p.session(t, work)
	pid := p.cmd.Process.Pid
	var first []string
	for i, text := range []string{"one", "two", "three"} {
		p.prompt(t, sid, text)
		if got := acptest.Text(p.c.Take(), false); !strings.Contains(got, fmt.Sprintf("(turn %d)", i+1)) {
			t.Fatalf("prompt %d: answer %q", i+1, got)
		}
		got := containersOf(t, pid)
		if i == 0 {
			first = got
		}
		if len(got) != 1 || !slices.Equal(got, first) {
			t.Fatalf("after prompt %d the session's containers are %v, want one, the first prompt's %v", i+1, got, first)
		}
	}
	// The kept container removed behind the session's back: the next
	// prompt runs in a new one, not into a failure.
	dc := dockertest.Client(t)
	list, err := dc.ContainerList(t.Context(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", docker.LabelLease+"="+first[0]))})
	if err != nil || len(list) != 1 {
		t.Fatalf("the kept container: %v, %v", list, err)
	}
	if err := dc.ContainerRemove(t.Context(), list[0].ID, container.RemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	p.prompt(t, sid, "four")
	if got := acptest.Text(p.c.Take(), false); !strings.Contains(got, "(turn 4)") {
		t.Fatalf("the prompt after the removal: answer %q", got)
	}
	if got := containersOf(t, pid); len(got) != 1 || slices.Equal(got, first) {
		t.Fatalf("after the removal the session's containers are %v, want a new one", got)
	}
	p.stop(t)
	if got := containersOf(t, pid); len(got) > 0 {
		t.Fatalf("outpost acp exited leaving containers %v", got)
	}
}

// BenchmarkACPFirstUpdate measures an editor's prompt-to-first-update
// through `outpost acp` (the echo agent on the local sandbox, one session)
// against the echo agent run directly (its process started, to its first
// line of answer text), in pairs: each iteration runs one of each, and the
// metric is the median of the pairs' ratios, which a loaded machine's
// noise moves least. docs/benchmarks.md records it.
func BenchmarkACPFirstUpdate(b *testing.B) {
	p := startACP(b, b.TempDir(), b.TempDir())
	sid := p.session(b, b.TempDir())
	// The anchor is the binary `outpost acp` runs as the echo agent:
	// outpost-sandbox beside outpost (selfbin.HostAgent), as a release
	// installs them.
	bin, home := filepath.Join(filepath.Dir(outpostBinary(b)), "outpost-sandbox"), b.TempDir()
	var viaACP, direct, ratio []float64
	for b.Loop() {
		a := acpFirstUpdate(b, p, sid)
		d := directFirstText(b, bin, home)
		viaACP, direct, ratio = append(viaACP, ms(a)), append(direct, ms(d)), append(ratio, float64(a)/float64(d))
	}
	b.ReportMetric(median(viaACP), "acp-ms")
	b.ReportMetric(median(direct), "direct-ms")
	b.ReportMetric(median(ratio), "ratio")
}

// acpFirstUpdate is one prompt's time to its first update.
func acpFirstUpdate(b *testing.B, p *acpProcess, sid sdk.SessionId) time.Duration {
	start := time.Now()
	done := make(chan struct{})
	go func() { p.prompt(b, sid, "hi"); close(done) }()
	p.c.WaitFor(b, func(sdk.SessionUpdate) bool { return true })
	d := time.Since(start)
	<-done
	p.c.Take()
	return d
}

// directFirstText is the echo agent's time to its first line of text.
func directFirstText(b *testing.B, bin, home string) time.Duration {
	start := time.Now()
	cmd := exec.Command(bin, "echo-agent", "--", "hi")
	cmd.Env = append(os.Environ(), "HOME="+home)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	br := bufio.NewReader(out)
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			b.Fatal(err)
		}
		if strings.Contains(l, `"type":"text"`) {
			break
		}
	}
	d := time.Since(start)
	io.Copy(io.Discard, br)
	cmd.Wait()
	return d
}

// BenchmarkACPPromptSandbox: a prompt through `outpost acp` (the echo
// agent, from the prompt to its answer) in a session that keeps its
// sandbox (the default) against one that opens a sandbox every prompt
// (--sandbox-idle 0), on local and docker, in alternating pairs; the
// metric is the median of the per-pair ratios kept/fresh.
//
//	go test ./integration -run '^$' -bench BenchmarkACPPromptSandbox -benchtime 10x
func BenchmarkACPPromptSandbox(b *testing.B) {
	for _, sb := range []string{"local", "docker"} {
		b.Run(sb, func(b *testing.B) {
			if sb == "docker" {
				dockertest.Require(b)
			}
			open := func(args ...string) (*acpProcess, sdk.SessionId) {
				p := startACP(b, b.TempDir(), b.TempDir(), append([]string{"--sandbox", sb}, args...)...)
				sid := p.session(b, b.TempDir())
				p.prompt(b, sid, "warm up") // the first prompt opens a sandbox either way
				p.c.Take()
				return p, sid
			}
			kept, ks := open()
			fresh, fs := open("--sandbox-idle", "0")
			once := func(p *acpProcess, sid sdk.SessionId) float64 {
				start := time.Now()
				p.prompt(b, sid, "hi")
				d := time.Since(start)
				p.c.Take()
				return ms(d)
			}
			var k, f, ratio []float64
			i := 0
			for b.Loop() {
				var a, c float64
				if i%2 == 0 {
					a, c = once(kept, ks), once(fresh, fs)
				} else {
					c, a = once(fresh, fs), once(kept, ks)
				}
				i++
				k, f, ratio = append(k, a), append(f, c), append(ratio, a/c)
			}
			b.ReportMetric(median(k), "kept-ms")
			b.ReportMetric(median(f), "fresh-ms")
			b.ReportMetric(median(ratio), "ratio")
		})
	}
}
