package front

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/ocifn/ocifn/admit"
	"github.com/ocifn/ocifn/hook"
)

// BodyError is why a request's body could not be read, with the status an
// HTTP front answers it with.
type BodyError struct {
	Status int
	Msg    string
	// Rejected says the server had no memory for it then
	// (--max-inflight-bytes): the call is counted as rejected, and its
	// answer carries Retry-After.
	Rejected bool
}

func (e *BodyError) Error() string { return e.Msg }

// ReadBody reads r's body as ReadCharged does, charged to no budget.
func ReadBody(w http.ResponseWriter, r *http.Request, max int64, timeout time.Duration) ([]byte, *BodyError) {
	return ReadCharged(w, r, max, timeout, nil, nil)
}

// ReadCharged reads r's body: at most max bytes, and all of it within
// timeout when timeout is not zero, so that a stalled client cannot hold a
// slot of the gate. The body is charged to mem: its Content-Length before
// a byte of it is read, when the request gives one, which is the size of
// the one buffer it is read into; else the buffer's capacity as it grows.
// copies, when not nil, is the least the caller will make of a body of n
// bytes, charged ahead with a body whose length is known (Memory's credit).
// A charge refused answers 503 with Retry-After (the server busy), or 413
// (a body the budget could never hold).
//
// The deadline is lifted once the body is in: net/http's read that watches
// for the client going away would otherwise hit it, and cancel the call. It
// stays when the body failed, so that net/http does not wait for the rest
// of it before it answers.
func ReadCharged(w http.ResponseWriter, r *http.Request, max int64, timeout time.Duration, mem *Memory, copies func(n int64) int64) ([]byte, *BodyError) {
	if r.ContentLength > max {
		// Said before a byte of it is read, which is before net/http
		// tells a client that waits for it (Expect: 100-continue) to send
		// it: such a client sends nothing in vain.
		return nil, &BodyError{Status: http.StatusRequestEntityTooLarge, Msg: fmt.Sprintf("the request body is larger than the limit of %d bytes (--max-request-bytes): its Content-Length is %d", max, r.ContentLength)}
	}
	ctx := r.Context()
	if p, ok := ctx.Value(pendingKey{}).(*pending); ok {
		// An asynchronous invocation's, read and charged already.
		return p.body, nil
	}
	if n := r.ContentLength; n > 0 {
		// Charged before it is read, and so before a client that waits
		// on Expect: 100-continue sends it.
		why := func() string { return fmt.Sprintf("to hold the request body of %d bytes (its Content-Length)", n) }
		ahead := int64(0)
		if copies != nil {
			ahead = copies(n)
			why = func() string {
				return fmt.Sprintf("to hold the request body of %d bytes (its Content-Length) and the %d bytes of copies the front makes of it", n, ahead)
			}
		}
		if err := mem.Take(ctx, n+ahead, why); err != nil {
			return nil, chargeError(w, err)
		}
		if mem != nil {
			mem.credit.Add(ahead)
		}
	}
	rc := http.NewResponseController(w)
	if timeout > 0 {
		_ = rc.SetReadDeadline(time.Now().Add(timeout))
	}
	var body []byte
	var err error
	if r.ContentLength >= 0 {
		// One buffer of the announced size, which net/http's reader
		// never passes: a buffer grown by doubling as the body comes
		// would hold up to twice it, and its garbage more.
		body = make([]byte, r.ContentLength)
		_, err = io.ReadFull(r.Body, body)
	} else {
		into := &Capped{Max: int(max), mem: mem, ctx: ctx, what: "the request body (no Content-Length)"}
		_, err = io.Copy(into, http.MaxBytesReader(w, r.Body, max))
		body = into.Bytes()
		if into.Refused != nil {
			return nil, chargeError(w, into.Refused)
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		if timeout > 0 {
			_ = rc.SetReadDeadline(time.Time{})
		}
		return body, nil
	case errors.As(err, &tooBig):
		return nil, &BodyError{Status: http.StatusRequestEntityTooLarge, Msg: fmt.Sprintf("the request body is larger than the limit of %d bytes (--max-request-bytes)", tooBig.Limit)}
	case timeout > 0 && errors.Is(err, os.ErrDeadlineExceeded):
		return nil, &BodyError{Status: http.StatusBadRequest, Msg: fmt.Sprintf("the request body did not arrive within the call's timeout of %s", timeout)}
	case errors.Is(err, io.ErrUnexpectedEOF) && r.ContentLength < 0:
		// Sent in chunks, without a Content-Length to name.
		return nil, &BodyError{Status: http.StatusBadRequest, Msg: fmt.Sprintf("cannot read the request body: it ended after %d bytes, before its last chunk (Transfer-Encoding: chunked)", len(body))}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, &BodyError{Status: http.StatusBadRequest, Msg: fmt.Sprintf("cannot read the request body: it ended before its Content-Length of %d bytes", r.ContentLength)}
	default:
		return nil, &BodyError{Status: http.StatusBadRequest, Msg: fmt.Sprintf("cannot read the request body: %v", err)}
	}
}

// chargeError is the BodyError of a body its charge to the in-flight
// budget refused with err.
func chargeError(w http.ResponseWriter, err error) *BodyError {
	if _, status, ok := MemoryRefusal(w, err); ok {
		return &BodyError{Status: status, Msg: err.Error(), Rejected: status == http.StatusServiceUnavailable}
	}
	// The caller went away while the body waited for room.
	return &BodyError{Status: StatusCallerGone, Msg: fmt.Sprintf("the caller went away while its body waited for memory: %v", err)}
}

// Refused is a request Admit did not admit, or whose body it could not
// read: the status to answer with, and the outcome the hooks count it
// under.
type Refused struct {
	Outcome hook.Outcome
	Status  int
	Err     error
}

// Admitted is a call Admit let in: its body, and its share of the
// in-flight budget, which holds the body and which the front charges the
// copies it makes and hands to Exec for the function's output.
type Admitted struct {
	Body []byte
	Mem  *Memory
	// leave gives back the call's slot of the gate.
	leave func()
	// own says Mem is the call's to let go of: an asynchronous
	// invocation's is the invocation's, which holds its answer after its
	// call, until it is stored.
	own bool
}

// Leave gives back what the call holds, once it has been answered.
func (a Admitted) Leave() {
	if a.own {
		a.Mem.Release()
	}
	a.leave()
}

// Admit takes a slot of the gate for r, then reads its body (at most
// MaxRequestBytes, all of it within Timeout, charged to Budget): a request
// waiting for a slot holds no body in memory, and a stalled one cannot
// hold a slot. An asynchronous invocation's body, read before it took its
// place, is taken as it is, with what it is charged; while it waits for a
// slot, running calls whose output needs its memory may take it, and it
// is refused then (503), not run. The caller calls
// Leave once the call has run; on a refusal nothing is held.
func (c *Config) Admit(ctx context.Context, w http.ResponseWriter, r *http.Request) (Admitted, *Refused) {
	p, async := ctx.Value(pendingKey{}).(*pending)
	if async {
		p.wait()
	}
	leave, err := c.Gate.Enter(ctx)
	if async && !p.start() {
		// Its body's memory went to running calls while it waited:
		// it did not run, and is refused as a call the server had no
		// room for.
		if err == nil {
			leave()
		}
		return Admitted{}, &Refused{hook.Rejected, http.StatusServiceUnavailable, p.yieldedError()}
	}
	if errors.Is(err, context.Canceled) && !errors.Is(context.Cause(ctx), ErrShutdown) {
		// Gone while its call waited for a slot: logged as one gone
		// mid-call is, not as a refusal of ocifn's.
		return Admitted{}, &Refused{hook.Error, StatusCallerGone, fmt.Errorf("the caller went away while the call waited for a slot: %w", err)}
	}
	if err != nil {
		outcome, status := refusal(w, err)
		return Admitted{}, &Refused{outcome, status, err}
	}
	if async {
		return Admitted{Body: p.body, Mem: p.mem, leave: leave}, nil
	}
	mem := NewMemory(c.Budget)
	body, bad := ReadCharged(w, r, c.MaxRequestBytes, c.Timeout, mem, c.Copies)
	if bad != nil {
		mem.Release()
		leave()
		outcome := hook.Error
		if bad.Rejected {
			outcome = hook.Rejected
		}
		return Admitted{}, &Refused{outcome, bad.Status, bad}
	}
	return Admitted{Body: body, Mem: mem, leave: leave, own: true}, nil
}

// refusal is how an HTTP front answers a call its gate refused (err is
// from admit.Gate's Enter or Refuses): 503, with Retry-After when the gate
// was full, and the outcome the hooks count it under.
func refusal(w http.ResponseWriter, err error) (hook.Outcome, int) {
	var full *admit.FullError
	if errors.As(err, &full) {
		w.Header().Set("Retry-After", "1")
		return hook.Rejected, http.StatusServiceUnavailable
	}
	return hook.Error, http.StatusServiceUnavailable
}
