package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// withEnv adds environment variables to the server process.
func withEnv(kv ...string) serverOption {
	return func(c *exec.Cmd) { c.Env = append(c.Env, kv...) }
}

// collector is an OTLP trace receiver on loopback that keeps every span.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			c.spans = append(c.spans, ss.GetSpans()...)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

func (c *collector) byName() map[string]*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]*tracepb.Span{}
	for _, s := range c.spans {
		m[s.GetName()] = s
	}
	return m
}

// startCollector starts an OTLP trace receiver on loopback, stopped when
// the test ends, and returns it with the environment that points ocifn's
// exporter at it.
func startCollector(t *testing.T) (*collector, []string) {
	t.Helper()
	col := &collector{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, col)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return col, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + lis.Addr().String(), "OTEL_EXPORTER_OTLP_INSECURE=true", "OTEL_BSP_SCHEDULE_DELAY=50"}
}

// The caller's trace context that the tracing tests send, as a W3C
// traceparent.
const (
	callerTraceID, callerSpanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	callerTraceparent           = "00-" + callerTraceID + "-" + callerSpanID + "-01"
)

// callSpans waits until col holds n spans, checks that the one named root
// is in the caller's trace as a child of the caller's span, and that each
// of children is its child, and returns the spans by name.
func callSpans(t *testing.T, col *collector, n int, root string, children ...string) map[string]*tracepb.Span {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%d spans exported", n), func() bool { return len(col.byName()) >= n })
	spans := col.byName()
	r := spans[root]
	if r == nil {
		t.Fatalf("no %s span: %v", root, spans)
	}
	if got := hex.EncodeToString(r.GetTraceId()); got != callerTraceID {
		t.Errorf("trace id %s, want the caller's %s", got, callerTraceID)
	}
	if got := hex.EncodeToString(r.GetParentSpanId()); got != callerSpanID {
		t.Errorf("parent span %s, want the caller's %s", got, callerSpanID)
	}
	for _, name := range children {
		sp := spans[name]
		if sp == nil {
			t.Errorf("no %s span", name)
			continue
		}
		if !bytes.Equal(sp.GetParentSpanId(), r.GetSpanId()) {
			t.Errorf("%s is not a child of the call's span", name)
		}
	}
	return spans
}

// TestTracing: with OTEL_EXPORTER_OTLP_ENDPOINT set, each call is a span in
// the caller's trace (W3C trace context from gRPC metadata) with children
// for the container's start, its run and the parsing of the response.
func TestTracing(t *testing.T) {
	col, env := startCollector(t)
	s := startServer(t, []string{"--tarball", image("labelizer.tar")}, withEnv(env...))
	mustContain(t, "log", s.stderr.String(), "tracing=true")

	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", callerTraceparent)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := s.callErr(ctx, loadRequest(t, "labelizer", "request.json")); err != nil {
		t.Fatal(err)
	}
	children := []string{"container.start", "container.run", "response.parse"}
	spans := callSpans(t, col, 4, "RunFunction", children...)
	for _, name := range children {
		if sp := spans[name]; sp != nil && sp.GetEndTimeUnixNano() < sp.GetStartTimeUnixNano() {
			t.Errorf("%s ends before it starts", name)
		}
	}
}

// TestNoTracingByDefault: without the OTLP variables, tracing is off.
func TestNoTracingByDefault(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("passthrough.tar")}, withEnv("OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="))
	mustContain(t, "log", s.stderr.String(), "tracing=false")
}

// TestTracingRefusedCall: a call refused before the function saw it (its
// request needs more than --max-inflight-bytes) is a span in its caller's
// trace too, as every call is.
func TestTracingRefusedCall(t *testing.T) {
	col, env := startCollector(t)
	s := startServer(t, []string{"--tarball", image("passthrough.tar"), "--max-recv-msg-size", "1Mi", "--max-inflight-bytes", "20Mi"}, withEnv(env...))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", callerTraceparent)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// 100,000 nulls take some 40 MB decoded and encoded: refused unread.
	req := jsonRequest(t, `{"meta": {"tag": "refused"}, "input": {"a": [`+strings.Repeat("null,", 100000)+`null]}}`)
	if _, err := s.callErr(ctx, req); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a request past --max-inflight-bytes: %v, want RESOURCE_EXHAUSTED", err)
	}
	spans := callSpans(t, col, 1, "RunFunction")
	if got := spans["RunFunction"].GetStatus().GetCode(); got != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("the refused call's span has status %v, want an error", got)
	}
	// No function ran: an exit code of 0 would say it succeeded.
	for _, a := range spans["RunFunction"].GetAttributes() {
		if a.GetKey() == "ocifn.exit_code" {
			t.Errorf("the refused call's span has %s %v, though no container ran", a.GetKey(), a.GetValue())
		}
	}
}

// TestTracingErrorsAreLogged: what OpenTelemetry says of its exporter (a
// collector that cannot be reached, an OTEL_EXPORTER_OTLP_* variable it
// cannot read) goes to ocifn's log, in its format: with --log-format
// json, every line on stderr is a JSON record.
func TestTracingErrorsAreLogged(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("passthrough.tar"), "--log-format", "json"},
		withEnv("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_INSECURE=true", "OTEL_BSP_SCHEDULE_DELAY=50",
			"OTEL_EXPORTER_OTLP_TIMEOUT=500", "OTEL_EXPORTER_OTLP_HEADERS=no-equals-sign"))
	if _, err := s.callErr(context.Background(), jsonRequest(t, `{"meta": {"tag": "traced"}}`)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the failed export logged", func() bool { return strings.Contains(s.stderr.String(), "127.0.0.1:1") })
	log := s.stderr.String()
	mustContain(t, "log", log, "no-equals-sign")
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("a line of the log is not JSON: %s", line)
		}
	}
}

// TestTracingOverHTTP: with OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf (a
// collector's port 4318, the default of many SDKs) spans are exported
// over OTLP/HTTP, and with the service name OTEL_SERVICE_NAME gives; a
// protocol ocifn does not speak stops the start, naming the variable,
// rather than every export failing.
func TestTracingOverHTTP(t *testing.T) {
	col := &collector{}
	var mu sync.Mutex
	var services []string
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if err == nil {
			err = proto.Unmarshal(body, req)
		}
		if r.URL.Path != "/v1/traces" || err != nil {
			http.Error(w, fmt.Sprintf("%s: %v", r.URL.Path, err), http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					services = append(services, kv.GetValue().GetStringValue())
				}
			}
		}
		mu.Unlock()
		rsp, _ := col.Export(r.Context(), req)
		b, _ := proto.Marshal(rsp)
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(b)
	})}
	go func() { _ = hs.Serve(lis) }()
	t.Cleanup(func() { hs.Close() })

	s := startServer(t, []string{"--tarball", image("labelizer.tar")}, withEnv("OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+lis.Addr().String(), "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_SERVICE_NAME=function-labelizer"))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", callerTraceparent)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := s.callErr(ctx, loadRequest(t, "labelizer", "request.json")); err != nil {
		t.Fatal(err)
	}
	callSpans(t, col, 4, "RunFunction", "container.start", "container.run", "response.parse")
	mu.Lock()
	if len(services) == 0 || services[0] != "function-labelizer" {
		t.Errorf("service names exported: %q, want OTEL_SERVICE_NAME's", services)
	}
	mu.Unlock()

	out, err := runWithin(t, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL=http/json"},
		"serve", "--insecure", "--tarball", image("passthrough.tar"), "--cache-dir", cacheDir(t), "--address", "127.0.0.1:0", "--metrics-address", "")
	if err == nil {
		t.Fatalf("OTEL_EXPORTER_OTLP_PROTOCOL=http/json was taken:\n%s", out)
	}
	mustContain(t, "output", out, "OTEL_EXPORTER_OTLP_PROTOCOL=http/json")
}
