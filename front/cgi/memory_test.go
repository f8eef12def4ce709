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
