package main

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestCellSumsItsRounds(t *testing.T) {
	ms := time.Millisecond
	// Two rounds of a server: the slow calls all in the second, as in a
	// slow phase of the machine.
	var fast, slow []time.Duration
	for range 90 {
		fast = append(fast, 1*ms)
	}
	for range 10 {
		slow = append(slow, 10*ms)
	}
	c := cell{
		{lat: fast, elapsed: 90 * ms, own: 90 * ms, children: 360 * ms, client: 45 * ms, machine: 540 * ms},
		{lat: slow, errors: 1, firstError: "boom", elapsed: 110 * ms, own: 10 * ms, children: 40 * ms, client: 5 * ms, machine: 60 * ms},
	}
	r := c.result()
	if r.calls != 100 || r.errors != 1 || r.firstError != "boom" {
		t.Errorf("calls, errors, first error: got %d, %d, %q", r.calls, r.errors, r.firstError)
	}
	// Percentiles over all 100 calls, not an average of the rounds'.
	if r.p50 != 1*ms || r.p90 != 10*ms || r.p99 != 10*ms {
		t.Errorf("p50, p90, p99: got %v, %v, %v", r.p50, r.p90, r.p99)
	}
	if r.perSecond != 500 { // 100 calls in 200 ms
		t.Errorf("calls/s: got %v, want 500", r.perSecond)
	}
	// Per call: own 1 ms, children 4 ms of which the floor's 3 ms are the
	// function's, ghz 0.5 ms, the machine 6 ms of which 0.5 ms is beyond
	// them all.
	s := c.split(3 * ms)
	want := split{own: 1 * ms, runtime: 1 * ms, function: 3 * ms, client: ms / 2, elsewhere: ms / 2, floor: 3 * ms}
	if s != want {
		t.Errorf("split: got %+v, want %+v", s, want)
	}
	// Where the server counted its functions' CPU in every round, that is
	// the function's part, and the floor's is kept beside it.
	c[0].function, c[0].counted = 180*ms, true
	c[1].function, c[1].counted = 20*ms, true
	s = c.split(3 * ms)
	want = split{own: 1 * ms, runtime: 2 * ms, function: 2 * ms, client: ms / 2, elsewhere: ms / 2, floor: 3 * ms, counted: true}
	if s != want {
		t.Errorf("split with the function counted: got %+v, want %+v", s, want)
	}
	c[1].counted = false
	if s := c.split(3 * ms); s.counted || s.function != 3*ms {
		t.Errorf("split with one round not counted: got %+v, want the floor's function", s)
	}
	if got := c.cpuPerCall(); got != 4*ms {
		t.Errorf("children's CPU per call: got %v, want 4ms", got)
	}
	// The bench's own loops read no machine time: nothing is elsewhere.
	loop := cell{{lat: fast, elapsed: 90 * ms, children: 90 * ms}}
	if s := loop.split(loop.cpuPerCall()); s != (split{function: ms, floor: ms}) {
		t.Errorf("a loop's split: got %+v", s)
	}
	if (cell{}).result() != (result{}) || (cell{}).split(ms) != (split{floor: ms}) {
		t.Error("an empty cell has figures")
	}
}

func TestInterleaveRotatesTheModes(t *testing.T) {
	var order []string
	mode := func(name string) func() (round, error) {
		return func() (round, error) {
			order = append(order, name)
			return round{lat: []time.Duration{time.Duration(len(order))}}, nil
		}
	}
	cells, err := interleave(3, []func() (round, error){mode("a"), mode("b"), mode("c")})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a", "b", "c", "b", "c", "a", "c", "a", "b"}; !slices.Equal(order, want) {
		t.Errorf("order: got %v, want %v", order, want)
	}
	// Each mode's cell holds its own rounds, in the order they ran.
	a := cells[0]
	if len(a) != 3 || a[0].lat[0] != 1 || a[1].lat[0] != 6 || a[2].lat[0] != 8 {
		t.Errorf("mode a's rounds: got %v", a)
	}

	boom := errors.New("boom")
	calls := 0
	_, err = interleave(3, []func() (round, error){
		func() (round, error) { calls++; return round{}, nil },
		func() (round, error) { return round{}, boom },
	})
	if !errors.Is(err, boom) || calls != 1 {
		t.Errorf("a failing mode: got %v after %d calls of the other, want boom after 1", err, calls)
	}
}
