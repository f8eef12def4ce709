package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// soakCalls is how many calls TestSoak makes: OCIFN_SOAK_CALLS, 300 by
// default (CI); `make soak` runs 5,000.
func soakCalls(t *testing.T) int {
	t.Helper()
	n := 300
	if v := os.Getenv("OCIFN_SOAK_CALLS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("OCIFN_SOAK_CALLS=%q: want a positive number", v)
		}
	}
	return n
}

// soakKind is one kind of call in the soak mix: the script it runs for a
// call with a unique id, and the check of its answer.
type soakKind struct {
	name   string
	weight int
	script func(id string) string
	check  func(id string, rsp *fnv1.RunFunctionResponse) error
}

// TestSoak: 16 clients make OCIFN_SOAK_CALLS calls over a mix of good and
// faulty functions, each with a unique payload. Every call is answered, with
// its own content or its own error (0 lost, 0 mixed up), and afterwards the
// server holds no process, container state, temp file or mount.
func TestSoak(t *testing.T) {
	calls, clients := soakCalls(t), 16
	cache, tmp := cacheDir(t), t.TempDir()
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--timeout", "10s",
		"--max-output-bytes", "1000000", "--max-concurrency", "8", "--max-queue", "64"}, privateTmp(tmp))

	ownResource := func(id string, rsp *fnv1.RunFunctionResponse) error {
		if r := rsp.GetDesired().GetResources()[id]; r == nil || len(rsp.GetDesired().GetResources()) != 1 {
			return fmt.Errorf("desired %v, want only resource %s", rsp.GetDesired(), id)
		}
		return nil
	}
	fatalWith := func(want string) func(string, *fnv1.RunFunctionResponse) error {
		return func(id string, rsp *fnv1.RunFunctionResponse) error {
			rs := rsp.GetResults()
			if len(rs) != 1 || rs[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL || !strings.Contains(rs[0].GetMessage(), want) {
				return fmt.Errorf("results %v, want one Fatal with %q", rs, want)
			}
			// The request's desired state, which names the call, comes back.
			if rsp.GetDesired().GetResources()["req-"+id] == nil {
				return fmt.Errorf("desired %v is not this call's request's", rsp.GetDesired())
			}
			return nil
		}
	}
	kinds := []soakKind{
		{name: "good", weight: 10, script: func(id string) string {
			return fmt.Sprintf(`jq -c '{desired: {resources: {%q: {resource: {kind: "Soak", id: %q}}}}}'`, id, id)
		}, check: ownResource},
		{name: "stderr_then_good", weight: 2, script: func(id string) string {
			return fmt.Sprintf(`echo "working on %s" >&2; jq -c '{desired: {resources: {%q: {resource: {kind: "Soak"}}}}}'`, id, id)
		}, check: ownResource},
		{name: "background_child", weight: 1, script: func(id string) string {
			return fmt.Sprintf(`sleep 30 & jq -c '{desired: {resources: {%q: {resource: {kind: "Soak"}}}}}'`, id)
		}, check: ownResource},
		{name: "exit_code", weight: 2, script: func(id string) string { return "echo failing " + id + " >&2; exit 3" }, check: fatalWith("exited with code 3")},
		{name: "invalid_json", weight: 2, script: func(id string) string { return `echo '{"desired":'` }, check: fatalWith("not a valid RunFunctionResponse")},
		{name: "empty_output", weight: 1, script: func(id string) string { return "exit 0" }, check: fatalWith("printed nothing")},
		{name: "output_over_limit", weight: 1, script: func(id string) string { return "head -c 3000000 /dev/zero" }, check: fatalWith("more than the limit")},
		{name: "crash", weight: 1, script: func(id string) string { return "kill -SEGV $$" }, check: fatalWith("exited with code 139")},
	}
	var mix []soakKind
	for _, k := range kinds {
		for range k.weight {
			mix = append(mix, k)
		}
	}

	var next, answered atomic.Int64
	var mu sync.Mutex
	failures := map[string]int{}
	var examples []string
	fail := func(kind, id string, err error) {
		mu.Lock()
		defer mu.Unlock()
		failures[kind]++
		if len(examples) < 10 {
			examples = append(examples, fmt.Sprintf("%s %s: %v", kind, id, err))
		}
	}
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= calls {
					return
				}
				k := mix[i%len(mix)]
				id := fmt.Sprintf("soak-%d-%d-%s", c, i, k.name)
				req := jsonRequest(t, fmt.Sprintf(`{"meta": {"tag": %q}, "desired": {"resources": {"req-%s": {"resource": {"kind": "Req"}}}}, "input": {"script": %q}}`,
					id, id, k.script(id)))
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				rsp, err := s.callErr(ctx, req)
				cancel()
				answered.Add(1)
				switch {
				case err != nil:
					fail(k.name, id, err)
				case rsp.GetMeta().GetTag() != id:
					fail(k.name, id, fmt.Errorf("got the answer tagged %q", rsp.GetMeta().GetTag()))
				default:
					if err := k.check(id, rsp); err != nil {
						fail(k.name, id, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("%d calls from %d clients in %s (%.0f calls/s)", calls, clients, took.Round(time.Millisecond), float64(calls)/took.Seconds())
	if int(answered.Load()) != calls {
		t.Errorf("%d of %d calls answered", answered.Load(), calls)
	}
	if len(failures) != 0 {
		t.Errorf("wrong answers by kind: %v; first ones:\n%s", failures, strings.Join(examples, "\n"))
	}
	assertNoLeaks(t, s, cache, tmp)
}
