package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/server"
)

// Figures from these benchmarks are in docs/benchmarks.md ("Serve and
// the warm pool"):
//
//	PKGS=./integration BENCHTIME=20x COUNT=5 scripts/bench.sh 'BenchmarkServe'

// BenchmarkServeFirstByte: a sandbox taken from a warm sandbox.Pool until
// the first byte of the echo agent inside it, against `docker run` of the
// same agent until its first byte. The pool refills in the background
// between iterations (not counted), as it does between a server's turns.
func BenchmarkServeFirstByte(b *testing.B) {
	p := benchProvider(b)
	wd := b.TempDir()
	ctx := context.Background()
	buf := make([]byte, 1)
	b.Run("direct", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			cmd := rawRun(b)
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(out, buf); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			io.Copy(io.Discard, out)
			cmd.Wait()
			b.StartTimer()
		}
	})
	b.Run("pool", func(b *testing.B) {
		ready := make(chan sandbox.PoolStats, 1024)
		pool := sandbox.NewPool(&sandbox.PoolOptions{
			Size:     1,
			Open:     func(string, map[string]string) (driver.Provider, error) { return p, nil },
			OnChange: func(s sandbox.PoolStats) { ready <- s },
		})
		defer func() { b.StopTimer(); pool.Close(ctx) }() // teardown: not counted
		key := sandbox.PoolKey{Provider: "docker", Workdir: wd}
		pool.Warm(key)
		waitPool := func() {
			for s := range ready {
				if s.Ready == 1 && s.Leased == 0 {
					return
				}
			}
		}
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			waitPool()
			b.StartTimer()
			l, err := pool.Get(ctx, key)
			if err != nil {
				b.Fatal(err)
			}
			env := l.Environment()
			pr, err := l.Start(ctx, driver.ExecRequest{Path: layout.BinaryPath, Args: []string{echo.Subcommand, "--", "hello"}, Env: map[string]string{"HOME": env.Fixed["HOME"], "PATH": env.Defaults["PATH"]}})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(pr.Stdout(), buf); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			go io.Copy(io.Discard, pr.Stderr())
			io.Copy(io.Discard, pr.Stdout())
			pr.Wait()
			pr.Close()
			pool.Release(key, l)
			b.StartTimer()
		}
	})
}

// BenchmarkServeTurn: a whole echo turn on docker through the HTTP API
// (POST /v1/turns, its SSE stream to the result: a pooled container, the
// agent run and decoded, the conversation captured), against `docker run
// --rm` of the same agent. Releasing the used container happens after the
// result, in the background, as in the server; the next iteration waits
// for a ready sandbox outside the timer only when none is ready.
func BenchmarkServeTurn(b *testing.B) {
	dockertest.Require(b, dockertest.Busybox)
	b.Run("direct", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			cmd := rawRun(b)
			if out, err := cmd.Output(); err != nil || len(out) == 0 {
				b.Fatalf("docker run: %v %q", err, out)
			}
		}
	})
	b.Run("serve", func(b *testing.B) {
		srv, err := server.New(&server.Options{
			Store:     conversation.NewFS(b.TempDir()),
			Workdir:   b.TempDir(),
			Environ:   []string{},
			Sandboxes: []string{"docker"},
			Settings:  map[string]map[string]string{"docker": {"image": dockertest.Busybox, "binary": outpostBinary(b)}},
			PoolSize:  2,
			Warm:      []server.WarmKey{{Sandbox: "docker"}},
		})
		if err != nil {
			b.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go srv.Serve(ln, nil)
		defer func() { b.StopTimer(); srv.Shutdown(context.Background()) }() // teardown: not counted
		url := "http://" + ln.Addr().String()
		turn := func() {
			resp, err := http.Post(url+"/v1/turns", "application/json", strings.NewReader(`{"prompt":"hello"}`))
			if err != nil {
				b.Fatal(err)
			}
			var st server.TurnStatus
			json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			resp, err = http.Get(url + "/v1/turns/" + st.ID + "/events")
			if err != nil {
				b.Fatal(err)
			}
			sc := bufio.NewScanner(resp.Body)
			var last []byte
			for sc.Scan() {
				if bytes.HasPrefix(sc.Bytes(), []byte("data: ")) {
					last = append(last[:0], sc.Bytes()...)
				}
			}
			resp.Body.Close()
			if !bytes.Contains(last, []byte(`"type":"result"`)) || !bytes.Contains(last, []byte(`"error":null`)) {
				b.Fatalf("turn: %s", last)
			}
		}
		pooled := func() bool {
			for _, s := range srv.Pool().Stats() {
				if s.Ready > 0 {
					return true
				}
			}
			return false
		}
		turn() // the first fills the pool
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if !pooled() {
				b.StopTimer()
				for !pooled() {
					time.Sleep(5 * time.Millisecond) // outside the timer
				}
				b.StartTimer()
			}
			turn()
		}
	})
}

// BenchmarkServePoolTurn is BenchmarkDockerTurn's turn on a pooled lease
// (library use of sandbox.Pool, no HTTP).
func BenchmarkServePoolTurn(b *testing.B) {
	p := benchProvider(b)
	wd := b.TempDir()
	ctx := context.Background()
	pool := sandbox.NewPool(&sandbox.PoolOptions{Size: 2, Open: func(string, map[string]string) (driver.Provider, error) { return p, nil }})
	defer func() { b.StopTimer(); pool.Close(ctx) }() // teardown: not counted
	key := sandbox.PoolKey{Provider: "docker", Workdir: wd}
	turn := engine.Turn{Agent: harness.Agent{Kind: "cli", Harness: echo.Harness()}, Prompt: "hello", Workdir: wd}
	o := &engine.RunOptions{Store: conversation.NewFS(b.TempDir()), Environ: []string{}}
	for i := 0; i < b.N; i++ {
		l, err := pool.Get(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		o.Lease = l
		if _, err := engine.Run(ctx, turn, o); err != nil {
			b.Fatal(err)
		}
		pool.Release(key, l)
	}
}
