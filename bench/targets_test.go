package main

import (
	"strings"
	"testing"
	"time"
)

const warm = "ocifn --warm 2"

// fixture is a run of the trivial function and the labelizer with
// round figures, so that every derived figure can be checked by hand.
func fixture() map[string]*measured {
	msec := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	res := func(p50, p99 float64, perSecond float64) result {
		return result{calls: 100, p50: msec(p50), p99: msec(p99), perSecond: perSecond}
	}
	tr := &measured{warm: warm, pace: 20, idle: memory{pss: 28 << 20, childPss: 1 << 20}}
	tr.rows = []row{
		{"floor (chroot + exec, no gRPC)", 1, res(1, 2, 900), split{function: msec(0.7)}},
		{isolationName, 1, res(2, 3, 400), split{runtime: msec(2), function: msec(0.7), elsewhere: msec(0.3)}},
		{warm, 1, res(3, 12, 250), split{own: msec(1.2), runtime: msec(3.2), function: msec(0.7), client: msec(0.6), elsewhere: msec(0.3)}},
		{"peer (sdk server, chroot + exec)", 1, res(1.5, 3, 600), split{own: msec(0.5), function: msec(0.7), client: msec(0.4), elsewhere: msec(0.1)}},
		{"floor (chroot + exec, no gRPC)", 4, res(2, 5, 2000), split{function: msec(0.7)}},
		{isolationName, 4, res(4, 9, 550), split{runtime: msec(2), function: msec(0.7), elsewhere: msec(0.3)}},
		// The machine 6.4 ms per call; the ideal 4.0 (iso 3.0, peer 1.0).
		{warm, 4, res(12, 30, 310), split{own: msec(1.1), runtime: msec(3.4), function: msec(0.7), client: msec(0.6), elsewhere: msec(0.6)}},
		{"peer (sdk server, chroot + exec)", 4, res(3, 7, 1100), split{own: msec(0.5), function: msec(0.7), client: msec(0.4), elsewhere: msec(0.1)}},
	}
	tr.paced = []row{
		{"floor", 1, res(1.2, 2, 20), split{function: msec(0.7)}},
		{"ocifn --warm 0", 1, res(3, 5, 20), split{}},
		{warm, 1, res(2.6, 4, 20), split{}},
		{"peer (sdk server, chroot + exec)", 1, res(2.0, 3, 20), split{}},
	}
	lab := &measured{warm: warm}
	lab.rows = []row{
		{"floor (chroot + exec, no gRPC)", 4, res(30, 40, 70), split{function: msec(28)}},
		{isolationName, 4, res(32, 42, 66), split{runtime: msec(2), function: msec(28), elsewhere: msec(0.5)}},
		{warm, 4, res(60, 80, 55), split{own: msec(1.5), runtime: msec(3.5), function: msec(28), client: msec(1), elsewhere: msec(1)}},
		// The peer: 30 ms of the machine per call; the ideal 32.5.
		{"peer (sdk server, chroot + exec)", 4, res(52, 70, 63), split{own: msec(0.6), function: msec(28), client: msec(1), elsewhere: msec(0.4)}},
	}
	return map[string]*measured{"trivial": tr, "labelizer": lab}
}

func TestTargets(t *testing.T) {
	got := targets(fixture(), 1.05, 2)
	want := []verdict{
		{"trivial, 4 clients: ≥ 300 calls/s", "310 calls/s (6.40 ms of the machine per call)", "yes", "500 calls/s (2 CPUs ÷ 4.00 ms)"},
		{"trivial, 4 clients: CPU per call beyond the function's ≤ 5 ms", "4.50 ms", "yes", "2.50 ms"},
		{"labelizer, 4 clients: CPU per call beyond the function's ≤ 5 ms", "5.00 ms", "yes", "2.60 ms"},
		{"trivial, 1 client: p50 ≤ floor + 1.5 ms, p99 ≤ floor + 5 ms", "p50 +2.00 ms, p99 +10.00 ms", "no", "mean ≥ floor p50 +1.00 ms (4.00 ms per call ÷ 2 CPUs)"},
		{"trivial, 20 calls/s: p50 ≤ floor + 1 ms", "+1.40 ms", "no", "≥ +0.80 ms (the peer, with no container)"},
		{"labelizer, 4 clients: ≥ 85% of the floor's calls/s", "79%", "no", "88%"},
		{"labelizer against the peer, 4 clients: p50 ≤ 1.1x, calls/s ≥ 90%", "p50 1.2x, 87% of the calls", "no", "p50 1.1x, 92% of the calls (the peer's 30.00 ms of the machine per call against 32.50 ms)"},
		{"idle memory of ocifn's processes and the warm containers < 30 MB", "28.0 MB + 1.0 MB", "yes", "–"},
		{"100 MB image startup ≤ 1.1x `tar -xf`", "1.1x", "yes", "–"},
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

// A run of some functions only, or without the isolation floor or the
// peer, says what it could not judge instead of judging from zeros.
func TestTargetsNotMeasured(t *testing.T) {
	f := fixture()
	var rows []row
	for _, r := range f["trivial"].rows {
		if r.mode != isolationName {
			rows = append(rows, r)
		}
	}
	f["trivial"].rows = rows
	delete(f, "labelizer")
	got := targets(f, 0, 2)
	for _, v := range got {
		switch {
		case strings.HasPrefix(v.target, "labelizer"), strings.HasPrefix(v.target, "100 MB"):
			if v.met != "–" || v.measured != "not measured" {
				t.Errorf("%s: %+v, want not measured", v.target, v)
			}
		case strings.HasPrefix(v.target, "trivial, 4 clients: ≥ 300"), strings.HasPrefix(v.target, "trivial, 1 client"):
			if v.met == "–" || v.ideal != "–" {
				t.Errorf("%s: %+v, want a verdict and no ideal without the isolation floor", v.target, v)
			}
		}
	}
}
