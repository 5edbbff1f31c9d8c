package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat's CPU
// times: 100 on every Linux architecture Go supports.
const clockTicks = 100

// procSample is what /proc says of one process.
type procSample struct {
	cpu      time.Duration // user + system
	rss, hwm int64         // bytes: resident now, and its peak (VmHWM)
}

func readProc(pid int) (procSample, error) {
	var p procSample
	if pid <= 0 {
		return p, fmt.Errorf("no process id")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return p, err
	}
	// The command name (field 2) may hold spaces: count after its ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return p, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64) // field 14
	st, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	p.cpu = time.Duration(ut+st) * time.Second / clockTicks
	st2, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return p, err
	}
	defer st2.Close()
	sc := bufio.NewScanner(st2)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			p.rss = kb << 10
		case "VmHWM":
			p.hwm = kb << 10
		}
	}
	return p, sc.Err()
}

// labelled reads the series name of a server's /metrics by their label
// values joined with "/" (outpost_store_operations_total{store="a",op="b"}
// is "a/b").
func labelled(s *server, name string) (map[string]float64, error) {
	out := map[string]float64{}
	err := metricLines(s, func(line string) {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			return
		}
		labels, value, _ := strings.Cut(rest, "} ")
		var vals []string
		for _, kv := range strings.Split(labels, ",") {
			_, v, _ := strings.Cut(kv, "=")
			vals = append(vals, strings.Trim(v, `"`))
		}
		out[strings.Join(vals, "/")], _ = strconv.ParseFloat(strings.TrimSpace(value), 64)
	})
	return out, err
}

// metricLines calls each with every line of a server's /metrics.
func metricLines(s *server, each func(line string)) error {
	resp, err := s.client.Get("http://outpost/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		each(sc.Text())
	}
	return sc.Err()
}

// scrape reads the named series of a server's /metrics, each summed over
// its labels; a series the server does not have is absent from the map.
func scrape(s *server, names ...string) (map[string]float64, error) {
	out := map[string]float64{}
	err := metricLines(s, func(line string) {
		if line == "" || line[0] == '#' {
			return
		}
		name, rest, _ := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		if i := strings.LastIndexByte(line, '}'); i >= 0 {
			rest = strings.TrimSpace(line[i+1:])
		}
		for _, n := range names {
			if n == name {
				v, _ := strconv.ParseFloat(strings.Fields(rest)[0], 64)
				out[n] += v
			}
		}
	})
	return out, err
}

// totals are the servers' counters and process figures, summed.
type totals struct {
	cpu        time.Duration
	rss, hwm   int64
	goroutines float64
	heap       float64
	storeOps   float64
	ops        map[string]float64 // by store/op
}

func sampleFleet(f *fleet) (totals, error) {
	t := totals{ops: map[string]float64{}}
	for _, s := range f.servers {
		if s.pid > 0 {
			p, err := readProc(s.pid)
			if err != nil {
				return t, err
			}
			t.cpu, t.rss, t.hwm = t.cpu+p.cpu, t.rss+p.rss, t.hwm+p.hwm
		}
		m, err := scrape(s, "go_goroutines", "go_memstats_heap_inuse_bytes", "outpost_store_operations_total")
		if err != nil {
			return t, err
		}
		t.goroutines += m["go_goroutines"]
		t.heap += m["go_memstats_heap_inuse_bytes"]
		t.storeOps += m["outpost_store_operations_total"]
		ops, err := labelled(s, "outpost_store_operations_total")
		if err != nil {
			return t, err
		}
		for k, v := range ops {
			t.ops[k] += v
		}
	}
	return t, nil
}

// peaks samples the fleet while a run goes: the highest resident memory,
// heap and goroutine count seen (every 100 ms, /metrics every 500 ms).
type peaks struct {
	mu                     sync.Mutex
	rss                    int64
	heap, goroutines       float64
	running, maxConcurrent int
}

func (p *peaks) watch(ctx context.Context, f *fleet) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var rss int64
		for _, s := range f.servers {
			if pr, err := readProc(s.pid); err == nil {
				rss += pr.rss
			}
		}
		p.mu.Lock()
		p.rss = max(p.rss, rss)
		p.mu.Unlock()
		if n%5 != 0 {
			continue
		}
		if t, err := sampleFleet(f); err == nil {
			p.mu.Lock()
			p.heap, p.goroutines = max(p.heap, t.heap), max(p.goroutines, t.goroutines)
			p.mu.Unlock()
		}
	}
}

// turnBegan and turnEnded count the turns in flight (between their POST
// and their result), for the concurrency actually reached.
func (p *peaks) turnBegan() {
	p.mu.Lock()
	p.running++
	p.maxConcurrent = max(p.maxConcurrent, p.running)
	p.mu.Unlock()
}

func (p *peaks) turnEnded() {
	p.mu.Lock()
	p.running--
	p.mu.Unlock()
}
