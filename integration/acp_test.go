package integration

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	sdk "github.com/coder/acp-go-sdk"

	"github.com/outposthq/outpost/acp/acptest"
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

// TestACPProcess: an editor's session with `outpost acp`, then the same
// session loaded by a second `outpost acp` process on the same store, its
// history replayed before it continues.
func TestACPProcess(t *testing.T) {
	store, home, work := t.TempDir(), t.TempDir(), t.TempDir()
	ctx := context.Background()
	p := startACP(t, store, home, "--agent", "echo", "--sandbox", "local")
	if _, err := p.Initialize(ctx, sdk.InitializeRequest{ProtocolVersion: sdk.ProtocolVersionNumber}); err != nil {
		t.Fatal(err)
	}
	s, err := p.NewSession(ctx, sdk.NewSessionRequest{Cwd: work, McpServers: []sdk.McpServer{}})
	if err != nil {
		t.Fatal(err)
	}
	if r := p.prompt(t, s.SessionId, "hello from the editor"); r.StopReason != sdk.StopReasonEndTurn {
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
	if _, err := p2.LoadSession(ctx, sdk.LoadSessionRequest{SessionId: s.SessionId, Cwd: work, McpServers: []sdk.McpServer{}}); err != nil {
		t.Fatalf("load: %v\n%s", err, p2.stderr.String())
	}
	replayed := p2.c.Take()
	if got := acptest.Text(replayed, true); got != "hello from the editor\n" {
		t.Errorf("replayed user text %q", got)
	}
	p2.prompt(t, s.SessionId, "and again")
	if got := acptest.Text(p2.c.Take(), false); !strings.Contains(got, "(turn 2)") {
		t.Errorf("answer after load %q", got)
	}
}

// BenchmarkACPFirstUpdate measures an editor's prompt-to-first-update
// through `outpost acp` (the echo agent on the local sandbox, one session,
// a prompt an iteration) against the echo agent run directly (its
// process started, to its first line of answer text). docs/benchmarks.md
// records the ratio.
func BenchmarkACPFirstUpdate(b *testing.B) {
	b.Run("acp", func(b *testing.B) {
		p := startACP(b, b.TempDir(), b.TempDir())
		ctx := context.Background()
		if _, err := p.Initialize(ctx, sdk.InitializeRequest{ProtocolVersion: sdk.ProtocolVersionNumber}); err != nil {
			b.Fatal(err)
		}
		s, err := p.NewSession(ctx, sdk.NewSessionRequest{Cwd: b.TempDir(), McpServers: []sdk.McpServer{}})
		if err != nil {
			b.Fatal(err)
		}
		var first time.Duration
		for b.Loop() {
			start := time.Now()
			done := make(chan struct{})
			go func() { p.prompt(b, s.SessionId, "hi"); close(done) }()
			p.c.WaitFor(b, func(sdk.SessionUpdate) bool { return true })
			first += time.Since(start)
			<-done
			p.c.Take()
		}
		b.ReportMetric(float64(first.Microseconds())/float64(b.N), "µs-to-first-update/op")
	})
	b.Run("direct", func(b *testing.B) {
		bin := outpostBinary(b)
		home := b.TempDir()
		var first time.Duration
		for b.Loop() {
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
			first += time.Since(start)
			io.Copy(io.Discard, br)
			cmd.Wait()
		}
		b.ReportMetric(float64(first.Microseconds())/float64(b.N), "µs-to-first-update/op")
	})
}
