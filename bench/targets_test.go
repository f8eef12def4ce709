package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

const (
	warm = "ocifn --warm 2"
	peer = "peer (sdk server, chroot + exec)"
	fl   = "floor (chroot + exec, no gRPC)"
)

func msec(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

func res(p50, p99, perSecond float64) result {
	return result{calls: 100, p50: msec(p50), p99: msec(p99), perSecond: perSecond}
}

// fixture is a run of the trivial function and the labelizer with round
// figures, so that every derived figure can be checked by hand. The
// isolation floor's function CPU differs from the peer's, so that an
// estimate made of the wrong row's parts shows.
func fixture() map[string]*measured {
	tr := &measured{warm: warm, pace: 20, idle: memory{pss: 28 << 20, childPss: 1 << 20}}
	tr.rows = []row{
		{fl, 1, res(1, 2, 900), split{function: msec(0.7)}},
		{isolationName, 1, res(2, 3, 400), split{runtime: msec(2), function: msec(0.7), elsewhere: msec(0.3)}},
		// p50 +1.5 (at the target), p99 +5.5: the p99 decides.
		{warm, 1, res(2.5, 7.5, 250), split{own: msec(1.2), runtime: msec(3.2), function: msec(0.7), client: msec(0.6), elsewhere: msec(0.3)}},
		{peer, 1, res(1.5, 3, 600), split{own: msec(0.5), function: msec(0.9), client: msec(0.4), elsewhere: msec(0.1)}},
		{fl, 4, res(2, 5, 2000), split{function: msec(0.7)}},
		{isolationName, 4, res(4, 9, 550), split{runtime: msec(2), function: msec(0.7), elsewhere: msec(0.3)}},
		// The machine 6.4 ms per call; the estimate 4.0 (isolation
		// floor 3.0, peer 1.0).
		{warm, 4, res(12, 30, 300), split{own: msec(1.1), runtime: msec(3.4), function: msec(0.7), client: msec(0.6), elsewhere: msec(0.6)}},
		{peer, 4, res(3, 7, 1100), split{own: msec(0.5), function: msec(0.9), client: msec(0.4), elsewhere: msec(0.1)}},
		// With the peer's: p50 +0.8 ms, p99 +2.5 ms at 1 client.
		{isolationAheadName, 1, res(1.3, 3.5, 700), split{runtime: msec(1.5), function: msec(0.7), elsewhere: msec(0.3)}},
		{isolationAheadName, 4, res(3, 8, 600), split{runtime: msec(1.5), function: msec(0.7), elsewhere: msec(0.3)}},
	}
	tr.paced = []row{
		{"floor", 1, res(1.2, 2, 20), split{function: msec(0.7)}},
		// With the peer's: +1.0 ms, at the target.
		{isolationAheadName, 1, res(1.4, 2.5, 20), split{runtime: msec(1.5), function: msec(0.7)}},
		{"ocifn --warm 0", 1, res(3, 5, 20), split{}},
		{warm, 1, res(2.6, 4, 20), split{}},
		{peer, 1, res(2.0, 3, 20), split{}},
	}
	lab := &measured{warm: warm}
	lab.rows = []row{
		{fl, 4, res(30, 40, 70), split{function: msec(28)}},
		{isolationName, 4, res(32, 42, 66), split{runtime: msec(2), function: msec(28), elsewhere: msec(0.5)}},
		{warm, 4, res(60, 80, 59.5), split{own: msec(1.5), runtime: msec(3.5), function: msec(28), client: msec(1), elsewhere: msec(1)}},
		// The peer: 30 ms of the machine per call; the estimate 32.5.
		{peer, 4, res(55, 70, 66), split{own: msec(0.6), function: msec(28), client: msec(1), elsewhere: msec(0.4)}},
	}
	return map[string]*measured{"trivial": tr, "labelizer": lab}
}

func TestTargets(t *testing.T) {
	got := targets(fixture(), targetOptions{cpus: 2, bigMB: 100, startup: 1.05})
	want := []verdict{
		{"trivial, 4 clients: ≥ 300 calls/s", "300 calls/s (6.40 ms of the machine per call)", "yes", "500 calls/s (2 CPUs ÷ 4.00 ms)", "yes"},
		{"trivial, 4 clients: CPU per call beyond the function's ≤ 5 ms (server and crun & co.)", "4.50 ms (elsewhere 0.60 ms more)", "yes", "2.50 ms", "yes"},
		{"labelizer, 4 clients: CPU per call beyond the function's ≤ 5 ms (server and crun & co.)", "5.00 ms (elsewhere 1.00 ms more)", "yes", "2.60 ms", "yes"},
		{"trivial, 1 client: p50 ≤ floor + 1.5 ms, p99 ≤ floor + 5 ms", "p50 +1.50 ms, p99 +5.50 ms", "no", "p50 +0.80 ms, p99 +2.50 ms (a container made ahead by the isolation floor, behind the peer's gRPC); mean from call to call ≥ floor p50 +1.00 ms (4.00 ms per call ÷ 2 CPUs)", "p50: yes, p99: yes, mean: yes"},
		{"trivial, 20 calls/s: p50 ≤ floor + 1 ms", "+1.40 ms", "no", "+1.00 ms (the peer, with no container, +0.80 ms; a container made ahead by the isolation floor +0.20 ms)", "yes"},
		{"labelizer, 4 clients: ≥ 85% of the floor's calls/s", "85.0%", "yes", "87.9%", "yes"},
		{"labelizer against the peer, 4 clients: p50 ≤ 1.1x, calls/s ≥ 90%", "p50 1.10x, 90.1% of the calls", "yes", "p50 1.09x, 92.3% of the calls (the peer's 30.00 ms of the machine per call against 32.50 ms)", "yes"},
		{"idle memory of ocifn's processes and the warm containers < 30 MB (ocifn --warm 2)", "28.0 MB + 1.0 MB", "yes", "–", "–"},
		{"100 MB image startup ≤ 1.1x `tar -xf`", "1.050x", "yes", "–", "–"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d verdicts, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("verdict %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// Just past each edge, the verdicts turn, and a failed call fails its
// target whatever the figures.
func TestTargetsMissed(t *testing.T) {
	f := fixture()
	tr, lab := f["trivial"], f["labelizer"]
	tr.rows[6].r.perSecond = 299.9
	lab.rows[2].r.perSecond = 59.4       // 84.9% of the floor's, 90.0% of the peer's
	lab.rows[3].r.perSecond = 66.1       // 89.9%
	tr.rows[5].cpu.elsewhere = msec(4.3) // the estimate 8 ms per call at 4 clients: 250 calls/s
	tr.rows[1].cpu.elsewhere = msec(1.4) // 5.1 ms at 1: a mean of 2.55 ms, floor p50 + 1.55
	tr.rows[2].r.errors = 3
	tr.rows[8].r.p50 = msec(2.01)  // with the peer's, p50 +1.51 ms
	tr.rows[8].r.p99 = msec(6.01)  // and p99 +5.01 ms
	tr.paced[1].r.p50 = msec(1.41) // with the peer's, +1.01 ms
	got := targets(f, targetOptions{cpus: 2, bigMB: 50, startup: 1.11})
	want := map[string][2]string{
		"trivial, 4 clients: ≥ 300 calls/s":                                {"no", "no"},
		"trivial, 1 client: p50 ≤ floor + 1.5 ms, p99 ≤ floor + 5 ms":      {"no (3 calls failed)", "p50: no, p99: no, mean: no"},
		"trivial, 20 calls/s: p50 ≤ floor + 1 ms":                          {"no", "no"},
		"labelizer, 4 clients: ≥ 85% of the floor's calls/s":               {"no", "yes"},
		"labelizer against the peer, 4 clients: p50 ≤ 1.1x, calls/s ≥ 90%": {"no", "yes"},
		"50 MB image startup ≤ 1.1x `tar -xf`":                             {"no", "–"},
	}
	for _, v := range got {
		if w, ok := want[v.target]; ok {
			if v.met != w[0] || v.estimateMet != w[1] {
				t.Errorf("%s: met %q, estimate %q; want %q, %q (%+v)", v.target, v.met, v.estimateMet, w[0], w[1], v)
			}
			delete(want, v.target)
		}
	}
	for target := range want {
		t.Errorf("no verdict for %q", target)
	}
}

// A run of some functions or cells only says what it could not judge
// instead of judging from zeros, and still has a row for every target.
func TestTargetsNotMeasured(t *testing.T) {
	for name, change := range map[string]func(map[string]*measured){
		"trivial only, no isolation floor": func(f map[string]*measured) {
			without := func(rows []row) []row {
				return slices.DeleteFunc(rows, func(r row) bool { return r.mode == isolationName || r.mode == isolationAheadName })
			}
			f["trivial"].rows, f["trivial"].paced = without(f["trivial"].rows), without(f["trivial"].paced)
			delete(f, "labelizer")
		},
		"labelizer only, no peer, no paced": func(f map[string]*measured) {
			delete(f, "trivial")
			f["labelizer"].rows = f["labelizer"].rows[:3]
		},
		"one client only": func(f map[string]*measured) {
			f["trivial"].rows = f["trivial"].rows[:4]
			f["trivial"].paced = nil
			delete(f, "labelizer")
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := fixture()
			change(f)
			got := targets(f, targetOptions{cpus: 2, bigMB: 100})
			if len(got) != 9 {
				t.Errorf("%d verdicts, want a row for each of the 9 targets: %+v", len(got), got)
			}
			for _, v := range got {
				if v.measured == "not measured" && (v.met != "–" || v.estimate != "–") {
					t.Errorf("%s: %+v, judged without a figure", v.target, v)
				}
				if v.estimate == "–" && v.estimateMet != "–" {
					t.Errorf("%s: %+v, an estimate judged without one", v.target, v)
				}
				if strings.Contains(v.measured+v.estimate, "+-") || strings.Contains(v.measured, "NaN") || strings.Contains(v.measured, "Inf") {
					t.Errorf("%s: %+v", v.target, v)
				}
			}
			byTarget := map[string]verdict{}
			for _, v := range got {
				byTarget[v.target] = v
			}
			switch name {
			case "trivial only, no isolation floor":
				for _, target := range []string{"labelizer, 4 clients: ≥ 85% of the floor's calls/s", "labelizer against the peer, 4 clients: p50 ≤ 1.1x, calls/s ≥ 90%", "100 MB image startup ≤ 1.1x `tar -xf`"} {
					if v := byTarget[target]; v.measured != "not measured" {
						t.Errorf("%s: %+v, want not measured", target, v)
					}
				}
				if v := byTarget["trivial, 4 clients: ≥ 300 calls/s"]; v.met != "yes" || v.estimate != "–" {
					t.Errorf("%+v: want a verdict and no estimate without the isolation floor", v)
				}
				// The latencies fall back to what the peer alone adds.
				if v := byTarget["trivial, 20 calls/s: p50 ≤ floor + 1 ms"]; v.estimate != "+0.80 ms or more (the peer, with no container)" || v.estimateMet != "yes" {
					t.Errorf("%+v: want the peer's estimate without the isolation floor", v)
				}
				if v := byTarget["trivial, 1 client: p50 ≤ floor + 1.5 ms, p99 ≤ floor + 5 ms"]; v.estimate != "–" {
					t.Errorf("%+v: want no estimate without the isolation floor", v)
				}
			case "labelizer only, no peer, no paced":
				if v := byTarget["labelizer against the peer, 4 clients: p50 ≤ 1.1x, calls/s ≥ 90%"]; v.measured != "not measured" {
					t.Errorf("%+v: want not measured without the peer", v)
				}
				if v := byTarget["trivial, 20 calls/s: p50 ≤ floor + 1 ms"]; v.measured != "not measured" {
					t.Errorf("%+v: want not measured", v)
				}
			case "one client only":
				if v := byTarget["trivial, 4 clients: ≥ 300 calls/s"]; v.measured != "not measured" {
					t.Errorf("%+v: want not measured without 4 clients", v)
				}
				if v := byTarget["trivial, 1 client: p50 ≤ floor + 1.5 ms, p99 ≤ floor + 5 ms"]; v.met != "no" {
					t.Errorf("%+v: want judged", v)
				}
			}
		})
	}
}

// A figure never prints as its target when it misses it.
func TestRoundedAwayFromTheTarget(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{pct1(59.5, 70), "85.0%"},
		{pct1(84.97, 100), "84.9%"},
		{pct1(89.99, 100), "89.9%"},
		{ratio2(1.1, 1), "1.10x"},
		{ratio2(1.101, 1), "1.11x"},
		{ratio2(60, 55), "1.10x"},
	} {
		if c.got != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
}
