package adaptor

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	fnv1beta1 "github.com/crossplane/function-sdk-go/proto/v1beta1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ocifn/ocifn/codec"
)

// TestInflightBudget: reservations fit in the limit, a request that does
// not fit waits for bytes to be freed, and is refused with
// RESOURCE_EXHAUSTED naming the flag when none are within reserveWait.
func TestInflightBudget(t *testing.T) {
	b := newInflight(100, 10, 0)
	ctx := context.Background()
	if err := b.reserve(ctx, 60, "t"); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		b.resize(60, 20)
	}()
	start := time.Now()
	if err := b.reserve(ctx, 70, "t"); err != nil {
		t.Fatalf("the second reservation after the first shrank: %v", err)
	}
	if took := time.Since(start); took < 40*time.Millisecond || took > reserveWait {
		t.Errorf("the second reservation took %s, want it to wait for the first to shrink", took)
	}
	start = time.Now()
	err := b.reserve(ctx, 20, "t")
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-inflight-bytes 100") {
		t.Errorf("a reservation past the limit: %v, want RESOURCE_EXHAUSTED naming the flag", err)
	}
	if took := time.Since(start); took < reserveWait {
		t.Errorf("refused after %s, want after waiting %s", took, reserveWait)
	}
	b.resize(70, 0)
	b.resize(20, 0)
	if used := b.budget.Used(); used != 0 {
		t.Errorf("%d bytes still reserved after every release", used)
	}
	if err := CheckInflightBytes(100, 64); err == nil {
		t.Error("a bound below what the largest request takes was accepted")
	}
}

// TestAnswerBudgetFormatsOnlyToRefuse: taking bytes for a function's
// answer that fit allocates nothing and never formats why; a refusal says
// why. A call takes bytes for its answer at least once.
func TestAnswerBudgetFormatsOnlyToRefuse(t *testing.T) {
	b := newInflight(1<<20, 10, 0)
	ctx := context.Background()
	formatted := 0
	why := func() string { formatted++; return "to hold what the function printed" }
	a := &answerBudget{b: b}
	if n := testing.AllocsPerRun(100, func() {
		if err := a.take(ctx, 512, why); err != nil {
			t.Fatal(err)
		}
		// A release wakes waiters, of which there are none: it
		// allocates nothing either.
		a.release()
	}); n != 0 || formatted != 0 {
		t.Errorf("a take that fits: %.0f allocations, why formatted %d times; want none", n, formatted)
	}
	if err := a.take(ctx, 2<<20, why); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "to hold what the function printed") || formatted != 1 {
		t.Errorf("a take past the limit: %v (why formatted %d times), want RESOURCE_EXHAUSTED saying why", err, formatted)
	}
}

// TestRequestCostIsKnownBeforeDecoding: a request is charged what it will
// cost decoded and encoded, counted from its bytes before it is decoded.
// One long string of a few megabytes fits a budget sized for the largest
// request; as many bytes of nulls, which decode to some 40 times their
// size, are refused at once, naming the flag and the I/O mode, without
// being decoded; a v1beta1 request is charged its conversion too; and the
// server goes on serving.
func TestRequestCostIsKnownBeforeDecoding(t *testing.T) {
	const limit = 4 << 20
	srv := NewServer(nil, limit, WithMaxInflightBytes(largestCost(limit)))
	srv.Ready(NewFunction(&scriptedRunner{stdout: `{}`}, WithLogger(slog.New(slog.DiscardHandler))))
	conn := serveInMemory(t, srv)
	client := fnv1.NewFunctionRunnerServiceClient(conn)
	xr := func(v any) *fnv1.RunFunctionRequest {
		s, err := structpb.NewStruct(map[string]any{"a": v})
		if err != nil {
			t.Fatal(err)
		}
		return &fnv1.RunFunctionRequest{Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: s}}}
	}
	const size = limit * 9 / 10
	long := xr(strings.Repeat("x", size))
	if _, err := client.RunFunction(context.Background(), long); err != nil {
		t.Fatalf("a request of one string of %d bytes: %v, want it served", size, err)
	}
	nulls := xr(make([]any, 700000)) // 2.8 MB on the wire
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := client.RunFunction(context.Background(), nulls)
	runtime.ReadMemStats(&after)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-inflight-bytes") || !strings.Contains(err.Error(), "json I/O mode") {
		t.Fatalf("a request of 700,000 nulls: %v, want RESOURCE_EXHAUSTED naming the flag and the I/O mode", err)
	}
	if !strings.Contains(err.Error(), "send less") {
		t.Errorf("refused with %q, want the refusal of a request that can never fit, which does not wait", err)
	}
	// Decoded, the nulls would take over 50 MB; the client's encoding and
	// the server's buffers take about 6.
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 30<<20 {
		t.Errorf("%d bytes allocated while the request was refused; was it decoded?", allocated)
	}
	// The v1beta1 service charges the conversion: a string that fits as
	// v1 with little to spare does not as v1beta1.
	spare := largestCost(limit) - largestCost(size)
	if spare > size+size*5/4 {
		t.Fatalf("the budget leaves %d bytes beyond a 3 MiB string; the v1beta1 case needs a tighter one", spare)
	}
	wire, err := proto.Marshal(long)
	if err != nil {
		t.Fatal(err)
	}
	var beta fnv1beta1.RunFunctionRequest
	if err := proto.Unmarshal(wire, &beta); err != nil {
		t.Fatal(err)
	}
	if _, err := fnv1beta1.NewFunctionRunnerServiceClient(conn).RunFunction(context.Background(), &beta); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("the long string as v1beta1: %v, want RESOURCE_EXHAUSTED for its conversion", err)
	}
	if _, err := client.RunFunction(context.Background(), long); err != nil {
		t.Errorf("the long string again: %v, want it served", err)
	}
}

// TestAnswerCostIsChargedBeforeDecoding: what a function prints is charged
// to the budget as it is read, and what decoding it takes before it is
// decoded. An answer of 300,000 nulls (1.5 MB printed, over 100 MB to
// decode by the model, 26 measured) is refused at once with
// RESOURCE_EXHAUSTED naming the flag and the I/O mode, without being
// decoded; answers that take some two thirds of the budget are served one
// after the other, each letting go of what it took when its call returns,
// over v1 and over v1beta1, whose conversion of the response is charged
// too.
func TestAnswerCostIsChargedBeforeDecoding(t *testing.T) {
	const limit = 4 << 20
	nulls := func(n int) string {
		return `{"desired":{"composite":{"resource":{"a":[` + strings.Repeat("null,", n-1) + `null]}}}}`
	}
	runner := &scriptedRunner{stdout: nulls(300000)}
	srv := NewServer(nil, limit, WithMaxInflightBytes(largestCost(limit)))
	srv.Ready(NewFunction(runner, WithLogger(slog.New(slog.DiscardHandler))))
	conn := serveInMemory(t, srv)
	client := fnv1.NewFunctionRunnerServiceClient(conn)
	req := &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "t"}}

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := client.RunFunction(context.Background(), req)
	runtime.ReadMemStats(&after)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-inflight-bytes") || !strings.Contains(err.Error(), "json I/O mode") || !strings.Contains(err.Error(), "print less") {
		t.Fatalf("an answer of 300,000 nulls: %v, want RESOURCE_EXHAUSTED at once, naming the flag and the I/O mode", err)
	}
	// The output and its buffer take about 4 MB; decoded, it would take 26.
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 15<<20 {
		t.Errorf("%d bytes allocated while the answer was refused; was it decoded?", allocated)
	}

	const n = 50000
	runner.stdout = nulls(n)
	charged, budget := (codec.JSON{}).DecodeMemory([]byte(runner.stdout)), largestCost(limit)
	if charged < budget/2 || charged > budget*3/4 {
		t.Fatalf("%d nulls are charged %d bytes to decode, want between a half and three quarters of the budget of %d", n, charged, budget)
	}
	for i := range 2 {
		rsp, err := client.RunFunction(context.Background(), req)
		if err != nil {
			t.Fatalf("call %d, an answer of %d nulls: %v", i+1, n, err)
		}
		if got := len(rsp.GetDesired().GetComposite().GetResource().GetFields()["a"].GetListValue().GetValues()); got != n {
			t.Fatalf("call %d: %d nulls in the answer, want %d", i+1, got, n)
		}
	}
	beta := fnv1beta1.NewFunctionRunnerServiceClient(conn)
	for i := range 2 {
		rsp, err := beta.RunFunction(context.Background(), &fnv1beta1.RunFunctionRequest{Meta: &fnv1beta1.RequestMeta{Tag: "t"}})
		if err != nil {
			t.Fatalf("v1beta1 call %d, an answer of %d nulls: %v", i+1, n, err)
		}
		if got := len(rsp.GetDesired().GetComposite().GetResource().GetFields()["a"].GetListValue().GetValues()); got != n {
			t.Fatalf("v1beta1 call %d: %d nulls in the answer, want %d", i+1, got, n)
		}
	}
}

// TestAnswerOutputIsChargedAsItIsRead: stdout is charged as its buffer
// grows, step by step as a pipe is read, so output larger than the budget
// stops being read there, and the call gets RESOURCE_EXHAUSTED naming what
// it printed so far; the server then serves the next call.
func TestAnswerOutputIsChargedAsItIsRead(t *testing.T) {
	const limit = 1 << 20
	runner := &scriptedRunner{stdout: "{}" + strings.Repeat(" ", 16<<20), chunk: 64 << 10}
	srv := NewServer(nil, limit, WithMaxInflightBytes(10<<20))
	srv.Ready(NewFunction(runner, WithLogger(slog.New(slog.DiscardHandler))))
	client := fnv1.NewFunctionRunnerServiceClient(serveInMemory(t, srv))
	req := &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "t"}}
	_, err := client.RunFunction(context.Background(), req)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "printed on stdout (8388608 bytes so far)") || !strings.Contains(err.Error(), "--max-inflight-bytes 10485760") {
		t.Fatalf("16 MiB of output against a budget of 10: %v, want RESOURCE_EXHAUSTED once 8 MiB are in, naming the output and the flag", err)
	}
	runner.stdout = "{}"
	if _, err := client.RunFunction(context.Background(), req); err != nil {
		t.Fatalf("the next call: %v", err)
	}
}
