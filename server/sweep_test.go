package server_test

import (
	"context"
	"sync"
	"testing"

	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/memsandbox"
	"github.com/outposthq/outpost/server"
)

// sweepProvider is an in-memory provider with a sweep (driver.Sweeper),
// registered once as "sweeptest".
type sweepProvider struct {
	*memsandbox.Provider
	swept chan struct{}
	once  sync.Once
}

func (p *sweepProvider) Sweep() { p.once.Do(func() { close(p.swept) }) }

var sweepTest = &sweepProvider{Provider: memsandbox.New(nil), swept: make(chan struct{})}

func init() {
	driver.Register("sweeptest", func(map[string]string) (driver.Provider, error) { return sweepTest, nil })
}

// TestServeStartsSweeps: a server starts the sweep of every served
// provider that has one, before any turn: a replica that has not run a
// turn still removes what a lost replica left (on the test cluster, a
// new replica after a rolling restart left a force-deleted one's 7 pods
// in place for over 55 s, with a sweep bound of 25 s).
func TestServeStartsSweeps(t *testing.T) {
	srv, err := server.New(&server.Options{Workdir: t.TempDir(), Environ: []string{}, Sandboxes: []string{"sweeptest"}, PoolSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	select {
	case <-sweepTest.swept:
	default:
		t.Fatal("the served provider's sweep was not started")
	}
}
