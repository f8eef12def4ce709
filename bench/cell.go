package main

import (
	"slices"
	"time"
)

// round is one run of a mode at a number of clients: every call's latency,
// and the CPU time used while it ran, by whom. It is summed with the
// mode's other rounds into a cell before anything is derived from it.
type round struct {
	// lat holds the latency of each call made (the isolation floor's loop
	// reports its answered calls only).
	lat        []time.Duration
	errors     int
	firstError string
	elapsed    time.Duration
	// own is the server's own processes' CPU; children that of the
	// processes it (or the bench's loop) reaped; client is ghz's; machine
	// is what all the CPUs were busy with (0 where it is not read).
	own, children, client, machine time.Duration
	// function is the part of children that the server counted as its
	// functions' own (ocifn_function_cpu_seconds_total), if counted.
	function time.Duration
	counted  bool
}

// cell is the rounds of one mode at one number of clients. A cell is
// measured in rounds taken in turn with the other modes' (see
// interleave), so that the modes compared in a row of the tables ran
// through the same phases of a shared machine, whose speed drifts by 10%
// and more within seconds.
type cell []round

// result is a cell's figures: latency percentiles over all its calls,
// throughput over the time its rounds ran.
type result struct {
	calls, errors int
	p50, p90, p99 time.Duration
	perSecond     float64
	firstError    string
}

func (c cell) result() result {
	var r result
	var all []time.Duration
	var elapsed time.Duration
	for _, rd := range c {
		all = append(all, rd.lat...)
		r.errors += rd.errors
		elapsed += rd.elapsed
		if r.firstError == "" {
			r.firstError = rd.firstError
		}
	}
	r.calls = len(all)
	if r.calls == 0 {
		return r
	}
	slices.Sort(all)
	pct := func(p float64) time.Duration { return all[min(len(all)-1, int(p*float64(len(all))))] }
	r.p50, r.p90, r.p99 = pct(.50), pct(.90), pct(.99)
	if elapsed > 0 {
		r.perSecond = float64(r.calls) / elapsed.Seconds()
	}
	return r
}

// usage is the CPU a call of the cell used on average, by whom (as in
// round), or zeros if it made no call. counted says that every round
// counted its function's CPU.
type usage struct {
	own, children, client, machine, function time.Duration
	counted                                  bool
}

func (c cell) usage() usage {
	var calls int
	sum := usage{counted: len(c) > 0}
	for _, rd := range c {
		calls += len(rd.lat)
		sum.own += rd.own
		sum.children += rd.children
		sum.client += rd.client
		sum.machine += rd.machine
		sum.function += rd.function
		sum.counted = sum.counted && rd.counted
	}
	if calls == 0 {
		return usage{}
	}
	n := time.Duration(calls)
	return usage{own: sum.own / n, children: sum.children / n, client: sum.client / n, machine: sum.machine / n, function: sum.function / n, counted: sum.counted}
}

// split divides the cell's CPU per call by who spent it. The function's
// part of the reaped children's CPU is what the server counted of it
// where it counts it (ocifn), in the same calls; otherwise it is taken to
// be floorCPU, the floor's CPU per call in the same run, which floor keeps
// for comparison either way. The rest is the runtime's (crun, or the
// isolation floor's kernel work). elsewhere is the machine's busy time
// beyond the server, its children and ghz.
func (c cell) split(floorCPU time.Duration) split {
	u := c.usage()
	s := split{own: u.own, client: u.client, function: min(floorCPU, u.children), floor: floorCPU}
	if u.counted {
		s.function, s.counted = min(u.function, u.children), true
	}
	s.runtime = u.children - s.function
	if u.machine > 0 {
		s.elsewhere = max(0, u.machine-s.client-s.total())
	}
	return s
}

// cpuPerCall is the reaped children's CPU per call: the whole cost of a
// call for the bench's own loops.
func (c cell) cpuPerCall() time.Duration { return c.usage().children }

// interleave measures each of the modes in rounds: round i runs every
// mode once, in an order rotated by i, so that no mode always runs right
// after the same other one. It returns each mode's cell, in the modes'
// order, and stops at the first error.
func interleave(rounds int, modes []func() (round, error)) ([]cell, error) {
	cells := make([]cell, len(modes))
	for i := range rounds {
		for k := range modes {
			m := (k + i) % len(modes)
			rd, err := modes[m]()
			if err != nil {
				return nil, err
			}
			cells[m] = append(cells[m], rd)
		}
	}
	return cells, nil
}
