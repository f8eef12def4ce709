package adaptor

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics of the adaptor.
type Metrics struct {
	calls          *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	containerStart prometheus.Histogram
	inFlight       prometheus.Gauge
	queued         prometheus.Gauge
	bytesIn        prometheus.Counter
	bytesOut       prometheus.Counter
	cacheHits      prometheus.Counter
	cacheMisses    prometheus.Counter
	unknownFields  *prometheus.CounterVec
}

// Outcomes counted in ocifn_calls_total beyond OutcomeOK and OutcomeFatal.
const (
	// OutcomeError is a call answered with a gRPC error (bad request,
	// caller gone, shutting down).
	OutcomeError Outcome = "error"
	// OutcomeTimeout is a call stopped at the adaptor's timeout or the
	// caller's deadline.
	OutcomeTimeout Outcome = "timeout"
	// OutcomeRejected is a call refused because the server was full.
	OutcomeRejected Outcome = "rejected"
)

// NewMetrics creates the adaptor's metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ocifn_calls_total",
			Help: "RunFunction calls by outcome: ok, fatal (the adaptor answered with a Fatal result), error (gRPC error), timeout, rejected (server full).",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ocifn_call_duration_seconds",
			Help:    "Time from receiving a RunFunction call to answering it, by outcome.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"outcome"}),
		containerStart: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ocifn_container_start_seconds",
			Help:    "Time from asking for a container to the function's process running in it.",
			Buckets: []float64{.001, .0025, .005, .0075, .01, .015, .025, .05, .1, .25, 1},
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ocifn_calls_in_flight",
			Help: "Calls running in a container now.",
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ocifn_calls_queued",
			Help: "Calls waiting for a free slot (see --max-concurrency).",
		}),
		bytesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ocifn_request_bytes_total",
			Help: "Bytes of request JSON written to functions' stdin.",
		}),
		bytesOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ocifn_response_bytes_total",
			Help: "Bytes functions printed on stdout.",
		}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ocifn_cache_hits_total",
			Help: "Calls answered from the response cache.",
		}),
		cacheMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ocifn_cache_misses_total",
			Help: "Calls with a tag not found in the response cache (only counted while the cache is on).",
		}),
		unknownFields: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ocifn_unknown_fields_total",
			Help: "Request fields this ocifn's protocol does not know (sent by a newer Crossplane), which cannot reach the function, by message path and field number.",
		}, []string{"message", "field"}),
	}
	reg.MustRegister(m.calls, m.duration, m.containerStart, m.inFlight, m.queued, m.bytesIn, m.bytesOut, m.cacheHits, m.cacheMisses, m.unknownFields)
	// Every outcome is exported from the start, so a rate() over a counter
	// that has not moved yet is 0 rather than absent.
	for _, o := range []Outcome{OutcomeOK, OutcomeFatal, OutcomeError, OutcomeTimeout, OutcomeRejected} {
		m.calls.WithLabelValues(string(o))
	}
	return m
}
