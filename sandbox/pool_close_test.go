package sandbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// slowProvider's Open waits for its ctx to end, then takes a while to
// remove what it made, which needs the provider open.
type slowProvider struct {
	mu      sync.Mutex
	opening chan struct{} // closed once an Open waits
	once    sync.Once
	closed  bool
	started int  // Opens begun
	cleaned int  // Opens that removed what they made with the provider open
	late    bool // an Open found the provider closed during its cleanup
}

func (p *slowProvider) Name() string                      { return "slow" }
func (p *slowProvider) Capabilities() driver.Capabilities { return driver.Capabilities{} }
func (p *slowProvider) Open(ctx context.Context, _ driver.Options) (driver.Sandbox, error) {
	p.mu.Lock()
	p.started++
	p.mu.Unlock()
	p.once.Do(func() { close(p.opening) })
	<-ctx.Done()
	time.Sleep(200 * time.Millisecond) // the removal of what it made
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.late = true
	} else {
		p.cleaned++
	}
	return nil, ctx.Err()
}

func (p *slowProvider) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return nil
}

// TestPoolCloseLetsOpensFinish: a Close whose ctx has ended returns its
// error at once, and still closes the provider only after the sandboxes
// being opened have removed what they made.
func TestPoolCloseLetsOpensFinish(t *testing.T) {
	prov := &slowProvider{opening: make(chan struct{})}
	p := sandbox.NewPool(&sandbox.PoolOptions{Size: 2, Open: func(string, map[string]string) (driver.Provider, error) { return prov, nil }})
	if err := p.Warm(sandbox.PoolKey{Provider: "slow", Workdir: "/w"}); err != nil {
		t.Fatal(err)
	}
	<-prov.opening
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close with an ended ctx: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		prov.mu.Lock()
		closed, started, cleaned, late := prov.closed, prov.started, prov.cleaned, prov.late
		prov.mu.Unlock()
		if late {
			t.Fatal("the provider was closed while a sandbox being opened was still removing what it made")
		}
		if closed {
			// The pool may have begun one Open or both before Close;
			// every one begun must have cleaned up first.
			if cleaned != started {
				t.Fatalf("provider closed after %d of %d opens cleaned up", cleaned, started)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the provider was never closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
