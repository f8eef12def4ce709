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
}

func (e *BodyError) Error() string { return e.Msg }

// ReadBody reads r's body: at most max bytes, and all of it within timeout
// when timeout is not zero, so that a stalled client cannot hold a slot of
// the gate.
//
// The deadline is lifted once the body is in: net/http's read that watches
// for the client going away would otherwise hit it, and cancel the call. It
// stays when the body failed, so that net/http does not wait for the rest
// of it before it answers.
func ReadBody(w http.ResponseWriter, r *http.Request, max int64, timeout time.Duration) ([]byte, *BodyError) {
	if r.ContentLength > max {
		// Said before a byte of it is read, which is before net/http
		// tells a client that waits for it (Expect: 100-continue) to send
		// it: such a client sends nothing in vain.
		return nil, &BodyError{http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is larger than the limit of %d bytes (--max-request-bytes): its Content-Length is %d", max, r.ContentLength)}
	}
	rc := http.NewResponseController(w)
	if timeout > 0 {
		_ = rc.SetReadDeadline(time.Now().Add(timeout))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		if timeout > 0 {
			_ = rc.SetReadDeadline(time.Time{})
		}
		return body, nil
	case errors.As(err, &tooBig):
		return nil, &BodyError{http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is larger than the limit of %d bytes (--max-request-bytes)", tooBig.Limit)}
	case timeout > 0 && errors.Is(err, os.ErrDeadlineExceeded):
		return nil, &BodyError{http.StatusBadRequest, fmt.Sprintf("the request body did not arrive within the call's timeout of %s", timeout)}
	default:
		return nil, &BodyError{http.StatusBadRequest, fmt.Sprintf("cannot read the request body: %v", err)}
	}
}

// Refused is a request Admit did not admit, or whose body it could not
// read: the status to answer with, and the outcome the hooks count it
// under.
type Refused struct {
	Outcome hook.Outcome
	Status  int
	Err     error
}

// Admit takes a slot of the gate for r, then reads its body (at most
// MaxRequestBytes, all of it within Timeout): a request waiting for a slot
// holds no body in memory, and a stalled one cannot hold a slot. The
// caller calls leave once the call has run; on a refusal nothing is held.
func (c *Config) Admit(ctx context.Context, w http.ResponseWriter, r *http.Request) (body []byte, leave func(), refused *Refused) {
	leave, err := c.Gate.Enter(ctx)
	if errors.Is(err, context.Canceled) && !errors.Is(context.Cause(ctx), ErrShutdown) {
		// Gone while its call waited for a slot: logged as one gone
		// mid-call is, not as a refusal of ocifn's.
		return nil, nil, &Refused{hook.Error, StatusCallerGone, fmt.Errorf("the caller went away while the call waited for a slot: %w", err)}
	}
	if err != nil {
		outcome, status := refusal(w, err)
		return nil, nil, &Refused{outcome, status, err}
	}
	body, bad := ReadBody(w, r, c.MaxRequestBytes, c.Timeout)
	if bad != nil {
		leave()
		return nil, nil, &Refused{hook.Error, bad.Status, bad}
	}
	return body, leave, nil
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
