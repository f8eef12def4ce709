package adaptor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Defaults.
const (
	// DefaultTimeout is the longest a call may run when the caller allows
	// more. Crossplane gives a whole pipeline 30s per reconcile by default.
	DefaultTimeout = 25 * time.Second
	// DefaultMaxOutputBytes caps what a function may print on stdout.
	DefaultMaxOutputBytes = 64 << 20
	// stderrLogBytes bounds how much of one call's stderr is logged.
	stderrLogBytes = 64 << 10
)

// Function runs RunFunction calls through a Runner under the I/O contract.
type Function struct {
	runner         Runner
	log            *slog.Logger
	timeout        time.Duration
	maxOutputBytes int
}

// Option configures a Function.
type Option func(*Function)

// WithLogger sets the logger for call and stderr lines.
func WithLogger(l *slog.Logger) Option { return func(f *Function) { f.log = l } }

// WithTimeout sets the longest a call may run.
func WithTimeout(d time.Duration) Option { return func(f *Function) { f.timeout = d } }

// WithMaxOutputBytes caps the size of a function's stdout.
func WithMaxOutputBytes(n int) Option { return func(f *Function) { f.maxOutputBytes = n } }

// NewFunction returns a Function that runs calls with r.
func NewFunction(r Runner, opts ...Option) *Function {
	f := &Function{runner: r, log: slog.Default(), timeout: DefaultTimeout, maxOutputBytes: DefaultMaxOutputBytes}
	for _, o := range opts {
		o(f)
	}
	return f
}

// errTimeout is the cause of a call's context when the adaptor's own
// timeout ends it.
var errTimeout = errors.New("function timeout")

// Run runs one call and returns the response the caller gets. Errors are
// gRPC status errors about the call itself; everything that goes wrong with
// the function becomes a Fatal result instead.
func (f *Function) Run(ctx context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	res, err := f.run(ctx, req)
	if err != nil {
		f.log.Warn("call failed", "tag", req.GetMeta().GetTag(), "error", err)
		return nil, err
	}
	attrs := []any{"tag", req.GetMeta().GetTag(), "outcome", res.Outcome, "exit_code", res.Exit.Code, "duration", res.Exit.Duration.Round(time.Microsecond)}
	if res.Reason != "" {
		attrs = append(attrs, "reason", res.Reason)
	}
	f.log.Info("call", attrs...)
	return res.Response, nil
}

func (f *Function) run(ctx context.Context, req *fnv1.RunFunctionRequest) (Result, error) {
	in, err := encodeRequest(req)
	if err != nil {
		return Result{}, status.Errorf(codes.InvalidArgument, "cannot encode the request as JSON: %v", err)
	}
	callCtx, cancel := context.WithTimeoutCause(ctx, f.timeout, errTimeout)
	defer cancel()

	stdout := &cappedBuffer{max: f.maxOutputBytes}
	stderr := newStderrSink(f.log.With("tag", req.GetMeta().GetTag()), stderrLogBytes, stderrTailBytes)
	exit, runErr := f.runner.Run(callCtx, bytes.NewReader(in), stdout, stderr)
	stderr.Flush()

	res := Result{Exit: exit}
	fail := func(reason string) (Result, error) {
		res.Outcome, res.Reason = OutcomeFatal, reason
		res.Response = fatal(req, withStderr(reason, stderr.Tail()))
		return res, nil
	}
	switch {
	case ctx.Err() != nil:
		// The caller's own deadline passed, or it went away: it gets a
		// status, not a response it can no longer use.
		return res, status.FromContextError(ctx.Err()).Err()
	case errors.Is(context.Cause(callCtx), errTimeout):
		return fail(fmt.Sprintf("the function ran longer than the limit of %s and was stopped", f.timeout))
	case stdout.overflow:
		return fail(fmt.Sprintf("the function printed more than the limit of %d bytes on stdout", f.maxOutputBytes))
	case runErr != nil:
		return fail(fmt.Sprintf("the function could not be run: %v", runErr))
	case exit.RuntimeError != "":
		return fail(fmt.Sprintf("the container runtime could not run the function (exit code %d): %s", exit.Code, exit.RuntimeError))
	case exit.Code != 0:
		return fail(fmt.Sprintf("the function exited with code %d", exit.Code))
	}
	rsp, err := decodeResponse(stdout.Bytes())
	if err != nil {
		return fail(err.Error())
	}
	complete(req, rsp)
	res.Outcome, res.Response = OutcomeOK, rsp
	return res, nil
}
