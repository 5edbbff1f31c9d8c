package kubernetes

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/rest"

	"github.com/outposthq/outpost/sandbox/driver"
)

// TestExecProtocols checks which upgrade each exec of Start asks the API
// server for first: a program with a live stdin (open while it runs) goes
// SPDY first, as client-go's WebSocket executor cannot end a stdin idle
// for a minute (Provider.executor); the others WebSocket first. The fake
// API server refuses every upgrade, so each Start also shows its
// fallback. Without ExecEach the lease's serving exec (serve.go), whose
// stdin is live, is asked for first, and once it cannot start every
// process is an exec of its own.
func TestExecProtocols(t *testing.T) {
	for _, tc := range []struct {
		name     string
		stdin    bool
		execEach bool
		want     []string
	}{
		{"live stdin", true, true, []string{"SPDY/3.1", "websocket"}},
		{"no stdin", false, true, []string{"websocket", "SPDY/3.1"}},
		{"the serving exec first", false, false, []string{"SPDY/3.1", "websocket", "websocket", "SPDY/3.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var upgrades []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.URL.Path, "/pods/outpost-exec/exec") {
					mu.Lock()
					upgrades = append(upgrades, r.Header.Get("Upgrade"))
					mu.Unlock()
					http.Error(w, "no upgrade here", http.StatusBadRequest)
					return
				}
				http.NotFound(w, r)
			}))
			defer srv.Close()
			cfg := &rest.Config{Host: srv.URL}
			a, err := newAPI(cfg, "agents")
			if err != nil {
				t.Fatal(err)
			}
			s := &Sandbox{p: &Provider{cfg: cfg, api: a, ns: "agents", opts: Options{ExecEach: tc.execEach}}, id: "outpost-exec", pod: "outpost-exec", procs: map[*process]bool{}}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := s.Start(ctx, driver.ExecRequest{Path: "cat", Stdin: tc.stdin}); err == nil {
				t.Fatal("Start succeeded against a server that refuses every upgrade")
			}
			mu.Lock()
			defer mu.Unlock()
			if d := cmp.Diff(tc.want, upgrades); d != "" {
				t.Errorf("upgrades asked for (-want +got):\n%s", d)
			}
			// Without ExecEach the serving exec could not start: the
			// lease says why its processes are execs of their own.
			err = s.Degraded()
			if tc.execEach && err != nil {
				t.Errorf("Degraded with ExecEach: %v", err)
			}
			if !tc.execEach && (err == nil || !strings.Contains(err.Error(), "serving exec")) {
				t.Errorf("Degraded once the serving exec could not start: %v", err)
			}
		})
	}
}
