package e2e

import (
	"context"
	"encoding/hex"
	"net"
	"os/exec"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
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

// TestTracing: with OTEL_EXPORTER_OTLP_ENDPOINT set, each call is a span in
// the caller's trace (W3C trace context from gRPC metadata) with children
// for the container's start, its run and the parsing of the response.
func TestTracing(t *testing.T) {
	col := &collector{}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(gs, col)
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()

	s := startServer(t, []string{"--tarball", image("labelizer.tar")}, withEnv(
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://"+lis.Addr().String(),
		"OTEL_EXPORTER_OTLP_INSECURE=true",
		"OTEL_BSP_SCHEDULE_DELAY=50",
	))
	mustContain(t, "log", s.stderr.String(), "tracing=true")

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+traceID+"-"+parentID+"-01")
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := s.callErr(ctx, loadRequest(t, "labelizer", "request.json")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "four spans exported", func() bool { return len(col.byName()) >= 4 })

	spans := col.byName()
	root := spans["RunFunction"]
	if root == nil {
		t.Fatalf("no RunFunction span: %v", spans)
	}
	if got := hex.EncodeToString(root.GetTraceId()); got != traceID {
		t.Errorf("trace id %s, want the caller's %s", got, traceID)
	}
	if got := hex.EncodeToString(root.GetParentSpanId()); got != parentID {
		t.Errorf("parent span %s, want the caller's %s", got, parentID)
	}
	for _, name := range []string{"container.start", "container.run", "response.parse"} {
		sp := spans[name]
		if sp == nil {
			t.Errorf("no %s span", name)
			continue
		}
		if hex.EncodeToString(sp.GetParentSpanId()) != hex.EncodeToString(root.GetSpanId()) {
			t.Errorf("%s is not a child of the call's span", name)
		}
		if sp.GetEndTimeUnixNano() < sp.GetStartTimeUnixNano() {
			t.Errorf("%s ends before it starts", name)
		}
	}
}

// TestNoTracingByDefault: without the OTLP variables, tracing is off.
func TestNoTracingByDefault(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("passthrough.tar")}, withEnv("OTEL_EXPORTER_OTLP_ENDPOINT=", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="))
	mustContain(t, "log", s.stderr.String(), "tracing=false")
}
