package adaptor

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ocifn/ocifn/hook"
	"github.com/ocifn/ocifn/hook/hooktest"
)

// TestStreamWorkers checks that WithStreamWorkers reaches gRPC: a server
// made with it has that many goroutines waiting in gRPC's stream worker
// before it serves anything, at most maxStreamWorkers, and they leave
// when it stops.
func TestStreamWorkers(t *testing.T) {
	workers := func() int {
		buf := make([]byte, 1<<20)
		return bytes.Count(buf[:runtime.Stack(buf, true)], []byte("grpc.(*Server).serverWorker("))
	}
	// Workers of servers stopped earlier (other tests, -count) leave in
	// their own time.
	settles := func(want int) {
		t.Helper()
		n := workers()
		for deadline := time.Now().Add(5 * time.Second); n != want && time.Now().Before(deadline); n = workers() {
			time.Sleep(10 * time.Millisecond)
		}
		if n != want {
			t.Fatalf("%d goroutines in gRPC's stream worker, want %d", n, want)
		}
	}
	settles(0)
	srv := NewServer(nil, DefaultMaxRecvMsgSize, WithStreamWorkers(5))
	settles(5)
	srv.Stop()
	settles(0)
	// A huge --max-concurrency does not start a worker per slot: each
	// holds its goroutine's memory for the server's life (1.3 GB of RSS
	// at idle with 1,000,000).
	srv = NewServer(nil, DefaultMaxRecvMsgSize, WithStreamWorkers(1<<16))
	settles(maxStreamWorkers())
	srv.Stop()
	settles(0)
	srv = NewServer(nil, DefaultMaxRecvMsgSize)
	defer srv.Stop()
	settles(0)
}

// TestRefusalsAreCounted: a call the server refuses before the Function
// sees it (here the in-flight budget is held by a stream that never sends
// its request) gets RESOURCE_EXHAUSTED and is counted and logged as
// rejected, as a call the Function's own gate refuses is.
func TestRefusalsAreCounted(t *testing.T) {
	const limit = 1 << 20
	reg := prometheus.NewRegistry()
	m := hook.NewMetrics(reg)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	srv := NewServer(nil, limit, WithMaxInflightBytes(readCost(limit)))
	srv.Ready(NewFunction(&scriptedRunner{stdout: `{}`}, WithLogger(log), WithMetrics(m),
		WithHooks(hook.NewChain(log, m, hook.Log{Logger: log}), 0)))
	conn := serveInMemory(t, srv)
	// Its handler reserves the whole budget and waits for the request.
	holder, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := conn.NewStream(holder, &grpc.StreamDesc{ClientStreams: true}, "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	_, err := fnv1.NewFunctionRunnerServiceClient(conn).RunFunction(context.Background(), &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "t"}})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the call: %v, want RESOURCE_EXHAUSTED", err)
	}
	hooktest.CheckCalls(t, reg, hook.Rejected, 1)
	if !strings.Contains(logs.String(), "outcome=rejected") || !strings.Contains(logs.String(), "max-inflight-bytes") {
		t.Errorf("no log line of the refusal naming the flag: %q", logs.String())
	}
}

// TestRequestOverTheLimitIsAnError: a request larger than
// --max-recv-msg-size gets gRPC's RESOURCE_EXHAUSTED (gRPC writes that
// status itself), and is counted and logged as an error, a request to make
// smaller, not as rejected, which says the server was full; the log line
// names the flag.
func TestRequestOverTheLimitIsAnError(t *testing.T) {
	const limit = 1 << 20
	reg := prometheus.NewRegistry()
	m := hook.NewMetrics(reg)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	srv := NewServer(nil, limit, WithMaxInflightBytes(largestCost(limit)))
	srv.Ready(NewFunction(&scriptedRunner{stdout: `{}`}, WithLogger(log), WithMetrics(m),
		WithHooks(hook.NewChain(log, m, hook.Log{Logger: log}), 0)))
	conn := serveInMemory(t, srv)
	big := &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "t"}, Input: &structpb.Struct{Fields: map[string]*structpb.Value{"pad": structpb.NewStringValue(strings.Repeat("x", limit))}}}
	_, err := fnv1.NewFunctionRunnerServiceClient(conn).RunFunction(context.Background(), big)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("the call: %v, want RESOURCE_EXHAUSTED", err)
	}
	// The caller has its status before the handler returns: wait for the
	// call's hooks (the log line, then the metrics).
	for deadline := time.Now().Add(5 * time.Second); callsCounted(t, reg) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	hooktest.CheckCalls(t, reg, hook.Error, 1)
	if !strings.Contains(logs.String(), "outcome=error") || !strings.Contains(logs.String(), "--max-recv-msg-size 1048576") {
		t.Errorf("the refusal is not logged as an error naming --max-recv-msg-size: %q", logs.String())
	}
}

// callsCounted is how many calls ocifn_calls_total counts, whatever their
// outcome.
func callsCounted(t *testing.T, reg prometheus.Gatherer) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() == "ocifn_calls_total" {
			for _, m := range f.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// TestStalledRequestLetsGoOfTheBudget: a stream that opens and never sends
// its request is refused after the receive timeout, and what it held of
// the in-flight budget serves the next call.
func TestStalledRequestLetsGoOfTheBudget(t *testing.T) {
	const limit = 1 << 20
	srv := NewServer(nil, limit, WithMaxInflightBytes(largestCost(limit)), WithRecvTimeout(300*time.Millisecond))
	srv.Ready(NewFunction(&scriptedRunner{stdout: `{}`}, WithLogger(slog.New(slog.DiscardHandler))))
	conn := serveInMemory(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stalled, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction")
	if err != nil {
		t.Fatal(err)
	}
	var rsp fnv1.RunFunctionResponse
	err = stalled.RecvMsg(&rsp)
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "did not arrive within 300ms") {
		t.Errorf("the stalled stream: %v, want DEADLINE_EXCEEDED naming the timeout", err)
	}
	if _, err := fnv1.NewFunctionRunnerServiceClient(conn).RunFunction(context.Background(), &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "t"}}); err != nil {
		t.Errorf("the next call: %v, want it served", err)
	}
}

// serveInMemory serves srv on an in-memory listener until the test ends,
// and returns a client connected to it.
func serveInMemory(t *testing.T, srv *Server) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///buf",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestCallerDeadlineIsATimeout: a call whose caller's deadline passes while
// the function runs is counted and logged as a timeout, whichever comes
// first at the server: its own copy of the deadline, or the caller's
// cancellation of the stream when its deadline fired.
func TestCallerDeadlineIsATimeout(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := hook.NewMetrics(reg)
	srv := NewServer(nil, DefaultMaxRecvMsgSize)
	srv.Ready(NewFunction(&scriptedRunner{block: true}, WithLogger(slog.New(slog.DiscardHandler)), WithMetrics(m)))
	conn := serveInMemory(t, srv)
	const calls = 20
	for range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		_, err := fnv1.NewFunctionRunnerServiceClient(conn).RunFunction(ctx, &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "t"}})
		cancel()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("the call: %v, want DEADLINE_EXCEEDED", err)
		}
	}
	// The hooks run as the handler returns, which may be after the
	// caller has its status.
	counted := func() map[string]float64 {
		n := map[string]float64{}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "ocifn_calls_total" {
				continue
			}
			for _, c := range mf.GetMetric() {
				n[c.GetLabel()[0].GetValue()] += c.GetCounter().GetValue()
			}
		}
		return n
	}
	n := counted()
	for deadline := time.Now().Add(5 * time.Second); n["timeout"]+n["error"] < calls && time.Now().Before(deadline); n = counted() {
		time.Sleep(10 * time.Millisecond)
	}
	if n["timeout"] != calls {
		t.Errorf("calls counted by outcome: %v, want all %d as timeouts", n, calls)
	}
}

// TestRefusalsWhileStartingAreCounted: a call that comes while the image is
// still unpacked gets UNAVAILABLE and is counted and logged as an error,
// as a call refused once the server serves is.
func TestRefusalsWhileStartingAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := hook.NewMetrics(reg)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	srv := NewServer(nil, DefaultMaxRecvMsgSize, WithHooksWhileStarting(hook.NewChain(log, m, hook.Log{Logger: log})))
	conn := serveInMemory(t, srv)
	_, err := fnv1.NewFunctionRunnerServiceClient(conn).RunFunction(context.Background(), &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "early"}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("a call before the server is ready: %v, want UNAVAILABLE", err)
	}
	hooktest.CheckCalls(t, reg, hook.Error, 1)
	if !strings.Contains(logs.String(), "outcome=error") || !strings.Contains(logs.String(), "unpacked") {
		t.Errorf("no log line of the refusal saying why: %q", logs.String())
	}
}
