package cgi

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

type echoRunner struct{}

func (echoRunner) Call(_ context.Context, c bundle.Call) (bundle.Exit, error) {
	_, err := io.Copy(c.Stdout, c.Stdin)
	return bundle.Exit{}, err
}

func (echoRunner) Args() []string { return []string{"/fn"} }

// TestAdmittedBeforeTheBodyIsRead: a request the gate refuses is answered
// 503 without its body read into memory; an admitted one runs with its
// whole body.
func TestAdmittedBeforeTheBodyIsRead(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	gate := admit.New(1, 0, nil)
	h := New(&front.Config{Runner: echoRunner{}, Hooks: hook.NewChain(log), Gate: gate, Log: log,
		Timeout: time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 64 << 20})

	leave, err := gate.Enter(context.Background()) // the only slot
	if err != nil {
		t.Fatal(err)
	}
	body := &fronttest.CountingReader{Max: 64 << 20}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", body))
	if w.Code != http.StatusServiceUnavailable || body.N != 0 {
		t.Errorf("with the gate full: status %d after reading %d bytes of the body, want 503 and none read", w.Code, body.N)
	}
	leave()

	body = &fronttest.CountingReader{Max: 1000}
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", body))
	if w.Code != http.StatusOK || w.Body.Len() != 1000 {
		t.Errorf("admitted: status %d with %d bytes answered, want 200 with the 1000 bytes sent", w.Code, w.Body.Len())
	}
}

// TestSlowBodyIsRefused: a body that does not arrive within the call's
// timeout is answered 400, and its slot let go.
func TestSlowBodyIsRefused(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	gate := admit.New(1, 0, nil)
	srv := httptest.NewServer(New(&front.Config{Runner: echoRunner{}, Hooks: hook.NewChain(log), Gate: gate, Log: log,
		Timeout: 300 * time.Millisecond, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 20}))
	defer srv.Close()
	code, msg := fronttest.StalledBody(t, srv.Listener.Addr().String(), "")
	if code != http.StatusBadRequest || !strings.Contains(msg, "did not arrive within the call's timeout of 300ms") {
		t.Errorf("a stalled body: status %d %q, want 400 naming the timeout", code, msg)
	}
	leave, err := gate.Enter(context.Background())
	if err != nil {
		t.Fatalf("the slot of the stalled request was not let go: %v", err)
	}
	leave()
}

// TestHopByHopHeadersAreDropped: header fields of the connection that a
// program prints are not sent on: a Transfer-Encoding of its own beside
// net/http's made an answer no client could read, logged as ok.
func TestHopByHopHeadersAreDropped(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	srv := httptest.NewServer(New(&front.Config{Runner: echoRunner{}, Hooks: hook.NewChain(log), Gate: admit.New(1, 0, nil), Log: log,
		Timeout: time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 20}))
	defer srv.Close()
	out := "Content-Type: text/plain\nTransfer-Encoding: gzip\nConnection: Upgrade\nUpgrade: websocket\nTrailer: X-Sum\nX-Kept: yes\n\nhello"
	rsp, err := http.Post(srv.URL, "text/plain", strings.NewReader(out))
	if err != nil {
		t.Fatalf("the answer cannot be read: %v", err)
	}
	defer rsp.Body.Close()
	body, err := io.ReadAll(rsp.Body)
	if err != nil || string(body) != "hello" || rsp.StatusCode != http.StatusOK {
		t.Fatalf("%d %q %v, want 200 hello", rsp.StatusCode, body, err)
	}
	if rsp.Header.Get("X-Kept") != "yes" || rsp.Header.Get("Content-Type") != "text/plain" {
		t.Errorf("the program's other headers are lost: %v", rsp.Header)
	}
	for _, h := range []string{"Upgrade", "Connection", "Trailer"} {
		if v := rsp.Header.Get(h); v != "" {
			t.Errorf("%s: %q sent on", h, v)
		}
	}
	if len(rsp.TransferEncoding) != 0 {
		t.Errorf("Transfer-Encoding %v sent on", rsp.TransferEncoding)
	}
}

// blockingRunner runs until its call's context ends, as a container killed
// then does.
type blockingRunner struct{ started chan struct{} }

func (b blockingRunner) Call(ctx context.Context, _ bundle.Call) (bundle.Exit, error) {
	close(b.started)
	<-ctx.Done()
	return bundle.Exit{Code: 137}, fmt.Errorf("the function was stopped: %w", ctx.Err())
}

func (blockingRunner) Args() []string { return []string{"/fn"} }

// TestCallerGoneIsLoggedAsSuch: a caller that goes away mid-call stops
// the call, and its log line says so; it said status=500 and "the function
// could not be run: the function was stopped: context canceled".
func TestCallerGoneIsLoggedAsSuch(t *testing.T) {
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	run := blockingRunner{started: make(chan struct{})}
	h := New(&front.Config{Runner: run, Hooks: hook.NewChain(log, hook.Log{Logger: log}), Gate: admit.New(1, 0, nil), Log: log,
		Timeout: time.Minute, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 20})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-run.started; cancel() }()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx))
	line := logs.String()
	fronttest.Says(t, "log", line, "outcome=error", "status=499", "caller went away")
	if strings.Contains(line, "could not be run") {
		t.Errorf("log %q blames the function's container", line)
	}
}

// oomRunner is a function the kernel's OOM killer killed.
type oomRunner struct{}

func (oomRunner) Call(context.Context, bundle.Call) (bundle.Exit, error) {
	return bundle.Exit{Code: 137, OOMKilled: "the container's cgroup hit memory.max (64 MiB)"}, nil
}

func (oomRunner) Args() []string { return []string{"/fn"} }

// TestOutOfMemoryIsSaid: a function killed for memory is answered saying
// so, not only with its exit code.
func TestOutOfMemoryIsSaid(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	h := New(&front.Config{Runner: oomRunner{}, Hooks: hook.NewChain(log), Gate: admit.New(1, 0, nil), Log: log,
		Timeout: time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 20})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "ran out of memory and exited with code 137: the container's cgroup hit memory.max") {
		t.Errorf("got %d %q, want 500 saying the function ran out of memory", w.Code, w.Body.String())
	}
}

// oomExit0Runner is a function that exits 0 printing no CGI response after
// the kernel's OOM killer killed the command whose output it prints.
type oomExit0Runner struct{}

func (oomExit0Runner) Call(_ context.Context, c bundle.Call) (bundle.Exit, error) {
	_, err := io.WriteString(c.Stdout, "Content-Type: text/plain\nno blank line")
	return bundle.Exit{OOMKilled: "the container's cgroup hit memory.max (64 MiB)"}, err
}

func (oomExit0Runner) Args() []string { return []string{"/fn"} }

// TestOutOfMemoryIsSaidWhenItExits0: a function that exits 0 with output
// that is no CGI response once a process of its was killed for memory is
// answered saying so, not only that its output is wrong.
func TestOutOfMemoryIsSaidWhenItExits0(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	h := New(&front.Config{Runner: oomExit0Runner{}, Hooks: hook.NewChain(log), Gate: admit.New(1, 0, nil), Log: log,
		Timeout: time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 20})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), "ran out of memory and exited with code 0: the container's cgroup hit memory.max") {
		t.Errorf("got %d %q, want 502 saying the function ran out of memory", w.Code, w.Body.String())
	}
}

// TestCallerGoneWhileQueued: a caller that goes away while its call waits
// for a slot is logged as one gone mid-call is, 499 naming the caller; it
// said status=503 and error="context canceled", as if ocifn had refused it.
func TestCallerGoneWhileQueued(t *testing.T) {
	var logs strings.Builder
	log := slog.New(slog.NewTextHandler(&logs, nil))
	gate := admit.New(1, 1, nil)
	leave, err := gate.Enter(context.Background()) // the only slot
	if err != nil {
		t.Fatal(err)
	}
	defer leave()
	h := New(&front.Config{Runner: echoRunner{}, Hooks: hook.NewChain(log, hook.Log{Logger: log}), Gate: gate, Log: log,
		Timeout: time.Minute, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 20})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx))
	line := logs.String()
	fronttest.Says(t, "log", line, "outcome=error", "status=499", "caller went away while the call waited for a slot")
}

// envRunner prints the EVENT_ID of its environment.
type envRunner struct{}

func (envRunner) Call(_ context.Context, c bundle.Call) (bundle.Exit, error) {
	for _, kv := range c.Env {
		if id, ok := strings.CutPrefix(kv, "EVENT_ID="); ok {
			_, err := io.WriteString(c.Stdout, id)
			return bundle.Exit{}, err
		}
	}
	return bundle.Exit{}, nil
}

func (envRunner) Args() []string { return []string{"/fn"} }

// tagAtStart records the tag a call has when its hooks start (its span's).
type tagAtStart struct{ tag string }

func (h *tagAtStart) Before(ctx context.Context, c *hook.Call) (context.Context, error) {
	h.tag = c.Tag
	return ctx, nil
}

func (*tagAtStart) After(context.Context, *hook.Call) error { return nil }

// TestEventIDIsTheTagFromTheStart: a call without an Event-Id gets one
// made before its hooks start, so that its span carries the tag its log
// line and the function's EVENT_ID have.
func TestEventIDIsTheTagFromTheStart(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	seen := &tagAtStart{}
	h := New(&front.Config{Runner: envRunner{}, Hooks: hook.NewChain(log, seen), Gate: admit.New(1, 0, nil), Log: log,
		Timeout: time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 20})
	for _, sent := range []string{"", "ev-7"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if sent != "" {
			r.Header.Set("Event-Id", sent)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		got := w.Body.String()
		if got == "" || seen.tag != got || (sent != "" && got != sent) {
			t.Errorf("Event-Id %q: EVENT_ID %q, the tag at the hooks' start %q; want them equal (and the one sent)", sent, got, seen.tag)
		}
	}
}

// countingRunner counts the containers asked for.
type countingRunner struct{ calls int }

func (r *countingRunner) Call(_ context.Context, c bundle.Call) (bundle.Exit, error) {
	r.calls++
	return bundle.Exit{}, nil
}

func (*countingRunner) Args() []string { return []string{"/fn"} }

// TestTooManyHeaderFields: a request with more header fields than a
// function takes, each a variable of its environment, is answered 431
// without a container; Host and MaxHeaderFields-1 others still run.
func TestTooManyHeaderFields(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	runner := &countingRunner{}
	h := New(&front.Config{Runner: runner, Hooks: hook.NewChain(log), Gate: admit.New(1, 0, nil), Log: log,
		Timeout: time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 20})
	request := func(fields int) *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		for i := range fields {
			r.Header.Set(fmt.Sprintf("X-F%d", i), "a")
		}
		return r
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, request(MaxHeaderFields))
	if w.Code != http.StatusRequestHeaderFieldsTooLarge || runner.calls != 0 {
		t.Errorf("Host and %d header fields: %d %q after %d containers, want 431 and none", MaxHeaderFields, w.Code, w.Body, runner.calls)
	}
	fronttest.Says(t, "the answer", w.Body.String(), fmt.Sprintf("headers make %d HTTP_* variables of the program's environment (one per name), more than the %d", MaxHeaderFields+1, MaxHeaderFields))
	w = httptest.NewRecorder()
	h.ServeHTTP(w, request(MaxHeaderFields-1))
	if w.Code != http.StatusOK || runner.calls != 1 {
		t.Errorf("Host and %d header fields: %d %q, want 200 from the function", MaxHeaderFields-1, w.Code, w.Body)
	}
}

// TestNULInThePathIsRefused: a path with %00 is answered 400, naming
// PATH_INFO, without a container: the program's environment would cut
// the path at the NUL, and the function answer for another path.
func TestNULInThePathIsRefused(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	runner := &countingRunner{}
	h := New(&front.Config{Runner: runner, Hooks: hook.NewChain(log), Gate: admit.New(1, 0, nil), Log: log,
		Timeout: time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 20})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/admin%00/public", nil))
	if w.Code != http.StatusBadRequest || runner.calls != 0 {
		t.Errorf("a path with %%00: %d %q after %d containers, want 400 and none", w.Code, w.Body, runner.calls)
	}
	fronttest.Says(t, "the answer", w.Body.String(), "PATH_INFO holds a NUL byte (%00)")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/admin%01/public", nil))
	if w.Code != http.StatusOK || runner.calls != 1 {
		t.Errorf("a path with %%01: %d %q, want 200 from the function", w.Code, w.Body)
	}
}
