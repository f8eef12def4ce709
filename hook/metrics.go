package hook

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the Prometheus metrics of calls, whatever their front: ocifn's
// own by outcome, and Kubeless' runtime metrics by method.
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
	// UnknownFields counts request fields this ocifn's protocol does not
	// know (sent by a newer Crossplane), by message path and field number;
	// the Crossplane front counts them.
	UnknownFields *prometheus.CounterVec
	// Kubeless' runtime contract.
	fnCalls    *prometheus.CounterVec
	fnFailures *prometheus.CounterVec
	fnDuration *prometheus.HistogramVec
}

// callBuckets are the buckets of the calls' durations, ocifn's own and
// Kubeless', so that the two histograms agree. They reach past the longest
// default timeouts, an OpenWhisk activation's 5 minutes and Kubeless'
// FUNC_TIMEOUT of 180 s: a call that took longer than the last bucket only
// counts in +Inf, and a quantile of such calls reads as that bucket's bound.
var callBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// NewMetrics creates the call metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ocifn_calls_total",
			Help: "Calls by outcome: ok, fatal (ocifn answered on the function's behalf), error (protocol error), timeout, rejected (server full).",
		}, []string{"outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ocifn_call_duration_seconds",
			Help:    "Time from receiving a call to answering it, by outcome.",
			Buckets: callBuckets,
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
			Help: "Bytes written to functions' stdin.",
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
		UnknownFields: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ocifn_unknown_fields_total",
			Help: "Request fields this ocifn's protocol does not know (sent by a newer Crossplane), which cannot reach the function, by message path and field number.",
		}, []string{"message", "field"}),
		fnCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "function_calls_total",
			Help: "Calls of the function, by method (Kubeless' runtime metric).",
		}, []string{"method"}),
		fnFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "function_failures_total",
			Help: "Calls of the function that did not end with an answer from it, by method (Kubeless' runtime metric).",
		}, []string{"method"}),
		fnDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "function_duration_seconds",
			Help:    "Time from receiving a call to answering it, by method (Kubeless' runtime metric).",
			Buckets: callBuckets,
		}, []string{"method"}),
	}
	reg.MustRegister(m.calls, m.duration, m.containerStart, m.inFlight, m.queued, m.bytesIn, m.bytesOut, m.cacheHits, m.cacheMisses,
		m.UnknownFields, m.fnCalls, m.fnFailures, m.fnDuration)
	// Every outcome is exported from the start, so a rate() over a counter
	// that has not moved yet is 0 rather than absent.
	for _, o := range []Outcome{OK, Fatal, Error, Timeout, Rejected} {
		m.calls.WithLabelValues(string(o))
	}
	return m
}

// Admission records how many calls run and wait now.
func (m *Metrics) Admission(inFlight, queued int64) {
	if m == nil {
		return
	}
	m.inFlight.Set(float64(inFlight))
	m.queued.Set(float64(queued))
}

// Before does nothing: calls are counted once they end.
func (m *Metrics) Before(ctx context.Context, _ *Call) (context.Context, error) { return ctx, nil }

// After counts the call.
func (m *Metrics) After(_ context.Context, c *Call) error {
	d := sinceReceived(c).Seconds()
	m.calls.WithLabelValues(string(c.Outcome)).Inc()
	m.duration.WithLabelValues(string(c.Outcome)).Observe(d)
	m.fnCalls.WithLabelValues(c.Method).Inc()
	m.fnDuration.WithLabelValues(c.Method).Observe(d)
	if c.Outcome != OK {
		m.fnFailures.WithLabelValues(c.Method).Inc()
	}
	if !c.Ran.IsZero() {
		if c.Exit.Start > 0 {
			m.containerStart.Observe(c.Exit.Start.Seconds())
		}
		m.bytesIn.Add(float64(c.StdinBytes))
		m.bytesOut.Add(float64(c.StdoutBytes))
	}
	return nil
}
