// Package front holds what the HTTP fronts (OpenWhisk's action proxy, CGI
// functions) share: running one call through the admission gate, the
// timeout and the hook chain, and the HTTP server with its health and
// metrics endpoints; the Crossplane front (package adaptor) shares its
// output cap and timeout cause. A front owns its protocol; the runner and
// the hooks are the same for every front.
package front

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/ocifn/ocifn/admit"
	"github.com/ocifn/ocifn/bundle"
	"github.com/ocifn/ocifn/hook"
)

// Runner runs one call in a fresh container. A write to the call's stdout
// or stderr that fails (past its cap) ends the call at once, as ctx ending
// does.
type Runner interface {
	Call(ctx context.Context, c bundle.Call) (bundle.Exit, error)
	// Args are the image's own process arguments (entrypoint and command).
	Args() []string
}

// Config is what every front needs to run calls.
type Config struct {
	Runner Runner
	Hooks  *hook.Chain
	Gate   *admit.Gate
	// Budget, when set, is --max-inflight-bytes: the memory that calls
	// hold at once, each its body, the front's copies and the function's
	// output (see Memory).
	Budget *admit.Budget
	Log    *slog.Logger
	// Timeout is the longest a call may run.
	Timeout time.Duration
	// MaxOutputBytes caps what a call may print on stdout, and on stderr.
	MaxOutputBytes int
	// MaxRequestBytes caps a request's body.
	MaxRequestBytes int64
	// Copies, when set, is the least the front makes of a body of n
	// bytes (OpenWhisk's parses it and copies its value), charged with
	// the body before it is read (Memory's credit).
	Copies func(n int64) int64
	// WorkDir holds a front's files (OpenWhisk's actions, async results).
	WorkDir string
}

// Output is what one call's container did.
type Output struct {
	Stdout, Stderr []byte
	Exit           bundle.Exit
	// TimedOut reports the call was stopped at its timeout, Timeout.
	TimedOut bool
	Timeout  time.Duration
	// Unstarted, with TimedOut, is why the function had not started by
	// then (its container was still being made), or nil.
	Unstarted error
	// Overflow names the stream that went over MaxOutputBytes, if any.
	Overflow string
	// Refused, a *MemoryError, says the in-flight budget had no room for
	// what the function printed: the call was stopped there.
	Refused error
	// Shutdown reports the call was stopped at the end of the server's
	// grace period (ErrShutdown); Err says where it was.
	Shutdown bool
	// CallerGone reports the call was stopped because its caller went
	// away (its request's context ended) before the answer; Err says
	// where it was.
	CallerGone bool
	// Err is why the container could not run to its end, other than a
	// timeout or an overflow (crun failed, the caller went away).
	Err error
}

// StatusCallerGone is the status logged for a request whose caller went
// away before its answer (nginx's 499, "client closed request"): none
// reaches the caller.
const StatusCallerGone = 499

// ErrTimeout is the cause of a call's context when its timeout ends it.
var ErrTimeout = errors.New("function timeout")

// ErrShutdown is the cause of a call's context when the server's shutdown
// stops it: its grace period ended before the call did.
var ErrShutdown = errors.New("ocifn is shutting down and its grace period (--grace-period) ended before the call did; run it again")

// Exec runs a call in a container with timeout (Config.Timeout when zero
// or longer) and fills in call's result fields for the hooks. The caller
// holds a slot of the gate already: the fronts admit a request before
// they read its body, so that only admitted requests hold a body in
// memory. What the function prints is charged to mem as it is read.
func (c *Config) Exec(ctx context.Context, call *hook.Call, bc bundle.Call, stdin []byte, timeout time.Duration, mem *Memory) Output {
	if timeout <= 0 || timeout > c.Timeout {
		timeout = c.Timeout
	}
	callCtx, cancel := context.WithTimeoutCause(ctx, timeout, ErrTimeout)
	defer cancel()
	// One allocation for the call's three streams.
	s := &struct {
		stdout, stderr Capped
		stdin          bytes.Reader
	}{
		stdout: Capped{Max: c.MaxOutputBytes, mem: mem, ctx: callCtx, what: "what the function printed on stdout"},
		stderr: Capped{Max: c.MaxOutputBytes, mem: mem, ctx: callCtx, what: "what the function printed on stderr"},
	}
	s.stdin.Reset(stdin)
	stdout, stderr := &s.stdout, &s.stderr
	bc.Stdin, bc.Stdout, bc.Stderr = &s.stdin, stdout, stderr
	call.Ran = time.Now()
	mem.run()
	exit, runErr := c.Runner.Call(callCtx, bc)
	call.Exit = hook.Exit{Code: exit.Code, Start: exit.Start, Duration: exit.Duration}
	call.StdinBytes, call.StdoutBytes = len(stdin), len(stdout.Bytes())
	out := Output{Stdout: stdout.Bytes(), Stderr: stderr.Bytes(), Exit: exit, Timeout: timeout}
	// An overflow comes before a timeout: a stream past its cap ends the
	// call at once (the runner kills the container), so a timeout that
	// passed meanwhile did not stop the function.
	switch {
	case stdout.Overflow:
		out.Overflow = "stdout"
	case stderr.Overflow:
		out.Overflow = "stderr"
	case refusedForMemory(stdout.Refused):
		// A stream the budget had no room for ended the call, as one
		// past its cap does. (One whose wait the call's end cut short
		// ended with it: the cases below say how.)
		out.Refused = stdout.Refused
	case refusedForMemory(stderr.Refused):
		out.Refused = stderr.Refused
	case runErr != nil && errors.Is(context.Cause(callCtx), ErrShutdown):
		// Stopped by the shutdown, whatever step it was at (its
		// container's creation too, whose error does not wrap the cause).
		out.Shutdown, out.Err = true, runErr
	case runErr != nil && errors.Is(context.Cause(callCtx), ErrTimeout):
		out.TimedOut = true
		if exit.Start == 0 {
			out.Unstarted = runErr
		}
	case runErr != nil && ctx.Err() != nil:
		// Not the function's, nor the container's: nobody waits for
		// the answer any more.
		out.CallerGone, out.Err = true, runErr
	case runErr != nil:
		out.Err = runErr
	case exit.RuntimeError != "":
		out.Err = fmt.Errorf("the container runtime could not run the function (exit code %d): %s", exit.Code, exit.RuntimeError)
	}
	return out
}

// refusedForMemory says whether err is a refusal of the in-flight budget.
func refusedForMemory(err error) bool {
	if err == nil {
		// Without errors.As, whose target would be allocated per call.
		return false
	}
	var m *MemoryError
	return errors.As(err, &m)
}

// errOutputLimit stops the copy of a stream past its cap, which ends the
// call: the runner (bundle.Call) kills the container at once.
var errOutputLimit = errors.New("output limit reached")

// Capped collects up to Max bytes and fails writes beyond. The buffer is a
// field, not embedded: an embedded bytes.Buffer would lend its ReadFrom and
// WriteString to io.Copy and io.WriteString, which would bypass the cap.
type Capped struct {
	buf      []byte
	Max      int
	Overflow bool
	// Reserve, when set, is asked for the bytes the buffer grows by before
	// it grows, so that they are charged to a memory budget; if it fails,
	// the write fails with its error, kept in Refused. What is charged is
	// the buffer's capacity: the one it replaces, at most half its size,
	// is garbage once copied.
	Reserve func(n int) error
	Refused error
	// mem, when Reserve is not set, is charged instead, in ctx, for
	// what the buffer holds: an HTTP front's call (Exec, ReadCharged).
	// It is charged every buffer the bytes grow into, the ones outgrown
	// too: those are garbage, but only until the collector runs, and
	// the bytes of an HTTP call's body and output are its memory, with
	// no decoding model's margin to cover them (a flood of echoed
	// bodies of 60 MB took the RSS 77 MiB past the budget otherwise).
	mem  *Memory
	ctx  context.Context
	what string
}

func (c *Capped) Write(p []byte) (int, error) {
	if len(c.buf)+len(p) > c.Max {
		c.Overflow = true
		return 0, errOutputLimit
	}
	if need := len(c.buf) + len(p); need > cap(c.buf) {
		// Grown by doubling, as append would, but never past Max: the
		// capacity is what is charged.
		size := min(max(need, 2*cap(c.buf), 512), c.Max)
		if err := c.reserve(size, size-cap(c.buf)); err != nil {
			c.Refused = err
			return 0, err
		}
		buf := make([]byte, len(c.buf), size)
		copy(buf, c.buf)
		c.buf = buf
	}
	c.buf = append(c.buf, p...)
	return len(p), nil
}

// reserve charges for a new buffer of size bytes, grow more than the one
// it replaces.
func (c *Capped) reserve(size, grow int) error {
	if c.Reserve != nil {
		return c.Reserve(grow)
	}
	if c.mem != nil {
		return c.mem.Take(c.ctx, int64(size), c.why)
	}
	return nil
}

// why says what a charge of the buffer is for, to refuse it.
func (c *Capped) why() string {
	return fmt.Sprintf("to hold %s (%d bytes so far)", c.what, len(c.buf))
}

// Bytes returns what was collected.
func (c *Capped) Bytes() []byte { return c.buf }

// MaxArgBytes is the longest argument or environment variable Linux
// passes to a program (MAX_ARG_STRLEN, 32 pages of 4 KiB, less the
// terminating NUL): a longer one fails the container's execve (E2BIG)
// before the function runs.
const MaxArgBytes = 32*4096 - 1

// NewCall is the hook.Call of an HTTP request to a front, tagged tag: its
// method as methodLabel names it, the time it came (Received), its
// headers, which may carry a trace's context, and the asynchronous
// invocation it runs for, if any.
func NewCall(front string, r *http.Request, tag string) *hook.Call {
	id, _ := r.Context().Value(invocationKey{}).(string)
	return &hook.Call{Front: front, Method: methodLabel(r.Method), Tag: tag, Received: Received(r),
		Carrier: propagation.HeaderCarrier(r.Header), Invocation: id}
}

// methodLabel is an HTTP request's method as the calls' metrics and trace
// spans name it: one of the methods HTTP defines (RFC 9110, and PATCH), or
// OTHER. A function's front runs any method the caller sends, and each
// name a caller made up would otherwise add series to every metric by
// method, without bound.
func methodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return method
	}
	return "OTHER"
}
