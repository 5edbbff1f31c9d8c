package main

import (
	"fmt"
	"io"
	"slices"
)

// tables writes the Markdown tables of the runs, one per label.
func tables(w io.Writer, runs map[string][]*report) error {
	labels := make([]string, 0, len(runs))
	for l := range runs {
		labels = append(labels, l)
	}
	slices.Sort(labels)
	for _, l := range labels {
		rs := runs[l]
		fmt.Fprintf(w, "\n%s (%s to %s, load average %s to %s):\n\n", l, rs[0].Date, rs[len(rs)-1].Date, rs[0].LoadAverage, rs[len(rs)-1].LoadAverage)
		if rs[0].Stored != nil {
			storedTable(w, rs)
			continue
		}
		fmt.Fprintln(w, "| conversations × turns | watchers | replicas | turns/s | first event p50 / p99 | result p50 / p99 / max | server CPU per turn | heap / RSS per running turn | goroutines per running turn | store ops per turn | events/s | lost, duplicated, errors |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
		for _, r := range rs {
			fmt.Fprintf(w, "| %d × %d | %d | %d | %.1f | %.0f / %.0f ms | %.0f / %.0f / %.0f ms | %.2f ms | %s / %s | %.1f | %.1f | %.0f | %d, %d, %s |\n",
				r.Conversations, r.TurnsEach, r.Watchers, r.Replicas, r.TurnsPerSec, r.FirstP50, r.FirstP99, r.ResultP50, r.ResultP99, r.ResultMax,
				r.CPUPerTurn, size(r.HeapPerRun), size(r.RSSPerRunning), r.GoroutinesRun, r.StoreOps, r.EventsPerSec, r.Lost, r.Duplicated, codes(r.Errors))
		}
	}
	return nil
}

func storedTable(w io.Writer, rs []*report) {
	fmt.Fprint(w, "| stored | on disk, each | index in memory, each |")
	for _, op := range rs[0].Stored.Ops {
		fmt.Fprintf(w, " %s |", op.Name)
	}
	fmt.Fprint(w, "\n|---|---|---|")
	for range rs[0].Stored.Ops {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, r := range rs {
		n := int64(max(r.Stored.Count, 1))
		fmt.Fprintf(w, "| %d | %s | %s |", r.Stored.Count, size(r.Stored.DiskBytes/n), size(r.Stored.IndexBytes/n))
		for _, op := range r.Stored.Ops {
			fmt.Fprintf(w, " %.2f ms (max %.2f; %s) |", op.Median, op.Max, size(int64(op.Bytes)))
		}
		fmt.Fprintln(w)
	}
}
