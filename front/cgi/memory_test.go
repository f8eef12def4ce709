package cgi

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ocifn/ocifn/admit"
	"github.com/ocifn/ocifn/bundle"
	"github.com/ocifn/ocifn/front"
	"github.com/ocifn/ocifn/front/fronttest"
	"github.com/ocifn/ocifn/hook"
)

// printRunner prints n bytes on stdout, whatever the request.
type printRunner struct{ n int }

func (r printRunner) Call(_ context.Context, c bundle.Call) (bundle.Exit, error) {
	_, _ = io.Copy(io.Discard, c.Stdin)
	_, err := io.WriteString(c.Stdout, "Content-Type: text/plain\n\n"+strings.Repeat("x", r.n))
	return bundle.Exit{}, err
}

func (printRunner) Args() []string { return []string{"/fn"} }

// TestCallsAreChargedToTheBudget: a call's body and its function's output
// are charged to --max-inflight-bytes. A body whose Content-Length could
// never fit is answered 413 naming the flag before a byte of it is read;
// one that finds no room within a second 503 with Retry-After, counted as
// rejected, as the Crossplane front's RESOURCE_EXHAUSTED; a body without
// Content-Length is charged as it is read; output that could never fit
// beside the body answers 502, output that finds no room 503 without
// Retry-After (the function ran). A call that fits is served, and every
// call lets go of what it held.
func TestCallsAreChargedToTheBudget(t *testing.T) {
	const limit = 1 << 20
	log := slog.New(slog.DiscardHandler)
	outcomes := &seenOutcomes{}
	budget := admit.NewBudget(limit)
	cfg := &front.Config{Runner: echoRunner{}, Hooks: hook.NewChain(log, outcomes), Gate: admit.New(4, 0, nil), Budget: budget, Log: log,
		Timeout: 5 * time.Second, MaxOutputBytes: 8 << 20, MaxRequestBytes: 8 << 20}
	h := New(cfg)
	serve := func(r *http.Request) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Body, r.ContentLength = unreadBody{t}, 2<<20
	w := serve(r)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a body of 2 MiB announced: %d %s, want 413", w.Code, w.Body)
	}
	fronttest.Says(t, "its answer", w.Body.String(), "--max-inflight-bytes 1048576", "Content-Length")

	w = serve(httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat("b", 300<<10))))
	if w.Code != http.StatusOK || w.Body.Len() != 300<<10 {
		t.Errorf("a body of 300 KiB echoed: %d with %d bytes, want 200 with it all", w.Code, w.Body.Len())
	}

	// Without Content-Length (chunked), charged as it is read: every
	// buffer it grows into, as the output's.
	chunked := func(n int) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/", io.MultiReader(strings.NewReader(strings.Repeat("c", n))))
		r.ContentLength = -1
		return r
	}
	w = serve(chunked(100 << 10))
	if w.Code != http.StatusOK || w.Body.Len() != 100<<10 {
		t.Errorf("a body of 100 KiB without Content-Length echoed: %d with %d bytes, want 200 with it all", w.Code, w.Body.Len())
	}
	w = serve(chunked(700 << 10))
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a body of 700 KiB without Content-Length: %d, want 413", w.Code)
	}
	fronttest.Says(t, "its answer", w.Body.String(), "--max-inflight-bytes 1048576", "no Content-Length")

	// The budget taken by others: refused after waiting a second.
	if err := budget.Reserve(context.Background(), limit-1000, "others", func() string { return "" }); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w = serve(httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat("d", 2000))))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("a body of 2000 bytes with 1000 free: %d Retry-After %q, want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	if took := time.Since(start); took < admit.ReserveWait {
		t.Errorf("refused after %s, want after waiting %s for room", took, admit.ReserveWait)
	}
	fronttest.Says(t, "its answer", w.Body.String(), "--max-inflight-bytes 1048576", "retry later")
	budget.Resize(limit-1000, 0)

	cfg.Runner = printRunner{n: 2 << 20}
	w = serve(httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != http.StatusBadGateway {
		t.Errorf("a function printing 2 MiB: %d, want 502", w.Code)
	}
	fronttest.Says(t, "its answer", w.Body.String(), "--max-inflight-bytes 1048576", "printed on stdout")

	// Output that finds no room once the function runs: 503, but without
	// Retry-After, which would have the caller run the function, stopped
	// part way, again.
	if err := budget.Reserve(context.Background(), limit-1000, "others", func() string { return "" }); err != nil {
		t.Fatal(err)
	}
	cfg.Runner = printRunner{n: 4000}
	w = serve(httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "" {
		t.Errorf("a function printing 4000 bytes with 1000 free: %d Retry-After %q, want 503 without Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	fronttest.Says(t, "its answer", w.Body.String(), "the function ran and was stopped", "--max-inflight-bytes 1048576", "only if the function may run twice")
	if strings.Contains(w.Body.String(), "retry later") {
		t.Errorf("the answer of a function stopped part way invites a retry: %s", w.Body)
	}
	budget.Resize(limit-1000, 0)

	if used := budget.Used(); used != 0 {
		t.Errorf("%d bytes still charged after every call", used)
	}
	want := []hook.Outcome{hook.Error, hook.OK, hook.OK, hook.Error, hook.Rejected, hook.Fatal, hook.Rejected}
	outcomes.mu.Lock()
	defer outcomes.mu.Unlock()
	if fmt.Sprint(outcomes.seen) != fmt.Sprint(want) {
		t.Errorf("outcomes %v, want %v", outcomes.seen, want)
	}
}

// seenOutcomes records the outcome of every call the hooks saw.
type seenOutcomes struct {
	mu   sync.Mutex
	seen []hook.Outcome
}

func (o *seenOutcomes) Before(ctx context.Context, _ *hook.Call) (context.Context, error) {
	return ctx, nil
}

func (o *seenOutcomes) After(_ context.Context, c *hook.Call) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, c.Outcome)
	return nil
}

// unreadBody is a body that fails the test if it is read.
type unreadBody struct{ t *testing.T }

func (u unreadBody) Read([]byte) (int, error) {
	u.t.Error("the body was read")
	return 0, io.EOF
}

func (unreadBody) Close() error { return nil }

// heldEcho prints its stdin back once release is closed.
type heldEcho struct{ release chan struct{} }

func (r heldEcho) Call(ctx context.Context, c bundle.Call) (bundle.Exit, error) {
	<-r.release
	_, err := io.Copy(c.Stdout, c.Stdin)
	return bundle.Exit{}, err
}

func (heldEcho) Args() []string { return []string{"/fn"} }

// TestQueuedInvocationsYieldToARunningCall: the bodies of asynchronous
// invocations waiting in the queue hold the budget that the call running
// needs for its output. Rather than stop that call (its function may have
// acted), the youngest of those waiting give up their place and body:
// their results say they did not run and may be sent again, 503 without
// Retry-After (a poll for them is not to be retried), and they are
// counted as rejected. Before, the running call was stopped, and the next
// too: "the function ran and was stopped".
func TestQueuedInvocationsYieldToARunningCall(t *testing.T) {
	const (
		limit = 1 << 20
		size  = 240 << 10 // four fit, but not a fifth: the output
	)
	log := slog.New(slog.DiscardHandler)
	outcomes := &seenOutcomes{}
	budget := admit.NewBudget(limit)
	var queued atomic.Int64
	gate := admit.New(1, 4, func(_, q int64) { queued.Store(q) })
	run := heldEcho{release: make(chan struct{})}
	hooks := hook.NewChain(log, outcomes)
	cfg := &front.Config{Runner: run, Hooks: hooks, Gate: gate, Budget: budget, Log: log,
		Timeout: 5 * time.Second, MaxOutputBytes: 8 << 20, MaxRequestBytes: 8 << 20}
	iv, err := front.OpenInvocations(t.TempDir(), time.Hour, 1<<30, 8<<20, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iv.Close)
	iv.RefuseWhenFull(gate)
	iv.ChargeTo(budget, nil)
	iv.CountRefusals(hooks, "http")
	h := iv.Wrap(New(cfg))

	var locations []string
	for i := range 4 {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat(string(rune('a'+i)), size)))
		r.Header.Set("Prefer", "respond-async")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusAccepted {
			t.Fatalf("invocation %d: %d %s, want 202", i, w.Code, w.Body)
		}
		locations = append(locations, w.Header().Get("Location"))
	}
	// One runs, held; three wait in the queue.
	deadline := time.Now().Add(5 * time.Second)
	for queued.Load() != 3 || budget.Used() != 4*size {
		if time.Now().After(deadline) {
			t.Fatalf("%d queued, %d bytes charged; want 3 queued and the 4 bodies", queued.Load(), budget.Used())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // for the three to wait on their slot
	close(run.release)

	var ran, yielded []int
	for i, loc := range locations {
		for {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, loc, nil))
			if w.Code == http.StatusAccepted {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			switch {
			case w.Code == http.StatusOK && w.Body.Len() == size:
				ran = append(ran, i)
			case w.Code == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" &&
				strings.Contains(w.Body.String(), "did not run") && strings.Contains(w.Body.String(), "safe to send it again"):
				yielded = append(yielded, i)
				fronttest.Says(t, "the result of an invocation that yielded", w.Body.String(), "--max-inflight-bytes 1048576")
			default:
				t.Errorf("invocation %d: %d Retry-After %q: %.300s", i, w.Code, w.Header().Get("Retry-After"), w.Body)
			}
			break
		}
	}
	// The running call ran, and the youngest waiting yielded to it. Of
	// the two others, whichever took the slot next ran; the other may
	// have yielded to it, the first's answer, kept until it is stored,
	// holding what its output needed.
	if len(ran) < 2 || ran[0] != 0 || len(yielded) == 0 || yielded[len(yielded)-1] != 3 {
		t.Errorf("invocations that ran %v, that yielded %v; want the first and one other to run, and the youngest to yield", ran, yielded)
	}
	deadline = time.Now().Add(5 * time.Second)
	for budget.Used() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if used := budget.Used(); used != 0 {
		t.Errorf("%d bytes still charged once the results are stored", used)
	}
	outcomes.mu.Lock()
	defer outcomes.mu.Unlock()
	rejected := 0
	for _, o := range outcomes.seen {
		if o == hook.Rejected {
			rejected++
		}
	}
	if rejected != len(yielded) || len(outcomes.seen) != 4 {
		t.Errorf("outcomes %v, want %d rejected, those that yielded, among 4", outcomes.seen, len(yielded))
	}
}
