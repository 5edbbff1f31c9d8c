package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

const chaosUsage = `usage: outpost-load chaos --store URL [flags]

The chaos run (docs/scale.md, "Chaos"): --replicas servers on the
PostgreSQL database of --store run --conversations conversations, turn
after turn, while faults strike one after the other, --phase apart:
  cut       the next --conversations event streams are cut after their
            first event (the clients resume them with Last-Event-ID)
  kill      replica r1 is killed with SIGKILL (its clients go to the next
            replica; its turns are ended by the others' heartbeats)
  postgres  --restart-postgres runs (sh -c), e.g. pg_ctl restart -m immediate
  docker    --restart-docker runs (sh -c): the Docker daemon of the
            conversations on --sandbox docker (every --docker-every-th)
  restart   r1 starts again under its name
Then every conversation is resumed once more, and the run checks what a
user must see: every accepted turn exactly one result, no event twice,
every turn in the store once and finished with the result its client
saw, no conversation but the clients', each conversation's turns in
order with none lost or applied twice, and with docker no container left
(outpost gc --dry-run). scripts/chaos.sh runs it on a PostgreSQL and a
Docker daemon of its own: never point it at shared ones.

Flags:
`

// chaosConfig is a chaos run's command line.
type chaosConfig struct {
	store, restartPG, restartDocker, image, jsonOut string
	replicas, conversations, dockerEvery, slow      int
	phase, timeout                                  time.Duration
}

func parseChaos(args []string, stderr io.Writer) (*chaosConfig, error) {
	c := &chaosConfig{}
	fs := flag.NewFlagSet("outpost-load chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, chaosUsage); fs.PrintDefaults() }
	fs.StringVar(&c.store, "store", "", "the fleet's PostgreSQL database (loopback or a Unix socket); required")
	fs.IntVar(&c.replicas, "replicas", 3, "servers started, r1 ... rR (at least 2)")
	fs.IntVar(&c.conversations, "conversations", 9, "conversations running at once")
	fs.IntVar(&c.dockerEvery, "docker-every", 0, "every Nth conversation runs on the docker sandbox (0: none)")
	fs.StringVar(&c.image, "image", "outpost/busybox:test", "the docker sandbox's image")
	fs.IntVar(&c.slow, "slow", 10, "each turn's #slow=N: N × 50 ms of agent time")
	fs.StringVar(&c.restartPG, "restart-postgres", "", "shell command restarting the store's PostgreSQL (none: that fault is skipped)")
	fs.StringVar(&c.restartDocker, "restart-docker", "", "shell command restarting the Docker daemon (none: skipped)")
	fs.DurationVar(&c.phase, "phase", 8*time.Second, "time between faults")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "the whole run's bound")
	fs.StringVar(&c.jsonOut, "json", "", "also write the report as JSON to this file (- for standard output)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, errHelp
		}
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	case c.store == "":
		return nil, errors.New("--store: the chaos run needs a PostgreSQL database")
	case c.replicas < 2 || c.conversations < 1 || c.dockerEvery < 0 || c.slow < 0:
		return nil, errors.New("--replicas must be ≥ 2, --conversations ≥ 1, --docker-every and --slow ≥ 0")
	}
	return c, loopbackOnly(c.store)
}

func chaosMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseChaos(args, stderr)
	if err != nil {
		if err == errHelp {
			return 0
		}
		fmt.Fprintln(stderr, "outpost-load chaos:", err)
		return 2
	}
	rep, err := chaosRun(ctx, c, stderr)
	if rep != nil {
		rep.write(c, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "outpost-load chaos:", err)
		return 1
	}
	return 0
}

// serveConfig is the servers' configuration: the in-memory sandbox
// first, docker beside it when some conversations use it.
func (c *chaosConfig) serveConfig() *config {
	cfg := &config{conversations: c.conversations, watchers: 2, replicas: c.replicas, sandbox: memProvider, poolSize: 4}
	if c.dockerEvery > 0 {
		cfg.serveExtra = []string{"--sandbox", "docker", "--set", "docker.image=" + c.image, "--set", "docker.network=none"}
	}
	return cfg
}

// chaosRun starts the fleet, runs the load and the faults, then checks.
func chaosRun(ctx context.Context, c *chaosConfig, log io.Writer) (*chaosReport, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	cfg := c.serveConfig()
	f, err := startFleet(ctx, cfg, c.store)
	if err != nil {
		return nil, err
	}
	defer f.stop(false)
	if err := warmUp(ctx, cfg, f); err != nil {
		return nil, err
	}
	cl := &chaosClient{fleet: f, dead: map[string]bool{}, refused: map[string]int{}}
	rep := &chaosReport{Date: time.Now().UTC().Format(time.RFC3339), LoadAverage: loadAverage(), Replicas: c.replicas, Conversations: c.conversations}
	stop := make(chan struct{})
	convs := make([]string, c.conversations)
	var wg sync.WaitGroup
	for i := range c.conversations {
		wg.Add(1)
		go func() { defer wg.Done(); convs[i] = c.converse(ctx, cl, i, stop) }()
	}
	start := time.Now()
	rep.Faults = c.faults(ctx, cfg, f, cl, log)
	close(stop)
	wg.Wait()
	for i, conv := range convs { // every conversation resumes: no hold left
		c.resume(ctx, cl, i, conv, rep)
	}
	rep.Seconds = time.Since(start).Seconds()
	if err := rep.check(ctx, c, cl); err != nil {
		return rep, err
	}
	if rep.Lost > 0 || rep.Duplicated > 0 || len(rep.Violations) > 0 {
		return rep, fmt.Errorf("%d turns lost, %d duplicated, %d violations (the report says which)", rep.Lost, rep.Duplicated, len(rep.Violations))
	}
	return rep, ctx.Err()
}

// sandboxOf is conversation i's sandbox.
func (c *chaosConfig) sandboxOf(i int) string {
	if c.dockerEvery > 0 && i%c.dockerEvery == c.dockerEvery-1 {
		return "docker"
	}
	return memProvider
}

// converse runs conversation i's turns until stop, and returns its id.
func (c *chaosConfig) converse(ctx context.Context, cl *chaosClient, i int, stop <-chan struct{}) string {
	conv := ""
	for n := 1; ; n++ {
		select {
		case <-stop:
			return conv
		default:
		}
		req := map[string]any{"prompt": fmt.Sprintf("c%d t%d #slow=%d", i, n, c.slow), "sandbox": c.sandboxOf(i)}
		if conv != "" {
			req["resume"] = conv
		}
		t := cl.start(ctx, i, req)
		if t == nil {
			return conv
		}
		cl.follow(ctx, i, t)
		if conv == "" && t.Code == "" {
			conv = t.Conversation
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// resume runs one more turn of conv until one succeeds (30 tries): a
// conversation a killed replica held must be free again.
func (c *chaosConfig) resume(ctx context.Context, cl *chaosClient, i int, conv string, rep *chaosReport) {
	if conv == "" {
		return
	}
	for range 30 {
		t := cl.start(ctx, i, map[string]any{"prompt": "after the chaos", "resume": conv, "sandbox": c.sandboxOf(i)})
		if t == nil {
			break
		}
		cl.follow(ctx, i, t)
		if t.Code == "" {
			return
		}
		sleep(ctx, 500*time.Millisecond)
	}
	rep.Violations = append(rep.Violations, "conversation "+conv+" could not be resumed after the chaos")
}

// faults strikes the faults one after the other, --phase apart, and
// returns when and how long each took.
func (c *chaosConfig) faults(ctx context.Context, cfg *config, f *fleet, cl *chaosClient, log io.Writer) []chaosFault {
	var out []chaosFault
	do := func(name string, fn func() error) {
		sleep(ctx, c.phase)
		fl := chaosFault{Name: name, At: time.Now()}
		if err := fn(); err != nil {
			fl.Error = err.Error()
		}
		fl.Took = time.Since(fl.At).Seconds()
		fmt.Fprintf(log, "outpost-load chaos: %s at %s (%.1f s) %s\n", name, fl.At.Format(time.TimeOnly), fl.Took, fl.Error)
		out = append(out, fl)
	}
	do("cut", func() error { cl.cut.Store(int64(c.conversations)); return nil })
	r1 := f.servers[0]
	do("kill", func() error {
		cl.mu.Lock()
		cl.dead[r1.name] = true
		cl.mu.Unlock()
		r1.cmd.Process.Signal(syscall.SIGKILL)
		<-r1.exited
		return nil
	})
	if c.restartPG != "" {
		do("postgres", func() error { return shell(ctx, c.restartPG) })
	}
	if c.restartDocker != "" {
		do("docker", func() error { return shell(ctx, c.restartDocker) })
	}
	do("restart", func() error {
		s, err := f.start(cfg, c.store, r1.name)
		if err == nil {
			err = waitHealthy(ctx, s)
		}
		if err == nil {
			cl.mu.Lock()
			f.servers[0], cl.dead[r1.name] = s, false
			cl.mu.Unlock()
		}
		return err
	})
	sleep(ctx, c.phase)
	return out
}

func shell(ctx context.Context, cmd string) error {
	out, err := exec.CommandContext(ctx, "sh", "-c", cmd).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", cmd, err, out)
	}
	return nil
}
