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

// registerFunctionCPU exports the CPU time the functions used, read from
// the bundle at each scrape, whatever the front.
func registerFunctionCPU(reg prometheus.Registerer, b *bundle.Bundle) {
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "ocifn_function_cpu_seconds_total",
		Help: "CPU time, user and system, that the functions' processes and the children they reaped used from their container's start to their end, without crun's set-up of the container; counted when the container is removed after its call.",
	}, func() float64 { return b.FunctionCPU().Seconds() }))
}
