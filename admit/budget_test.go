package admit

import (
	"context"
	"errors"
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
