package front

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
