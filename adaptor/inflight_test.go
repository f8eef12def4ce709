package adaptor

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestInflightBudget: reservations fit in the limit, a request that does
// not fit waits for bytes to be freed, and is refused with
// RESOURCE_EXHAUSTED naming the flag when none are within reserveWait.
func TestInflightBudget(t *testing.T) {
	b := newInflight(100, 10, 0)
	ctx := context.Background()
	if err := b.reserve(ctx, 60); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		b.resize(60, 20)
	}()
	start := time.Now()
	if err := b.reserve(ctx, 70); err != nil {
		t.Fatalf("the second reservation after the first shrank: %v", err)
	}
	if took := time.Since(start); took < 40*time.Millisecond || took > reserveWait {
		t.Errorf("the second reservation took %s, want it to wait for the first to shrink", took)
	}
	start = time.Now()
	err := b.reserve(ctx, 20)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-inflight-bytes 100") {
		t.Errorf("a reservation past the limit: %v, want RESOURCE_EXHAUSTED naming the flag", err)
	}
	if took := time.Since(start); took < reserveWait {
		t.Errorf("refused after %s, want after waiting %s", took, reserveWait)
	}
	b.resize(70, 0)
	b.resize(20, 0)
	if b.used != 0 {
		t.Errorf("%d bytes still reserved after every release", b.used)
	}
	if err := CheckInflightBytes(100, 64); err == nil {
		t.Error("a bound below 5 times the largest request was accepted")
	}
}
