package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outposthq/outpost/conversation/postgres"
)

// config is a run's command line.
type config struct {
	conversations, turns, watchers, replicas int
	stored                                   int
	maxTurns                                 int
	timeout                                  time.Duration
	store                                    string // "" (a fresh directory store) or a postgres:// URL
	sandbox                                  string
	poolSize                                 int
	socket                                   string // point at a running server instead
	pid                                      int
	label                                    string
	jsonOut                                  string
	keep                                     bool
	cpuProfile                               string
	serveExtra                               []string // more flags for each server (the chaos run's docker sandbox)
}

var errHelp = errors.New("help")

const usageText = `usage: outpost-load [flags]
       outpost-load plot [flags] RUNS.jsonl

Drives outpost serve through its HTTP API and reports the server's own cost
per turn (docs/benchmarks.md, "Scale").

A run starts --replicas servers (outpost serve with the in-memory sandbox
"memory-echo", whose echo agent costs nothing), on a fresh directory store,
or on the PostgreSQL database of --store (one database shared by the
replicas: a fleet). Then --conversations conversations run at once, each of
--turns turns (the first new, the others resuming it), each turn followed by
--watchers event streams. It reports throughput, p50/p99/max of
submit-to-first-event and submit-to-result, the servers' CPU seconds and
memory per turn (/proc), goroutines (go_goroutines of /metrics), store
operations per turn (outpost_store_operations_total) and events delivered.

With --stored N it first puts N conversations in the store, then times
GET /v1/conversations (the first page), GET /v1/conversations/{id} and its
/usage, and the store's sweep of the spool and of finished turns.

Bounds: at most --max-turns turns and --timeout in all; servers are spoken to
over Unix sockets only, and PostgreSQL only on loopback or a Unix socket.

Examples:
  outpost-load --conversations 100 --turns 3
  outpost-load --conversations 300 --replicas 3 --store postgres://...@127.0.0.1/db
  outpost-load --conversations 10 --watchers 100 --json -
  outpost-load --stored 10000 --conversations 0 --store postgres://...

Flags:
`

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("outpost-load", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usageText); fs.PrintDefaults() }
	fs.IntVar(&c.conversations, "conversations", 10, "conversations running at once (N)")
	fs.IntVar(&c.turns, "turns", 3, "turns per conversation (M), the first new, the others resuming it")
	fs.IntVar(&c.watchers, "watchers", 1, "event streams per turn (K), the harness's own among them")
	fs.IntVar(&c.replicas, "replicas", 1, "servers started (R); more than one needs a PostgreSQL --store")
	fs.IntVar(&c.stored, "stored", 0, "conversations put in the store before the run, then list, show and usage timed")
	fs.IntVar(&c.maxTurns, "max-turns", 100000, "refuse a run of more turns than this")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Minute, "the whole run's bound; turns unfinished then count as lost")
	fs.StringVar(&c.store, "store", "", "the servers' store: a postgres:// URL on loopback or a Unix socket (default: a fresh directory store)")
	fs.StringVar(&c.sandbox, "sandbox", memProvider, "the turns' sandbox provider: memory-echo, local or docker")
	fs.IntVar(&c.poolSize, "pool-size", 0, "the servers' --pool-size (default: min(N, 64) per replica)")
	fs.StringVar(&c.socket, "socket", "", "drive the running server on this Unix socket instead of starting one (--pid to measure it)")
	fs.IntVar(&c.pid, "pid", 0, "with --socket: the server's process id, for its CPU and memory")
	fs.StringVar(&c.label, "label", "", "a name for this run in the report")
	fs.StringVar(&c.jsonOut, "json", "", "also append the report as one JSON line to this file (- for standard output, instead of the table)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write each server's CPU profile (go tool pprof) to this directory, as rN.pprof")
	fs.BoolVar(&c.keep, "keep", false, "keep the servers' directories and logs (printed)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	return c, c.check()
}

func (c *config) check() error {
	switch {
	case c.conversations < 0 || c.turns < 1 || c.watchers < 1 || c.replicas < 1 || c.stored < 0:
		return errors.New("--conversations and --stored must be ≥ 0, --turns, --watchers and --replicas ≥ 1")
	case c.conversations*c.turns > c.maxTurns:
		return fmt.Errorf("%d × %d turns is over --max-turns %d", c.conversations, c.turns, c.maxTurns)
	case c.timeout <= 0:
		return errors.New("--timeout must be positive")
	case c.replicas > 1 && c.store == "":
		return errors.New("several --replicas share a PostgreSQL --store")
	case c.socket != "" && (c.replicas > 1 || c.stored > 0):
		return errors.New("--socket drives one running server: no --replicas or --stored")
	}
	if c.store != "" {
		return loopbackOnly(c.store)
	}
	return nil
}

// loopbackOnly refuses a PostgreSQL connection string whose hosts are not
// Unix sockets or loopback addresses: the harness never reaches a network.
func loopbackOnly(url string) error {
	if !postgres.IsConnString(url) {
		return errors.New("--store: want a postgres:// URL (the directory store is made fresh for each run)")
	}
	pc, err := pgconn.ParseConfig(url)
	if err != nil {
		return errors.New("--store: not a valid PostgreSQL connection string")
	}
	hosts := []string{pc.Host}
	for _, f := range pc.Fallbacks {
		hosts = append(hosts, f.Host)
	}
	for _, h := range hosts {
		if strings.HasPrefix(h, "/") || h == "localhost" {
			continue
		}
		if ip := net.ParseIP(h); ip == nil || !ip.IsLoopback() {
			return fmt.Errorf("--store: host %q is not loopback or a Unix socket", h)
		}
	}
	return nil
}
