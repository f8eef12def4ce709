package adaptor

import (
	"bytes"
	"runtime"
	"testing"
	"time"
)

// TestStreamWorkers checks that WithStreamWorkers reaches gRPC: a server
// made with it has that many goroutines waiting in gRPC's stream worker
// before it serves anything, and they leave when it stops.
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
	srv = NewServer(nil, DefaultMaxRecvMsgSize)
	defer srv.Stop()
	settles(0)
}
