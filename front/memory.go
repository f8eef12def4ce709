package front

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/ocifn/ocifn/admit"
	"github.com/ocifn/ocifn/hook"
)

// Memory is what one call of an HTTP front holds of the in-flight budget
// (--max-inflight-bytes, Config.Budget), as the Crossplane front's calls
// hold it: its body as it is read, the copies its front makes of it, and
// the function's stdout and stderr as they are printed. It is let go when
// the call ends (Release). A nil Memory, or one without a budget, takes
// anything.
type Memory struct {
	b *admit.Budget
	// age orders the call among others (admit.Budget.ReserveAs).
	age  uint64
	held atomic.Int64
	// credit is what the call was charged ahead, with its body and
	// before a byte of it was read (ReadCharged), for the copies its
	// front will make of it, and has not taken yet: Take takes it first.
	// Calls that come together so do not each read a body and then wait
	// for room the others hold, and a call that could not have its
	// copies is refused before its body is read.
	credit atomic.Int64
	// running says the call's function has started (Exec): what it
	// charges from then on is taken first from the asynchronous
	// invocations that wait in the queue (admit.Budget.ReserveRunning),
	// which have not acted yet, rather than refused, which would stop a
	// function that may have.
	running atomic.Bool
}

// NewMemory returns the share of a call in b, which may be nil (no bound).
func NewMemory(b *admit.Budget) *Memory {
	if b == nil {
		return &Memory{}
	}
	return &Memory{b: b, age: b.Age()}
}

// MemoryError refuses a call, or its answer, that the in-flight budget
// has no room for: Full when it found none within admit.ReserveWait (the
// server is busy: 503 with Retry-After, outcome rejected), otherwise it
// could never fit, whatever else ran.
type MemoryError struct {
	Full bool
	Msg  string
	// full is the budget's refusal, when Full.
	full *admit.MemoryFullError
}

func (e *MemoryError) Error() string { return e.Msg }

// Take charges n more bytes, waiting up to admit.ReserveWait for them.
// why says what they are for; it is only called to refuse. What could
// never fit beside what the call holds already is refused at once. The
// error is a *MemoryError, or ctx's error.
func (m *Memory) Take(ctx context.Context, n int64, why func() string) error {
	if m == nil || m.b == nil || n <= 0 {
		return nil
	}
	for c := m.credit.Load(); c > 0; c = m.credit.Load() {
		if use := min(c, n); m.credit.CompareAndSwap(c, c-use) {
			if n -= use; n == 0 {
				return nil
			}
			break
		}
	}
	limit := m.b.Limit()
	if total := m.held.Load() + n; total > limit {
		return &MemoryError{Msg: fmt.Sprintf("this call needs %d bytes of memory, %s, past --max-inflight-bytes %d; raise it, or send or have the function print less", total, why(), limit)}
	}
	var err error
	if m.running.Load() {
		err = m.b.ReserveRunning(ctx, m.age, n, "this call", why)
	} else {
		err = m.b.ReserveAs(ctx, m.age, n, "this call", why)
	}
	if err != nil {
		var full *admit.MemoryFullError
		if errors.As(err, &full) {
			return &MemoryError{Full: true, Msg: full.Error(), full: full}
		}
		return err
	}
	m.held.Add(n)
	return nil
}

// run says the call's function starts now.
func (m *Memory) run() {
	if m != nil {
		m.running.Store(true)
	}
}

// Force charges n more bytes at once, past the limit if need be: for
// memory a call that ran cannot do without, such as the answer of an
// asynchronous invocation kept until it is stored.
func (m *Memory) Force(n int64) {
	if m == nil || m.b == nil || n <= 0 {
		return
	}
	m.b.Resize(0, n)
	m.held.Add(n)
}

// Held is what the call holds now.
func (m *Memory) Held() int64 {
	if m == nil {
		return 0
	}
	return m.held.Load()
}

// Release lets go of everything the call holds.
func (m *Memory) Release() {
	if m == nil || m.b == nil {
		return
	}
	m.credit.Store(0)
	if n := m.held.Swap(0); n > 0 {
		m.b.Resize(n, 0)
	}
}

// MemoryRefusal is how an HTTP front answers a call refused with err, a
// *MemoryError: 503 with Retry-After, counted as rejected, when the
// server was busy; 413 when the call could never fit. ok is false for
// any other error.
func MemoryRefusal(w http.ResponseWriter, err error) (outcome hook.Outcome, status int, ok bool) {
	var m *MemoryError
	if !errors.As(err, &m) {
		return "", 0, false
	}
	if m.Full {
		w.Header().Set("Retry-After", "1")
		return hook.Rejected, http.StatusServiceUnavailable, true
	}
	return hook.Error, http.StatusRequestEntityTooLarge, true
}

// OutputRefusal is how an HTTP front answers a call whose function had
// started when the in-flight budget refused it (err, a *MemoryError), for
// its output or the front's reading of it. The function ran, in part, and
// was stopped: a server that was busy answers 503 without Retry-After
// and says so, since a caller that retried on the hint would run a
// function that may have acted already a second time; what could never
// fit is the function's output at fault, 502, as output past
// --max-output-bytes. ok is false for any other error.
func OutputRefusal(err error) (outcome hook.Outcome, status int, msg string, ok bool) {
	var m *MemoryError
	if !errors.As(err, &m) {
		return "", 0, "", false
	}
	if m.Full {
		msg := m.Msg
		if f := m.full; f != nil {
			// Not the budget's "retry later": the hint the missing
			// Retry-After does not give.
			msg = fmt.Sprintf("ocifn holds %d bytes of calls in flight and %s needs %d more, %s, past --max-inflight-bytes %d; run the call again only if the function may run twice, or raise the flag",
				f.Used, f.What, f.Need, f.Why, f.Limit)
		}
		return hook.Rejected, http.StatusServiceUnavailable, "the function ran and was stopped, its output not kept: " + msg, true
	}
	return hook.Fatal, http.StatusBadGateway, m.Msg, true
}
