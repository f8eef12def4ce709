package front

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"
)

// Answer writes a call's answer, which the caller must take within
// timeout, as its body must arrive within it: one that stops reading
// would otherwise hold the call's slot, and the answer's memory, for as
// long as it keeps its connection open. With flush, what net/http still
// buffers goes now; without, once the handler returns (OpenWhisk's front
// writes its sentinels first). Either way the deadline bounds every
// write of the answer: net/http clears it only once the handler's answer
// is finished, for the next request on the connection. It returns why
// the caller did not take the answer, or nil.
func Answer(w http.ResponseWriter, status int, body []byte, timeout time.Duration, flush bool) error {
	rc := http.NewResponseController(w)
	// An asynchronous invocation's answer is kept, not sent: its writer
	// takes no deadline, and fails no write.
	bounded := rc.SetWriteDeadline(time.Now().Add(timeout)) == nil
	w.WriteHeader(status)
	_, err := w.Write(body)
	if errors.Is(err, http.ErrBodyNotAllowed) {
		// A 204 or 304, whose body is not sent.
		err = nil
	}
	if !bounded {
		return nil
	}
	if err == nil && flush {
		err = rc.Flush()
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("the caller did not take the function's answer (%d bytes) within the call's timeout of %s: %w", len(body), timeout, err)
	default:
		return fmt.Errorf("the caller went away before it took the function's answer (%d bytes): %w", len(body), err)
	}
}
