package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// report is one run's figures; its JSON is one line of a runs file
// (`outpost-load plot`).
type report struct {
	Label         string  `json:"label,omitempty"`
	Date          string  `json:"date"`
	LoadAverage   string  `json:"load_average"`
	Sandbox       string  `json:"sandbox"`
	Store         string  `json:"store"` // "filesystem" or "postgres"
	Replicas      int     `json:"replicas"`
	Conversations int     `json:"conversations"`
	TurnsEach     int     `json:"turns_each"`
	Watchers      int     `json:"watchers"`
	Stored        *stored `json:"stored,omitempty"`

	Turns         int            `json:"turns"`   // turns meant to run
	Results       int            `json:"results"` // turns with exactly one result line
	Errors        map[string]int `json:"errors,omitempty"`
	Lost          int            `json:"lost"`       // no result (not started, stream broken, or not run)
	Duplicated    int            `json:"duplicated"` // more than one result line, or a conversation id twice
	Retries       int            `json:"retries_429"`
	CutStreams    int            `json:"cut_streams"` // extra watchers' streams that ended without the result
	MaxConcurrent int            `json:"max_concurrent"`
	Failures      []string       `json:"failures,omitempty"` // the first distinct errors of lost turns

	Seconds       float64            `json:"seconds"`
	TurnsPerSec   float64            `json:"turns_per_second"`
	FirstP50      float64            `json:"first_event_p50_ms"`
	FirstP99      float64            `json:"first_event_p99_ms"`
	FirstMax      float64            `json:"first_event_max_ms"`
	ResultP50     float64            `json:"result_p50_ms"`
	ResultP99     float64            `json:"result_p99_ms"`
	ResultMax     float64            `json:"result_max_ms"`
	CPUSeconds    float64            `json:"server_cpu_seconds"`
	CPUPerTurn    float64            `json:"server_cpu_ms_per_turn"`
	PeakRSS       int64              `json:"server_peak_rss_bytes"`
	RSSPerRunning int64              `json:"server_rss_per_running_turn_bytes"`
	HeapPerRun    int64              `json:"server_heap_per_running_turn_bytes"`
	GoroutinesIn  float64            `json:"goroutines_before"`
	GoroutinesMax float64            `json:"goroutines_peak"`
	GoroutinesOut float64            `json:"goroutines_after"`
	GoroutinesRun float64            `json:"goroutines_per_running_turn"`
	StoreOps      float64            `json:"store_ops_per_turn"`
	StoreOpsBy    map[string]float64 `json:"store_ops_per_turn_by_op,omitempty"` // store/op
	EventsPerTurn float64            `json:"events_per_turn"`                    // to all K watchers
	EventsPerSec  float64            `json:"events_per_second"`                  // delivered to all watchers
	EventsWatched int64              `json:"events_to_watchers"`                 // delivered in all
}

func newReport(cfg *config) *report {
	store := "filesystem"
	if cfg.store != "" {
		store = "postgres"
	}
	if cfg.socket != "" {
		store = "given"
	}
	return &report{Label: cfg.label, Date: time.Now().UTC().Format(time.RFC3339), LoadAverage: loadAverage(),
		Sandbox: cfg.sandbox, Store: store, Replicas: max(cfg.replicas, 1), Conversations: cfg.conversations,
		TurnsEach: cfg.turns, Watchers: cfg.watchers}
}

// fill computes the figures of a measured run.
func (r *report) fill(cfg *config, d *loader, stats []turnStat, elapsed time.Duration, before, after totals, pk *peaks) {
	r.Turns = len(stats)
	var firsts, results []time.Duration
	convs := map[string]int{}
	events := d.watched.Load()
	for i, st := range stats {
		r.Retries += st.retries
		events += int64(st.events)
		switch {
		case st.results == 1:
			r.Results++
			firsts, results = append(firsts, st.first), append(results, st.result)
			if st.code != "" {
				if r.Errors == nil {
					r.Errors = map[string]int{}
				}
				r.Errors[st.code]++
			}
		case st.results > 1:
			r.Duplicated++
		default:
			r.Lost++
			if st.err != nil && len(r.Failures) < 5 && !slices.Contains(r.Failures, st.err.Error()) {
				r.Failures = append(r.Failures, st.err.Error())
			}
		}
		if i%cfg.turns == 0 && st.conversation != "" {
			convs[st.conversation]++
		}
	}
	for _, n := range convs {
		if n > 1 {
			r.Duplicated += n - 1
		}
	}
	firsts, results = sortedDurations(firsts), sortedDurations(results)
	r.FirstP50, r.FirstP99, r.FirstMax = percentile(firsts, .5), percentile(firsts, .99), percentile(firsts, 1)
	r.ResultP50, r.ResultP99, r.ResultMax = percentile(results, .5), percentile(results, .99), percentile(results, 1)
	r.Seconds = elapsed.Seconds()
	r.CutStreams = int(d.cut.Load())
	r.MaxConcurrent = pk.maxConcurrent
	n := float64(max(r.Results, 1))
	running := float64(max(pk.maxConcurrent, 1))
	r.TurnsPerSec = float64(r.Results) / r.Seconds
	r.CPUSeconds = (after.cpu - before.cpu).Seconds()
	r.CPUPerTurn = r.CPUSeconds * 1000 / n
	r.PeakRSS = after.hwm
	r.RSSPerRunning = int64(float64(max(pk.rss-before.rss, 0)) / running)
	r.HeapPerRun = int64(max(pk.heap-before.heap, 0) / running)
	r.GoroutinesIn, r.GoroutinesMax, r.GoroutinesOut = before.goroutines, pk.goroutines, after.goroutines
	r.GoroutinesRun = max(pk.goroutines-before.goroutines, 0) / running
	r.StoreOps = (after.storeOps - before.storeOps) / n
	for k, v := range after.ops {
		if d := v - before.ops[k]; d > 0 {
			if r.StoreOpsBy == nil {
				r.StoreOpsBy = map[string]float64{}
			}
			r.StoreOpsBy[k] = d / n
		}
	}
	r.EventsWatched = events
	r.EventsPerTurn = float64(events) / n
	r.EventsPerSec = float64(events) / r.Seconds
}

// write prints the report as a table, and as a JSON line to --json.
func (r *report) write(cfg *config, stdout io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	switch cfg.jsonOut {
	case "-":
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	case "":
	default:
		f, err := os.OpenFile(cfg.jsonOut, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(f, "%s\n", b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return r.table(stdout)
}

func (r *report) table(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, format string, v ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, v...)...) }
	row("run", "%s: %d conversations × %d turns, %d watchers, %d replica(s), %s sandbox, %s store", r.Label, r.Conversations, r.TurnsEach, r.Watchers, r.Replicas, r.Sandbox, r.Store)
	row("when", "%s, load average %s", r.Date, r.LoadAverage)
	if r.Turns > 0 {
		row("turns", "%d meant, %d with one result, errors %s, lost %d, duplicated %d, 429 retries %d, cut streams %d", r.Turns, r.Results, codes(r.Errors), r.Lost, r.Duplicated, r.Retries, r.CutStreams)
		for _, f := range r.Failures {
			row("  lost because", "%s", f)
		}
		row("throughput", "%.1f turns/s over %.2f s (at most %d turns in flight)", r.TurnsPerSec, r.Seconds, r.MaxConcurrent)
		row("submit → first event", "p50 %.1f ms, p99 %.1f ms, max %.1f ms", r.FirstP50, r.FirstP99, r.FirstMax)
		row("submit → result", "p50 %.1f ms, p99 %.1f ms, max %.1f ms", r.ResultP50, r.ResultP99, r.ResultMax)
		row("server CPU", "%.2f s, %.3f ms per turn", r.CPUSeconds, r.CPUPerTurn)
		row("server memory", "peak RSS %s; per running turn: RSS %s, heap %s", size(r.PeakRSS), size(r.RSSPerRunning), size(r.HeapPerRun))
		row("goroutines", "%.0f before, %.0f peak, %.0f after (%.1f per running turn)", r.GoroutinesIn, r.GoroutinesMax, r.GoroutinesOut, r.GoroutinesRun)
		row("store operations", "%.1f per turn: %s", r.StoreOps, perOp(r.StoreOpsBy))
		row("events", "%.1f per turn to %d watcher(s), %.0f/s delivered", r.EventsPerTurn, r.Watchers, r.EventsPerSec)
	}
	if s := r.Stored; s != nil {
		row("stored conversations", "%d (put in %.1f s); on disk %s (%s each); directory store's index %s", s.Count, s.SeedSeconds,
			size(s.DiskBytes), size(s.DiskBytes/int64(max(s.Count, 1))), size(s.IndexBytes))
		for _, op := range s.Ops {
			row("  "+op.Name, "median %.2f ms, max %.2f ms (%d times; %d B)", op.Median, op.Max, op.Count, op.Bytes)
		}
	}
	return tw.Flush()
}

func codes(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

func size(b int64) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

func perOp(m map[string]float64) string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s %.2f", k, v))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}
