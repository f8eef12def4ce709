// Package hooktest holds what tests of the fronts share to check what the
// calls' hooks counted.
package hooktest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ocifn/ocifn/hook"
)

// outcomes are those ocifn_calls_total counts.
var outcomes = []hook.Outcome{hook.OK, hook.Fatal, hook.Error, hook.Timeout, hook.Rejected}

// CheckCalls checks that reg's ocifn_calls_total counted n calls of
// outcome and none of any other.
func CheckCalls(t testing.TB, reg prometheus.Gatherer, outcome hook.Outcome, n int) {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "ocifn_calls_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					got[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	for _, o := range outcomes {
		want := 0.0
		if o == outcome {
			want = float64(n)
		}
		if v, ok := got[string(o)]; !ok || v != want {
			t.Errorf("ocifn_calls_total{outcome=%q} = %v (present: %v), want %v", o, v, ok, want)
		}
	}
}
