package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// run is one whole run: the servers, the stored conversations (--stored),
// the warm-up, the measured turns, the report.
func run(ctx context.Context, cfg *config, log io.Writer) (*report, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	f, err := startFleet(ctx, cfg, cfg.store)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := f.stop(cfg.keep); err != nil {
			fmt.Fprintln(log, "outpost-load:", err)
		}
		if cfg.keep && f.dir != "" {
			fmt.Fprintln(log, "outpost-load: servers' directories and logs kept in", f.dir)
		}
	}()
	rep := newReport(cfg)
	if cfg.stored > 0 {
		if rep.Stored, err = storedRun(ctx, cfg, f); err != nil {
			return rep, err
		}
	}
	if cfg.conversations == 0 {
		return rep, nil
	}
	if err := warmUp(ctx, cfg, f); err != nil {
		return rep, err
	}
	before, err := sampleFleet(f)
	if err != nil {
		return rep, err
	}
	pk := &peaks{rss: before.rss, heap: before.heap, goroutines: before.goroutines}
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { pk.watch(wctx, f); close(watched) }()
	d := &loader{cfg: cfg, fleet: f, peaks: pk}
	start := time.Now()
	stats := d.run(ctx)
	elapsed := time.Since(start)
	stopWatch()
	<-watched
	after, err := sampleFleet(f)
	if err != nil {
		return rep, err
	}
	rep.fill(cfg, d, stats, elapsed, before, after, pk)
	if rep.Lost > 0 || rep.Duplicated > 0 {
		return rep, fmt.Errorf("%d turns lost, %d duplicated (the report says why)", rep.Lost, rep.Duplicated)
	}
	return rep, ctx.Err()
}

// warmUp runs one turn per replica, unmeasured: the pools fill, the
// store's files and connections open.
func warmUp(ctx context.Context, cfg *config, f *fleet) error {
	d := &loader{cfg: &config{watchers: 1}, fleet: f, peaks: &peaks{}}
	for _, s := range f.servers {
		st := d.turn(ctx, s, "warm up", "")
		if st.err != nil || st.results != 1 || st.code != "" {
			return fmt.Errorf("the warm-up turn on %s failed: %v (code %q, %d results; server log: %s)", s.name, st.err, st.code, st.results, s.log)
		}
	}
	return nil
}

// loadAverage is /proc/loadavg's first three figures.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// percentile is the p-th percentile (0..1) of sorted durations, in ms.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1)*p + 0.5)
	return ms(sorted[i])
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func sortedDurations(ds []time.Duration) []time.Duration {
	out := slices.Clone(ds)
	slices.Sort(out)
	return out
}
