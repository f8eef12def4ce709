package admit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestOldestWaiterGoesOn: calls that each hold part of the budget and all
// wait for more are not all refused at the end of their waits, which
// start as the budget fills: younger ones are, after ReserveWait, and the
// oldest gets what their refusals free (so may another), whether its own
// wait ends first or last. A call alone waiting is refused after
// ReserveWait.
func TestOldestWaiterGoesOn(t *testing.T) {
	ctx := context.Background()
	why := func() string { return "for the test" }
	for _, oldestLast := range []bool{false, true} {
		b := NewBudget(300)
		ages := []uint64{b.Age(), b.Age(), b.Age()}
		for range ages {
			if err := b.Reserve(ctx, 100, "a call", why); err != nil {
				t.Fatal(err)
			}
		}
		errs := make([]error, len(ages))
		var wg sync.WaitGroup
		start := time.Now()
		for k := range ages {
			i := k
			if oldestLast {
				i = len(ages) - 1 - k
			}
			if (k == 1 && !oldestLast) || (k == 2 && oldestLast) {
				// The oldest's wait ends 50 ms before the others', or
				// after theirs.
				time.Sleep(50 * time.Millisecond)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = b.ReserveAs(ctx, ages[i], 50, "a call", why)
				if errs[i] != nil {
					// A refused call ends, and lets go of what it
					// holds, a moment later: after the oldest's wait
					// ends, when it ends last.
					time.Sleep(200 * time.Millisecond)
					b.Resize(100, 0)
				}
			}()
		}
		wg.Wait()
		var full *MemoryFullError
		ok := 0
		for _, err := range errs {
			if err == nil {
				ok++
			} else if !errors.As(err, &full) {
				t.Errorf("refused with %v, want a *MemoryFullError", err)
			}
		}
		if errs[0] != nil || ok == len(errs) {
			t.Errorf("oldest waiting last %v: the oldest: %v; the others: %v, %v; want the oldest to go on and another refused", oldestLast, errs[0], errs[1], errs[2])
		}
		if took := time.Since(start); took < ReserveWait {
			t.Errorf("decided after %s, want after the others waited %s", took, ReserveWait)
		}
		if used := b.Used(); used != int64(150*ok) {
			t.Errorf("%d bytes charged, want 150 for each of the %d calls that went on", used, ok)
		}
	}

	b := NewBudget(300)
	start := time.Now()
	err := b.ReserveAs(ctx, b.Age(), 500, "a call", why)
	var full *MemoryFullError
	if !errors.As(err, &full) || time.Since(start) < ReserveWait {
		t.Errorf("a call alone waiting for more than is free: %v after %s, want refused after %s", err, time.Since(start), ReserveWait)
	}
}

// TestRunningCallTakesFromCallsNotStarted: a charge of a call that runs
// already (ReserveRunning) that does not fit takes the bytes of calls that
// have not started (Yielding), the youngest first and only as many as it
// needs, at once; one that started meanwhile keeps its own. What fits
// takes nothing and allocates nothing; ReserveAs takes nothing from them.
func TestRunningCallTakesFromCallsNotStarted(t *testing.T) {
	ctx := context.Background()
	why := func() string { return "for the test" }
	b := NewBudget(1000)
	running := b.Age()
	if err := b.ReserveAs(ctx, running, 100, "the running call", why); err != nil {
		t.Fatal(err)
	}
	var yielded []int
	var ages []uint64
	for i, started := range []bool{false, false, true, false} {
		age := b.Age()
		ages = append(ages, age)
		if err := b.ReserveAs(ctx, age, 200, "a call waiting", why); err != nil {
			t.Fatal(err)
		}
		b.Yielding(age, func() bool {
			if started {
				return false
			}
			yielded = append(yielded, i)
			b.Resize(200, 0)
			return true
		})
	}
	if n := testing.AllocsPerRun(100, func() {
		if err := b.ReserveRunning(ctx, running, 100, "the running call", why); err != nil {
			t.Fatal(err)
		}
		b.Resize(100, 0)
	}); n != 0 || len(yielded) != 0 {
		t.Errorf("a charge that fits: %.0f allocations, %v yielded; want none", n, yielded)
	}
	start := time.Now()
	if err := b.ReserveAs(ctx, running, 400, "the running call", why); err == nil || len(yielded) != 0 {
		t.Errorf("ReserveAs past the limit: %v, %v yielded; want refused, none yielded", err, yielded)
	}
	if took := time.Since(start); took < ReserveWait {
		t.Errorf("ReserveAs refused after %s, want after %s", took, ReserveWait)
	}
	start = time.Now()
	if err := b.ReserveRunning(ctx, running, 400, "the running call", why); err != nil {
		t.Fatal(err)
	}
	// 900 held: the youngest (3) gives 200, the next (2) has started,
	// and 1 gives 200 more, enough.
	if fmt.Sprint(yielded) != "[3 1]" || b.Used() != 900 {
		t.Errorf("yielded %v, %d bytes charged; want [3 1] and 900", yielded, b.Used())
	}
	if took := time.Since(start); took >= ReserveWait/2 {
		t.Errorf("took %s, want at once", took)
	}
	b.Withdraw(ages[0])
	if err := b.ReserveRunning(ctx, running, 200, "the running call", why); err == nil || len(yielded) != 2 {
		t.Errorf("with the rest withdrawn: %v, %v yielded; want refused, none more", err, yielded)
	}
}
