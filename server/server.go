package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/gateway"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/internal/conncap"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/turnstore"
)

// Options configure New; nil means defaults.
type Options struct {
	// Store keeps conversations (required for resume, fork and the
	// conversation routes; nil: nothing is captured and those are 404).
	Store conversation.Store
	// Spool keeps the conversations of turns the store could not take
	// (as `outpost run` does: the result's details.spooled names the
	// file). The server pushes it into the store at start and then every
	// SpoolPush (default 30s; negative: only at start). nil: no spool.
	Spool     *conversation.Spool
	SpoolPush time.Duration
	// Workdir is the host directory turns run in (its .outpost/.env is
	// read); default the current directory. Clients cannot choose it.
	Workdir string
	// Environ is what variables are resolved from; default os.Environ().
	Environ []string
	// Installer installs pinned CLIs; default a zero bootstrap.Installer.
	Installer *bootstrap.Installer

	// DefaultAgent is used when a request names none (default "echo").
	DefaultAgent string
	// Sandboxes are the providers clients may ask for; the first is the
	// default (default: "local").
	Sandboxes []string
	// Settings are each provider's server-side settings (e.g. the docker
	// host), under which clients' settings are applied.
	Settings map[string]map[string]string
	// AllowSettings are the setting names a client may give (default:
	// "image"). Anything else is refused: a client must not point the
	// server at another engine.
	AllowSettings []string

	// MaxConcurrent bounds running turns (default 8); MaxQueue bounds the
	// turns waiting for a slot (default 4 × MaxConcurrent). Beyond both,
	// POST /v1/turns answers 429 with Retry-After.
	MaxConcurrent int
	MaxQueue      int
	// MaxTimeout is the per-turn timeout ceiling, also the timeout of turns
	// that ask for none (default 1h).
	MaxTimeout time.Duration
	// MaxBody bounds request bodies (default 1 MiB; 413 beyond).
	MaxBody int64
	// MaxSchema bounds a structured-answer schema (default 64 KiB; 413).
	MaxSchema int
	// Retention is how long a finished turn's events stay replayable
	// (default 15m); MaxFinished bounds how many finished turns are kept
	// (default 1000, oldest dropped first). MaxTurnEvents bounds one
	// turn's retained events in bytes (default 8 MiB, and at most
	// MaxRetained / MaxConcurrent): its oldest are dropped, and a replay
	// from before them starts with a notice of kind "truncated".
	// MaxRetained bounds the retained events of all turns in bytes
	// (default 128 MiB): beyond it, the oldest finished turns are
	// forgotten.
	Retention     time.Duration
	MaxFinished   int
	MaxTurnEvents int
	MaxRetained   int
	// MaxStreams bounds the open event streams (default 64), and
	// MaxTurnStreams those of one turn (default 8); beyond, 429 with
	// Retry-After.
	MaxStreams     int
	MaxTurnStreams int
	// Grace is how long Shutdown lets running turns finish before it
	// cancels them (default 30s).
	Grace time.Duration
	// MaxUnauthConns bounds the connections Serve holds before a request
	// on them authenticates (default 128; a new one closes the oldest),
	// and AuthTimeout is how long such a connection may take to
	// authenticate, its headers and any refused body included (default
	// 10s). Authenticated connections are not bounded by either.
	MaxUnauthConns int
	AuthTimeout    time.Duration

	// PoolSize is how many sandboxes are kept warm per sandbox kind
	// (default 2; negative: no pool, every turn opens its own). PoolAgents
	// are the presets whose CLIs pooled sandboxes get in advance (default
	// the default agent). Warm lists sandbox kinds to fill at start.
	PoolSize   int
	PoolAgents []string
	Warm       []WarmKey

	// Tokens, when set, require a bearer token on every TCP request but
	// /healthz. Unix-socket requests are checked by peer credentials
	// instead: only AllowUIDs (default: the server's own uid).
	Tokens    *Tokens
	AllowUIDs []int
	// TokenLimits are the operator's token budgets by token name (the
	// peer of a TCP request), per hour and per day (docs/metering.md).
	TokenLimits map[string]TokenLimit
	// Policy is what clients may ask of a turn (secrets and egress modes,
	// egress allowlist entries, variables); a token's fields in the
	// tokens file replace its fields for that token. Operators are not
	// bound by it (docs/serve.md, Policy and tenancy).
	Policy Policy

	// DisableUI turns off the web console served at /ui/ (package
	// server/ui; docs/console.md). Its files need no token: they hold no
	// data, and every call they make is an API request with its own.
	DisableUI bool

	// Logger receives structured logs (default: discarded). Name starts
	// the server's own log messages (default "outpost serve"; `outpost
	// mcp` names itself).
	Logger *slog.Logger
	Name   string
	// Version is reported by /healthz.
	Version string
	// Keepalive is the SSE comment interval (default 15s).
	Keepalive time.Duration

	// Turns, when set, is the turn store this server shares with the
	// other replicas of a fleet (docs/serve.md): any replica answers for
	// any turn, and turn ids outlive the process. Replica names this
	// server in it (default: the host name and a random suffix);
	// Heartbeat is how often it beats (default 5s): a replica silent for
	// 3 heartbeats is lost, and its unfinished turns are ended by the
	// others with code sandbox and details.replica_lost.
	Turns     turnstore.Store
	Replica   string
	Heartbeat time.Duration
}

// WarmKey is a sandbox kind to keep warm from the start.
type WarmKey struct {
	Sandbox  string
	Settings map[string]string
}

// Server is the HTTP API. Create it with New, serve it with Serve (or
// mount Handler), stop it with Shutdown.
type Server struct {
	o       Options
	log     *slog.Logger
	pool    *sandbox.Pool
	gw      *gateway.Gateway // the one credential gateway of every turn
	metrics *metrics
	handler http.Handler
	mcp     *mcp.Server
	fleet   *fleet // nil without Options.Turns

	windows  windows         // TokenLimits' running budgets (budget.go)
	gc       gcState         // the last garbage collection of POST /v1/gc (console.go)
	base     context.Context // ends at the end of Shutdown: cancels every turn
	baseStop context.CancelCauseFunc
	sem      chan struct{}
	wg       sync.WaitGroup // turn goroutines

	mu        sync.Mutex
	turns     map[string]*turn
	finished  []*turn // oldest first
	queued    int
	running   int
	draining  bool
	convInUse map[string]int // conversations that live turns continue
	servers   []*http.Server
	guard     *conncap.Cap       // Serve's unauthenticated connections
	streams   int                // open event streams
	races     map[*race]struct{} // running races (race.go)

	retained atomic.Int64 // bytes of every turn's retained events
}

var (
	errShutdown     = errors.New("the server is shutting down")
	errClientCancel = errors.New("cancelled by the client")
)

// New returns a server. Providers in Sandboxes must be registered
// (driver.Register; the outpost command registers local and docker).
func New(opts *Options) (*Server, error) {
	s := &Server{turns: map[string]*turn{}, convInUse: map[string]int{}}
	if opts != nil {
		s.o = *opts
	}
	if err := s.o.defaults(); err != nil {
		return nil, err
	}
	s.o.limits()
	s.log = s.o.Logger
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s.gw = gateway.New(gateway.Options{Logger: s.log})
	s.metrics = newMetrics(&s.retained, s.o.Spool)
	s.metrics.streams.Set(0)
	if err := s.newPool(); err != nil {
		return nil, err
	}
	s.base, s.baseStop = context.WithCancelCause(context.Background())
	s.sem = make(chan struct{}, s.o.MaxConcurrent)
	s.mcp = s.newMCP()
	s.handler = s.routes()
	if err := s.warm(); err != nil {
		return nil, err
	}
	if s.o.Turns != nil {
		f, err := newFleet(s)
		if err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			return nil, errors.Join(err, s.pool.Close(ctx))
		}
		s.fleet = f
	}
	if s.o.Spool != nil && s.o.Store != nil {
		go s.pushSpool()
	}
	return s, nil
}

// defaults fills in the options that name things: the directory, the
// environment, the agent, the providers.
func (o *Options) defaults() error {
	if o.Name == "" {
		o.Name = "outpost serve"
	}
	if o.Workdir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return outpost.Wrap(outpost.Configuration, "serve", err)
		}
		o.Workdir = wd
	}
	if o.Environ == nil {
		o.Environ = os.Environ()
	}
	if o.Installer == nil {
		o.Installer = &bootstrap.Installer{}
	}
	if o.DefaultAgent == "" {
		o.DefaultAgent = "echo"
	}
	if _, ok := presets.Lookup(o.DefaultAgent); !ok {
		return outpost.Errorf(outpost.Configuration, "serve", "unknown default agent %q", o.DefaultAgent)
	}
	if len(o.Sandboxes) == 0 {
		o.Sandboxes = []string{"local"}
	}
	for _, name := range o.Sandboxes {
		if !slices.Contains(sandbox.Providers(), name) {
			return outpost.Errorf(outpost.Configuration, "serve", "unknown sandbox provider %q (known: %v)", name, sandbox.Providers())
		}
	}
	if o.AllowSettings == nil {
		o.AllowSettings = []string{"image"}
	}
	if o.PoolAgents == nil {
		o.PoolAgents = []string{o.DefaultAgent}
	}
	if err := o.Policy.check(); err != nil {
		return outpost.Errorf(outpost.Configuration, "serve", "client policy: %v", err)
	}
	if o.AllowUIDs == nil {
		o.AllowUIDs = []int{os.Geteuid()}
	}
	return nil
}

// limits fills in the bounds and durations left at zero.
func (o *Options) limits() {
	orDefault(&o.MaxConcurrent, 8)
	orDefault(&o.MaxQueue, 4*o.MaxConcurrent)
	orDefault(&o.MaxTimeout, time.Hour)
	orDefault(&o.MaxBody, 1<<20)
	orDefault(&o.MaxSchema, 64<<10)
	orDefault(&o.Retention, 15*time.Minute)
	orDefault(&o.MaxFinished, 1000)
	orDefault(&o.MaxRetained, 128<<20)
	orDefault(&o.MaxTurnEvents, 8<<20)
	// Running turns alone never exceed MaxRetained.
	o.MaxTurnEvents = max(min(o.MaxTurnEvents, o.MaxRetained/o.MaxConcurrent), 1)
	orDefault(&o.MaxStreams, 64)
	orDefault(&o.MaxTurnStreams, 8)
	orDefault(&o.Grace, 30*time.Second)
	orDefault(&o.MaxUnauthConns, 128)
	orDefault(&o.AuthTimeout, 10*time.Second)
	orDefault(&o.Keepalive, 15*time.Second)
	orDefault(&o.Heartbeat, 5*time.Second)
	if o.Replica == "" {
		o.Replica = defaultReplica()
	}
	if o.SpoolPush == 0 {
		o.SpoolPush = 30 * time.Second
	}
	if o.PoolSize == 0 {
		o.PoolSize = 2
	}
}

// orDefault sets *v to def when it is zero or negative.
func orDefault[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// newPool makes the sandbox pool, with the pool agents' CLIs.
func (s *Server) newPool() error {
	var warmAgents []*harness.Harness
	for _, name := range s.o.PoolAgents {
		h, ok := presets.Lookup(name)
		if !ok {
			return outpost.Errorf(outpost.Configuration, "serve", "unknown pool agent %q", name)
		}
		warmAgents = append(warmAgents, h)
	}
	s.pool = sandbox.NewPool(&sandbox.PoolOptions{
		Size:      max(s.o.PoolSize, 1),
		Bootstrap: warmAgents,
		Installer: s.o.Installer,
		Logger:    s.log,
		OnChange:  func(sandbox.PoolStats) { s.metrics.poolStats(s.pool.Stats()) },
		Open: func(name string, settings map[string]string) (driver.Provider, error) {
			return sandbox.Open(name, settings)
		},
	})
	return nil
}

// warm starts the sweep of every served sandbox kind whose provider has
// one (driver.Sweeper), then fills the kinds of Options.Warm.
func (s *Server) warm() error {
	for _, name := range s.o.Sandboxes {
		key, err := s.poolKey(name, nil, true)
		if err != nil {
			return err
		}
		// A provider that cannot be opened yet (no cluster configuration,
		// an unreachable host) fails the turns that need it, as before.
		if pr, err := s.pool.Provider(key); err != nil {
			s.log.Warn(s.o.Name+": opening a sandbox provider", "sandbox", name, "err", err)
		} else {
			sandbox.Sweep(pr)
		}
	}
	if s.o.PoolSize <= 0 {
		return nil
	}
	for _, w := range s.o.Warm {
		key, err := s.poolKey(w.Sandbox, w.Settings, true)
		if err != nil {
			return err
		}
		if key, err = s.egressKey(key, "", nil); err != nil {
			return err
		}
		if err := s.pool.Warm(key); err != nil {
			return err
		}
	}
	return nil
}

// Handler is the API's handler, for mounting in a server of the caller's.
// Requests it receives without connection information (connContext) are
// treated as TCP requests: they need a token when Options.Tokens is set.
func (s *Server) Handler() http.Handler { return s.handler }

// Sandboxes are the providers the server serves, the default first.
func (s *Server) Sandboxes() []string { return slices.Clone(s.o.Sandboxes) }

// Pool is the server's sandbox pool.
func (s *Server) Pool() *sandbox.Pool { return s.pool }

// HTTPServer returns an http.Server for the handler with the API's
// timeouts: 10s to read the headers (a slow-header client is dropped),
// 2 minutes idle, 64 KiB of headers. There is no write timeout (event
// streams are long); the SSE handler bounds each write itself.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ConnContext:       connContext,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// Serve serves the API on ln until Shutdown (it then returns nil), with
// HTTPServer's settings. hs may be nil, or an http.Server from HTTPServer
// with settings changed. Connections that have not yet authenticated are
// bounded by Options.MaxUnauthConns and Options.AuthTimeout.
func (s *Server) Serve(ln net.Listener, hs *http.Server) error {
	if hs == nil {
		hs = s.HTTPServer()
	}
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.servers = append(s.servers, hs)
	if s.guard == nil {
		s.guard = newConnGuard(s.o.MaxUnauthConns, s.o.AuthTimeout)
	}
	g := s.guard
	s.mu.Unlock()
	err := hs.Serve(g.Listen(ln))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown drains the server: new turns are refused (503) at once, while
// running and queued turns get Options.Grace (or until ctx ends, if
// sooner) to finish; then they are cancelled (code cancelled,
// details.cancelled_by "shutdown") and their conversations captured. Then
// the HTTP servers stop (open event streams have ended with their turns'
// results) and the pool is destroyed. The listeners stay open during the
// grace so that clients can follow their turns to the end.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	live := s.liveTurns()
	races := make([]*race, 0, len(s.races))
	for r := range s.races {
		races = append(races, r)
	}
	s.mu.Unlock()
	s.log.Info(s.o.Name+": draining", "turns", len(live), "races", len(races), "grace", s.o.Grace.String())
	grace, cancel := context.WithTimeout(ctx, s.o.Grace)
	waitTurns(grace, live)
	for _, r := range races {
		select {
		case <-r.done:
		case <-grace.Done():
		}
	}
	cancel()
	if len(s.unfinished(live)) > 0 {
		s.log.Warn(s.o.Name+": grace over, cancelling turns", "turns", len(s.unfinished(live)))
		for _, t := range live {
			t.cancel(errShutdown)
		}
	}
	for _, r := range races {
		r.cancel(errShutdown) // a finished race's is a no-op
	}
	// Cancelled turns still capture their conversations: wait for them,
	// however long ctx allows.
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = fmt.Errorf("server: shutdown: turns still running: %w", ctx.Err())
	}
	if s.fleet != nil {
		err = errors.Join(err, s.fleet.close(ctx))
	}
	s.baseStop(errShutdown)
	s.mu.Lock()
	servers := s.servers
	s.mu.Unlock()
	for _, hs := range servers {
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if herr := hs.Shutdown(hctx); herr != nil {
			hs.Close()
		}
		cancel()
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	return errors.Join(err, s.pool.Close(pctx), s.gw.Close())
}

func waitTurns(ctx context.Context, ts []*turn) {
	for _, t := range ts {
		select {
		case <-t.done:
		case <-ctx.Done():
			return
		}
	}
}

func (s *Server) unfinished(ts []*turn) []*turn {
	var out []*turn
	for _, t := range ts {
		select {
		case <-t.done:
		default:
			out = append(out, t)
		}
	}
	return out
}

// liveTurns returns the queued and running turns. Call with mu.
func (s *Server) liveTurns() []*turn {
	var out []*turn
	for _, t := range s.turns {
		select {
		case <-t.done:
		default:
			out = append(out, t)
		}
	}
	return out
}

// poolKey validates a sandbox and client settings and returns the pool
// key. trusted: settings come from the operator, not a client.
func (s *Server) poolKey(name string, settings map[string]string, trusted bool) (sandbox.PoolKey, error) {
	if name == "" {
		name = s.o.Sandboxes[0]
	}
	if !slices.Contains(s.o.Sandboxes, name) {
		return sandbox.PoolKey{}, fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("sandbox %q is not served here (served: %v)", name, s.o.Sandboxes))
	}
	merged := map[string]string{}
	for k, v := range s.o.Settings[name] {
		merged[k] = v
	}
	for k, v := range settings {
		if !trusted && !slices.Contains(s.o.AllowSettings, k) {
			return sandbox.PoolKey{}, fail(outpost.Configuration, ReasonBadRequest, fmt.Sprintf("setting %q may not be set by a client (allowed: %v)", k, s.o.AllowSettings))
		}
		merged[k] = v
	}
	if len(merged) == 0 {
		merged = nil
	}
	key := sandbox.PoolKey{Provider: name, Settings: merged, Workdir: s.o.Workdir}
	if _, err := s.pool.Provider(key); err != nil {
		return key, err
	}
	return key, nil
}

// egressKey sets on key the egress a turn asks of its sandbox
// (engine.EgressFor), so that pooled sandboxes are opened with it.
func (s *Server) egressKey(key sandbox.PoolKey, egress string, allow []string) (sandbox.PoolKey, error) {
	p, err := s.pool.Provider(key)
	if err != nil {
		return key, err
	}
	if e := engine.EgressFor(p.Capabilities(), egress, allow); e == driver.EgressGateway {
		key.Egress = e
	}
	return key, nil
}

func newTurnID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

func validTurnID(id string) bool {
	if len(id) != 25 || id[0] != 't' {
		return false
	}
	_, err := hex.DecodeString(id[1:])
	return err == nil
}
