package front

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ocifn/ocifn/front/fronttest"
	"github.com/ocifn/ocifn/hook"
	"github.com/ocifn/ocifn/hook/hooktest"
)

func TestServerWaitsUntilReady(t *testing.T) {
	s := NewServer(prometheus.NewRegistry())
	ts := httptest.NewServer(s)
	defer ts.Close()

	if rsp, err := http.Get(ts.URL + "/healthz"); err != nil || rsp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/healthz before ready: %v %v", rsp.StatusCode, err)
	}
	answered := make(chan string, 1)
	go func() {
		rsp, err := http.Post(ts.URL+"/init", "application/json", nil)
		if err != nil {
			answered <- err.Error()
			return
		}
		b, _ := io.ReadAll(rsp.Body)
		answered <- string(b)
	}()
	select {
	case a := <-answered:
		t.Fatalf("a call before ready was answered: %s", a)
	case <-time.After(100 * time.Millisecond):
	}
	s.Ready(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("served")) }))
	if a := <-answered; a != "served" {
		t.Errorf("the waiting call got %q", a)
	}
	if rsp, err := http.Get(ts.URL + "/healthz"); err != nil || rsp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz when ready: %v %v", rsp.StatusCode, err)
	}
	if rsp, err := http.Get(ts.URL + "/metrics"); err != nil || rsp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %v %v", rsp.StatusCode, err)
	}
	s.Drain()
	if rsp, err := http.Get(ts.URL + "/healthz"); err != nil || rsp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/healthz while draining: %v %v", rsp.StatusCode, err)
	}
}

// TestCallsWaitingForReadyAreCounted: the calls that wait for the image
// are ocifn_calls_waiting_for_image, until the server is ready or stops
// before it is: an operator sees them pile up behind a slow unpack, and a
// test can tell that its call is in.
func TestCallsWaitingForReadyAreCounted(t *testing.T) {
	for _, ready := range []bool{true, false} {
		reg := prometheus.NewRegistry()
		s := NewServer(reg)
		ts := httptest.NewServer(s)
		// As a scraper reads it, from the front's /metrics.
		waiting := func() string {
			rsp, err := http.Get(ts.URL + "/metrics")
			if err != nil {
				t.Fatal(err)
			}
			defer rsp.Body.Close()
			b, _ := io.ReadAll(rsp.Body)
			for line := range strings.Lines(string(b)) {
				if v, ok := strings.CutPrefix(line, "ocifn_calls_waiting_for_image "); ok {
					return strings.TrimSpace(v)
				}
			}
			t.Fatalf("no ocifn_calls_waiting_for_image in /metrics:\n%s", b)
			return ""
		}
		if n := waiting(); n != "0" {
			t.Errorf("before any call: %s waiting", n)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			if rsp, err := http.Post(ts.URL+"/run", "application/json", nil); err == nil {
				rsp.Body.Close()
			}
		}()
		for deadline := time.Now().Add(10 * time.Second); waiting() != "1"; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("a call waiting for the image is not counted")
			}
		}
		if ready {
			s.Ready(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		} else {
			s.Abandon()
		}
		<-done
		if n := waiting(); n != "0" {
			t.Errorf("once the server was ready (%v) or stopped: %s waiting", ready, n)
		}
		ts.Close()
	}
}

func TestPrefersAsync(t *testing.T) {
	for v, want := range map[string]bool{
		"respond-async":              true,
		"Respond-Async":              true,
		"wait=10, respond-async":     true,
		"respond-async; foo=bar":     true,
		"return=minimal":             false,
		"":                           false,
		"respond-asynchronously-not": false,
	} {
		h := http.Header{}
		if v != "" {
			h.Set("Prefer", v)
		}
		if got := prefersAsync(h); got != want {
			t.Errorf("Prefer %q: %v, want %v", v, got, want)
		}
	}
}

// TestCallWaitingForReadyIsTimedFromArrival: a call that came while the
// image was unpacked is timed from its arrival, its wait included, as a
// call waiting for a slot is.
func TestCallWaitingForReadyIsTimedFromArrival(t *testing.T) {
	s := NewServer(prometheus.NewRegistry())
	ts := httptest.NewServer(s)
	defer ts.Close()
	sent := make(chan time.Time, 1)
	done := make(chan error, 1)
	go func() {
		sent <- time.Now()
		rsp, err := http.Post(ts.URL+"/run", "application/json", nil)
		if err == nil {
			rsp.Body.Close()
		}
		done <- err
	}()
	before := <-sent
	time.Sleep(200 * time.Millisecond)
	received := make(chan time.Time, 1)
	ready := time.Now()
	s.Ready(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { received <- NewCall("http", r, "").Received }))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := <-received; got.Before(before) || !got.Before(ready) {
		t.Errorf("the call was received %s after it was sent, and the server was ready %s after; want it timed from its arrival, before", got.Sub(before), ready.Sub(before))
	}
}

// TestCallsRefusedBeforeReadyAreCounted: a call answered 503 because the
// server stopped before it was ready goes through the calls' hooks, as
// the front's other refusals do: counted, and logged with its status.
func TestCallsRefusedBeforeReadyAreCounted(t *testing.T) {
	s := NewServer(prometheus.NewRegistry())
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	s.CountRefusals(hook.NewChain(slog.New(slog.DiscardHandler), hook.Log{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, hook.NewMetrics(reg)), "http")
	w := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/run", nil))
	}()
	time.Sleep(50 * time.Millisecond)
	s.Abandon()
	<-done
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("the waiting call: %d, want 503", w.Code)
	}
	hooktest.CheckCalls(t, reg, hook.Error, 1)
	fronttest.Says(t, "log", logs.String(), "outcome=error", "status=503", "path=/run", "stopped before the function image was ready")
}

// TestCallerGoneBeforeReadyIsLoggedSo: a caller that leaves while its call
// waits for the image to be unpacked is logged as one that leaves while
// its call waits for a slot: status 499, saying the caller went away,
// not a 503 of ocifn's that nobody got.
func TestCallerGoneBeforeReadyIsLoggedSo(t *testing.T) {
	s := NewServer(prometheus.NewRegistry())
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	s.CountRefusals(hook.NewChain(slog.New(slog.DiscardHandler), hook.Log{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, hook.NewMetrics(reg)), "http")
	logged := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(logged)
		s.ServeHTTP(w, r)
	}))
	defer ts.Close()
	c := &http.Client{Timeout: 100 * time.Millisecond}
	if rsp, err := c.Post(ts.URL+"/run", "application/json", nil); err == nil {
		rsp.Body.Close()
		t.Fatalf("a call before ready was answered %d", rsp.StatusCode)
	}
	select {
	case <-logged:
	case <-time.After(10 * time.Second):
		t.Fatal("the call whose caller left was not logged")
	}
	hooktest.CheckCalls(t, reg, hook.Error, 1)
	fronttest.Says(t, "log", logs.String(), "outcome=error", "status=499", "path=/run", "the caller went away while the call waited for the function image to be unpacked")
}

// TestAnswerDeadlineOutlivesItsHandler: an answer not flushed (OpenWhisk's,
// whose end goes at the handler's return) keeps its write deadline to the
// handler's return, so that its end is bounded too, and the next requests
// on the connection, once the deadline has passed, are still answered:
// net/http clears it once the answer is finished.
func TestAnswerDeadlineOutlivesItsHandler(t *testing.T) {
	s := NewServer(prometheus.NewRegistry())
	s.Ready(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err := Answer(w, http.StatusOK, bytes.Repeat([]byte("x"), 64<<10), 100*time.Millisecond, false); err != nil {
			t.Errorf("the answer: %v", err)
		}
	}))
	ts := httptest.NewServer(s)
	defer ts.Close()
	c := ts.Client()
	get := func(path string) string {
		// A POST, which the client does not send again on a new
		// connection when the one it reused fails.
		rsp, err := c.Post(ts.URL+path, "text/plain", nil)
		if err != nil {
			return err.Error()
		}
		defer rsp.Body.Close()
		b, err := io.ReadAll(rsp.Body)
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("%d, %d bytes", rsp.StatusCode, len(b))
	}
	if got := get("/run"); got != "200, 65536 bytes" {
		t.Fatalf("the answer: %s", got)
	}
	time.Sleep(200 * time.Millisecond) // past the answer's deadline
	for _, path := range []string{"/healthz", "/run"} {
		want := "200, 65536 bytes"
		if path == "/healthz" {
			want = "200, 3 bytes"
		}
		if got := get(path); got != want {
			t.Errorf("%s on the same connection after the deadline: %s, want %s", path, got, want)
		}
	}
}

// TestAnswerDeadlineBoundsWhatFollows: what is written of an answer after
// Answer returns without a flush (OpenWhisk's front writes its sentinels,
// then net/http the answer's end) is still bounded by the caller's
// deadline: a caller that stopped reading fails it, rather than holding
// the handler, and a shutdown, for good.
func TestAnswerDeadlineBoundsWhatFollows(t *testing.T) {
	after := make(chan error, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err := Answer(w, http.StatusOK, []byte("{}"), 200*time.Millisecond, false); err != nil {
			t.Errorf("the answer: %v", err)
		}
		_, err := w.Write(bytes.Repeat([]byte("x"), 64<<20))
		after <- err
	}))
	defer ts.Close()
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-after:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("a write after the answer, to a caller that does not read: %v, want the deadline exceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write after the answer, to a caller that does not read, still blocks after 10s")
	}
}
