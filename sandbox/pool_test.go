package sandbox_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/memsandbox"
)

// waitStats returns a channel of the pool's stats changes and the
// PoolOptions.OnChange feeding it.
func statsFeed() (chan sandbox.PoolStats, func(sandbox.PoolStats)) {
	ch := make(chan sandbox.PoolStats, 1024)
	return ch, func(s sandbox.PoolStats) { ch <- s }
}

func waitReady(t *testing.T, ch chan sandbox.PoolStats, n int) {
	t.Helper()
	for s := range ch {
		if s.Ready == n && s.Opening == 0 {
			return
		}
	}
}

func TestPoolKeepsSizeReadyAndDestroysAfterUse(t *testing.T) {
	mem := memsandbox.New(nil)
	ch, on := statsFeed()
	p := sandbox.NewPool(&sandbox.PoolOptions{
		Size:     3,
		Open:     func(string, map[string]string) (driver.Provider, error) { return mem, nil },
		Labels:   map[string]string{"example.com/team": "infra"},
		OnChange: on,
	})
	key := sandbox.PoolKey{Provider: "memory", Workdir: "/work"}
	if err := p.Warm(key); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ch, 3)
	if got := mem.Live(); got != 3 {
		t.Fatalf("live sandboxes after warming = %d, want 3", got)
	}
	ctx := context.Background()
	l, err := p.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	labels := l.Sandbox().(*memsandbox.Sandbox).Labels()
	if labels[sandbox.PoolLabel] != "1" || labels["example.com/team"] != "infra" {
		t.Errorf("pooled sandbox labels = %v, want %s and the caller's", labels, sandbox.PoolLabel)
	}
	// refilled: a stats of before the Get may still be queued, so wait
	// for one that counts the leased sandbox.
	for s := range ch {
		if s.Leased == 1 && s.Ready == 3 && s.Opening == 0 {
			break
		}
	}
	if got := mem.Live(); got != 4 {
		t.Fatalf("live sandboxes with one leased = %d, want 4", got)
	}
	p.Release(key, l)
	for s := range ch {
		if s.Leased == 0 {
			break
		}
	}
	if got := mem.Live(); got != 3 {
		t.Fatalf("live sandboxes after the release = %d, want 3 (a used sandbox is destroyed)", got)
	}
	if _, err := l.Exec(ctx, driver.ExecRequest{Path: "true"}, 0); err == nil {
		t.Error("a released pooled lease still runs processes")
	}
	if st := p.Stats(); len(st) != 1 || st[0].Ready != 3 || st[0].Key != key.String() {
		t.Errorf("Stats = %+v", st)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := mem.Live(); got != 0 {
		t.Fatalf("live sandboxes after Close = %d, want 0", got)
	}
	if _, err := p.Get(ctx, key); !errors.Is(err, sandbox.ErrPoolClosed) {
		t.Errorf("Get after Close: %v, want ErrPoolClosed", err)
	}
}

func TestPoolBoundsKeys(t *testing.T) {
	mem := memsandbox.New(nil)
	p := sandbox.NewPool(&sandbox.PoolOptions{Size: 1, MaxKeys: 1, Open: func(string, map[string]string) (driver.Provider, error) { return mem, nil }})
	defer p.Close(context.Background())
	ctx := context.Background()
	a := sandbox.PoolKey{Provider: "memory", Workdir: "/a"}
	b := sandbox.PoolKey{Provider: "memory", Workdir: "/b"}
	la, err := p.Get(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := p.Get(ctx, b) // beyond MaxKeys: served cold, nothing kept
	if err != nil {
		t.Fatal(err)
	}
	p.Release(a, la)
	p.Release(b, lb)
	for _, s := range p.Stats() {
		if s.Key == b.String() {
			t.Errorf("a key beyond MaxKeys is kept warm: %+v", s)
		}
	}
}

func TestPoolKeyString(t *testing.T) {
	a := sandbox.PoolKey{Provider: "docker", Settings: map[string]string{"image": "x", "user": "1"}, Workdir: "/w"}
	b := sandbox.PoolKey{Provider: "docker", Settings: map[string]string{"user": "1", "image": "x"}, Workdir: "/w"}
	c := sandbox.PoolKey{Provider: "docker", Settings: map[string]string{"image": "x,user=1"}, Workdir: "/w"}
	if a.String() != b.String() {
		t.Errorf("equal keys differ: %s vs %s", a, b)
	}
	if a.String() == c.String() {
		t.Errorf("different keys collide: %s", a)
	}
}

// warmProvider's sandboxes are driver.Warmers that count their Warm
// calls, or fail them.
type warmProvider struct {
	driver.Provider
	warmed atomic.Int32
	fail   bool
}

func (w *warmProvider) Open(ctx context.Context, o driver.Options) (driver.Sandbox, error) {
	sb, err := w.Provider.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	return &warmSandbox{Sandbox: sb, w: w}, nil
}

type warmSandbox struct {
	driver.Sandbox
	w *warmProvider
}

var errNoLauncher = errors.New("no launcher")

func (s *warmSandbox) Warm(ctx context.Context) error {
	if s.w.fail {
		return errNoLauncher
	}
	s.w.warmed.Add(1)
	return nil
}

// TestPoolWarmsSandboxes: every pooled sandbox is warmed (driver.Warmer)
// before it is ready, and one that cannot be is not handed out.
func TestPoolWarmsSandboxes(t *testing.T) {
	mem := memsandbox.New(nil)
	w := &warmProvider{Provider: mem}
	ch, on := statsFeed()
	p := sandbox.NewPool(&sandbox.PoolOptions{Size: 2, Open: func(string, map[string]string) (driver.Provider, error) { return w, nil }, OnChange: on})
	key := sandbox.PoolKey{Provider: "memory", Workdir: "/work"}
	if err := p.Warm(key); err != nil {
		t.Fatal(err)
	}
	waitReady(t, ch, 2)
	if got := w.warmed.Load(); got != 2 {
		t.Errorf("warmed %d sandboxes, want 2", got)
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	failing := &warmProvider{Provider: mem, fail: true}
	p = sandbox.NewPool(&sandbox.PoolOptions{Open: func(string, map[string]string) (driver.Provider, error) { return failing, nil }})
	_, err := p.Get(t.Context(), key)
	if !errors.Is(err, errNoLauncher) || outpost.CodeOf(err) != outpost.Sandbox {
		t.Errorf("Get of a sandbox that cannot be warmed: %v (code %q), want errNoLauncher with code sandbox", err, outpost.CodeOf(err))
	}
	if err := p.Close(context.Background()); err != nil { // waits for the refills
		t.Fatal(err)
	}
	if got := mem.Live(); got != 0 {
		t.Errorf("%d sandboxes live after a failed warm-up, want 0", got)
	}
}

// egressRecorder is a provider that records the egress of each Open.
type egressRecorder struct {
	driver.Provider
	mu   sync.Mutex
	seen map[string]driver.Egress // sandbox id -> Options.Egress
}

func (r *egressRecorder) Open(ctx context.Context, opts driver.Options) (driver.Sandbox, error) {
	sb, err := r.Provider.Open(ctx, opts)
	if err == nil {
		r.mu.Lock()
		r.seen[sb.ID()] = opts.Egress
		r.mu.Unlock()
	}
	return sb, err
}

// TestPoolKeyEgress: the egress is part of a pool's key: a sandbox kept
// warm with an open network is never handed to a key that wants the
// gateway, and each key's sandboxes are opened with its egress.
func TestPoolKeyEgress(t *testing.T) {
	rec := &egressRecorder{Provider: memsandbox.New(nil), seen: map[string]driver.Egress{}}
	p := sandbox.NewPool(&sandbox.PoolOptions{Size: 1, Open: func(string, map[string]string) (driver.Provider, error) { return rec, nil }})
	defer p.Close(context.Background())
	open := sandbox.PoolKey{Provider: "memory", Workdir: "/w"}
	gw := sandbox.PoolKey{Provider: "memory", Workdir: "/w", Egress: driver.EgressGateway}
	if open.String() == gw.String() {
		t.Fatalf("the egress is not in the key: %s", gw)
	}
	if o := (sandbox.PoolKey{Provider: "memory", Workdir: "/w", Egress: driver.EgressOpen}); o.String() != open.String() {
		t.Errorf("an explicit open egress makes another key: %s vs %s", o, open)
	}
	for _, tc := range []struct {
		key  sandbox.PoolKey
		want driver.Egress
	}{{open, ""}, {gw, driver.EgressGateway}, {gw, driver.EgressGateway}, {open, ""}} {
		l, err := p.Get(t.Context(), tc.key)
		if err != nil {
			t.Fatal(err)
		}
		rec.mu.Lock()
		got := rec.seen[l.Sandbox().ID()]
		rec.mu.Unlock()
		if got != tc.want {
			t.Errorf("key %s got a sandbox opened with egress %q, want %q", tc.key, got, tc.want)
		}
		p.Release(tc.key, l)
	}
}
