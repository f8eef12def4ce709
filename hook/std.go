package hook

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

func sinceReceived(c *Call) time.Duration {
	if c.Received.IsZero() {
		return 0
	}
	return time.Since(c.Received)
}

// StderrMessage is the message every front logs each line of a function's
// stderr with, in the attribute "line"; the human log format of the author
// commands prints those lines as they are.
const StderrMessage = "function stderr"

// Log writes one line per call: outcome, exit code, duration and what the
// front adds (method, path, status on HTTP).
type Log struct{ Logger *slog.Logger }

// Before does nothing.
func (l Log) Before(ctx context.Context, _ *Call) (context.Context, error) { return ctx, nil }

// After logs the call.
func (l Log) After(_ context.Context, c *Call) error {
	attrs := []any{"tag", c.Tag, "front", c.Front, "outcome", c.Outcome}
	attrs = append(attrs, c.LogAttrs...)
	if c.Cached != nil {
		attrs = append(attrs, "cached", true)
	}
	if !c.Ran.IsZero() {
		attrs = append(attrs, "exit_code", c.Exit.Code)
	}
	attrs = append(attrs, "duration", sinceReceived(c).Round(time.Microsecond))
	if c.Err != nil {
		l.Logger.Warn("call failed", append(attrs, "error", c.Err)...)
		return nil
	}
	if c.Reason != "" {
		attrs = append(attrs, "reason", c.Reason)
	}
	l.Logger.Info("call", attrs...)
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
	ctx, _ = t.Tracer.Start(ctx, c.Method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("ocifn.front", c.Front), attribute.String("ocifn.tag", c.Tag)))
	return ctx, nil
}

// After records the container's start and run, after the fact (the runner
// reports how long each took), and ends the call's span.
func (t Tracing) After(ctx context.Context, c *Call) error {
	span := trace.SpanFromContext(ctx)
	defer span.End()
	if !c.Ran.IsZero() && c.Exit.Duration > 0 {
		ran := c.Ran.Add(c.Exit.Start)
		_, s := t.Tracer.Start(ctx, "container.start", trace.WithTimestamp(c.Ran))
		s.End(trace.WithTimestamp(ran))
		_, r := t.Tracer.Start(ctx, "container.run", trace.WithTimestamp(ran),
			trace.WithAttributes(attribute.Int("ocifn.exit_code", c.Exit.Code), attribute.Int("ocifn.stdin_bytes", c.StdinBytes), attribute.Int("ocifn.stdout_bytes", c.StdoutBytes)))
		r.End(trace.WithTimestamp(c.Ran.Add(c.Exit.Duration)))
	}
	span.SetAttributes(attribute.String("ocifn.outcome", string(c.Outcome)), attribute.Int("ocifn.exit_code", c.Exit.Code))
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

// After keeps the call's answer.
func (c Cache) After(_ context.Context, call *Call) error {
	if call.CacheKey == "" || call.Cached != nil || call.Outcome != OK || call.Err != nil || call.Answer == nil || call.TTL <= 0 {
		return nil
	}
	c.Store.Put(call.CacheKey, call.Answer, call.TTL)
	return nil
}
