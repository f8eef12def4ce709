package admit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// queue has n calls enter g, each leaving as soon as it is admitted, and
// returns once they wait in its queue (5 s at most); each sends how its
// Enter ended.
func queue(g *Gate, n int) <-chan error {
	waited := make(chan error, n)
	for range n {
		go func() {
			l, err := g.Enter(context.Background())
			if err == nil {
				l()
			}
			waited <- err
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for g.queued.Load() != int64(n) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	return waited
}

func TestGate(t *testing.T) {
	var inFlight, queued int64
	g := New(1, 1, func(i, q int64) { inFlight, queued = i, q })
	leave, err := g.Enter(context.Background())
	if err != nil || inFlight != 1 {
		t.Fatalf("first call: %v, in flight %d", err, inFlight)
	}
	// The second waits in the queue; the third finds it full.
	waited := queue(g, 1)
	var full *FullError
	if _, err := g.Enter(context.Background()); !errors.As(err, &full) || full.Max != 1 || full.Queue != 1 {
		t.Errorf("third call: %v, want a FullError", err)
	}
	leave()
	if err := <-waited; err != nil {
		t.Errorf("queued call: %v", err)
	}
	if inFlight != 0 || queued != 0 {
		t.Errorf("gauges after all left: %d in flight, %d queued", inFlight, queued)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Enter(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("call whose caller left: %v", err)
	}

	g.Drain()
	if _, err := g.Enter(context.Background()); !errors.Is(err, ErrDraining) {
		t.Errorf("call after Drain: %v", err)
	}
}

// Once Drain begins, the calls waiting in the queue and new calls are
// refused at once, while the call admitted runs on until it leaves.
func TestDrainRefusesQueued(t *testing.T) {
	var mu sync.Mutex
	var queuedGauge int64
	g := New(1, 2, func(_, q int64) { mu.Lock(); queuedGauge = q; mu.Unlock() })
	leave, err := g.Enter(context.Background())
	if err != nil {
		t.Fatalf("first call: %v", err)
	}
	waited := queue(g, 2)
	if q := g.queued.Load(); q != 2 {
		t.Fatalf("%d calls queued, want 2", q)
	}

	drained := make(chan struct{})
	go func() { g.Drain(); close(drained) }()
	// However long the admitted call runs, the queued ones are refused
	// now: were they not, they would wait until leave below.
	timeout := time.After(2 * time.Second)
	for i := range 2 {
		select {
		case err := <-waited:
			if !errors.Is(err, ErrDraining) || !strings.Contains(err.Error(), "shutting down") || !strings.Contains(err.Error(), "did not run") {
				t.Errorf("queued call %d: %v, want ErrDraining saying it did not run", i, err)
			}
		case <-timeout:
			leave()
			t.Fatalf("%d queued calls still waiting 2s after Drain began", 2-i)
		}
	}
	// A new call is refused as draining, not as full, and so is one that
	// would find a free slot.
	if _, err := g.Enter(context.Background()); !errors.Is(err, ErrDraining) {
		t.Errorf("new call while draining: %v, want ErrDraining", err)
	}
	if err := g.Refuses(); !errors.Is(err, ErrDraining) {
		t.Errorf("Refuses while draining: %v, want ErrDraining", err)
	}
	mu.Lock()
	q := queuedGauge
	mu.Unlock()
	if q != 0 || g.queued.Load() != 0 {
		t.Errorf("queued gauge %d, count %d after the queue was refused; want 0", q, g.queued.Load())
	}
	select {
	case <-drained:
		t.Fatal("Drain returned while a call admitted still ran")
	case <-time.After(50 * time.Millisecond):
	}
	leave()
	select {
	case <-drained:
	case <-time.After(5 * time.Second):
		t.Fatal("Drain still waiting after the admitted call left")
	}
	if _, err := g.Enter(context.Background()); !errors.Is(err, ErrDraining) || strings.Contains(err.Error(), "did not run") {
		t.Errorf("call after Drain, with a slot free: %v, want plain ErrDraining", err)
	}
	g.Drain() // a second Drain returns at once
}

// TestReservation: a reservation holds its place until the call that
// carries it enters with it, or it is released; one taken when the gate
// is full is refused, and one holding a slot when shutdown begins enters
// as a new call would, refused.
func TestReservation(t *testing.T) {
	g := New(1, 1, nil)
	slot, err := g.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	queued, err := g.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	var full *FullError
	if _, err := g.Reserve(); !errors.As(err, &full) {
		t.Fatalf("a third reservation: %v, want *FullError", err)
	}
	if err := g.Refuses(); err == nil {
		t.Error("Refuses: nil with the slot and the queue reserved")
	}
	leave, err := g.Enter(WithReservation(context.Background(), slot))
	if err != nil {
		t.Fatalf("entering with the slot's reservation: %v", err)
	}
	slot.Release() // used: does nothing
	queued.Release()
	if err := g.Refuses(); err != nil {
		t.Errorf("the released place in the queue is still taken: %v", err)
	}
	leave()
	late, err := g.Reserve()
	if err != nil {
		t.Fatal(err)
	}
	go g.Drain()
	for !errors.Is(g.Refuses(), ErrDraining) {
		time.Sleep(time.Millisecond)
	}
	if _, err := g.Enter(WithReservation(context.Background(), late)); !errors.Is(err, ErrDraining) {
		t.Errorf("entering with a reservation after Drain: %v, want ErrDraining", err)
	}
}
