package hook

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

type ctxKey struct{}

// recorder notes the order hooks run in and can fail or panic.
type recorder struct {
	name  string
	seen  *[]string
	fail  error
	panic bool
}

func (r recorder) Before(ctx context.Context, c *Call) (context.Context, error) {
	*r.seen = append(*r.seen, "before "+r.name)
	if r.panic {
		panic("boom")
	}
	if r.fail != nil {
		return nil, r.fail
	}
	return context.WithValue(ctx, ctxKey{}, r.name), nil
}

func (r recorder) After(ctx context.Context, c *Call) error {
	*r.seen = append(*r.seen, "after "+r.name)
	if r.panic {
		panic("boom")
	}
	return r.fail
}

func TestChain(t *testing.T) {
	var seen []string
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ch := NewChain(log,
		recorder{name: "a", seen: &seen},
		recorder{name: "failing", seen: &seen, fail: errors.New("store down")},
		recorder{name: "panicking", seen: &seen, panic: true},
		recorder{name: "b", seen: &seen},
	)
	c := &Call{Tag: "t1"}
	ctx := ch.Before(context.Background(), c)
	if got := ctx.Value(ctxKey{}); got != "b" {
		t.Errorf("context after Before carries %v, want the last good hook's", got)
	}
	ch.After(ctx, c)
	want := "before a,before failing,before panicking,before b,after b,after panicking,after failing,after a"
	if got := strings.Join(seen, ","); got != want {
		t.Errorf("order:\n got %s\nwant %s", got, want)
	}
	for _, s := range []string{"store down", "panic: boom", "stage=before", "stage=after", "tag=t1"} {
		if !strings.Contains(logs.String(), s) {
			t.Errorf("log lacks %q:\n%s", s, logs.String())
		}
	}
}

// promptRecorder is a recorder that is a Prompt hook.
type promptRecorder struct{ recorder }

func (promptRecorder) prompt() {}

// TestAfterPrompt: AfterPrompt runs the After of the Prompt hooks alone,
// last first, and After then runs the others; without AfterPrompt, After
// runs them all.
func TestAfterPrompt(t *testing.T) {
	var seen []string
	ch := NewChain(slog.New(slog.DiscardHandler),
		recorder{name: "a", seen: &seen},
		promptRecorder{recorder{name: "p1", seen: &seen}},
		recorder{name: "b", seen: &seen},
		promptRecorder{recorder{name: "p2", seen: &seen}},
	)
	c := &Call{}
	ch.AfterPrompt(context.Background(), c)
	ch.After(context.Background(), c)
	if got, want := strings.Join(seen, ","), "after p2,after p1,after b,after a"; got != want {
		t.Errorf("with AfterPrompt first:\n got %s\nwant %s", got, want)
	}
	seen = nil
	ch.After(context.Background(), &Call{})
	if got, want := strings.Join(seen, ","), "after p2,after b,after p1,after a"; got != want {
		t.Errorf("After alone:\n got %s\nwant %s", got, want)
	}
	if !isPrompt(Cache{}) {
		t.Error("the cache is not a Prompt hook: a call right after an answer would not find it kept")
	}
}

func TestNilChainIsNoOp(t *testing.T) {
	var ch *Chain
	ctx := context.Background()
	if ch.Before(ctx, &Call{}) != ctx {
		t.Error("a nil chain changed the context")
	}
	ch.AfterPrompt(ctx, &Call{})
	ch.After(ctx, &Call{})
}

// TestTracingEndsAtTheAnswer: the call's span starts when the call came
// and ends when it was answered, as its duration does, not when the hooks
// before and after it ran (a front may run them after the call waited for
// a slot, and after its answer).
func TestTracingEndsAtTheAnswer(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := Tracing{Tracer: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")}
	c := &Call{Method: "RunFunction", Received: time.Now().Add(-time.Second)}
	ctx, err := tr.Before(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	c.Answered = time.Now()
	time.Sleep(50 * time.Millisecond)
	if err := tr.After(ctx, c); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != "RunFunction" {
		t.Fatalf("ended spans %v, want the call's", spans)
	}
	if start := spans[0].StartTime(); !start.Equal(c.Received) {
		t.Errorf("the span started at %s, %s after the call came", start, start.Sub(c.Received))
	}
	if end := spans[0].EndTime(); !end.Equal(c.Answered) {
		t.Errorf("the span ended at %s, %s after the answer", end, end.Sub(c.Answered))
	}
}

// TestTracingExitCodeTakesNoAllocation: a call that ran a container has
// its exit code on its span, one that ran none has none, and the exit code
// rides in the outcome's SetAttributes: a call of its own took one more
// allocation, and the span's lock once more, for every traced call.
func TestTracingExitCodeTakesNoAllocation(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := Tracing{Tracer: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")}
	now := time.Now()
	traced := func(ran time.Time) {
		// No Exit.Duration: no container spans, only the call's.
		c := &Call{Method: "RunFunction", Received: now, Answered: now, Ran: ran, Outcome: OK, Exit: Exit{Code: 3}}
		ctx, _ := tr.Before(context.Background(), c)
		_ = tr.After(ctx, c)
	}
	without := testing.AllocsPerRun(100, func() { traced(time.Time{}) })
	with := testing.AllocsPerRun(100, func() { traced(now) })
	if with != without {
		t.Errorf("a traced call takes %.0f allocations with an exit code, %.0f without", with, without)
	}
	spans := rec.Ended()
	exitCode := func(s sdktrace.ReadOnlySpan) bool {
		for _, a := range s.Attributes() {
			if a.Key == "ocifn.exit_code" {
				return true
			}
		}
		return false
	}
	if exitCode(spans[0]) || !exitCode(spans[len(spans)-1]) {
		t.Errorf("ocifn.exit_code on the span of a call that ran no container %v, of one that ran one %v; want only the second", exitCode(spans[0]), exitCode(spans[len(spans)-1]))
	}
}

// TestLogTagIsBounded: a call's log lines carry at most MaxLogTag bytes
// of its tag, the caller's (an Event-Id header may hold 1 MB, and each
// line of the function's stderr carries it), cut where a character
// starts and with its length; a tag of the usual sizes is carried whole.
func TestLogTagIsBounded(t *testing.T) {
	hex := strings.Repeat("0123456789abcdef", 4)
	if got := LogTag(hex); got != hex {
		t.Errorf("a 64-digit tag: got %q, want it whole", got)
	}
	exact := strings.Repeat("a", MaxLogTag)
	if got := LogTag(exact); got != exact {
		t.Errorf("a tag of MaxLogTag bytes: got %q, want it whole", got)
	}
	long := strings.Repeat("a", 120000)
	if got, want := LogTag(long), strings.Repeat("a", MaxLogTag)+"…(120000 bytes)"; got != want {
		t.Errorf("a tag of 120000 bytes: got %q, want %q", got, want)
	}
	// A snowman (3 bytes) across the cut is left out whole.
	snow := strings.Repeat("a", MaxLogTag-1) + "☃" + strings.Repeat("b", 10)
	if got, want := LogTag(snow), strings.Repeat("a", MaxLogTag-1)+"…("+strconv.Itoa(len(snow))+" bytes)"; got != want {
		t.Errorf("a tag cut in a character: got %q, want %q", got, want)
	}
	var logged bytes.Buffer
	c := &Call{Tag: long, Front: "http", Outcome: OK}
	_ = Log{Logger: slog.New(slog.NewTextHandler(&logged, nil))}.After(context.Background(), c)
	if !strings.Contains(logged.String(), "…(120000 bytes)") || logged.Len() > 1024 {
		t.Errorf("the call's line of a 120000-byte tag holds %d bytes:\n%.600s", logged.Len(), logged.String())
	}
}

// TestTracingBoundsTheTag: a call's span carries its tag as its log line
// does, cut past MaxLogTag bytes: the tag is the caller's (an Event-Id
// header of up to 1 MB), and a span goes to a collector with limits of its
// own.
func TestTracingBoundsTheTag(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tr := Tracing{Tracer: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")}
	c := &Call{Method: "POST", Tag: strings.Repeat("t", 100000), Received: time.Now()}
	ctx, err := tr.Before(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	c.Answered = time.Now()
	if err := tr.After(ctx, c); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("ended spans %v, want the call's", spans)
	}
	var tag string
	for _, a := range spans[0].Attributes() {
		if a.Key == "ocifn.tag" {
			tag = a.Value.AsString()
		}
	}
	if tag != LogTag(c.Tag) {
		t.Errorf("the span's ocifn.tag holds %d bytes, want it as LogTag cuts it, %d", len(tag), len(LogTag(c.Tag)))
	}
}
