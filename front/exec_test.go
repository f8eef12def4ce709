package front

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ocifn/ocifn/bundle"
	"github.com/ocifn/ocifn/hook"
)

// floodRunner prints n bytes on one of the call's streams and then, like a
// function that ignores EPIPE and that nothing killed, waits for the call's
// context to end.
type floodRunner struct {
	stream string // "stdout", "stderr" or "" (prints nothing)
	n      int
}

func (r floodRunner) Call(ctx context.Context, c bundle.Call) (bundle.Exit, error) {
	w := map[string]io.Writer{"stdout": c.Stdout, "stderr": c.Stderr}[r.stream]
	if w != nil {
		_, _ = io.WriteString(w, strings.Repeat("x", r.n))
	}
	<-ctx.Done()
	return bundle.Exit{Code: 137}, ctx.Err()
}

func (floodRunner) Args() []string { return []string{"/fn"} }

// TestExecOverflowIsNotATimeout: a call whose stdout or stderr went past
// MaxOutputBytes is over the output limit even if its timeout passed
// before the runner returned; one that only ran too long timed out.
func TestExecOverflowIsNotATimeout(t *testing.T) {
	for _, tc := range []struct {
		stream, overflow string
		timedOut         bool
	}{
		{"stdout", "stdout", false},
		{"stderr", "stderr", false},
		{"", "", true},
	} {
		c := &Config{Runner: floodRunner{stream: tc.stream, n: 100}, Timeout: 20 * time.Millisecond, MaxOutputBytes: 10}
		out := c.Exec(context.Background(), &hook.Call{}, bundle.Call{}, nil, 0, nil)
		if out.Overflow != tc.overflow || out.TimedOut != tc.timedOut || out.Err != nil {
			t.Errorf("printing %d bytes on %q: overflow %q, timed out %v, error %v; want overflow %q, timed out %v",
				100, tc.stream, out.Overflow, out.TimedOut, out.Err, tc.overflow, tc.timedOut)
		}
	}
}

// TestExecStoppedByTheShutdown: a call whose context the shutdown ended
// (ErrShutdown, at the grace period's end) is said to be, whatever the
// runner's error wraps (a container's creation cut off does not wrap it).
func TestExecStoppedByTheShutdown(t *testing.T) {
	ctx, stop := context.WithCancelCause(context.Background())
	c := &Config{Runner: floodRunner{}, Timeout: time.Minute, MaxOutputBytes: 10}
	done := make(chan Output, 1)
	go func() { done <- c.Exec(ctx, &hook.Call{}, bundle.Call{}, nil, 0, nil) }()
	stop(ErrShutdown)
	out := <-done
	if !out.Shutdown || out.TimedOut || out.Err == nil {
		t.Errorf("shutdown %v, timed out %v, error %v; want stopped by the shutdown, with the runner's error", out.Shutdown, out.TimedOut, out.Err)
	}
}
