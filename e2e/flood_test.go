package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// rss is the largest VmRSS of the server and its re-executed self now.
func rss(t *testing.T, s *server) int64 { return largestOfServer(t, s, "VmRSS") }

// TestFloodOfLargestRequests: requests of the largest size (64 MiB), as
// many as the server runs and queues and more, all at once. The server
// admits what --max-inflight-bytes holds, refuses the rest with
// RESOURCE_EXHAUSTED naming the flag, answers every admitted call, and its
// peak RSS stays under that bound above its baseline. Then it answers
// calls as before.
func TestFloodOfLargestRequests(t *testing.T) {
	const (
		bound    = 960 << 20 // one request of 64 MiB that is one string takes 528 MiB
		requests = 8         // --max-concurrency 2 + --max-queue 4, and 2 more
	)
	cache, tmp := cacheDir(t), t.TempDir()
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--timeout", "20s",
		"--max-concurrency", "2", "--max-queue", "4", "--max-inflight-bytes", strconv.Itoa(bound), "--cache=false"}, privateTmp(tmp))
	s.call(t, shRequest(t, "warm-up", okScript))
	baseline := rss(t, s)

	// The function reads its whole stdin, then takes a moment, so the
	// calls overlap.
	const script = `cat >/dev/null; sleep 1; printf '{"desired": {"resources": {"a": {"resource": {"kind": "A"}}}}}'`
	padding := strings.Repeat("p", 64<<20-4096)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok, refused int
	for i := range requests {
		req := shRequest(t, fmt.Sprintf("big-%d", i), script)
		req.Input.Fields["padding"] = structString(padding)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rsp, err := s.callErr(ctx, req)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && len(rsp.GetResults()) == 0 && rsp.GetDesired().GetResources()["a"] != nil:
				ok++
			case status.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), "--max-inflight-bytes"):
				refused++
			default:
				t.Errorf("%s: %v %v", req.GetMeta().GetTag(), err, rsp.GetResults())
			}
		}()
	}
	wg.Wait()
	peak := peakRSS(t, s)
	t.Logf("%d answered, %d refused; RSS baseline %d MiB, peak %d MiB, bound %d MiB", ok, refused, baseline>>20, peak>>20, bound>>20)
	if ok == 0 || refused == 0 {
		t.Errorf("%d answered and %d refused, want some of each", ok, refused)
	}
	if peak > baseline+bound {
		t.Errorf("peak RSS %d MiB is past the baseline %d MiB plus --max-inflight-bytes %d MiB", peak>>20, baseline>>20, bound>>20)
	}
	rsp := s.call(t, shRequest(t, "after", okScript))
	if len(rsp.GetResults()) != 0 {
		t.Errorf("a call after the flood: %v", rsp.GetResults())
	}
	assertNoLeaks(t, s, cache, tmp)
}
