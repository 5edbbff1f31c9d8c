package server

import (
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/internal/storeops"
	"github.com/outposthq/outpost/sandbox"
)

// metrics are the server's Prometheus series, on a registry of its own.
// Label values are bounded: agent (a preset name), sandbox (an allowed
// provider), code (an outpost code or "ok"), route (a route pattern).
type metrics struct {
	reg      *prometheus.Registry
	turns    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	wait     prometheus.Histogram
	tokens   *prometheus.CounterVec
	running  prometheus.Gauge
	queued   prometheus.Gauge
	pool     *prometheus.GaugeVec
	requests *prometheus.CounterVec
	rejected *prometheus.CounterVec
	streams  prometheus.Gauge
	races    *prometheus.CounterVec
}

// newMetrics makes the series; retained is the bytes of the retained
// events; with a spool, also its size, read when scraped.
func newMetrics(retained *atomic.Int64, spool *conversation.Spool) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		turns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_turns_total", Help: "Finished turns by agent, sandbox provider and result code (ok for success).",
		}, []string{"agent", "sandbox", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "outpost_turn_duration_seconds", Help: "Turn duration from start (after the queue) to result.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
		}, []string{"agent", "sandbox"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "outpost_turn_queue_seconds", Help: "Time turns waited in the queue.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_tokens_total", Help: "Tokens reported by finished turns, by agent and kind (input, output, cache_read, cache_write).",
		}, []string{"agent", "kind"}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Name: "outpost_turns_running", Help: "Turns running now."}),
		queued:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "outpost_turns_queued", Help: "Turns waiting for a slot (the queue depth)."}),
		pool: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "outpost_pool_sandboxes", Help: "Pooled sandboxes by provider and state (ready, opening, leased).",
		}, []string{"sandbox", "state"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_http_requests_total", Help: "HTTP requests by route pattern and status.",
		}, []string{"route", "status"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_http_rejected_total", Help: "Requests refused before any work, by reason (unauthorized, forbidden, busy, too_large, ...).",
		}, []string{"reason"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "outpost_event_streams", Help: "Open event streams (GET /v1/turns/{id}/events, POST /v1/races)."}),
		races: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outpost_races_total", Help: "Finished races by result: winner, no_winner, error (the race could not start). Their contestants count in outpost_turns_total.",
		}, []string{"result"}),
	}
	m.reg.MustRegister(m.turns, m.duration, m.wait, m.tokens, m.running, m.queued, m.pool, m.requests, m.rejected, m.streams, m.races,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), storeOps{},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "outpost_events_retained_bytes", Help: "Bytes of the turns' events kept for replay."},
			func() float64 { return float64(retained.Load()) }))
	if spool != nil {
		size := func(bytes bool) func() float64 {
			return func() float64 {
				files, _ := spool.Files()
				n, b := spoolSize(files)
				if bytes {
					return b
				}
				return n
			}
		}
		m.reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "outpost_spool_files", Help: "Turns spooled because the store could not take them, not yet stored."}, size(false)),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "outpost_spool_bytes", Help: "Bytes of the spooled turns not yet stored."}, size(true)))
	}
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// poolStats sets the pool gauges from the pool's counts, summed by
// provider (a key's settings never become label values).
func (m *metrics) poolStats(stats []sandbox.PoolStats) {
	sum := map[[2]string]float64{}
	for _, s := range stats {
		prov, _, _ := strings.Cut(s.Key, ",")
		sum[[2]string{prov, "ready"}] += float64(s.Ready)
		sum[[2]string{prov, "opening"}] += float64(s.Opening)
		sum[[2]string{prov, "leased"}] += float64(s.Leased)
	}
	for k, v := range sum {
		m.pool.WithLabelValues(k[0], k[1]).Set(v)
	}
}

// storeOps exports the process's store operations (internal/storeops) as
// outpost_store_operations_total by store (filesystem, postgres,
// postgres-turns, filesystem-objects, postgres-objects) and operation
// (the stores' own constant names): both bounded.
type storeOps struct{}

var storeOpsDesc = prometheus.NewDesc("outpost_store_operations_total",
	"Operations of the conversation, turn and checkpoint-object stores by this process, by store and operation.",
	[]string{"store", "op"}, nil)

func (storeOps) Describe(ch chan<- *prometheus.Desc) { ch <- storeOpsDesc }

func (storeOps) Collect(ch chan<- prometheus.Metric) {
	for _, o := range storeops.All() {
		ch <- prometheus.MustNewConstMetric(storeOpsDesc, prometheus.CounterValue, float64(o.N), o.Store, o.Op)
	}
}
