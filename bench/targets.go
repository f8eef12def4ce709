package main

import (
	"fmt"
	"strings"
	"time"
)

// The targets of issue 12 (README, Performance), judged from this run's
// cells, next to what the same isolation would allow on this machine
// with no runtime or server cost of ocifn's own: the *ideal*, made of the
// isolation floor's kernel work and function (bench/isolation) and the
// peer's gRPC server and ghz, measured in the same rounds. Where a target
// is missed and the ideal misses it too, the machine is the limit, not
// crun or ocifn; where the ideal meets it, the table's last line says how
// much of the difference is crun's and how much ocifn's server's.

// verdict is one row of the targets' table.
type verdict struct {
	target, measured, met, ideal string
}

// machineCPU is what the whole machine spent per call in a row's cell:
// the server and its children, ghz, and elsewhere.
func machineCPU(r row) time.Duration {
	return r.cpu.total() + r.cpu.client + r.cpu.elsewhere
}

// idealCPU is the machine's CPU per call of a runtime as cheap as the
// isolation floor serving through a server as cheap as the peer: the
// isolation floor's container, function and elsewhere (mostly the
// teardown of network namespaces), and the peer's server, its ghz and its
// elsewhere. ok is false without either row.
func idealCPU(iso, peer row) (time.Duration, bool) {
	if iso.r.calls == 0 || peer.r.calls == 0 {
		return 0, false
	}
	return iso.cpu.runtime + iso.cpu.function + iso.cpu.elsewhere +
		peer.cpu.own + peer.cpu.client + peer.cpu.elsewhere, true
}

// perSecondOn is the calls per second that cpus CPUs allow at cpu of the
// machine per call: what a closed loop that keeps them busy makes.
func perSecondOn(cpus int, cpu time.Duration) float64 {
	if cpu <= 0 {
		return 0
	}
	return float64(cpus) / cpu.Seconds()
}

// rowOf is the row of m for n clients whose mode starts with prefix, or a
// zero row.
func (m *measured) rowOf(n int, prefix string) row {
	if m == nil {
		return row{}
	}
	for _, r := range m.rows {
		if r.clients == n && strings.HasPrefix(r.mode, prefix) {
			return r
		}
	}
	return row{}
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

var notMeasured = verdict{measured: "not measured", met: "–", ideal: "–"}

// targets judges the targets from the runs of the trivial function and
// of the labelizer (either may be missing), the large image's startup
// ratio (0: not measured) and the machine's CPUs.
func targets(got map[string]*measured, startup float64, cpus int) []verdict {
	tr, lab := got["trivial"], got["labelizer"]
	var out []verdict
	add := func(target string, v verdict) {
		v.target = target
		out = append(out, v)
	}
	ideal := func(m *measured, n int) (time.Duration, bool) {
		return idealCPU(m.rowOf(n, isolationName), m.rowOf(n, "peer"))
	}

	// Trivial, 4 clients: throughput.
	if w := tr.rowOf(4, tr.warmName()); w.r.calls > 0 {
		v := verdict{
			measured: fmt.Sprintf("%.0f calls/s (%s of the machine per call)", w.r.perSecond, ms(machineCPU(w))),
			met:      yesNo(w.r.perSecond >= 300), ideal: "–",
		}
		if cpu, ok := ideal(tr, 4); ok {
			v.ideal = fmt.Sprintf("%.0f calls/s (%d CPUs ÷ %s)", perSecondOn(cpus, cpu), cpus, ms(cpu))
		}
		add("trivial, 4 clients: ≥ 300 calls/s", v)
	} else {
		add("trivial, 4 clients: ≥ 300 calls/s", notMeasured)
	}

	// CPU beyond the function's own, at 4 clients.
	for _, f := range []struct {
		name string
		m    *measured
	}{{"trivial", tr}, {"labelizer", lab}} {
		target := fmt.Sprintf("%s, 4 clients: CPU per call beyond the function's ≤ 5 ms", f.name)
		w := f.m.rowOf(4, f.m.warmName())
		if w.r.calls == 0 {
			add(target, notMeasured)
			continue
		}
		beyond := w.cpu.own + w.cpu.runtime
		v := verdict{measured: ms(beyond), met: yesNo(beyond <= 5*time.Millisecond), ideal: "–"}
		if iso, peer := f.m.rowOf(4, isolationName), f.m.rowOf(4, "peer"); iso.r.calls > 0 && peer.r.calls > 0 {
			v.ideal = ms(iso.cpu.runtime + peer.cpu.own)
		}
		add(target, v)
	}

	// Trivial, 1 client in a closed loop: latency over the floor's. One
	// client waits for each answer, so its calls/s is 1 ÷ the mean
	// latency, and calls/s × the machine's CPU per call cannot pass the
	// CPUs: the mean latency is at least that CPU ÷ the CPUs.
	if w, fl := tr.rowOf(1, tr.warmName()), tr.rowOf(1, "floor"); w.r.calls > 0 && fl.r.calls > 0 {
		v := verdict{
			measured: fmt.Sprintf("p50 +%s, p99 +%s", ms(w.r.p50-fl.r.p50), ms(w.r.p99-fl.r.p99)),
			met:      yesNo(w.r.p50-fl.r.p50 <= 1500*time.Microsecond && w.r.p99-fl.r.p99 <= 5*time.Millisecond),
			ideal:    "–",
		}
		if cpu, ok := ideal(tr, 1); ok {
			v.ideal = fmt.Sprintf("mean ≥ floor p50 %+.2f ms (%s per call ÷ %d CPUs)", (cpu/time.Duration(cpus)-fl.r.p50).Seconds()*1000, ms(cpu), cpus)
		}
		add("trivial, 1 client: p50 ≤ floor + 1.5 ms, p99 ≤ floor + 5 ms", v)
	} else {
		add("trivial, 1 client: p50 ≤ floor + 1.5 ms, p99 ≤ floor + 5 ms", notMeasured)
	}

	// Trivial, 20 calls/s: the peer, which makes no container, shows what
	// gRPC and a server alone add to the floor's p50.
	if tr != nil && len(tr.paced) > 0 {
		fl := tr.paced[0]
		var w, peer row
		for _, r := range tr.paced[1:] {
			switch {
			case r.mode == tr.warm:
				w = r
			case strings.HasPrefix(r.mode, "peer"):
				peer = r
			}
		}
		v := verdict{
			measured: fmt.Sprintf("+%s", ms(w.r.p50-fl.r.p50)),
			met:      yesNo(w.r.calls > 0 && w.r.p50-fl.r.p50 <= time.Millisecond), ideal: "–",
		}
		if peer.r.calls > 0 {
			v.ideal = fmt.Sprintf("≥ +%s (the peer, with no container)", ms(peer.r.p50-fl.r.p50))
		}
		target := "trivial, 20 calls/s: p50 ≤ floor + 1 ms"
		if tr.pace != 20 {
			target += fmt.Sprintf(" (measured at %d calls/s)", tr.pace)
		}
		add(target, v)
	} else {
		add("trivial, 20 calls/s: p50 ≤ floor + 1 ms", notMeasured)
	}

	// Labelizer, 4 clients: against the floor, and against the peer.
	if w, fl, peer := lab.rowOf(4, lab.warmName()), lab.rowOf(4, "floor"), lab.rowOf(4, "peer"); w.r.calls > 0 && fl.r.calls > 0 {
		v := verdict{measured: pctOf(w.r.perSecond, fl.r.perSecond), met: yesNo(w.r.perSecond >= 0.85*fl.r.perSecond), ideal: "–"}
		if cpu, ok := ideal(lab, 4); ok {
			v.ideal = pctOf(perSecondOn(cpus, cpu), fl.r.perSecond)
		}
		add("labelizer, 4 clients: ≥ 85% of the floor's calls/s", v)
		if peer.r.calls > 0 {
			v := verdict{
				measured: fmt.Sprintf("p50 %s, %s of the calls", ratio(w.r.p50.Seconds(), peer.r.p50.Seconds()), pctOf(w.r.perSecond, peer.r.perSecond)),
				met:      yesNo(w.r.p50.Seconds() <= 1.1*peer.r.p50.Seconds() && w.r.perSecond >= 0.9*peer.r.perSecond),
				ideal:    "–",
			}
			// In a closed loop of n clients on busy CPUs, latency and
			// calls/s both follow the machine's CPU per call.
			if cpu, ok := ideal(lab, 4); ok {
				v.ideal = fmt.Sprintf("p50 %s, %s of the calls (the peer's %s of the machine per call against %s)",
					ratio(cpu.Seconds(), machineCPU(peer).Seconds()), pctOf(machineCPU(peer).Seconds(), cpu.Seconds()), ms(machineCPU(peer)), ms(cpu))
			}
			add("labelizer against the peer, 4 clients: p50 ≤ 1.1x, calls/s ≥ 90%", v)
		}
	} else {
		add("labelizer, 4 clients: ≥ 85% of the floor's calls/s", notMeasured)
	}

	// Idle memory, with the warm containers.
	if tr != nil && tr.idle.pss > 0 {
		total := tr.idle.pss + tr.idle.childPss
		add("idle memory of ocifn's processes and the warm containers < 30 MB", verdict{
			measured: fmt.Sprintf("%s + %s", mb(tr.idle.pss), mb(tr.idle.childPss)),
			met:      yesNo(total < 30<<20), ideal: "–",
		})
	} else {
		add("idle memory of ocifn's processes and the warm containers < 30 MB", notMeasured)
	}

	if startup > 0 {
		add("100 MB image startup ≤ 1.1x `tar -xf`", verdict{measured: fmt.Sprintf("%.1fx", startup), met: yesNo(startup <= 1.1+1e-9), ideal: "–"})
	} else {
		add("100 MB image startup ≤ 1.1x `tar -xf`", notMeasured)
	}
	return out
}

// warmName is the mode of the server with the default pool, or a prefix
// no row has.
func (m *measured) warmName() string {
	if m == nil {
		return "\x00"
	}
	return m.warm
}

// printTargets prints the targets' table and what crun and ocifn's server
// spent beyond the ideal's parts on the trivial function. Not on the
// labelizer: its jq's CPU moves by 10% between cells, several times
// crun's share, so the part of its children's CPU that is not the
// floor's function is mostly that noise.
func printTargets(got map[string]*measured, startup float64, cpus int) {
	fmt.Printf("## Issue 12's targets\n\n")
	fmt.Printf("From the cells above. *Ideal*: what the same isolation allows on this machine with no cost of ocifn's own, a runtime as cheap as the isolation floor (its kernel work, function and elsewhere) behind a server as cheap as the peer (its server, ghz and elsewhere), in the same rounds; throughput is the CPUs ÷ the machine's CPU per call, as in a closed loop that keeps them busy.\n\n")
	fmt.Printf("| target | measured | met | ideal |\n|---|---|---|---|\n")
	for _, v := range targets(got, startup, cpus) {
		fmt.Printf("| %s | %s | %s | %s |\n", v.target, v.measured, v.met, v.ideal)
	}
	fmt.Println()
	m := got["trivial"]
	if m == nil {
		return
	}
	var parts []string
	for _, r := range m.rows {
		iso, peer := m.rowOf(r.clients, isolationName), m.rowOf(r.clients, "peer")
		if r.mode != m.warm || iso.r.calls == 0 || peer.r.calls == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s crun, %s ocifn's server at %d", ms(r.cpu.runtime-iso.cpu.runtime), ms(r.cpu.own-peer.cpu.own), r.clients))
	}
	if len(parts) > 0 {
		fmt.Printf("What ocifn spent beyond the ideal's parts, trivial function, CPU per call (crun & co. over the isolation floor's, ocifn's server over the peer's), by clients: %s.\n\n", strings.Join(parts, "; "))
	}
}
