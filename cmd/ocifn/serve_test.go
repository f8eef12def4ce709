package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/ocifn/ocifn/adaptor"
)

// heapFree is the heap's free memory that Go still holds from the kernel.
func heapFree() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/free:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

var sink [][]byte

// garbage allocates n MB and drops it.
func garbage(n int) {
	for range n {
		sink = append(sink, make([]byte, 1<<20))
	}
	sink = nil
}

// TestReturnHeap: returnHeap collects and gives the free heap back to the
// kernel, unless collections are off (GOGC=off), when it collects nothing.
func TestReturnHeap(t *testing.T) {
	garbage(32)
	// Collected, the garbage is free heap that Go keeps (its scavenger
	// gives it back slowly, in the background).
	runtime.GC()
	before := heapFree()
	if before < 16<<20 {
		t.Fatalf("after a collection of 32 MB of garbage Go holds %d bytes of free heap; the test needs more", before)
	}
	returnHeap()
	// Not all: what the collection in returnHeap frees is swept, and
	// given back, partly after it.
	if after := heapFree(); after > before/4 {
		t.Errorf("after returnHeap Go holds %d bytes of free heap, want under a quarter of the %d before", after, before)
	}

	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	garbage(32)
	var stats0, stats1 runtime.MemStats
	runtime.ReadMemStats(&stats0)
	returnHeap()
	runtime.ReadMemStats(&stats1)
	if stats1.NumGC != stats0.NumGC {
		t.Errorf("returnHeap collected %d times with collections off, want none", stats1.NumGC-stats0.NumGC)
	}
	if gc := debug.SetGCPercent(-1); gc != -1 {
		t.Errorf("returnHeap left GOGC at %d, want it off", gc)
	}
}

// TestOnceFile: a flag naming one file takes it once; a second is refused,
// naming both, rather than replacing the first without a word.
func TestOnceFile(t *testing.T) {
	var f onceFile
	if err := f.Set("a.yaml"); err != nil || f.String() != "a.yaml" {
		t.Fatalf("first: %v, %q", err, f.String())
	}
	if err := f.Set("b.yaml"); err == nil || !strings.Contains(err.Error(), "a.yaml, then b.yaml") || f.String() != "a.yaml" {
		t.Errorf("second: %v, kept %q; want it refused, naming both, a.yaml kept", err, f.String())
	}
}

// TestKubelessTimeout: FUNC_TIMEOUT is a positive number of seconds; any
// other value is refused naming FUNC_TIMEOUT, not --timeout, which the
// user did not give.
func TestKubelessTimeout(t *testing.T) {
	for v, want := range map[string]time.Duration{"30": 30 * time.Second, "0.5": 500 * time.Millisecond, "": adaptor.DefaultTimeout} {
		t.Setenv("FUNC_TIMEOUT", v)
		o := &serveOptions{}
		o.timeout = adaptor.DefaultTimeout
		if err := o.kubelessTimeout(); err != nil || o.timeout != want {
			t.Errorf("FUNC_TIMEOUT=%q: %v, %s; want %s", v, err, o.timeout, want)
		}
	}
	for _, v := range []string{"0", "-1", "soon", "NaN", "Inf", "1e20", "1e-10"} {
		t.Setenv("FUNC_TIMEOUT", v)
		o := &serveOptions{}
		if err := o.kubelessTimeout(); err == nil || !strings.Contains(err.Error(), "FUNC_TIMEOUT") {
			t.Errorf("FUNC_TIMEOUT=%q: got %v (timeout %s), want an error naming FUNC_TIMEOUT", v, err, o.timeout)
		}
	}
}

// TestPlatformAddress: --api http listens on Kubeless' FUNC_PORT, else
// Knative's PORT, else 8080; a FUNC_PORT that is a Kubernetes service link
// (of a Service named func in the pod's namespace) is not a port for it.
func TestPlatformAddress(t *testing.T) {
	for _, c := range []struct{ funcPort, port, addr, from string }{
		{"9001", "9002", ":9001", "FUNC_PORT"},
		{"", "9002", ":9002", "PORT"},
		{"tcp://10.96.0.12:80", "9002", ":9002", "PORT"},
		{"tcp://10.96.0.12:80", "", httpAddress, ""},
		{"", "", httpAddress, ""},
	} {
		t.Setenv("FUNC_PORT", c.funcPort)
		t.Setenv("PORT", c.port)
		addr, from, err := platformAddress()
		if err != nil || addr != c.addr || from != c.from {
			t.Errorf("FUNC_PORT=%q PORT=%q: %q from %q (%v), want %q from %q", c.funcPort, c.port, addr, from, err, c.addr, c.from)
		}
	}
}

// TestInflightBytesCheckedByTheFrontsLargestRequest: the smallest
// --max-inflight-bytes is set by the largest request of the gRPC front,
// which charges it before reading it. The HTTP fronts are not held to a
// gRPC message of --max-recv-msg-size, a flag they do not read (a 128 MiB
// pod's 100Mi was refused, "must be at least 553648492", for the gRPC
// front's 64 MiB), nor to a body of --max-request-bytes: they answer a
// body the budget could never hold 413 naming it, and a server with
// --max-request-bytes above it was refused at startup (e2e
// TestFloodOfLargeBodiesOnTheHTTPFronts's, 600Mi and 1Gi).
func TestInflightBytesCheckedByTheFrontsLargestRequest(t *testing.T) {
	for _, tc := range []struct {
		api                        string
		inflight, request, recvMsg byteSize
		want                       string
	}{
		{apiHTTP, 100 << 20, 64 << 20, 64 << 20, ""},
		{apiOpenWhisk, 100 << 20, 64 << 20, 64 << 20, ""},
		{apiHTTP, 32 << 20, 64 << 20, 64 << 20, ""},
		{apiOpenWhisk, 600 << 20, 1 << 30, 64 << 20, ""},
		{apiHTTP, 0, 64 << 20, 64 << 20, "--max-inflight-bytes 0: must be positive"},
		{apiCrossplane, 100 << 20, 64 << 20, 64 << 20, "--max-recv-msg-size 67108864"},
		{apiCrossplane, 100 << 20, 64 << 20, 4 << 20, ""},
	} {
		o := &serveOptions{api: tc.api, maxInflight: tc.inflight, maxRequestBytes: tc.request, maxRecvMsgSize: tc.recvMsg}
		err := o.checkInflightBytes()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s, %d in flight: %v", tc.api, tc.inflight, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s, %d in flight: %v, want an error saying %q", tc.api, tc.inflight, err, tc.want)
		}
	}
}
