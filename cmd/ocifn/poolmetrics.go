package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ocifn/ocifn/bundle"
)

// registerPoolMetrics exports the warm pool's state, read from the bundle
// at each scrape.
func registerPoolMetrics(reg prometheus.Registerer, b *bundle.Bundle) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "ocifn_warm_misses_total",
			Help: "Calls that found no warm container and waited for crun to create one.",
		}, func() float64 { return float64(b.PoolStats().Misses) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ocifn_warm_containers",
			Help: "Containers created ahead of calls and waiting for one.",
		}, func() float64 { return float64(b.PoolStats().Ready) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ocifn_warm_target",
			Help: "Containers the warm pool fills up to now: --warm, more while calls overlap or outrun its refill, 0 after --warm-idle without a call.",
		}, func() float64 { return float64(b.PoolStats().Target) }),
	)
}
