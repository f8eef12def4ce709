package adaptor

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// DefaultMaxInflightBytes bounds the memory that requests hold at once: 1
// GiB is three requests of the largest size (64 MiB, each counted 5 times,
// see requestCost) in flight, while requests of usual sizes (kilobytes to
// a few megabytes) are never held back by it.
const DefaultMaxInflightBytes = 1 << 30

// requestMemoryFactor is how many times its wire size a request costs in
// memory while its call runs: the message as received, the decoded
// request, its JSON encoding for the function's stdin, and the garbage
// they leave until the collector runs. Measured by
// TestFloodOfLargestRequests (three 64 MiB requests at once peaked at
// 1016 MiB of RSS without a soft memory limit).
const requestMemoryFactor = 5

// reserveWait is how long a request waits for others to free the budget
// before it is refused: a burst of small requests that arrive together
// each reserve the largest size until they are read, which takes far less.
const reserveWait = time.Second

// inflight is the memory budget of the requests being received or run.
// gRPC reads a whole request into memory before it can be decoded, and its
// length is known only then. So a request reserves the cost of the
// largest request accepted before it is read, which keeps the bound true
// whatever arrives, and then keeps only its own cost until its call
// returns.
// Until a request is read, the bytes the client sent wait in HTTP/2 flow
// control windows (at most 16 MiB per connection).
type inflight struct {
	limit  int64
	maxMsg int64
	// recvTimeout, when not zero, is how long a request may take to
	// arrive: a stream that opens and sends nothing would otherwise hold
	// its reservation, the cost of the largest request, for as long as its
	// client keeps it open, and three of them the whole default budget.
	recvTimeout time.Duration

	mu    sync.Mutex
	used  int64
	freed chan struct{} // closed and replaced whenever bytes are released
}

func newInflight(limit, maxMsg int64, recvTimeout time.Duration) *inflight {
	return &inflight{limit: limit, maxMsg: maxMsg, recvTimeout: recvTimeout, freed: make(chan struct{})}
}

// requestCost is the memory a decoded request of n wire bytes is counted for.
func requestCost(n int) int64 { return requestMemoryFactor * int64(n) }

// reserve takes n bytes of the budget, waiting up to reserveWait for them.
func (b *inflight) reserve(ctx context.Context, n int64) error {
	timer := time.NewTimer(reserveWait)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if b.used+n <= b.limit {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		used := b.used
		b.mu.Unlock()
		select {
		case <-freed:
		case <-timer.C:
			return status.Errorf(codes.ResourceExhausted,
				"ocifn holds %d bytes of requests in flight and a request may need %d more (%d times the largest request accepted), past --max-inflight-bytes %d; retry later or raise it",
				used, n, requestMemoryFactor, b.limit)
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
}

// resize changes a reservation of from bytes to to bytes.
func (b *inflight) resize(from, to int64) {
	b.mu.Lock()
	b.used += to - from
	if to < from {
		close(b.freed)
		b.freed = make(chan struct{})
	}
	b.mu.Unlock()
}

// bounded returns a copy of desc whose unary handlers reserve the budget
// before the request is read and release it when the call returns. A call
// refused before the Function saw it (the budget full, a request that
// could not be read) is reported to refused, so that it is counted and
// logged as the Function's own refusals are.
func (b *inflight) bounded(desc *grpc.ServiceDesc, refused func(ctx context.Context, method string, err error)) *grpc.ServiceDesc {
	d := *desc
	d.Methods = append([]grpc.MethodDesc(nil), desc.Methods...)
	for i := range d.Methods {
		handler, method := d.Methods[i].Handler, d.Methods[i].MethodName
		d.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			held := requestCost(int(b.maxMsg))
			if err := b.reserve(ctx, held); err != nil {
				refused(ctx, method, err)
				return nil, err
			}
			defer func() { b.resize(held, 0) }()
			decoded := false
			rsp, err := handler(srv, ctx, func(v any) error {
				err := b.receive(dec, v)
				if m, ok := v.(proto.Message); ok && err == nil {
					decoded = true
					cost := requestCost(proto.Size(m))
					b.resize(held, cost)
					held = cost
				}
				return err
			}, ic)
			if err != nil && !decoded {
				refused(ctx, method, err)
			}
			return rsp, err
		}
	}
	return &d
}

// receive reads a request into v with dec, or gives up after recvTimeout.
// The read it leaves behind ends when the handler returns, which ends the
// stream; v is not used again.
func (b *inflight) receive(dec func(any) error, v any) error {
	if b.recvTimeout <= 0 {
		return dec(v)
	}
	done := make(chan error, 1)
	go func() { done <- dec(v) }()
	timer := time.NewTimer(b.recvTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return status.Errorf(codes.DeadlineExceeded, "the request did not arrive within %s (--timeout) of the call's start", b.recvTimeout)
	}
}
