package adaptor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
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

// DefaultMaxConcurrency is how many calls run at once by default: functions
// are mostly CPU-bound (jq, yq, shells), so a few per core keeps the cores
// busy while one call waits on its container's start.
func DefaultMaxConcurrency() int { return 4 * runtime.NumCPU() }

// Function runs RunFunction calls through a Runner under the I/O contract.
type Function struct {
	runner         Runner
	log            *slog.Logger
	timeout        time.Duration
	maxOutputBytes int
	metrics        *Metrics
	tracer         trace.Tracer
	cache          *responseCache
	// cacheTTL, when set, is the TTL of every response, whatever the
	// function says.
	cacheTTL time.Duration

	// slots admits at most cap(slots) calls at once; queued counts the
	// calls waiting for one, up to maxQueue.
	slots    chan struct{}
	maxQueue int64
	queued   atomic.Int64
	// running counts calls between admission and answer, so shutdown can
	// wait for them; once closed is set under mu, no call is admitted.
	running sync.WaitGroup
	mu      sync.Mutex
	closed  bool
}

// Option configures a Function.
type Option func(*Function)

// WithLogger sets the logger for call and stderr lines.
func WithLogger(l *slog.Logger) Option { return func(f *Function) { f.log = l } }

// WithTimeout sets the longest a call may run.
func WithTimeout(d time.Duration) Option { return func(f *Function) { f.timeout = d } }

// WithMaxOutputBytes caps the size of a function's stdout.
func WithMaxOutputBytes(n int) Option { return func(f *Function) { f.maxOutputBytes = n } }

// WithConcurrency lets at most max calls run at once and at most queue more
// wait; calls beyond that are refused with RESOURCE_EXHAUSTED.
func WithConcurrency(max, queue int) Option {
	return func(f *Function) {
		f.slots = make(chan struct{}, max)
		f.maxQueue = int64(queue)
	}
}

// WithMetrics records calls in m.
func WithMetrics(m *Metrics) Option { return func(f *Function) { f.metrics = m } }

// WithTracer records a span per call, and spans for its container's start,
// its run and the parsing of its response, with t. Without it, calls are
// not traced at all.
func WithTracer(t trace.Tracer) Option { return func(f *Function) { f.tracer = t } }

// WithCache keeps responses that carry a meta.ttl, by the request's tag, in
// at most maxBytes; forceTTL, when not zero, caches every response for that
// long instead, for functions known to be deterministic.
func WithCache(maxBytes int, forceTTL time.Duration) Option {
	return func(f *Function) {
		f.cache = newResponseCache(maxBytes)
		f.cacheTTL = forceTTL
	}
}

// NewFunction returns a Function that runs calls with r.
func NewFunction(r Runner, opts ...Option) *Function {
	f := &Function{runner: r, log: slog.Default(), timeout: DefaultTimeout, maxOutputBytes: DefaultMaxOutputBytes}
	WithConcurrency(DefaultMaxConcurrency(), 4*DefaultMaxConcurrency())(f)
	for _, o := range opts {
		o(f)
	}
	return f
}

// reasonInvalidOutput is what the log says of output that is not a valid
// response; the details, with the output's first bytes, go to the caller.
const reasonInvalidOutput = "the function's output is not a valid RunFunctionResponse (the Fatal result says why)"

// errTimeout is the cause of a call's context when the adaptor's own
// timeout ends it.
var errTimeout = errors.New("function timeout")

// Run runs one call and returns the response the caller gets. Errors are
// gRPC status errors about the call itself; everything that goes wrong with
// the function becomes a Fatal result instead.
func (f *Function) Run(ctx context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	received := time.Now()
	tag := req.GetMeta().GetTag()
	var span trace.Span
	if f.tracer != nil {
		ctx, span = f.startSpan(ctx, tag)
		defer span.End()
	}

	if rsp, ok := f.cached(tag); ok {
		if f.metrics != nil {
			f.metrics.calls.WithLabelValues(string(OutcomeOK)).Inc()
			f.metrics.duration.WithLabelValues(string(OutcomeOK)).Observe(time.Since(received).Seconds())
		}
		if span != nil {
			span.SetAttributes(attribute.Bool("ocifn.cached", true))
		}
		f.log.Info("call", "tag", tag, "outcome", OutcomeOK, "cached", true, "duration", time.Since(received).Round(time.Microsecond))
		return rsp, nil
	}

	res, err := f.admitAndRun(ctx, req)
	outcome := res.Outcome
	if err == nil && outcome == OutcomeOK {
		f.store(tag, res.Response)
	}
	switch {
	case err != nil && status.Code(err) == grpccodes.ResourceExhausted:
		outcome = OutcomeRejected
	case err != nil && status.Code(err) == grpccodes.DeadlineExceeded:
		outcome = OutcomeTimeout
	case err != nil:
		outcome = OutcomeError
	}
	if f.metrics != nil {
		f.metrics.calls.WithLabelValues(string(outcome)).Inc()
		f.metrics.duration.WithLabelValues(string(outcome)).Observe(time.Since(received).Seconds())
	}
	if span != nil {
		span.SetAttributes(attribute.String("ocifn.outcome", string(outcome)), attribute.Int("ocifn.exit_code", res.Exit.Code))
		if err != nil || outcome != OutcomeOK {
			span.SetStatus(codes.Error, string(outcome))
		}
	}
	if err != nil {
		f.log.Warn("call failed", "tag", tag, "outcome", outcome, "error", err)
		return nil, err
	}
	attrs := []any{"tag", tag, "outcome", outcome, "exit_code", res.Exit.Code, "duration", time.Since(received).Round(time.Microsecond)}
	if res.Reason != "" {
		attrs = append(attrs, "reason", res.Reason)
	}
	f.log.Info("call", attrs...)
	return res.Response, nil
}

// cached returns the cached response for a tag, counting hits and misses.
func (f *Function) cached(tag string) (*fnv1.RunFunctionResponse, bool) {
	if f.cache == nil || tag == "" {
		return nil, false
	}
	rsp, ok := f.cache.get(tag)
	if f.metrics != nil {
		if ok {
			f.metrics.cacheHits.Inc()
		} else {
			f.metrics.cacheMisses.Inc()
		}
	}
	return rsp, ok
}

// store caches a response for its TTL.
func (f *Function) store(tag string, rsp *fnv1.RunFunctionResponse) {
	if f.cache == nil {
		return
	}
	ttl := f.cacheTTL
	if ttl == 0 {
		ttl = rsp.GetMeta().GetTtl().AsDuration()
	}
	f.cache.put(tag, rsp, ttl)
}

// Drain refuses new calls and waits until every admitted call has been
// answered.
func (f *Function) Drain() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.running.Wait()
}

// errDraining refuses calls once shutdown has begun.
var errDraining = status.Error(grpccodes.Unavailable, "ocifn is shutting down; retry on another replica")

// admitAndRun waits for a free slot, unless too many calls already wait.
func (f *Function) admitAndRun(ctx context.Context, req *fnv1.RunFunctionRequest) (Result, error) {
	select {
	case f.slots <- struct{}{}:
	default:
		if f.queued.Add(1) > f.maxQueue {
			f.queued.Add(-1)
			return Result{}, status.Errorf(grpccodes.ResourceExhausted,
				"ocifn is running its maximum of %d calls with %d more queued; retry later or raise --max-concurrency", cap(f.slots), f.maxQueue)
		}
		f.gaugeQueued()
		select {
		case f.slots <- struct{}{}:
			f.queued.Add(-1)
			f.gaugeQueued()
		case <-ctx.Done():
			f.queued.Add(-1)
			f.gaugeQueued()
			return Result{}, status.FromContextError(ctx.Err()).Err()
		}
	}
	// A call may have waited for its slot while shutdown began, or while
	// its caller gave up.
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		<-f.slots
		return Result{}, errDraining
	}
	f.running.Add(1)
	f.mu.Unlock()
	if f.metrics != nil {
		f.metrics.inFlight.Inc()
	}
	defer func() {
		<-f.slots
		if f.metrics != nil {
			f.metrics.inFlight.Dec()
		}
		f.running.Done()
	}()
	if err := ctx.Err(); err != nil {
		return Result{}, status.FromContextError(err).Err()
	}
	return f.run(ctx, req)
}

func (f *Function) gaugeQueued() {
	if f.metrics != nil {
		f.metrics.queued.Set(float64(f.queued.Load()))
	}
}

func (f *Function) run(ctx context.Context, req *fnv1.RunFunctionRequest) (Result, error) {
	in, err := encodeRequest(req)
	if err != nil {
		return Result{}, status.Errorf(grpccodes.InvalidArgument, "cannot encode the request as JSON: %v", err)
	}
	callCtx, cancel := context.WithTimeoutCause(ctx, f.timeout, errTimeout)
	defer cancel()

	stdout := &cappedBuffer{max: f.maxOutputBytes}
	stderr := newStderrSink(f.log.With("tag", req.GetMeta().GetTag()), stderrLogBytes, stderrTailBytes)
	started := time.Now()
	exit, runErr := f.runner.Run(callCtx, bytes.NewReader(in), stdout, stderr)
	stderr.Flush()
	f.observeContainer(ctx, started, exit, len(in), stdout.buf.Len())

	res := Result{Exit: exit}
	// The Fatal result tells the caller everything; the log line's reason
	// never quotes the function's output, which may hold connection
	// details.
	fail := func(o Outcome, message string) (Result, error) {
		res.Outcome, res.Reason = o, message
		res.Response = fatal(req, withStderr(message, stderr.Tail()))
		return res, nil
	}
	switch {
	case ctx.Err() != nil:
		// The caller's own deadline passed, or it went away: it gets a
		// status, not a response it can no longer use.
		return res, status.FromContextError(ctx.Err()).Err()
	case runErr != nil && errors.Is(context.Cause(callCtx), errTimeout):
		return fail(OutcomeTimeout, fmt.Sprintf("the function ran longer than the limit of %s and was stopped", f.timeout))
	case stdout.overflow:
		return fail(OutcomeFatal, fmt.Sprintf("the function printed more than the limit of %d bytes on stdout", f.maxOutputBytes))
	case runErr != nil:
		return fail(OutcomeFatal, fmt.Sprintf("the function could not be run: %v", runErr))
	case exit.RuntimeError != "":
		return fail(OutcomeFatal, fmt.Sprintf("the container runtime could not run the function (exit code %d): %s", exit.Code, exit.RuntimeError))
	case exit.Code != 0 && exit.OOMKilled != "":
		return fail(OutcomeFatal, fmt.Sprintf("the function ran out of memory and exited with code %d: %s", exit.Code, exit.OOMKilled))
	case exit.Code != 0:
		return fail(OutcomeFatal, fmt.Sprintf("the function exited with code %d", exit.Code))
	}
	rsp, err := f.decode(ctx, stdout.Bytes())
	if err != nil {
		r, _ := fail(OutcomeFatal, err.Error())
		r.Reason = reasonInvalidOutput
		return r, nil
	}
	complete(req, rsp)
	res.Outcome, res.Response = OutcomeOK, rsp
	return res, nil
}

// observeContainer records the container's metrics and, when tracing, its
// start and run as spans after the fact: the runner reports how long each
// part took.
func (f *Function) observeContainer(ctx context.Context, started time.Time, exit Exit, in, out int) {
	if f.metrics != nil {
		if exit.Start > 0 {
			f.metrics.containerStart.Observe(exit.Start.Seconds())
		}
		f.metrics.bytesIn.Add(float64(in))
		f.metrics.bytesOut.Add(float64(out))
	}
	if f.tracer == nil || exit.Duration == 0 {
		return
	}
	ran := started.Add(exit.Start)
	_, s := f.tracer.Start(ctx, "container.start", trace.WithTimestamp(started))
	s.End(trace.WithTimestamp(ran))
	_, r := f.tracer.Start(ctx, "container.run", trace.WithTimestamp(ran),
		trace.WithAttributes(attribute.Int("ocifn.exit_code", exit.Code), attribute.Int("ocifn.stdin_bytes", in), attribute.Int("ocifn.stdout_bytes", out)))
	r.End(trace.WithTimestamp(started.Add(exit.Duration)))
}

// decode parses the function's output, in a span of its own when tracing.
func (f *Function) decode(ctx context.Context, out []byte) (*fnv1.RunFunctionResponse, error) {
	if f.tracer == nil {
		return decodeResponse(out)
	}
	_, span := f.tracer.Start(ctx, "response.parse")
	defer span.End()
	rsp, err := decodeResponse(out)
	if err != nil {
		span.SetStatus(codes.Error, "invalid response")
	}
	return rsp, err
}

// startSpan starts the call's span as a child of the caller's trace, if the
// caller sent W3C trace context in its gRPC metadata.
func (f *Function) startSpan(ctx context.Context, tag string) (context.Context, trace.Span) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		ctx = propagation.TraceContext{}.Extract(ctx, metadataCarrier(md))
	}
	return f.tracer.Start(ctx, "RunFunction", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("ocifn.tag", tag)))
}

// metadataCarrier reads W3C trace context headers from gRPC metadata.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
