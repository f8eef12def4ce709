package main

import (
	"context"
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// newRegistry returns a Prometheus registry with Go runtime and process
// metrics.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// serveMetrics serves reg on address at /metrics until ctx ends, and Go's
// profiles at /debug/pprof/ when profiling is on. An empty address turns
// both off.
func serveMetrics(ctx context.Context, log *slog.Logger, address string, reg *prometheus.Registry, profiling bool) (stop func(), err error) {
	if address == "" {
		return func() {}, nil
	}
	lis, err := listen(address, " for metrics", "--metrics-address")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: httpErrorLog(log)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "error", err)
		}
	}()
	log.Info("serving metrics", "address", lis.Addr().String(), "path", "/metrics")
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}, nil
}

// newTracer returns a tracer exporting spans over OTLP/gRPC when
// OTEL_EXPORTER_OTLP_ENDPOINT (or its traces-only variant) is set, and nil
// otherwise: then calls are not traced and cost nothing extra. The exporter
// reads the other standard OTEL_EXPORTER_OTLP_* variables itself.
func newTracer(ctx context.Context, log *slog.Logger) (trace.Tracer, func(), error) {
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return nil, func() {}, nil
	}
	// OpenTelemetry says what fails (an export, a variable it cannot
	// read) through its own global logger and error handler, which print
	// plain lines on stderr that --log-format json would not parse: they
	// go to ocifn's log instead.
	otel.SetLogger(logr.FromSlogHandler(redactValues{log.With("source", "opentelemetry").Handler()}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing failed; calls go on", "source", "opentelemetry", "error", err)
	}))
	exp, err := traceExporter(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot set up the OTLP trace exporter: %w", err)
	}
	res, err := traceResource(ctx)
	if err != nil {
		return nil, nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	return tp.Tracer("github.com/ocifn/ocifn/adaptor"), func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}, nil
}

// redactValues is the handler of OpenTelemetry's own log: it replaces
// every attribute named "value" with "(redacted)". The OTLP exporters log
// an OTEL_EXPORTER_OTLP_HEADERS value they cannot unescape whole, as
// "value", and those values are the collector's credentials (an
// Authorization header, an API key); the error beside it still says what
// is wrong with it.
type redactValues struct{ slog.Handler }

func (h redactValues) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redact(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h redactValues) WithAttrs(as []slog.Attr) slog.Handler {
	rs := make([]slog.Attr, len(as))
	for i, a := range as {
		rs[i] = redact(a)
	}
	return redactValues{h.Handler.WithAttrs(rs)}
}

func (h redactValues) WithGroup(name string) slog.Handler {
	return redactValues{h.Handler.WithGroup(name)}
}

func redact(a slog.Attr) slog.Attr {
	if a.Key == "value" {
		return slog.String(a.Key, "(redacted)")
	}
	return a
}

// traceExporter returns the OTLP exporter of the protocol that
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, or else OTEL_EXPORTER_OTLP_PROTOCOL,
// names: grpc, ocifn's default, or http/protobuf (a collector's port 4318,
// the default of many SDKs). Another is refused rather than spoken to in
// gRPC, where every export would fail.
func traceExporter(ctx context.Context) (sdktrace.SpanExporter, error) {
	name := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	v := os.Getenv(name)
	if v == "" {
		name = "OTEL_EXPORTER_OTLP_PROTOCOL"
		v = os.Getenv(name)
	}
	switch v {
	case "", "grpc":
		return otlptracegrpc.New(ctx)
	case "http/protobuf":
		return otlptracehttp.New(ctx)
	}
	return nil, fmt.Errorf("%s=%s: ocifn exports traces over grpc (the default) or http/protobuf", name, v)
}

// traceResource describes the process in its spans: service.name ocifn
// and its version, unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES
// say otherwise, as they do for any OpenTelemetry SDK: every function's
// pod runs ocifn, and a platform tells them apart by these.
func traceResource(ctx context.Context) (*resource.Resource, error) {
	fromEnv, err := resource.New(ctx, resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("cannot read the trace resource from OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return resource.Merge(resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName("ocifn"), semconv.ServiceVersion(version)), fromEnv)
}

// listen listens on address, the value of flag, for what (" for metrics",
// or ""). A port another process holds gets a hint: ocifn's own defaults
// (:9443 and :8080 for metrics; :8080 on the HTTP fronts) collide between
// two servers on one machine.
func listen(address, what, flag string) (net.Listener, error) {
	lis, err := net.Listen("tcp", address)
	if err == nil {
		return lis, nil
	}
	hint := ""
	if errors.Is(err, syscall.EADDRINUSE) {
		hint = fmt.Sprintf(" (another process, or this one's other port, has it: choose another with %s; --address is :9443 by default, :8080 on the HTTP fronts (with --api http, the port in FUNC_PORT or PORT when set), and --metrics-address :8080, empty for none)", flag)
	}
	return nil, fmt.Errorf("cannot listen on %s%s: %w%s", address, what, err, hint)
}

// httpErrorLog is where net/http's servers say what they cannot tell a
// handler (a handler's header they refused, a connection that failed its
// TLS handshake): ocifn's log, in its format, rather than plain lines on
// stderr that --log-format json would not parse.
func httpErrorLog(log *slog.Logger) *stdlog.Logger {
	return slog.NewLogLogger(log.With("source", "net/http").Handler(), slog.LevelWarn)
}
