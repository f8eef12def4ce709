package hook

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestCallDurationBucketsReachTheTimeouts: a call stopped at the longest
// default timeout, an OpenWhisk activation's 5 minutes, is counted in a
// bucket of both duration histograms, not only in +Inf, where every
// quantile of such calls would read as the last bucket's bound.
func TestCallDurationBucketsReachTheTimeouts(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	received := time.Now()
	c := &Call{Method: "POST", Outcome: Timeout, Received: received, Answered: received.Add(5*time.Minute + 10*time.Millisecond)}
	if err := m.After(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ocifn_call_duration_seconds", "function_duration_seconds"} {
		found := false
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
			for _, metric := range f.GetMetric() {
				h := metric.GetHistogram()
				if h.GetSampleCount() == 0 {
					continue
				}
				found = true
				// +Inf is not among the buckets exported.
				var last float64
				counted := false
				for _, b := range h.GetBucket() {
					if !math.IsInf(b.GetUpperBound(), 1) {
						last = b.GetUpperBound()
						counted = counted || b.GetCumulativeCount() == 1
					}
				}
				if !counted {
					t.Errorf("%s: a call of 5m0.01s is in no bucket but +Inf (the last bucket is %v s)", name, last)
				}
			}
		}
		if !found {
			t.Errorf("%s: no call observed", name)
		}
	}
}
