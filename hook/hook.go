// Package hook holds what wraps every call the same way whatever front it
// came through: a small Hook interface, a Chain that runs hooks in order and
// never lets one fail a call, and the standard hooks (metrics, traces, the
// call's log line, the response cache).
package hook

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/propagation"
)

// Outcome classifies a call for logs and metrics.
type Outcome string

// Outcomes.
const (
	// OK means the function answered with a valid answer.
	OK Outcome = "ok"
	// Fatal means ocifn answered on the function's behalf: it failed,
	// timed out or printed something that is not an answer.
	Fatal Outcome = "fatal"
	// Error is a call answered with a protocol error (bad request, caller
	// gone, shutting down).
	Error Outcome = "error"
	// Timeout is a call stopped at ocifn's timeout or the caller's deadline.
	Timeout Outcome = "timeout"
	// Rejected is a call refused because the server was full.
	Rejected Outcome = "rejected"
)

// Call is one call as every hook sees it. The front fills in what it knows
// before the chain's Before, and the result before its After.
type Call struct {
	// Front is the protocol the call came through: crossplane, openwhisk
	// or http.
	Front string
	// Method names the kind of call, for metrics labels and span names:
	// RunFunction, or an HTTP method.
	Method string
	// Tag identifies the call in logs (a request tag, an activation id).
	Tag string
	// Invocation, when set, is the id of the asynchronous invocation the
	// call runs for: its caller polls its result by it, and knows the
	// call by nothing else.
	Invocation string
	// Carrier holds the caller's W3C trace context, if any.
	Carrier propagation.TextMapCarrier
	// Received is when the call arrived.
	Received time.Time
	// Answered, when set, is when the front had the call's answer; the
	// hooks after the call may run later (a server runs them after the
	// answer is on its way) and measure the call up to it.
	Answered time.Time
	// CacheKey, when set, lets the cache answer the call.
	CacheKey string
	// LogAttrs are added to the call's log line.
	LogAttrs []any

	// Cached is set by the cache's Before when it holds an answer: the
	// front then answers with it instead of running the function.
	Cached any

	// Outcome, Err and Reason say how the call ended.
	Outcome Outcome
	Err     error
	Reason  string
	// Ran is when a container was asked for; the zero time if none was.
	Ran time.Time
	// Exit is how the function's process ended.
	Exit Exit
	// StdinBytes and StdoutBytes count what went in and came out.
	StdinBytes, StdoutBytes int
	// Answer, with TTL above zero, is what the cache keeps for CacheKey.
	Answer any
	TTL    time.Duration

	// promptDone: AfterPrompt has run.
	promptDone bool
}

// Exit is how a call's container ended, as hooks see it.
type Exit struct {
	// Code is the exit status; 128+N for signal N.
	Code int
	// Start is the time the container took to start the process.
	Start time.Duration
	// Duration is the time of the whole run, start included.
	Duration time.Duration
}

// Hook is called around every call. Before may return a derived context
// (a span, say) that the call and After then use. An error is logged and
// never fails the call.
type Hook interface {
	Before(ctx context.Context, c *Call) (context.Context, error)
	After(ctx context.Context, c *Call) error
}

// Chain runs hooks: Before in order, After in reverse order.
type Chain struct {
	hooks []Hook
	log   *slog.Logger
}

// NewChain returns a chain of hooks that logs their failures to log.
func NewChain(log *slog.Logger, hooks ...Hook) *Chain {
	return &Chain{hooks: hooks, log: log}
}

// Before runs every hook's Before and returns the context the call runs in.
func (ch *Chain) Before(ctx context.Context, c *Call) context.Context {
	if ch == nil {
		return ctx
	}
	for _, h := range ch.hooks {
		next, err := guard(func() (context.Context, error) { return h.Before(ctx, c) })
		if err != nil {
			ch.log.Warn("a call hook failed; the call goes on", "hook", fmt.Sprintf("%T", h), "stage", "before", "tag", LogTag(c.Tag), "error", err)
			continue
		}
		if next != nil {
			ctx = next
		}
	}
	return ctx
}

// Caches reports whether the chain holds a Cache: without one, a front
// need not work out its calls' CacheKey.
func (ch *Chain) Caches() bool {
	if ch == nil {
		return false
	}
	for _, h := range ch.hooks {
		if _, ok := h.(Cache); ok {
			return true
		}
	}
	return false
}

// Prompt is a hook whose After must have run by the time the caller has
// the call's answer: the cache's, so that a call that comes as soon as the
// answer finds it kept. A front that answers before it runs the chain's
// After runs AfterPrompt first.
type Prompt interface {
	Hook
	prompt()
}

// AfterPrompt runs the After of the hooks that are Prompt, last hook
// first; After then leaves them out for c.
func (ch *Chain) AfterPrompt(ctx context.Context, c *Call) {
	if ch == nil {
		return
	}
	ch.after(ctx, c, isPrompt)
	c.promptDone = true
}

// After runs every hook's After, last hook first, but those AfterPrompt
// has run for c.
func (ch *Chain) After(ctx context.Context, c *Call) {
	if ch == nil {
		return
	}
	ch.after(ctx, c, func(h Hook) bool { return !c.promptDone || !isPrompt(h) })
}

func isPrompt(h Hook) bool {
	_, ok := h.(Prompt)
	return ok
}

// after runs the After of the hooks that runs says, last hook first.
func (ch *Chain) after(ctx context.Context, c *Call, runs func(Hook) bool) {
	for i := len(ch.hooks) - 1; i >= 0; i-- {
		h := ch.hooks[i]
		if !runs(h) {
			continue
		}
		if _, err := guard(func() (context.Context, error) { return nil, h.After(ctx, c) }); err != nil {
			ch.log.Warn("a call hook failed; the call goes on", "hook", fmt.Sprintf("%T", h), "stage", "after", "tag", LogTag(c.Tag), "error", err)
		}
	}
}

// guard turns a hook's panic into an error: a hook must never take a call,
// or the server, down with it.
func guard(f func() (context.Context, error)) (ctx context.Context, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}
