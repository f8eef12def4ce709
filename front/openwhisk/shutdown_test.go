package openwhisk

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ocifn/ocifn/admit"
	"github.com/ocifn/ocifn/bundle"
	"github.com/ocifn/ocifn/front"
	"github.com/ocifn/ocifn/front/fronttest"
	"github.com/ocifn/ocifn/hook"
)

// shutdownRunner is stopped as bundle.Call is at the grace period's end.
type shutdownRunner struct{ echoRunner }

func (shutdownRunner) Call(ctx context.Context, c bundle.Call) (bundle.Exit, error) {
	<-ctx.Done()
	return bundle.Exit{Code: 137}, fmt.Errorf("the function was stopped: %w", context.Cause(ctx))
}

// TestRunStoppedByTheShutdown: an activation still running when the grace
// period ends answers 503 saying why, not 500: another invoker may run it.
func TestRunStoppedByTheShutdown(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	p := New(&front.Config{Runner: shutdownRunner{}, Hooks: hook.NewChain(log), Gate: admit.New(1, 0, nil), Log: log,
		Timeout: 10 * time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 10}, "", io.Discard, io.Discard)
	ctx, stop := context.WithCancelCause(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); stop(front.ErrShutdown) }()
	w := httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/run", strings.NewReader(`{"value":{"a":1}}`)).WithContext(ctx))
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "grace period") {
		t.Errorf("%d %s, want 503 naming the grace period", w.Code, w.Body.String())
	}
}

// TestInvokerGoneIsLoggedAsSuch: an activation whose invoker went away
// before its answer is logged as gone, 499, not as an internal error of
// the action's container.
func TestInvokerGoneIsLoggedAsSuch(t *testing.T) {
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	p := New(&front.Config{Runner: shutdownRunner{}, Hooks: hook.NewChain(log, hook.Log{Logger: log}), Gate: admit.New(1, 0, nil), Log: log,
		Timeout: 10 * time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 10}, "", io.Discard, io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	p.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/run", strings.NewReader(`{"value":{"a":1}}`)).WithContext(ctx))
	line := logs.String()
	fronttest.Says(t, "log", line, "outcome=error", "status=499", "invoker went away")
	if strings.Contains(line, "Internal error") {
		t.Errorf("log %q blames the action's container", line)
	}
}

// TestInvokerGoneWhileQueuedIsLoggedAsSuch: an activation whose invoker
// went away while it waited for a slot is logged as gone, 499, not as a
// refusal of ocifn's (503).
func TestInvokerGoneWhileQueuedIsLoggedAsSuch(t *testing.T) {
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	gate := admit.New(1, 1, nil)
	p := New(&front.Config{Runner: echoRunner{}, Hooks: hook.NewChain(log, hook.Log{Logger: log}), Gate: gate, Log: log,
		Timeout: 10 * time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 10}, "", io.Discard, io.Discard)
	leave, err := gate.Enter(context.Background()) // the only slot
	if err != nil {
		t.Fatal(err)
	}
	defer leave()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	p.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/run", strings.NewReader(`{"value":{"a":1}}`)).WithContext(ctx))
	line := logs.String()
	fronttest.Says(t, "log", line, "outcome=error", "status=499", "went away while the call waited for a slot")
}
