package adaptor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ocifn/ocifn/admit"
	"github.com/ocifn/ocifn/codec"
	"github.com/ocifn/ocifn/internal/protocount"
)

// DefaultMaxInflightBytes bounds the memory that requests hold at once: 1
// GiB holds a request of the largest size (64 MiB) that is one long
// string (about 8 times its size, see requestCost) besides hundreds of
// requests of usual sizes (kilobytes to a few megabytes), which are never
// held back by it.
const DefaultMaxInflightBytes = 1 << 30

// reserveWait is how long a request waits for others to free the budget
// before it is refused: a burst of small requests that arrive together
// each reserve the largest size until they are read, which takes far less.
const reserveWait = admit.ReserveWait

// inflight is the memory budget of the calls being received or run.
// gRPC reads a whole request into memory before it can be decoded, and its
// length is known only then. So a request reserves what the bytes of the
// largest request accepted take before it is read, which keeps the bound
// true whatever arrives. Once its bytes are in, and before they are
// decoded, they are counted (protocount) and the request takes what its
// decoding and its encoding for the function will cost, or is refused;
// it keeps that until its call returns. The function's answer charges the
// same budget (answerBudget): its stdout as it is read, and what decoding
// it takes before it is decoded.
// Until a request is read, the bytes the client sent wait in HTTP/2 flow
// control windows (at most 16 MiB per connection).
type inflight struct {
	// budget is --max-inflight-bytes, shared with the HTTP fronts'
	// accounting (admit.Budget).
	budget *admit.Budget
	maxMsg int64
	// recvTimeout, when not zero, is how long a request may take to
	// arrive: a stream that opens and sends nothing would otherwise hold
	// its reservation, the bytes of the largest request, for as long as
	// its client keeps it open.
	recvTimeout time.Duration
}

func newInflight(limit, maxMsg int64, recvTimeout time.Duration) *inflight {
	return &inflight{budget: admit.NewBudget(limit), maxMsg: maxMsg, recvTimeout: recvTimeout}
}

// readCost is what a request of n bytes holds while it is read: the
// buffers it arrives in, and one copy of them when it came in pieces.
func readCost(n int64) int64 { return 2 * n }

// requestCost is the memory a request of counts c holds while its call
// runs, given what its encoding for the function costs: its bytes as
// read, the decoded request, and the encoding. A v1beta1 request is
// converted to v1 through the wire format, a copy of the bytes and a
// second decoded request more.
func requestCost(c protocount.Counts, encode int64, converted bool) int64 {
	cost := readCost(c.Wire) + c.Decoded() + encode
	if converted {
		cost += c.Wire + c.Decoded()
	}
	return cost
}

// largestCost is the cost of a request of n bytes that is one string in
// the default JSON mode, the least a request of that size can cost.
func largestCost(n int64) int64 {
	c := protocount.Counts{Wire: n, Messages: 1, Strings: 1, StringBytes: n}
	return requestCost(c, codec.JSON{}.EncodeMemory(c), false)
}

// reserve takes n bytes of the budget for a request, waiting up to
// reserveWait for them; why says what they are for.
func (b *inflight) reserve(ctx context.Context, n int64, why string) error {
	return b.reserveFor(ctx, n, "this request", func() string { return why })
}

// reserveFor is reserve for what (this request, or the function's answer).
// why is only called to refuse: it formats, and a call reserves once or
// more for its answer alone.
func (b *inflight) reserveFor(ctx context.Context, n int64, what string, why func() string) error {
	err := b.budget.Reserve(ctx, n, what, why)
	if err == nil {
		return nil
	}
	var full *admit.MemoryFullError
	if errors.As(err, &full) {
		return status.Error(codes.ResourceExhausted, full.Error())
	}
	return callerGone(ctx)
}

// resize changes a reservation of from bytes to to bytes.
func (b *inflight) resize(from, to int64) { b.budget.Resize(from, to) }

// grow makes a reservation of from bytes one of to bytes, waiting as
// reserve does when it grows; a request that needs more than the whole
// budget is refused at once. why says what the bytes are for; it is only
// called to refuse, since most requests shrink their reservation.
func (b *inflight) grow(ctx context.Context, from, to int64, why func() string) error {
	if to <= from {
		b.resize(from, to)
		return nil
	}
	if limit := b.budget.Limit(); to > limit {
		return status.Errorf(codes.ResourceExhausted, "this request needs %d bytes of memory, %s, past --max-inflight-bytes %d; raise it or send less", to, why(), limit)
	}
	return b.reserveFor(ctx, to-from, "this request", why)
}

// bounded returns a copy of desc whose unary handlers reserve the budget
// before the request is read, take what the request costs once it is read
// and before it is decoded (its encoding priced by fn's codec), and
// release it when the call returns; converted says that the service's
// requests are converted to v1. A call refused before the Function saw it
// (the budget full, a request that could not be read) is reported to
// fn.refused, so that it is counted and logged as the Function's own
// refusals are.
func (b *inflight) bounded(desc *grpc.ServiceDesc, fn *FunctionRef, converted bool) *grpc.ServiceDesc {
	d := *desc
	d.Methods = append([]grpc.MethodDesc(nil), desc.Methods...)
	for i := range d.Methods {
		handler, method := d.Methods[i].Handler, d.Methods[i].MethodName
		d.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			// A refusal is timed from here: it may come after a second
			// of waiting for room, or a request slow to arrive.
			received := time.Now()
			held := readCost(b.maxMsg)
			if err := b.reserve(ctx, held, "the bytes of a request of the largest size accepted (--max-recv-msg-size) until it is read"); err != nil {
				fn.refused(ctx, method, received, err)
				return nil, err
			}
			defer func() { b.resize(held, 0) }()
			decoded := false
			ctx, wire := withWireCount(ctx)
			ctx, answer := withAnswerBudget(ctx, b)
			defer answer.release()
			rsp, err := handler(srv, ctx, func(v any) error {
				m, ok := v.(proto.Message)
				if !ok {
					return status.Errorf(codes.Internal, "cannot decode a request into %T", v)
				}
				var raw rawRequest
				if err := b.receive(dec, &raw); err != nil {
					return b.tooLarge(err)
				}
				defer raw.free()
				c, err := protocount.Count(raw.bytes(), m.ProtoReflect().Descriptor())
				if err != nil {
					return unreadable(err)
				}
				cd := fn.codec()
				cost := requestCost(c, cd.EncodeMemory(c), converted)
				why := func() string {
					return fmt.Sprintf("to hold its %d bytes, decoded and encoded for the function in the %s I/O mode", c.Wire, cd.Name())
				}
				if err := b.grow(ctx, held, cost, why); err != nil {
					return err
				}
				held = cost
				answer.besides(cost)
				if err := proto.Unmarshal(raw.bytes(), m); err != nil {
					return unreadable(err)
				}
				wire.counted, wire.unknown = true, c.Unknown
				decoded = true
				return nil
			}, ic)
			if err != nil && !decoded {
				fn.refused(ctx, method, received, err)
			}
			if err == nil && (answer.cached.head != nil || answer.cached.data != nil) {
				return &answer.cached, nil
			}
			return rsp, err
		}
	}
	return &d
}

// rawAnswer is an answer already in protobuf's encoding, a response from
// the cache, which rawCodec sends as it is: neither decoded nor encoded
// again per call, but for head, its meta with the TTL left. v1 and v1beta1
// responses are the same on the wire.
type rawAnswer struct{ head, data []byte }

// rawAnswerOf returns where a call served by the gRPC server puts an
// answer to send as it is, or nil elsewhere (ocifn test and render). It is
// the call's answer budget's, which every such call has already: no more
// to allocate per call.
func rawAnswerOf(ctx context.Context) *rawAnswer {
	if a := answerBudgetOf(ctx); a != nil {
		return &a.cached
	}
	return nil
}

// answerBudget is what a call's answer charges to the in-flight budget
// beyond its request's share: the function's output as it is read, then
// what decoding it takes. It is let go with the request's share, when the
// call returns; gRPC encodes the response after that, into at most
// --max-send-msg-size bytes.
type answerBudget struct {
	b  *inflight
	mu sync.Mutex
	// request is what the call's request holds, held what its answer
	// took.
	request, held int64
	// cached is the answer from the response cache, if the call has one.
	cached rawAnswer
}

// besides says what the call's request holds beside the answer.
func (a *answerBudget) besides(request int64) {
	a.mu.Lock()
	a.request = request
	a.mu.Unlock()
}

type answerBudgetKey struct{}

func withAnswerBudget(ctx context.Context, b *inflight) (context.Context, *answerBudget) {
	a := &answerBudget{b: b}
	return context.WithValue(ctx, answerBudgetKey{}, a), a
}

// answerBudgetOf returns the budget of the call in ctx, or nil when calls
// are not bounded (ocifn test and render).
func answerBudgetOf(ctx context.Context) *answerBudget {
	a, _ := ctx.Value(answerBudgetKey{}).(*answerBudget)
	return a
}

// take charges n more bytes, waiting as reserve does; why says what they
// are for. What could never fit beside the call's request is refused at
// once. A nil budget takes anything.
func (a *answerBudget) take(ctx context.Context, n int64, why func() string) error {
	if a == nil || n <= 0 {
		return nil
	}
	a.mu.Lock()
	request, total := a.request, a.held+n
	a.mu.Unlock()
	if limit := a.b.budget.Limit(); request+total > limit {
		return status.Errorf(codes.ResourceExhausted, "the function's answer needs %d bytes of memory, %s, and its request holds %d, past --max-inflight-bytes %d; raise it or have the function print less", total, why(), request, limit)
	}
	if err := a.b.reserveFor(ctx, n, "the function's answer", why); err != nil {
		return err
	}
	a.mu.Lock()
	a.held += n
	a.mu.Unlock()
	return nil
}

// force charges n more bytes at once, past the limit if need be: for
// memory an answered call cannot do without.
func (a *answerBudget) force(n int64) {
	if a == nil || n <= 0 {
		return
	}
	a.b.resize(0, n)
	a.mu.Lock()
	a.held += n
	a.mu.Unlock()
}

func (a *answerBudget) release() {
	a.mu.Lock()
	n := a.held
	a.held = 0
	a.mu.Unlock()
	if n > 0 {
		a.b.resize(n, 0)
	}
}

// unreadable is the error of a request whose bytes are not the message,
// worded as gRPC's own decoding words it.
func unreadable(err error) error {
	return status.Errorf(codes.Internal, "grpc: error unmarshalling request: %v", err)
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

// tooLarge names --max-recv-msg-size in err, for the call's log line, when
// err is gRPC's refusal of a request larger than it (RESOURCE_EXHAUSTED,
// "grpc: received message larger than max"; gRPC has sent the caller that
// status already), and marks it as a bad request rather than a full
// server (see oversizeError); other errors are returned as they are.
func (b *inflight) tooLarge(err error) error {
	if status.Code(err) != codes.ResourceExhausted {
		return err
	}
	return oversizeError{status.Newf(codes.ResourceExhausted, "%s: the request is larger than --max-recv-msg-size %d bytes, the largest ocifn accepts", status.Convert(err).Message(), b.maxMsg)}
}

// oversizeError is the RESOURCE_EXHAUSTED of a request larger than
// --max-recv-msg-size, gRPC's code for it: a request the caller must make
// smaller, or the server accept larger, not a server too busy to take it
// (refusalOutcome).
type oversizeError struct{ s *status.Status }

func (e oversizeError) Error() string { return e.s.Err().Error() }

// GRPCStatus makes the error's status the call's.
func (e oversizeError) GRPCStatus() *status.Status { return e.s }

// rawRequest receives a request's bytes undecoded from rawCodec, so that
// they can be counted before they are decoded.
type rawRequest struct{ buf mem.Buffer }

func (r *rawRequest) bytes() []byte { return r.buf.ReadOnlyData() }

// free gives the buffer back to gRPC's pool.
func (r *rawRequest) free() { r.buf.Free() }

// rawCodec is gRPC's proto codec, except that it hands a rawRequest its
// bytes as they came.
type rawCodec struct{ encoding.CodecV2 }

func newRawCodec() rawCodec { return rawCodec{encoding.GetCodecV2("proto")} }

// Marshal sends a rawAnswer's bytes as they are, without a copy: the
// cache never changes them, and each hit has a head of its own.
func (c rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	if a, ok := v.(*rawAnswer); ok {
		if len(a.head) == 0 {
			return mem.BufferSlice{mem.SliceBuffer(a.data)}, nil
		}
		return mem.BufferSlice{mem.SliceBuffer(a.head), mem.SliceBuffer(a.data)}, nil
	}
	return c.CodecV2.Marshal(v)
}

func (c rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rawRequest); ok {
		r.buf = data.MaterializeToBuffer(mem.DefaultBufferPool())
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}
