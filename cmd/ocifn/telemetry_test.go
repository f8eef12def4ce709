package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestHTTPErrorLogIsOcifnsLog: what net/http's server logs of its own
// (here a handler's second WriteHeader) comes out in ocifn's log format,
// as a warning, not as a plain line on stderr.
func TestHTTPErrorLogIsOcifnsLog(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	twice := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.WriteHeader(http.StatusInternalServerError)
	})
	srv := httptest.NewUnstartedServer(twice)
	srv.Config.ErrorLog = httpErrorLog(log)
	srv.Start()
	defer srv.Close()
	rsp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rsp.Body.Close()
	var line map[string]any
	if err := json.Unmarshal(bytes.SplitN(buf.Bytes(), []byte("\n"), 2)[0], &line); err != nil {
		t.Fatalf("not a JSON log line: %q", buf.Bytes())
	}
	if line["level"] != "WARN" || line["source"] != "net/http" || !strings.Contains(fmt.Sprint(line["msg"]), "superfluous") {
		t.Errorf("net/http's line: %v, want a WARN from net/http in ocifn's log", line)
	}
}

// syncBuffer is a bytes.Buffer for a writer and a reader in two goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Bytes is a copy of what was written so far.
func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

// TestTraceResource: spans name the service ocifn, unless the standard
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES say otherwise, which a
// platform sets to tell its functions' pods apart.
func TestTraceResource(t *testing.T) {
	attrs := func() map[string]string {
		t.Helper()
		res, err := traceResource(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, kv := range res.Attributes() {
			m[string(kv.Key)] = kv.Value.Emit()
		}
		return m
	}
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "")
	if m := attrs(); m["service.name"] != "ocifn" || m["service.version"] != version {
		t.Errorf("without the variables: %v, want service.name ocifn and its version", m)
	}
	t.Setenv("OTEL_SERVICE_NAME", "function-labelizer")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=staging,service.namespace=crossplane-system")
	m := attrs()
	for k, v := range map[string]string{"service.name": "function-labelizer", "service.version": version, "deployment.environment": "staging", "service.namespace": "crossplane-system"} {
		if m[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, m[k], v, m)
		}
	}
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "not-a-pair")
	if _, err := traceResource(context.Background()); err == nil || !strings.Contains(err.Error(), "OTEL_RESOURCE_ATTRIBUTES") {
		t.Errorf("a malformed OTEL_RESOURCE_ATTRIBUTES: %v, want an error naming it", err)
	}
}

// TestTracingHeadersNeverLogged: a value of OTEL_EXPORTER_OTLP_HEADERS that
// OpenTelemetry cannot read is logged without the value, which is the
// collector's credential; the line still says what is wrong.
func TestTracingHeadersNeverLogged(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%zzTOPSECRET")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-api-key=ANOTHER%SECRET")
	var buf syncBuffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	_, stop, err := newTracer(context.Background(), log)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	got := string(buf.Bytes())
	for _, secret := range []string{"TOPSECRET", "ANOTHER"} {
		if strings.Contains(got, secret) {
			t.Errorf("the log holds the header value %s:\n%s", secret, got)
		}
	}
	if !strings.Contains(got, "escape header value") || !strings.Contains(got, "invalid URL escape") {
		t.Errorf("the log does not say the header value could not be read:\n%s", got)
	}
}
