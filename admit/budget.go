package admit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ReserveWait is how long a charge to a Budget waits for other calls to
// free it before it is refused: a burst of calls that arrive together
// each charge what they read, and let it go as they end.
const ReserveWait = time.Second

// Budget is the memory that calls being received or run may hold at once
// (--max-inflight-bytes), the same for every front: each charges what its
// calls' requests and answers take as it takes it, and a charge that does
// not fit waits for others to free some, up to ReserveWait, or is
// refused.
type Budget struct {
	limit int64

	mu   sync.Mutex
	used int64
	// freed is closed when bytes are released. It is made only when a
	// charge waits, so that a call that never waits allocates nothing.
	freed chan struct{}
	// waiting counts the charges waiting now by the age of their call
	// (ReserveAs), made when one first waits.
	waiting map[uint64]int
	// spared is the oldest call waiting when a younger one was last
	// refused for it, and sparedUntil how long it waits on, alone, for
	// what that refusal frees: the refused call lets go of it only once
	// it has ended.
	spared      uint64
	sparedUntil time.Time
	// yielders give up, by the age of their call, what calls that have
	// not started hold (Yielding), for running calls that need it
	// (ReserveRunning); made when one is first registered.
	yielders map[uint64]func() bool
	// ages numbers calls, oldest first (Age).
	ages atomic.Uint64
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// Limit is the budget's size in bytes.
func (b *Budget) Limit() int64 { return b.limit }

// Used is how many bytes are charged now.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// MemoryFullError refuses a charge that found no room within ReserveWait.
type MemoryFullError struct {
	// Used is what was charged when it gave up, Need what it asked for.
	Used, Need, Limit int64
	// What needs the memory (this request, the function's answer) and
	// why (what it holds).
	What, Why string
}

func (e *MemoryFullError) Error() string {
	return fmt.Sprintf("ocifn holds %d bytes of calls in flight and %s needs %d more, %s, past --max-inflight-bytes %d; retry later or raise it",
		e.Used, e.What, e.Need, e.Why, e.Limit)
}

// Reserve charges n bytes for what, waiting up to ReserveWait for them.
// why says what they are for; it is only called to refuse, since it
// formats. The error is a *MemoryFullError, or ctx's error.
func (b *Budget) Reserve(ctx context.Context, n int64, what string, why func() string) error {
	return b.ReserveAs(ctx, 0, n, what, why)
}

// Age numbers a call that charges the budget in several steps
// (ReserveAs): a call numbered earlier is older.
func (b *Budget) Age() uint64 { return b.ages.Add(1) }

// ReserveAs is Reserve for a call of age (Age; 0: none) that holds
// bytes of the budget already and charges more as it goes, such as an
// HTTP call whose function prints its answer. Calls that each hold part
// of the budget and wait for more would all be refused at the end of
// their wait, which starts for all of them as the budget fills: the
// oldest of the calls waiting waits on while others wait too, for what
// their refusals free, so that at least one goes on.
func (b *Budget) ReserveAs(ctx context.Context, age uint64, n int64, what string, why func() string) error {
	return b.reserve(ctx, age, n, what, why, false)
}

// ReserveRunning is ReserveAs for a call whose function runs already,
// such as for its output: what does not fit is taken first from the
// calls that have not started (Yielding), the youngest first, as much as
// it needs. A function stopped half way may have acted; a call that has
// not started has not, and may be sent again. Only when they free too
// little does it wait, and is refused, as ReserveAs.
func (b *Budget) ReserveRunning(ctx context.Context, age uint64, n int64, what string, why func() string) error {
	return b.reserve(ctx, age, n, what, why, true)
}

// Yielding registers the bytes held by a call of age that has not
// started (an asynchronous invocation's body while it waits for a slot)
// as bytes a running call that finds no room may take (ReserveRunning).
// yield gives them up, and the call with them, unless the call has
// started meanwhile; it says whether it did, and frees them before it
// returns. Withdraw the call (Withdraw) once it starts or ends.
func (b *Budget) Yielding(age uint64, yield func() bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.yielders == nil {
		b.yielders = map[uint64]func() bool{}
	}
	b.yielders[age] = yield
}

// Withdraw undoes Yielding for the call of age, if it is registered.
func (b *Budget) Withdraw(age uint64) {
	b.mu.Lock()
	delete(b.yielders, age)
	b.mu.Unlock()
}

// youngestYielderLocked takes the yield of the youngest call registered
// by Yielding out of them, or returns nil; b.mu is held.
func (b *Budget) youngestYielderLocked() func() bool {
	var youngest uint64
	var yield func() bool
	for a, y := range b.yielders {
		if yield == nil || a > youngest {
			youngest, yield = a, y
		}
	}
	if yield != nil {
		delete(b.yielders, youngest)
	}
	return yield
}

func (b *Budget) reserve(ctx context.Context, age uint64, n int64, what string, why func() string, running bool) error {
	var timer *time.Timer // made only when the budget is full
	waiting, expired := false, false
	defer func() {
		if waiting {
			b.mu.Lock()
			b.unwait(age)
			b.mu.Unlock()
		}
	}()
	for {
		b.mu.Lock()
		if b.used+n <= b.limit {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		if running && len(b.yielders) > 0 {
			// Freed by the yield before it returns, or not at all
			// (the call started): either way, looked at again.
			yield := b.youngestYielderLocked()
			b.mu.Unlock()
			yield()
			continue
		}
		used := b.used
		if expired {
			// Checked again once the wait is over: what was freed as
			// it ended is taken, not refused.
			wait := time.Duration(0)
			switch {
			case waiting && b.oldestOfOthersLocked(age):
				// The others' refusals will free what it waits for.
				wait = ReserveWait
			case waiting && age == b.spared:
				wait = time.Until(b.sparedUntil)
			}
			if wait <= 0 {
				if oldest := b.oldestWaitingLocked(); oldest != 0 && oldest < age {
					b.spared, b.sparedUntil = oldest, time.Now().Add(ReserveWait)
				}
				b.mu.Unlock()
				return &MemoryFullError{Used: used, Need: n, Limit: b.limit, What: what, Why: why()}
			}
			timer.Reset(wait)
			expired = false
		}
		if b.freed == nil {
			b.freed = make(chan struct{})
		}
		if !waiting && age != 0 {
			if b.waiting == nil {
				b.waiting = map[uint64]int{}
			}
			b.waiting[age]++
			waiting = true
		}
		freed := b.freed
		b.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(ReserveWait)
			defer timer.Stop()
		}
		select {
		case <-freed:
		case <-timer.C:
			expired = true
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// oldestOfOthersLocked says whether age is the oldest of the calls
// waiting now, with others waiting beside it; b.mu is held.
func (b *Budget) oldestOfOthersLocked(age uint64) bool {
	others := false
	for a := range b.waiting {
		if a < age {
			return false
		}
		others = others || a != age
	}
	return others
}

// oldestWaitingLocked is the age of the oldest call waiting, or 0;
// b.mu is held.
func (b *Budget) oldestWaitingLocked() uint64 {
	var oldest uint64
	for a := range b.waiting {
		if oldest == 0 || a < oldest {
			oldest = a
		}
	}
	return oldest
}

// unwait counts a charge of age out of those waiting; b.mu is held.
func (b *Budget) unwait(age uint64) {
	if b.waiting[age]--; b.waiting[age] <= 0 {
		delete(b.waiting, age)
	}
}

// Resize changes a charge of from bytes to one of to bytes at once, past
// the limit if need be; a charge that shrinks wakes those waiting.
func (b *Budget) Resize(from, to int64) {
	b.mu.Lock()
	b.used += to - from
	if to < from && b.freed != nil {
		close(b.freed)
		b.freed = nil
	}
	b.mu.Unlock()
}
