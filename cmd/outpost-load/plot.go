package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// plotMain is `outpost-load plot [--out DIR] RUNS.jsonl`: the curves of
// scripts/scale.sh's runs (by their --label: concurrency, stored
// filesystem, stored postgres, watchers, replicas) as SVG line plots and
// Markdown tables in DIR. The last run of a label and size counts.
func plotMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost-load plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", ".", "directory the plots (*.svg) and tables.md are written to")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: outpost-load plot [--out DIR] RUNS.jsonl")
		return 2
	}
	runs, err := readRuns(fs.Arg(0))
	if err == nil {
		err = writeCurves(runs, *out)
	}
	if err != nil {
		fmt.Fprintln(stderr, "outpost-load plot:", err)
		return 1
	}
	fmt.Fprintln(stdout, "outpost-load plot: wrote", filepath.Join(*out, "tables.md"), "and the plots beside it")
	return 0
}

func readRuns(name string) (map[string][]*report, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	byLabel := map[string][]*report{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var r report
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		rs := byLabel[r.Label]
		rs = slices.DeleteFunc(rs, func(o *report) bool { return xOf(o) == xOf(&r) })
		byLabel[r.Label] = append(rs, &r)
	}
	for _, rs := range byLabel {
		slices.SortFunc(rs, func(a, b *report) int { return int(xOf(a) - xOf(b)) })
	}
	return byLabel, sc.Err()
}

// xOf is a run's x: the stored conversations, else the replicas (a fleet
// run), else the watchers when over one, else the concurrency.
func xOf(r *report) float64 {
	switch {
	case r.Stored != nil:
		return float64(r.Stored.Count)
	case strings.HasPrefix(r.Label, "replicas"):
		return float64(r.Replicas)
	case strings.HasPrefix(r.Label, "watchers"):
		return float64(r.Watchers)
	}
	return float64(r.Conversations)
}

// curve is one series: f of each run of the label.
func curve(name string, rs []*report, f func(*report) float64) series {
	s := series{name: name}
	for _, r := range rs {
		s.x, s.y = append(s.x, xOf(r)), append(s.y, f(r))
	}
	return s
}

func storedOp(i int) func(*report) float64 {
	return func(r *report) float64 {
		if r.Stored == nil || i >= len(r.Stored.Ops) {
			return 0
		}
		return r.Stored.Ops[i].Median
	}
}

func writeCurves(runs map[string][]*report, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	c, fsr, pgr, w, rep := runs["concurrency"], runs["stored filesystem"], runs["stored postgres"], runs["watchers"], runs["replicas"]
	plots := map[string]*lineplot{
		"concurrency-cpu.svg": {title: "Server CPU per echo turn (in-memory sandbox)", xlabel: "concurrent conversations", ylabel: "ms of CPU per turn", logx: true,
			series: []series{curve("CPU ms/turn", c, func(r *report) float64 { return r.CPUPerTurn })}},
		"concurrency-memory.svg": {title: "Server memory per running turn", xlabel: "concurrent conversations", ylabel: "KiB per running turn", logx: true,
			series: []series{curve("heap", c, func(r *report) float64 { return float64(r.HeapPerRun) / 1024 }),
				curve("RSS", c, func(r *report) float64 { return float64(r.RSSPerRunning) / 1024 })}},
		"concurrency-latency.svg": {title: "Submit to result", xlabel: "concurrent conversations", ylabel: "ms", logx: true,
			series: []series{curve("p50", c, func(r *report) float64 { return r.ResultP50 }), curve("p99", c, func(r *report) float64 { return r.ResultP99 })}},
		"stored.svg": {title: "Reading stored conversations", xlabel: "stored conversations", ylabel: "ms (median of 20)", logx: true,
			series: []series{curve("list, filesystem", fsr, storedOp(0)), curve("list, PostgreSQL", pgr, storedOp(0)),
				curve("native id, filesystem", fsr, storedOp(2)), curve("native id, PostgreSQL", pgr, storedOp(2)),
				curve("resume, filesystem", fsr, storedOp(4)), curve("resume, PostgreSQL", pgr, storedOp(4))}},
		"watchers.svg": {title: "Events to K watchers per turn", xlabel: "watchers per turn", ylabel: "events/s delivered", logx: true,
			series: []series{curve("events/s", w, func(r *report) float64 { return r.EventsPerSec })}},
		"replicas.svg": {title: "Fleet throughput on one PostgreSQL", xlabel: "replicas", ylabel: "turns/s",
			series: []series{curve("turns/s", rep, func(r *report) float64 { return r.TurnsPerSec })}},
	}
	for name, p := range plots {
		if !hasData(p) {
			continue
		}
		if err := writeFile(filepath.Join(dir, name), p.write); err != nil {
			return err
		}
	}
	return writeFile(filepath.Join(dir, "tables.md"), func(w io.Writer) error { return tables(w, runs) })
}

func hasData(p *lineplot) bool {
	for _, s := range p.series {
		if len(s.x) > 0 {
			return true
		}
	}
	return false
}

func writeFile(name string, write func(io.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
