package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/conversation/postgres"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/server"
)

type serveFlags struct {
	socket, listen, tokens, workdir, agent, image, logFormat string
	sandboxes, set, allow, poolAgents, warm                  []string
	tokenLimits                                              []string
	clientSecrets, clientEgress, clientAllow, clientEnv      []string
	maxConcurrent, maxQueue, poolSize                        int
	maxTurnEvents, maxRetained, maxStreams, maxTurnStreams   int
	maxTimeout, grace, retention, spoolPush, heartbeat       time.Duration
	replica                                                  string
	ui                                                       bool // --ui: the web console at /ui/
	maxBody                                                  int64
	verbose                                                  bool
}

// serveCmd is `outpost serve`: the HTTP API (docs/serve.md).
func (a *app) serveCmd() *cobra.Command {
	var f serveFlags
	c := &cobra.Command{
		Use:   "serve",
		Short: "Serve the HTTP API (turns, events over SSE, conversations) for orchestrators",
		Long: `Serve outpost's HTTP API: start turns, follow their events over Server-Sent
Events, steer and cancel them, read conversations (docs/serve.md).

By default it listens on a Unix socket, $XDG_RUNTIME_DIR/outpost/serve.sock,
that only the same user may use (the directory is 0700 and every
connection's peer uid is checked). --listen HOST:PORT opens TCP instead,
which requires bearer tokens from the tokens file (outpost serve token
add NAME). Turns run in sandboxes from a warm pool. SIGTERM drains: new
turns are refused, running ones get --grace to finish, then are cancelled;
conversations are captured either way.`,
		Example: `  outpost serve
  outpost serve --sandbox docker --image outpost/debian:test --pool-size 4
  outpost serve token add ci-bot && outpost serve --listen 127.0.0.1:7070`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return a.serve(c.Context(), f) },
	}
	fl := c.Flags()
	fl.StringVar(&f.socket, "socket", "", "Unix socket path (default $XDG_RUNTIME_DIR/outpost/serve.sock)")
	fl.StringVar(&f.listen, "listen", "", "listen on TCP HOST:PORT instead (requires tokens)")
	fl.StringVar(&f.tokens, "tokens", "", "tokens file (default $XDG_CONFIG_HOME/outpost/serve-tokens)")
	serverFlags(fl, &f, 2)
	fl.IntVar(&f.maxQueue, "max-queue", 0, "turns waiting for a slot before 429 (default 4 × --max-concurrent)")
	fl.DurationVar(&f.grace, "grace", 30*time.Second, "on SIGTERM, how long running turns may finish before they are cancelled")
	fl.DurationVar(&f.retention, "retention", 15*time.Minute, "how long a finished turn's events stay replayable")
	fl.IntVar(&f.maxTurnEvents, "max-turn-events", 8<<20, "bytes of one turn's events kept for replay (the oldest dropped beyond)")
	fl.IntVar(&f.maxRetained, "max-retained-events", 128<<20, "bytes of all turns' events kept for replay (the oldest finished turns forgotten beyond)")
	fl.IntVar(&f.maxStreams, "max-streams", 64, "open event streams (429 beyond)")
	fl.IntVar(&f.maxTurnStreams, "max-turn-streams", 8, "open event streams per turn (429 beyond)")
	fl.DurationVar(&f.spoolPush, "spool-push", 30*time.Second, "how often turns spooled while the store was down are pushed into it (negative: only at start)")
	fl.Int64Var(&f.maxBody, "max-body", 1<<20, "request body limit in bytes (413 beyond)")
	fl.StringArrayVar(&f.tokenLimits, "token-limit", nil, "model-API tokens the turns of one token name may spend, NAME=PER_HOUR/PER_DAY (either empty: no limit); repeatable (docs/metering.md)")
	fl.StringSliceVar(&f.clientSecrets, "client-secrets", nil, "secrets modes a client token may ask for (gateway, env; default gateway); a token's secrets= field replaces it")
	fl.StringSliceVar(&f.clientEgress, "client-egress", nil, "egress modes a client token may ask for (gateway, open; default gateway); a token's egress= field replaces it")
	fl.StringArrayVar(&f.clientAllow, "client-egress-allow", nil, "an egress allowlist entry clients may ask for (a request's entries must be covered by these; default none); repeatable")
	fl.StringArrayVar(&f.clientEnv, "client-env", nil, "a variable a client may set: NAME, PREFIX* or * (default *); never a base URL, proxy or credential variable, nor a secret of the server's environment; repeatable")
	fl.StringVar(&f.replica, "replica", "", "with a PostgreSQL store, this replica's name in the fleet (default: the host name and a random suffix)")
	fl.BoolVar(&f.ui, "ui", true, "serve the web console at /ui/ (docs/console.md); --ui=false turns it off")
	fl.DurationVar(&f.heartbeat, "heartbeat", 5*time.Second, "with a PostgreSQL store, how often this replica beats; a replica silent for 3 beats is lost and its turns ended")
	c.MarkFlagsMutuallyExclusive("socket", "listen")
	c.AddCommand(a.serveTokenCmd())
	return c
}

// serverFlags are the flags of the server's options that `outpost serve`
// and `outpost mcp` share; poolSize is --pool-size's default.
func serverFlags(fl *pflag.FlagSet, f *serveFlags, poolSize int) {
	fl.StringVar(&f.workdir, "workdir", "", "directory turns run in; its .outpost/.env is read (default: the current one)")
	fl.StringVar(&f.agent, "agent", "echo", "default agent ("+strings.Join(presets.Names(), ", ")+")")
	fl.StringArrayVar(&f.sandboxes, "sandbox", nil, "sandbox provider clients may use, the first the default ("+strings.Join(sandbox.Providers(), ", ")+"); repeatable (default local)")
	fl.StringArrayVar(&f.set, "set", nil, "provider setting PROVIDER.KEY=VALUE, e.g. docker.host=...; repeatable")
	fl.StringVar(&f.image, "image", "", "docker image (same as --set docker.image=...)")
	fl.StringArrayVar(&f.allow, "allow-setting", []string{"image"}, "provider setting name clients may set; repeatable")
	fl.IntVar(&f.maxConcurrent, "max-concurrent", 8, "turns running at once")
	fl.DurationVar(&f.maxTimeout, "max-timeout", time.Hour, "per-turn timeout ceiling (and default)")
	fl.IntVar(&f.poolSize, "pool-size", poolSize, "warm sandboxes kept per sandbox kind (-1: no pool)")
	fl.StringArrayVar(&f.poolAgents, "pool-agent", nil, "agent whose pinned CLI pooled sandboxes get in advance; repeatable (default: the default agent)")
	fl.StringArrayVar(&f.warm, "warm", nil, "sandbox kind to fill at start: PROVIDER or PROVIDER:image=IMG; repeatable")
	fl.StringVar(&f.logFormat, "log-format", "json", "log format on standard error: json or text")
	fl.BoolVarP(&f.verbose, "verbose", "v", false, "log debug records too")
}

func (a *app) serveTokenCmd() *cobra.Command {
	tok := &cobra.Command{Use: "token", Short: "Manage the bearer tokens of `outpost serve --listen`"}
	var file string
	var operator bool
	var policy []string
	add := &cobra.Command{
		Use:   "add NAME",
		Short: "Create a token; it is printed once, only its hash is kept",
		Long: `Create a token; it is printed once, only its hash is kept. A token is a
client's: it sees only its own turns and conversations and asks only what
the client policy allows (docs/serve.md, Policy and tenancy). --operator
makes an operator's token: it sees every client's, unbound by the policy.
--policy KEY=VALUES sets the token's own policy field (secrets, egress,
egress-allow, env; values comma-separated), over the server's --client-*.`,
		Example: `  outpost serve token add ci-bot
  outpost serve token add admin --operator
  outpost serve token add research --policy secrets=gateway,env --policy egress-allow=docs.example.com`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			path, err := tokensPath(file)
			if err != nil {
				return err
			}
			fields := policy
			if operator {
				fields = append([]string{"operator"}, fields...)
			}
			token, err := server.AddToken(path, args[0], fields...)
			if err != nil {
				return outpost.Wrap(outpost.Configuration, "token", err)
			}
			fmt.Fprintln(a.stdout, token)
			fmt.Fprintf(a.stderr, "outpost: token %q added to %s; it is not shown again\n", args[0], path)
			return nil
		},
	}
	add.Flags().StringVar(&file, "tokens", "", "tokens file (default $XDG_CONFIG_HOME/outpost/serve-tokens)")
	add.Flags().BoolVar(&operator, "operator", false, "an operator's token: sees every client's turns and conversations, not bound by the client policy")
	add.Flags().StringArrayVar(&policy, "policy", nil, "the token's own policy field KEY=VALUES (secrets, egress, egress-allow, env); repeatable")
	tok.AddCommand(add)
	return tok
}

func tokensPath(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", outpost.Wrap(outpost.Configuration, "token", err)
	}
	return filepath.Join(dir, "outpost", "serve-tokens"), nil
}

func (a *app) serve(ctx context.Context, f serveFlags) error {
	opts, err := a.serverOptions(f)
	if err != nil {
		return err
	}
	log := opts.Logger
	ln, where, err := serveListener(f, opts)
	if err != nil {
		return err
	}
	if pg, ok := opts.Store.(*postgres.Store); ok {
		// A fleet: the replicas share their turns in the same database.
		opts.Turns, opts.Replica, opts.Heartbeat = pg.Turns(), f.replica, f.heartbeat
	}
	srv, err := server.New(opts)
	if err != nil {
		ln.Close()
		return err
	}
	defer a.tracing(ctx)()
	log.Info("outpost serve: listening", "address", where, "sandboxes", srv.Sandboxes(), "version", version())
	fmt.Fprintln(a.stdout, "outpost serve: listening on", where)
	return serveUntilDone(ctx, srv, ln, f.grace, log)
}

// serverOptions are the server's options of the flags, with the store.
func (a *app) serverOptions(f serveFlags) (*server.Options, error) {
	log, err := a.serveLogger(f)
	if err != nil {
		return nil, err
	}
	settings, err := serveSettings(f)
	if err != nil {
		return nil, err
	}
	warm, err := warmKeys(f.warm)
	if err != nil {
		return nil, err
	}
	store, err := a.store()
	if err != nil {
		return nil, err
	}
	limits, err := tokenLimits(f.tokenLimits)
	if err != nil {
		return nil, err
	}
	policy := server.Policy{Secrets: f.clientSecrets, Egress: f.clientEgress, EgressAllow: f.clientAllow, Env: f.clientEnv}
	if err := server.CheckPolicy(policy); err != nil {
		return nil, usageError{err}
	}
	return &server.Options{TokenLimits: limits, Policy: policy,
		Store: store, Spool: a.spool, SpoolPush: f.spoolPush, Workdir: f.workdir, DefaultAgent: f.agent, Sandboxes: f.sandboxes, Settings: settings,
		AllowSettings: f.allow, MaxConcurrent: f.maxConcurrent, MaxQueue: f.maxQueue, MaxTimeout: f.maxTimeout,
		MaxBody: f.maxBody, Retention: f.retention, MaxTurnEvents: f.maxTurnEvents, MaxRetained: f.maxRetained,
		MaxStreams: f.maxStreams, MaxTurnStreams: f.maxTurnStreams, Grace: f.grace, PoolSize: f.poolSize, PoolAgents: f.poolAgents,
		Warm: warm, Logger: log, Version: version(), Installer: &bootstrap.Installer{}, DisableUI: !f.ui,
	}, nil
}

// serveLogger is the server's log on stderr, in --log-format.
func (a *app) serveLogger(f serveFlags) (*slog.Logger, error) {
	level := slog.LevelInfo
	if f.verbose {
		level = slog.LevelDebug
	}
	ho := &slog.HandlerOptions{Level: level}
	switch f.logFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(a.stderr, ho)), nil
	case "text":
		return slog.New(slog.NewTextHandler(a.stderr, ho)), nil
	}
	return nil, usageError{fmt.Errorf("--log-format %q: want json or text", f.logFormat)}
}

// serveSettings are the providers' settings of --set PROVIDER.KEY=VALUE,
// and --image as docker's image.
func serveSettings(f serveFlags) (map[string]map[string]string, error) {
	settings, err := providerSettings(f.set)
	if err != nil {
		return nil, err
	}
	if f.image != "" {
		if settings["docker"] == nil {
			settings["docker"] = map[string]string{}
		}
		settings["docker"]["image"] = f.image
	}
	return settings, nil
}

// providerSettings are the providers' settings of --set
// PROVIDER.KEY=VALUE flags (serve, agents).
func providerSettings(set []string) (map[string]map[string]string, error) {
	settings := map[string]map[string]string{}
	for _, kv := range set {
		k, v, ok := strings.Cut(kv, "=")
		prov, key, ok2 := strings.Cut(k, ".")
		if !ok || !ok2 || prov == "" || key == "" {
			return nil, usageError{fmt.Errorf("--set %q: want PROVIDER.KEY=VALUE", kv)}
		}
		if settings[prov] == nil {
			settings[prov] = map[string]string{}
		}
		settings[prov][key] = v
	}
	return settings, nil
}

// warmKeys parses --warm PROVIDER[:KEY=VALUE,...].
func warmKeys(list []string) ([]server.WarmKey, error) {
	var warm []server.WarmKey
	for _, w := range list {
		prov, rest, _ := strings.Cut(w, ":")
		wk := server.WarmKey{Sandbox: prov}
		if rest != "" {
			m, err := parsePairs(strings.Split(rest, ","), "--warm", nil)
			if err != nil {
				return nil, err
			}
			wk.Settings = m
		}
		warm = append(warm, wk)
	}
	return warm, nil
}

// serveListener listens on TCP (--listen, with the bearer tokens it
// needs, set in opts) or on the Unix socket, and says where.
func serveListener(f serveFlags, opts *server.Options) (net.Listener, string, error) {
	if f.listen == "" {
		path := f.socket
		if path == "" {
			var err error
			if path, err = defaultSocket(); err != nil {
				return nil, "", err
			}
		}
		ln, err := listenUnix(path)
		if err != nil {
			return nil, "", err
		}
		return ln, "unix:" + path, nil
	}
	path, err := tokensPath(f.tokens)
	if err != nil {
		return nil, "", err
	}
	tokens, err := server.LoadTokens(path)
	if err == nil && tokens.Len() == 0 {
		err = errors.New("it holds no token")
	}
	if err != nil {
		return nil, "", outpost.Errorf(outpost.Configuration, "serve", "--listen needs bearer tokens: %v (create one with `outpost serve token add NAME`)", err)
	}
	opts.Tokens = tokens
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return nil, "", outpost.Wrap(outpost.Configuration, "serve", err)
	}
	return ln, "http://" + ln.Addr().String(), nil
}

// serveUntilDone serves until the server fails or ctx ends (SIGTERM),
// then shuts down: the grace, then time for cancelled turns to capture
// their conversations.
func serveUntilDone(ctx context.Context, srv *server.Server, ln net.Listener, grace time.Duration, log *slog.Logger) error {
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln, nil) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace+2*time.Minute)
	defer cancel()
	if serr := srv.Shutdown(sctx); serr != nil {
		log.Error("outpost serve: shutdown", "err", serr)
		err = errors.Join(err, serr)
	}
	log.Info("outpost serve: stopped")
	if err != nil {
		return outpost.Wrap(outpost.Sandbox, "serve", err)
	}
	return nil
}

// defaultSocket is $XDG_RUNTIME_DIR/outpost/serve.sock, or a directory of
// the user's own under the temporary directory.
func defaultSocket() (string, error) {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "outpost", "serve.sock"), nil
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("outpost-%d", os.Getuid()), "serve.sock"), nil
}

// listenUnix listens on path, in a directory only this user may enter,
// with the socket itself 0600. A stale socket is replaced; a live one is
// an error.
func listenUnix(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, outpost.Wrap(outpost.Configuration, "serve", err)
	}
	if err := server.CheckPrivate(dir, 0o077, true); err != nil {
		return nil, outpost.Errorf(outpost.Configuration, "serve", "socket directory: %v (mode 0700)", err)
	}
	if _, err := os.Lstat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, outpost.Errorf(outpost.Configuration, "serve", "%s: another server is listening", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, outpost.Wrap(outpost.Configuration, "serve", err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, outpost.Wrap(outpost.Configuration, "serve", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, outpost.Wrap(outpost.Configuration, "serve", err)
	}
	return ln, nil
}
