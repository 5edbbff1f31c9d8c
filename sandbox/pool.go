package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox/driver"
)

// PoolKey names one kind of sandbox a Pool keeps warm: a registered
// provider, its settings (the docker image is the setting "image"), the
// host working directory the sandboxes are made for, and their egress
// (driver.Options.Egress: a sandbox made with an open network is never
// handed to a turn that wants it cut off).
type PoolKey struct {
	Provider string
	Settings map[string]string
	Workdir  string
	// Egress is the driver.Options.Egress the sandboxes are opened with
	// (EgressFor); "" is the provider's default network.
	Egress driver.Egress
}

// String is the key's canonical form: equal keys give equal strings.
func (k PoolKey) String() string {
	var b strings.Builder
	b.WriteString(k.Provider)
	for _, name := range slices.Sorted(maps.Keys(k.Settings)) {
		fmt.Fprintf(&b, ",%s=%q", name, k.Settings[name])
	}
	fmt.Fprintf(&b, ",workdir=%q", k.Workdir)
	if k.Egress != "" && k.Egress != driver.EgressOpen {
		fmt.Fprintf(&b, ",egress=%s", k.Egress)
	}
	return b.String()
}

// PoolLabel is the label every pooled sandbox carries (with the provider's
// own orphan labels: a pool whose process died leaves sandboxes the next
// lease or `outpost gc` removes). Its value is "1".
const PoolLabel = "com.github.outposthq.outpost.pool"

// PoolOptions configure NewPool; nil means defaults.
type PoolOptions struct {
	// Size is how many ready sandboxes the pool keeps per key (default 2).
	Size int
	// MaxKeys bounds the keys kept warm (default 8): a key beyond it is
	// served cold (Get opens a sandbox for the caller) and nothing is kept
	// for it. With Size it bounds the idle sandboxes: Size × MaxKeys.
	MaxKeys int
	// Bootstrap lists the presets whose pinned CLIs are installed in every
	// pooled sandbox before it is ready (bootstrap.Installer.Ensure), so a
	// turn of theirs starts at once. An install that fails is logged and the
	// sandbox is kept: a turn of that agent installs again and reports the
	// error with code bootstrap.
	Bootstrap []*harness.Harness
	// Installer installs them; default a zero bootstrap.Installer. Use the
	// one the turns use (RunOptions.Installer).
	Installer *bootstrap.Installer
	// Labels are added to every pooled sandbox (PoolLabel always is).
	Labels map[string]string
	// Open returns the provider of a key; default Open (the registry). The
	// pool opens one provider per distinct provider and settings, and
	// closes them in Close.
	Open func(name string, settings map[string]string) (driver.Provider, error)
	// Logger receives refill failures and release errors. Optional.
	Logger *slog.Logger
	// OnChange is called (from any goroutine) when a key's counts change,
	// e.g. to update metrics. Optional.
	OnChange func(PoolStats)
}

// PoolStats are one key's counts.
type PoolStats struct {
	Key     string `json:"key"`
	Ready   int    `json:"ready"`   // opened, bootstrapped, waiting for a turn
	Opening int    `json:"opening"` // being opened by the refill
	Leased  int    `json:"leased"`  // handed out, not yet released
}

// ErrPoolClosed is returned by Get after Close.
var ErrPoolClosed = errors.New("sandbox: pool closed")

// Pool keeps sandboxes opened in advance, with their agents' pinned CLIs
// already installed and, where the provider can (driver.Warmer, see
// Lease.Warm), the launcher of their first process ready, so a turn does
// not wait for a sandbox to be made. A
// sandbox from the pool serves one turn and is then destroyed (Release):
// no state passes between turns. The pool refills in the background and
// is bounded (PoolOptions.Size per key, MaxKeys keys). Safe for concurrent
// use.
type Pool struct {
	o     PoolOptions
	inst  *bootstrap.Installer
	ctx   context.Context // ends with Close: stops refills
	stop  context.CancelFunc
	bg    sync.WaitGroup // refills and releases
	mu    sync.Mutex
	keys  map[string]*poolKey
	provs map[string]driver.Provider
	done  bool
}

type poolKey struct {
	key     PoolKey
	name    string
	ready   []*Lease
	opening int
	leased  int
	fails   int       // consecutive refill failures, for the back-off
	retryAt time.Time // no refill before this
	timer   *time.Timer
}

// NewPool returns an empty pool. Warm or the first Get of a key starts
// filling it.
func NewPool(opts *PoolOptions) *Pool {
	p := &Pool{keys: map[string]*poolKey{}, provs: map[string]driver.Provider{}}
	if opts != nil {
		p.o = *opts
	}
	if p.o.Size <= 0 {
		p.o.Size = 2
	}
	if p.o.MaxKeys <= 0 {
		p.o.MaxKeys = 8
	}
	if p.o.Open == nil {
		p.o.Open = Open
	}
	p.inst = p.o.Installer
	if p.inst == nil {
		p.inst = &bootstrap.Installer{}
	}
	p.ctx, p.stop = context.WithCancel(context.Background())
	return p
}

// Provider returns the pool's provider for a key's provider and settings,
// opening it on first use. Errors have code configuration.
func (p *Pool) Provider(key PoolKey) (driver.Provider, error) {
	pk := PoolKey{Provider: key.Provider, Settings: key.Settings}.String()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return nil, outpost.Wrap(outpost.Sandbox, "lease", ErrPoolClosed)
	}
	if pr, ok := p.provs[pk]; ok {
		return pr, nil
	}
	pr, err := p.o.Open(key.Provider, key.Settings)
	if err != nil {
		return nil, err
	}
	p.provs[pk] = pr
	return pr, nil
}

// Warm starts keeping key's sandboxes ready. It returns at once; errors
// are those of the provider (refills retry with a back-off and log).
func (p *Pool) Warm(key PoolKey) error {
	if _, err := p.Provider(key); err != nil {
		return err
	}
	p.mu.Lock()
	k := p.entry(key)
	p.mu.Unlock()
	if k != nil {
		p.refill(k)
	}
	return nil
}

// entry returns key's entry, creating it when there is room. Call with mu.
func (p *Pool) entry(key PoolKey) *poolKey {
	name := key.String()
	if k, ok := p.keys[name]; ok {
		return k
	}
	if len(p.keys) >= p.o.MaxKeys || p.done {
		return nil
	}
	k := &poolKey{key: PoolKey{Provider: key.Provider, Settings: maps.Clone(key.Settings), Workdir: key.Workdir, Egress: key.Egress}, name: name}
	p.keys[name] = k
	return k
}

// Get returns a sandbox for key: a ready one when there is one, otherwise
// one opened now (and bootstrapped like a pooled one). The caller owns it
// for one turn and gives it back with Release, which destroys it. Errors
// have code sandbox (or configuration for the provider's settings).
func (p *Pool) Get(ctx context.Context, key PoolKey) (*Lease, error) {
	if _, err := p.Provider(key); err != nil {
		return nil, err
	}
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return nil, outpost.Wrap(outpost.Sandbox, "lease", ErrPoolClosed)
	}
	k := p.entry(key)
	var l *Lease
	if k != nil {
		if n := len(k.ready); n > 0 {
			l = k.ready[n-1]
			k.ready = k.ready[:n-1]
		}
		k.leased++
	}
	p.mu.Unlock()
	if k != nil {
		p.changed(k)
		defer p.refill(k)
	}
	if l != nil {
		return l, nil
	}
	l, err := p.open(ctx, key)
	if err != nil && k != nil {
		p.mu.Lock()
		k.leased--
		p.mu.Unlock()
		p.changed(k)
	}
	return l, err
}

// Release destroys a sandbox Get returned, in the background (after
// Close, before returning); Close waits for it. Errors are logged.
func (p *Pool) Release(key PoolKey, l *Lease) {
	p.mu.Lock()
	closed := p.done
	if !closed {
		p.bg.Add(1)
	}
	p.mu.Unlock()
	if closed {
		p.destroy(l) // Close is no longer waiting: the caller does
		return
	}
	go func() {
		defer p.bg.Done()
		p.destroy(l)
		p.mu.Lock()
		k := p.keys[key.String()]
		if k != nil && k.leased > 0 {
			k.leased--
		}
		p.mu.Unlock()
		if k != nil {
			p.changed(k)
		}
	}()
}

func (p *Pool) destroy(l *Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil && p.o.Logger != nil {
		p.o.Logger.Warn("outpost pool: releasing a sandbox", "sandbox", l.ID(), "err", err)
	}
}

// Stats returns every key's counts, by key.
func (p *Pool) Stats() []PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]PoolStats, 0, len(p.keys))
	for _, k := range p.keys {
		out = append(out, k.stats())
	}
	slices.SortFunc(out, func(a, b PoolStats) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func (k *poolKey) stats() PoolStats {
	return PoolStats{Key: k.name, Ready: len(k.ready), Opening: k.opening, Leased: k.leased}
}

func (p *Pool) changed(k *poolKey) {
	if p.o.OnChange == nil {
		return
	}
	p.mu.Lock()
	st := k.stats()
	p.mu.Unlock()
	p.o.OnChange(st)
}

// refill opens sandboxes until k has Size ready or opening, unless a
// back-off after failures is running.
func (p *Pool) refill(k *poolKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return
	}
	if wait := time.Until(k.retryAt); wait > 0 {
		if k.timer == nil {
			k.timer = time.AfterFunc(wait, func() {
				p.mu.Lock()
				k.timer = nil
				p.mu.Unlock()
				p.refill(k)
			})
		}
		return
	}
	for len(k.ready)+k.opening < p.o.Size {
		k.opening++
		p.bg.Add(1)
		go p.fill(k)
	}
}

func (p *Pool) fill(k *poolKey) {
	defer p.bg.Done()
	p.changed(k)
	l, err := p.open(p.ctx, k.key)
	p.mu.Lock()
	k.opening--
	if err != nil {
		k.fails++
		k.retryAt = time.Now().Add(min(time.Duration(1<<min(k.fails, 6))*250*time.Millisecond, 30*time.Second))
	} else {
		k.fails = 0
		k.retryAt = time.Time{}
	}
	closed := p.done
	if err == nil && !closed {
		k.ready = append(k.ready, l)
	}
	p.mu.Unlock()
	p.changed(k)
	switch {
	case err != nil:
		if p.o.Logger != nil && p.ctx.Err() == nil {
			p.o.Logger.Warn("outpost pool: opening a sandbox", "key", k.name, "err", err, "failures", k.fails)
		}
		p.refill(k)
	case closed:
		p.destroy(l)
	}
}

// open makes one sandbox for key: leased with the bootstrap cache mounted
// when a pinned CLI needs it, then every PoolOptions.Bootstrap CLI
// installed.
func (p *Pool) open(ctx context.Context, key PoolKey) (*Lease, error) {
	pr, err := p.Provider(key)
	if err != nil {
		return nil, err
	}
	labels := maps.Clone(p.o.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[PoolLabel] = "1"
	opts := driver.Options{Workdir: key.Workdir, Labels: labels, Egress: key.Egress}
	for _, h := range p.o.Bootstrap {
		for _, m := range CacheMounts(p.inst, pr.Capabilities(), h.Bootstrap) {
			if !slices.ContainsFunc(opts.Mounts, func(o driver.Mount) bool { return o.Source == m.Source && o.Target == m.Target }) {
				opts.Mounts = append(opts.Mounts, m)
			}
		}
	}
	l, err := Acquire(ctx, pr, opts)
	if err != nil {
		return nil, err
	}
	for _, h := range p.o.Bootstrap {
		if h.Bootstrap == "" || h.Request == nil {
			continue
		}
		cmd, err := h.Request(harness.Input{Prompt: "-", Workdir: l.Workdir(), Home: l.Home()})
		if err == nil {
			_, err = p.inst.Ensure(ctx, l, h.Bootstrap, cmd.Path, nil)
		}
		if err != nil {
			// The sandbox serves the other agents; a turn of this one
			// installs again and reports the error with its code.
			if p.o.Logger != nil && ctx.Err() == nil {
				p.o.Logger.Warn("outpost pool: installing an agent's CLI in a pooled sandbox", "agent", h.Name, "err", err)
			}
		}
	}
	// The sandbox waits for its turn: have its provider make the turn's
	// first process ready too (docker: an exec of its shim, waiting).
	if err := l.Warm(ctx); err != nil {
		p.destroy(l)
		return nil, err
	}
	return l, nil
}

// Close stops the refills, destroys the ready sandboxes, waits for
// releases in progress (up to ctx's end) and closes the providers. Leases
// still out are the callers' to Release; Close waits for them only if
// they are released before ctx ends. When ctx ends first, Close returns
// its error at once, and the providers are closed only once the
// sandboxes being opened (cancelled: each removes what it made) and the
// releases have ended, in the background: a short deadline does not cut
// their cleanup off.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	if p.done {
		p.mu.Unlock()
		return nil
	}
	p.done = true
	p.stop()
	var ready []*Lease
	for _, k := range p.keys {
		ready = append(ready, k.ready...)
		k.ready = nil
		if k.timer != nil {
			k.timer.Stop()
		}
	}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range ready {
		wg.Add(1)
		go func() { defer wg.Done(); p.destroy(l) }()
	}
	wg.Wait()
	done := make(chan struct{})
	go func() { p.bg.Wait(); close(done) }()
	select {
	case <-done:
		return p.closeProviders()
	case <-ctx.Done():
		go func() {
			<-done
			if err := p.closeProviders(); err != nil && p.o.Logger != nil {
				p.o.Logger.Warn("outpost pool: closing a provider", "err", err)
			}
		}()
		return fmt.Errorf("sandbox: pool close: %w (the sandboxes being opened and released finish in the background)", ctx.Err())
	}
}

// closeProviders closes the pool's providers.
func (p *Pool) closeProviders() error {
	p.mu.Lock()
	provs := p.provs
	p.provs = map[string]driver.Provider{}
	p.mu.Unlock()
	var err error
	for _, pr := range provs {
		err = errors.Join(err, pr.Close())
	}
	return err
}
