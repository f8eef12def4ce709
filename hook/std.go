package hook

import (
	"context"
	"log/slog"
	"strconv"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func sinceReceived(c *Call) time.Duration {
	switch {
	case c.Received.IsZero():
		return 0
	case !c.Answered.IsZero():
		return c.Answered.Sub(c.Received)
	}
	return time.Since(c.Received)
}

// StderrMessage is the message every front logs each line of a function's
// stderr with, in the attribute "line"; the human log format of the author
// commands prints those lines as they are.
const StderrMessage = "function stderr"

// MaxLogTag bounds the bytes of a call's tag that its log lines carry.
// The tag is the caller's (an HTTP front's Event-Id header, OpenWhisk's
// activation id, Crossplane's meta.tag), and each of the up to
// StderrLogLines lines of its function's stderr carries it: an Event-Id
// of 120 KB made 123 MB of log from one call. Crossplane's tags are 64
// hex digits, OpenWhisk's ids 32, Kubeless' event ids UUIDs.
const MaxLogTag = 256

// LogTag is tag as log lines carry it: whole up to MaxLogTag bytes, else
// its first bytes, up to a character's start, and its length.
func LogTag(tag string) string {
	if len(tag) <= MaxLogTag {
		return tag
	}
	n := MaxLogTag
	for n > MaxLogTag-utf8.UTFMax && !utf8.RuneStart(tag[n]) {
		n--
	}
	return tag[:n] + "…(" + strconv.Itoa(len(tag)) + " bytes)"
}

// invocationRefLen is how many of an invocation id's 64 hex digits its
// logs and spans carry: 64 bits tell the invocations of a directory apart
// and find its call's line, and are not the id, which alone fetches its
// result (GET /invocations/{id}), for whoever reads the logs or the traces.
const invocationRefLen = 16

// InvocationRef is an asynchronous invocation's id as logs and spans
// carry it: its first invocationRefLen digits, then "…".
func InvocationRef(id string) string {
	if len(id) <= invocationRefLen {
		return id
	}
	return id[:invocationRefLen] + "…"
}

// Log writes one line per call: outcome, exit code, duration and what the
// front adds (method, path, status on HTTP).
type Log struct{ Logger *slog.Logger }

// Before does nothing.
func (l Log) Before(ctx context.Context, _ *Call) (context.Context, error) { return ctx, nil }

// After logs the call.
//
// The record is made here and handed to the handler, as slog.Logger's
// LogAttrs would, but without the caller's program counter: no ocifn
// handler adds the source, and finding it walks the stack through tables
// that a call at a low rate finds out of the CPU's caches. With typed
// attributes (the outcome as a string, not a value of its own type) the
// handler formats nothing through fmt either. Both were most of the line's
// 56 µs of CPU per call at 20 calls/s (perf), on the call's path.
func (l Log) After(ctx context.Context, c *Call) error {
	level, msg := slog.LevelInfo, "call"
	if c.Err != nil {
		level, msg = slog.LevelWarn, "call failed"
	}
	if !l.Logger.Enabled(ctx, level) {
		return nil
	}
	r := slog.NewRecord(time.Now(), level, msg, 0)
	r.AddAttrs(slog.String("tag", LogTag(c.Tag)), slog.String("front", c.Front), slog.String("outcome", string(c.Outcome)))
	if c.Invocation != "" {
		r.AddAttrs(slog.Bool("async", true), slog.String("invocation", InvocationRef(c.Invocation)))
	}
	r.Add(c.LogAttrs...)
	if c.Cached != nil {
		r.AddAttrs(slog.Bool("cached", true))
	}
	if !c.Ran.IsZero() {
		r.AddAttrs(slog.Int("exit_code", c.Exit.Code))
	}
	r.AddAttrs(slog.Duration("duration", sinceReceived(c).Round(time.Microsecond)))
	switch {
	case c.Err != nil:
		r.AddAttrs(slog.Any("error", c.Err))
	case c.Reason != "":
		r.AddAttrs(slog.String("reason", c.Reason))
	}
	// As Logger.Info: a line that cannot be written fails nothing.
	_ = l.Logger.Handler().Handle(ctx, r)
	return nil
}

// Tracing makes every call a span, a child of the caller's trace when the
// call carries W3C trace context, with the container's start and run as
// child spans.
type Tracing struct{ Tracer trace.Tracer }

// Before starts the call's span.
func (t Tracing) Before(ctx context.Context, c *Call) (context.Context, error) {
	if c.Carrier != nil {
		ctx = propagation.TraceContext{}.Extract(ctx, c.Carrier)
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("ocifn.front", c.Front), attribute.String("ocifn.tag", LogTag(c.Tag)))}
	if c.Invocation != "" {
		opts = append(opts, trace.WithAttributes(attribute.String("ocifn.invocation", InvocationRef(c.Invocation))))
	}
	// The span starts when the call came, as its duration does: a front
	// may make the call's hooks only once it has waited for a slot and
	// read the request.
	if !c.Received.IsZero() {
		opts = append(opts, trace.WithTimestamp(c.Received))
	}
	ctx, _ = t.Tracer.Start(ctx, c.Method, opts...)
	return ctx, nil
}

// After records the container's start and run, after the fact (the runner
// reports how long each took), and ends the call's span.
func (t Tracing) After(ctx context.Context, c *Call) error {
	span := trace.SpanFromContext(ctx)
	// The span ends with the call's answer, as its duration does, not
	// when the hooks run (a server runs them after the answer).
	var end []trace.SpanEndOption
	if !c.Answered.IsZero() {
		end = append(end, trace.WithTimestamp(c.Answered))
	}
	defer span.End(end...)
	if !c.Ran.IsZero() && c.Exit.Duration > 0 {
		ran := c.Ran.Add(c.Exit.Start)
		_, s := t.Tracer.Start(ctx, "container.start", trace.WithTimestamp(c.Ran))
		s.End(trace.WithTimestamp(ran))
		_, r := t.Tracer.Start(ctx, "container.run", trace.WithTimestamp(ran),
			trace.WithAttributes(attribute.Int("ocifn.exit_code", c.Exit.Code), attribute.Int("ocifn.stdin_bytes", c.StdinBytes), attribute.Int("ocifn.stdout_bytes", c.StdoutBytes)))
		r.End(trace.WithTimestamp(c.Ran.Add(c.Exit.Duration)))
	}
	// As on the call's log line: a call that ran no container (refused,
	// a bad request, answered from the cache) has no exit code, and a 0
	// would say its function succeeded. With the outcome, in one call: a
	// second cost every traced call an allocation.
	if c.Ran.IsZero() {
		span.SetAttributes(attribute.String("ocifn.outcome", string(c.Outcome)))
	} else {
		span.SetAttributes(attribute.String("ocifn.outcome", string(c.Outcome)), attribute.Int("ocifn.exit_code", c.Exit.Code))
	}
	if c.Cached != nil {
		span.SetAttributes(attribute.Bool("ocifn.cached", true))
	}
	if c.Err != nil || c.Outcome != OK {
		span.SetStatus(codes.Error, string(c.Outcome))
	}
	return nil
}

// Store keeps answers by key for a time.
type Store interface {
	// Get returns the live answer for key, if any.
	Get(key string) (any, bool)
	// Put keeps answer for key for ttl.
	Put(key string, answer any, ttl time.Duration)
}

// Cache answers calls whose CacheKey it has seen from Store, and keeps the
// answers of calls that end OK with a TTL.
type Cache struct {
	Store Store
	// Metrics, when set, counts hits and misses.
	Metrics *Metrics
}

// Before looks the call up.
func (c Cache) Before(ctx context.Context, call *Call) (context.Context, error) {
	if call.CacheKey == "" {
		return ctx, nil
	}
	v, ok := c.Store.Get(call.CacheKey)
	if c.Metrics != nil {
		if ok {
			c.Metrics.cacheHits.Inc()
		} else {
			c.Metrics.cacheMisses.Inc()
		}
	}
	if ok {
		call.Cached = v
	}
	return ctx, nil
}

// prompt makes the cache a Prompt hook: a call that comes as soon as the
// answer must find it kept.
func (Cache) prompt() {}

// After keeps the call's answer.
func (c Cache) After(_ context.Context, call *Call) error {
	if call.CacheKey == "" || call.Cached != nil || call.Outcome != OK || call.Err != nil || call.Answer == nil || call.TTL <= 0 {
		return nil
	}
	c.Store.Put(call.CacheKey, call.Answer, call.TTL)
	return nil
}
