package admit

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestGate(t *testing.T) {
	var inFlight, queued int64
	g := New(1, 1, func(i, q int64) { inFlight, queued = i, q })
	leave, err := g.Enter(context.Background())
	if err != nil || inFlight != 1 {
		t.Fatalf("first call: %v, in flight %d", err, inFlight)
	}
	// The second waits in the queue; the third finds it full.
	waited := make(chan error, 1)
	go func() {
		l, err := g.Enter(context.Background())
		if err == nil {
			l()
		}
		waited <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for g.queued.Load() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
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
