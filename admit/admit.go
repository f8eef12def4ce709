// Package admit bounds how many calls run at once and how many wait, and
// refuses new calls once shutdown begins, the same way for every front.
package admit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// ErrDraining refuses calls once shutdown has begun.
var ErrDraining = errors.New("ocifn is shutting down; retry on another replica")

// errDrainingQueued refuses a call that was waiting in the queue when
// shutdown began: it did not run, so the caller may send it again
// elsewhere. It is ErrDraining to errors.Is.
var errDrainingQueued = fmt.Errorf("%w (this call was waiting for a slot and did not run)", ErrDraining)

// FullError refuses a call when every slot is taken and the queue is full.
type FullError struct{ Max, Queue int }

func (e *FullError) Error() string {
	return fmt.Sprintf("ocifn is running its maximum of %d calls with %d more queued; retry later or raise --max-concurrency", e.Max, e.Queue)
}

// Gate admits at most max calls at once and lets at most queue more wait.
type Gate struct {
	slots    chan struct{}
	maxQueue int64
	queued   atomic.Int64
	inFlight atomic.Int64
	gauge    func(inFlight, queued int64)
	reportMu sync.Mutex
	// running counts admitted calls, so Drain can wait for them; once
	// closed is set under mu, no call is admitted. draining is closed
	// then too, and wakes the calls waiting in the queue.
	running  sync.WaitGroup
	mu       sync.Mutex
	closed   bool
	draining chan struct{}
}

// New returns a gate; gauge, when not nil, is told the number of running
// and waiting calls whenever either changes.
func New(max, queue int, gauge func(inFlight, queued int64)) *Gate {
	if gauge == nil {
		gauge = func(int64, int64) {}
	}
	return &Gate{slots: make(chan struct{}, max), maxQueue: int64(queue), gauge: gauge, draining: make(chan struct{})}
}

// Max is the number of calls that run at once.
func (g *Gate) Max() int { return cap(g.slots) }

// Enter waits for a free slot, unless too many calls already wait. The
// caller must call leave once the call has been answered. The error is a
// *FullError, ErrDraining, or ctx's error. Once Drain has begun, every
// call is refused with ErrDraining at once, those waiting in the queue
// too: they do not wait for a slot that only frees as the calls running
// end, which may take the whole grace period. A call whose ctx carries a
// Reservation of g (WithReservation) enters with it, in the place it
// holds.
func (g *Gate) Enter(ctx context.Context) (leave func(), err error) {
	if r, ok := ctx.Value(reservationKey{}).(*Reservation); ok && r.g == g && r.used.CompareAndSwap(false, true) {
		return r.enter(ctx)
	}
	r, err := g.reserve()
	if err != nil {
		return nil, err
	}
	return r.enter(ctx)
}

// Reservation is a place in the gate, a slot or one in the queue, taken
// ahead of the call that enters with it: a front that answers before the
// call runs (an asynchronous invocation) refuses at once a call the gate
// has no room for, rather than accepting it to fail, and calls that come
// together cannot all see room that only one of them gets.
type Reservation struct {
	g *Gate
	// slot: it holds a slot; otherwise a place in the queue.
	slot bool
	used atomic.Bool
}

// Reserve takes a place for a call that will enter later, with a context
// that carries it (WithReservation); the error is ErrDraining or a
// *FullError, as Enter's. The caller calls Release once the call is over,
// in case it never entered.
func (g *Gate) Reserve() (*Reservation, error) { return g.reserve() }

// Release gives back the place of a reservation no call entered with. It
// does nothing to one a call entered with, or to nil.
func (r *Reservation) Release() {
	if r == nil || !r.used.CompareAndSwap(false, true) {
		return
	}
	if r.slot {
		<-r.g.slots
		return
	}
	r.g.queued.Add(-1)
	r.g.report()
}

type reservationKey struct{}

// WithReservation returns ctx carrying r, for Enter; r may be nil.
func WithReservation(ctx context.Context, r *Reservation) context.Context {
	if r == nil {
		return ctx
	}
	return context.WithValue(ctx, reservationKey{}, r)
}

// reserve takes a free slot, or else a place in the queue.
func (g *Gate) reserve() (*Reservation, error) {
	select {
	case <-g.draining:
		return nil, ErrDraining
	default:
	}
	select {
	case g.slots <- struct{}{}:
		return &Reservation{g: g, slot: true}, nil
	default:
	}
	if g.queued.Add(1) > g.maxQueue {
		g.queued.Add(-1)
		return nil, &FullError{Max: cap(g.slots), Queue: int(g.maxQueue)}
	}
	g.report()
	return &Reservation{g: g}, nil
}

// enter waits, from a place in the queue, for a slot, then admits the
// call.
func (r *Reservation) enter(ctx context.Context) (leave func(), err error) {
	g := r.g
	refused := ErrDraining
	if !r.slot {
		select {
		case g.slots <- struct{}{}:
			g.queued.Add(-1)
			g.report()
			refused = errDrainingQueued
		case <-g.draining:
			g.queued.Add(-1)
			g.report()
			return nil, errDrainingQueued
		case <-ctx.Done():
			g.queued.Add(-1)
			g.report()
			return nil, ctx.Err()
		}
	}
	// Shutdown may have begun between the check above and the slot (a
	// slot and draining may be ready at once, and select picks either).
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		<-g.slots
		return nil, refused
	}
	g.running.Add(1)
	g.mu.Unlock()
	g.inFlight.Add(1)
	g.report()
	leave = func() {
		<-g.slots
		g.inFlight.Add(-1)
		g.report()
		g.running.Done()
	}
	if err := ctx.Err(); err != nil {
		leave()
		return nil, err
	}
	return leave, nil
}

// Refuses says whether Enter would refuse a call now: ErrDraining, a
// *FullError, or nil. It is a hint for a front that answers before the
// call runs (an asynchronous invocation): a call may still be refused by
// the time it enters.
func (g *Gate) Refuses() error {
	g.mu.Lock()
	closed := g.closed
	g.mu.Unlock()
	if closed {
		return ErrDraining
	}
	if len(g.slots) == cap(g.slots) && g.queued.Load() >= g.maxQueue {
		return &FullError{Max: cap(g.slots), Queue: int(g.maxQueue)}
	}
	return nil
}

// report tells the gauge the counts. It loads them under a lock: of
// reports racing, the last to run reads the latest counts, so the gauge
// never keeps a stale value.
func (g *Gate) report() {
	g.reportMu.Lock()
	defer g.reportMu.Unlock()
	g.gauge(g.inFlight.Load(), g.queued.Load())
}

// Drain refuses new calls and the calls waiting in the queue at once, and
// waits until every admitted call has left. It may be called more than
// once.
func (g *Gate) Drain() {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		close(g.draining)
	}
	g.mu.Unlock()
	g.running.Wait()
}
