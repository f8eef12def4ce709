package e2e

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// shRequest builds a request for the sh-function image running script.
func shRequest(t *testing.T, tag, script string) *fnv1.RunFunctionRequest {
	t.Helper()
	q, err := json.Marshal(script)
	if err != nil {
		t.Fatal(err)
	}
	return jsonRequest(t, fmt.Sprintf(`{"meta": {"tag": %q}, "desired": {"resources": {"a": {"resource": {"kind": "A"}}}}, "input": {"script": %s}}`, tag, q))
}

// okScript is a sh-function script that answers with desired unchanged.
const okScript = `jq -c '{desired: .desired}'`

// callErr sends a v1 call and returns the error instead of failing.
func (s *server) callErr(ctx context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	return fnv1.NewFunctionRunnerServiceClient(s.conn).RunFunction(ctx, req)
}

// processesWith returns the pids of host processes whose command line
// contains marker.
func processesWith(t *testing.T, marker string) []int {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil || !strings.Contains(string(b), marker) {
			continue
		}
		pid, _ := strconv.Atoi(strings.Split(d, "/")[2])
		if pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// eventually retries check for up to d.
func eventually(t *testing.T, d time.Duration, what string, check func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !check() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %s", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// logLine waits for the first line of a server's log that holds marker
// (a call's "tag=ID ", say), and returns it.
func logLine(t *testing.T, log *syncBuffer, what, marker string) string {
	t.Helper()
	var line string
	eventually(t, 5*time.Second, what, func() bool {
		for _, l := range strings.Split(log.String(), "\n") {
			if strings.Contains(l, marker) {
				line = l
				return true
			}
		}
		return false
	})
	return line
}

// containerStates lists the crun state entries under a cache directory.
func containerStates(t *testing.T, cache string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(cache, "bundle-*", "state", "*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// memoryStateDirs returns the runtime state directories the bundles under
// a cache directory keep in memory (see bundle.makeStateDir), and fails
// unless there is one per bundle: /dev/shm is a tmpfs on every machine the
// tests run on.
func memoryStateDirs(t *testing.T, cache string) []string {
	t.Helper()
	links, _ := filepath.Glob(filepath.Join(cache, "bundle-*", "state"))
	var dirs []string
	for _, l := range links {
		target, err := os.Readlink(l)
		if err != nil || !strings.HasPrefix(target, "/dev/shm/ocifn-state-") {
			t.Fatalf("%s: want a symlink to a state directory in /dev/shm, got %q (%v)", l, target, err)
		}
		dirs = append(dirs, target)
	}
	if len(dirs) == 0 {
		t.Fatalf("no bundle in %s", cache)
	}
	return dirs
}

// assertRemoved fails for each path that still exists.
func assertRemoved(t *testing.T, what string, paths []string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s %s is still there", what, p)
		}
	}
}

// TestTimeout: the adaptor's --timeout ends a hanging function with a Fatal
// result, killing every process of its container and removing its state
// within a second; the caller's own deadline gives DeadlineExceeded.
func TestTimeout(t *testing.T) {
	cache := cacheDir(t)
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--timeout", "1s"})
	marker := "4242" + strconv.Itoa(os.Getpid())
	// A background child and a foreground sleep: both must die.
	script := fmt.Sprintf("sleep %s1 & exec sleep %s2", marker, marker)

	start := time.Now()
	rsp := s.call(t, shRequest(t, "t-timeout", script))
	took := time.Since(start)
	wantFatal(t, shRequest(t, "t-timeout", script), rsp, "ran longer than the limit of 1s")
	if took > 3*time.Second {
		t.Errorf("the call took %s with a 1s timeout", took)
	}
	eventually(t, time.Second, "no process of the call left", func() bool { return len(processesWith(t, marker)) == 0 })
	eventually(t, time.Second, "no container state left but the warm ones", func() bool { return len(containerStates(t, cache)) == s.warm })

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := s.callErr(ctx, shRequest(t, "t-deadline", script))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("caller deadline: got %v, want DeadlineExceeded", err)
	}
	eventually(t, 2*time.Second, "no process of the cancelled call left", func() bool { return len(processesWith(t, marker)) == 0 })
	eventually(t, time.Second, "no container state left after cancel but the warm ones", func() bool { return len(containerStates(t, cache)) == s.warm })
}

// TestLimits: calls beyond --max-concurrency and --max-queue are refused
// with RESOURCE_EXHAUSTED; output over --max-output-bytes and requests over
// --max-recv-msg-size are refused with clear messages. A function that goes
// on printing past --max-output-bytes, ignoring EPIPE, is killed at once,
// with every process of its container, not at --timeout.
func TestLimits(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--max-concurrency", "1", "--max-queue", "1",
		"--max-output-bytes", "1000", "--max-recv-msg-size", "100000", "--timeout", "8s"})

	// One call runs, one waits, the third is refused.
	var wg sync.WaitGroup
	results := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, results[i] = s.callErr(context.Background(), shRequest(t, fmt.Sprintf("t-slow-%d", i), "sleep 1; "+okScript))
		}()
		time.Sleep(200 * time.Millisecond)
	}
	_, err := s.callErr(context.Background(), shRequest(t, "t-rejected", okScript))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "--max-concurrency") {
		t.Errorf("third call: got %v, want RESOURCE_EXHAUSTED naming --max-concurrency", err)
	}
	wg.Wait()
	for i, err := range results {
		if err != nil {
			t.Errorf("admitted call %d: %v", i, err)
		}
	}

	big := shRequest(t, "t-big-output", "head -c 5000 /dev/zero | tr '\\0' x")
	wantFatal(t, big, s.call(t, big), "more than the limit of 1000 bytes")

	marker := "4343" + strconv.Itoa(os.Getpid())
	flood := shRequest(t, "t-flood", fmt.Sprintf(`sleep %s & trap "" PIPE; cat >/dev/null; while :; do echo xxxxxxxx; done`, marker))
	start := time.Now()
	rsp := s.call(t, flood)
	took := time.Since(start)
	wantFatal(t, flood, rsp, "more than the limit of 1000 bytes on stdout")
	if took > 3*time.Second {
		t.Errorf("the call that ignores EPIPE took %s with an 8s timeout: it was not stopped at the cap", took)
	}
	eventually(t, 2*time.Second, "no process of the flooding call left", func() bool { return len(processesWith(t, marker)) == 0 })

	huge := shRequest(t, "t-huge", okScript)
	huge.Input.Fields["padding"] = structString(strings.Repeat("p", 200000))
	_, err = s.callErr(context.Background(), huge)
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("request over --max-recv-msg-size: got %v, want RESOURCE_EXHAUSTED", err)
	}
	// The server is still fine.
	s.call(t, shRequest(t, "t-after", okScript))
}

// TestMisbehavingFunctionsNeverTakeTheServerDown runs crashing, flooding and
// half-finished functions in parallel with good calls: every good call gets
// its own answer, every bad one its Fatal result.
func TestMisbehavingFunctionsNeverTakeTheServerDown(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--timeout", "5s"})
	bad := map[string]string{
		"segfault":         `kill -SEGV $$`,
		"exit_no_read":     `exit 3`,
		"stderr_flood":     `head -c 3000000 /dev/zero | tr '\0' e >&2; exit 1`,
		"half_json":        `printf '{"desired": {'`,
		"background_child": `(sleep 30 &) ; jq -c '{desired: .desired}'`,
		"closes_stdout":    `exec >&-; sleep 0.1; exit 0`,
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for name, script := range bad {
		for i := range 3 {
			wg.Add(2)
			go func() {
				defer wg.Done()
				req := shRequest(t, fmt.Sprintf("bad-%s-%d", name, i), script)
				rsp, err := s.callErr(context.Background(), req)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("%s: %v", name, err)
					return
				}
				if name == "background_child" {
					if len(rsp.GetResults()) != 0 {
						t.Errorf("%s: %v", name, rsp.GetResults())
					}
					return
				}
				if len(rsp.GetResults()) != 1 || rsp.GetResults()[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
					t.Errorf("%s: want a Fatal result, got %v", name, rsp.GetResults())
				}
			}()
			go func() {
				defer wg.Done()
				tag := fmt.Sprintf("good-%s-%d", name, i)
				script := fmt.Sprintf(`jq -c '{desired: {resources: {%q: {resource: {kind: "Good"}}}}}'`, tag)
				rsp, err := s.callErr(context.Background(), shRequest(t, tag, script))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Errorf("%s: %v", tag, err)
					return
				}
				if rsp.GetMeta().GetTag() != tag || rsp.GetDesired().GetResources()[tag] == nil || len(rsp.GetDesired().GetResources()) != 1 {
					t.Errorf("%s: got someone else's answer: %v", tag, rsp)
				}
			}()
		}
	}
	wg.Wait()
	s.call(t, shRequest(t, "t-after", okScript))
}

// TestLogs: one JSON line per call with tag, outcome, exit code and
// duration, and the function's stderr line by line with the call's tag.
func TestLogs(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--log-format", "json"})
	s.call(t, shRequest(t, "t-log-ok", `echo "hello from the function" >&2; `+okScript))
	s.call(t, shRequest(t, "t-log-fail", `echo "about to fail" >&2; exit 7`))
	// Each line is a record: many short ones are bounded by their number.
	s.call(t, shRequest(t, "t-log-lines", `head -c 60000 /dev/zero | tr '\0' '\n' >&2; `+okScript))
	// The server logs a call a moment after it answers, and its stderr
	// reaches this test through a pipe that may not be read yet.
	eventually(t, 5*time.Second, "the call lines logged", func() bool {
		return strings.Count(s.stderr.String(), `"msg":"call"`) >= 3
	})

	var calls, stderrLines, notInFull []map[string]any
	for _, line := range strings.Split(s.stderr.String(), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", line)
		}
		switch m["msg"] {
		case "call":
			calls = append(calls, m)
		case "function stderr":
			stderrLines = append(stderrLines, m)
		case "function stderr not logged in full":
			notInFull = append(notInFull, m)
		}
	}
	want := map[string][2]any{"t-log-ok": {"ok", 0.0}, "t-log-fail": {"fatal", 7.0}, "t-log-lines": {"ok", 0.0}}
	if len(calls) != 3 {
		t.Fatalf("want 3 call lines, got %v", calls)
	}
	for _, c := range calls {
		w := want[c["tag"].(string)]
		if c["outcome"] != w[0] || c["exit_code"] != w[1] || c["duration"] == nil {
			t.Errorf("call line %v, want outcome %v exit_code %v and a duration", c, w[0], w[1])
		}
	}
	found, count := map[string]string{}, map[string]int{}
	for _, l := range stderrLines {
		found[l["tag"].(string)] = l["line"].(string)
		count[l["tag"].(string)]++
	}
	if count["t-log-lines"] != 1024 || len(notInFull) != 1 || notInFull[0]["tag"] != "t-log-lines" || notInFull[0]["bytes_dropped"] != float64(60000-1024) {
		t.Errorf("60,000 empty lines: %d logged and %v, want 1,024 and the other %d bytes counted", count["t-log-lines"], notInFull, 60000-1024)
	}
	if found["t-log-ok"] != "hello from the function" || found["t-log-fail"] != "about to fail" {
		t.Errorf("stderr lines by tag: %v", found)
	}
}

// metricValue reads one sample from a Prometheus text exposition.
func metricValue(t *testing.T, text, series string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("metric %s not found", series)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	rsp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer rsp.Body.Close()
	b, err := io.ReadAll(rsp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMetrics scrapes /metrics after real calls of each outcome.
func TestMetrics(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--timeout", "1s", "--max-concurrency", "1", "--max-queue", "0"})
	url := s.metricsURL(t)
	before := scrape(t, url)
	if v := metricValue(t, before, `ocifn_calls_total{outcome="ok"}`); v != 0 {
		t.Fatalf("ok calls before any call: %v", v)
	}

	s.call(t, shRequest(t, "m-ok-1", okScript))
	s.call(t, shRequest(t, "m-ok-2", okScript))
	s.call(t, shRequest(t, "m-fatal", "exit 1"))
	s.call(t, shRequest(t, "m-timeout", "sleep 10"))

	// --max-queue 0 means the default; fill the slot and the queue (4) to
	// get a rejection.
	var wg sync.WaitGroup
	rejected := 0
	var mu sync.Mutex
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.callErr(context.Background(), shRequest(t, fmt.Sprintf("m-load-%d", i), "sleep 0.3; "+okScript))
			if status.Code(err) == codes.ResourceExhausted {
				mu.Lock()
				rejected++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	// A call is counted by the hooks that run once its answer is on its
	// way, a moment after the caller has it.
	var text string
	eventually(t, 5*time.Second, "all 12 calls counted", func() bool {
		text = scrape(t, url)
		n := 0.0
		for _, outcome := range []string{"ok", "fatal", "timeout", "rejected", "error"} {
			n += metricValue(t, text, `ocifn_calls_total{outcome="`+outcome+`"}`)
		}
		return n == 12 && metricValue(t, text, `ocifn_call_duration_seconds_count{outcome="ok"}`) == metricValue(t, text, `ocifn_calls_total{outcome="ok"}`)
	})
	for series, want := range map[string]float64{
		`ocifn_calls_total{outcome="ok"}`:       float64(2 + 8 - rejected),
		`ocifn_calls_total{outcome="fatal"}`:    1,
		`ocifn_calls_total{outcome="timeout"}`:  1,
		`ocifn_calls_total{outcome="rejected"}`: float64(rejected),
		`ocifn_calls_total{outcome="error"}`:    0,
		`ocifn_calls_in_flight`:                 0,
		`ocifn_calls_queued`:                    0,
	} {
		if got := metricValue(t, text, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if rejected == 0 {
		t.Errorf("no call was rejected with 1 slot, a queue of 4 and 8 concurrent calls")
	}
	if n := metricValue(t, text, `ocifn_call_duration_seconds_count{outcome="ok"}`); n != float64(10-rejected) {
		t.Errorf("duration histogram count %v", n)
	}
	if n := metricValue(t, text, `ocifn_container_start_seconds_count`); n < 4 {
		t.Errorf("container start histogram count %v, want one per container", n)
	}
	for _, name := range []string{"ocifn_request_bytes_total", "ocifn_response_bytes_total", "go_goroutines", "process_resident_memory_bytes"} {
		if metricValue(t, text, name) <= 0 {
			t.Errorf("%s not positive", name)
		}
	}
}

// TestShutdown: on SIGTERM a running call finishes and gets its answer, a
// call waiting in the queue and a new call are refused at once, and the
// server exits cleanly with nothing left in its cache directory; past the
// grace period, running calls are stopped and cleaned up.
func TestShutdown(t *testing.T) {
	cache := cacheDir(t)
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--grace-period", patient(10 * time.Second).String(), "--max-concurrency", "1"})
	done := make(chan error, 1)
	go func() {
		// Long enough for the checks below while it runs.
		script := fmt.Sprintf("sleep %d; %s", int(patient(4*time.Second).Seconds()), okScript)
		rsp, err := s.callErr(context.Background(), shRequest(t, "t-drain", script))
		if err == nil && len(rsp.GetResults()) != 0 {
			err = fmt.Errorf("results %v", rsp.GetResults())
		}
		done <- err
	}()
	eventually(t, 5*time.Second, "the call running", func() bool { return s.metric(t, "ocifn_calls_in_flight") == 1 })
	// A second call waits in the queue for the only slot.
	queued := make(chan error, 1)
	go func() {
		_, err := s.callErr(context.Background(), shRequest(t, "t-queued", okScript))
		queued <- err
	}()
	eventually(t, 5*time.Second, "a call queued", func() bool { return s.metric(t, "ocifn_calls_queued") == 1 })
	memory := memoryStateDirs(t, cache)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	eventually(t, 5*time.Second, "shutting down", func() bool { return strings.Contains(s.stderr.String(), "shutting down") })
	// The queued call is refused at once, not when the running call ends
	// (a slot would free only then), so that its caller can retry
	// elsewhere; the error says it did not run.
	select {
	case err := <-queued:
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shutting down") || !strings.Contains(err.Error(), "did not run") {
			t.Errorf("the call queued at SIGTERM: %v; want UNAVAILABLE, shutting down, did not run", err)
		}
	case err := <-done:
		t.Errorf("the call running at SIGTERM ended (%v) before the queued call was refused", err)
		done <- err
	case <-time.After(patient(time.Second)):
		t.Errorf("the call queued at SIGTERM still waits %s after shutdown began", patient(time.Second))
	}
	// Draining, with the call still running: the port stays open, a new
	// connection's health check says NOT_SERVING, and a new call is
	// refused with UNAVAILABLE at once.
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), patient(time.Second))
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	cancel()
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health on a new connection while draining: %v, %v; want NOT_SERVING", h.GetStatus(), err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), patient(time.Second))
	_, err = fnv1.NewFunctionRunnerServiceClient(conn).RunFunction(ctx, shRequest(t, "t-late", okScript))
	cancel()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("a new call while draining: %v; want UNAVAILABLE, shutting down", err)
	}
	if err := <-done; err != nil {
		t.Errorf("the call running at SIGTERM: %v", err)
	}
	s.wait(t)
	if !s.cmd.ProcessState.Success() {
		t.Errorf("exit: %v\n%s", s.cmd.ProcessState, s.stderr)
	}
	// Its log line, written after its answer, is not lost to the exit.
	mustContain(t, "server log", s.stderr.String(), "msg=call tag=t-drain front=crossplane outcome=ok")
	if left, _ := os.ReadDir(cache); len(left) != 0 {
		t.Errorf("left in the cache directory: %v", left)
	}
	assertRemoved(t, "the runtime state directory", memory)

	// Past the grace period: the call is stopped, and its caller told
	// why, as the HTTP fronts tell theirs, rather than left with a
	// closed connection ("error reading from server: EOF").
	marker := "5353" + strconv.Itoa(os.Getpid())
	s2 := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--grace-period", "500ms"})
	killed := sleepingCall(t, s2, "t-killed", marker)
	_ = s2.cmd.Process.Signal(syscall.SIGTERM)
	assertStoppedByTheGracePeriod(t, <-killed)
	assertStoppedClean(t, s2, cache, marker)
	mustContain(t, "server log", s2.stderr.String(), `msg="call failed" tag=t-killed front=crossplane outcome=error`, "grace period (--grace-period) ended before the call did")

	// A second signal ends a long grace period at once (a second Ctrl-C).
	s3 := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--grace-period", "10m"})
	second := sleepingCall(t, s3, "t-second", marker)
	// Two at once are one, as a terminal's Ctrl-C that ocifn gets from
	// the terminal and from its parent process: the call goes on.
	_ = s3.cmd.Process.Signal(syscall.SIGTERM)
	_ = s3.cmd.Process.Signal(syscall.SIGINT)
	eventually(t, 5*time.Second, "shutting down", func() bool { return strings.Contains(s3.stderr.String(), "shutting down") })
	time.Sleep(1500 * time.Millisecond)
	if len(processesWith(t, marker)) == 0 {
		t.Errorf("a signal right after the first stopped the call")
	}
	_ = s3.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-second:
		assertStoppedByTheGracePeriod(t, err)
	case <-time.After(patient(10 * time.Second)):
		t.Fatalf("the call still runs %s after a second signal\n%s", patient(10*time.Second), s3.stderr)
	}
	assertStoppedClean(t, s3, cache, marker)
	mustContain(t, "server log", s3.stderr.String(), "a second signal ends the grace period")
}

// TestShutdownWithAHealthWatch: a client watching the health service
// (gRPC's client-side health checking keeps a Watch open on each
// connection) reads NOT_SERVING on SIGTERM, and the server, with no call
// to wait for, stops at once rather than hold its grace period until the
// client lets go: the watch held it for all of it (10m here), or 2 s
// past it with a call running.
func TestShutdownWithAHealthWatch(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cacheDir(t), "--grace-period", "10m"})
	w, err := healthpb.NewHealthClient(s.conn).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if rsp, err := w.Recv(); err != nil || rsp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("the watch's first status: %v, %v; want SERVING", rsp, err)
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	if rsp, err := w.Recv(); err != nil || rsp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("the watch's status on SIGTERM: %v, %v; want NOT_SERVING", rsp, err)
	}
	select {
	case <-s.exited:
	case <-time.After(patient(20 * time.Second)):
		t.Fatalf("ocifn serve, with no call running, still runs %s after SIGTERM: a health watch holds its --grace-period 10m\n%s", patient(20*time.Second), s.stderr)
	}
	if _, err := w.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("the watch after the server stopped: %v; want UNAVAILABLE", err)
	}
}

// assertStoppedByTheGracePeriod fails unless err is the status of a call
// stopped at the end of the grace period: UNAVAILABLE, saying so.
func assertStoppedByTheGracePeriod(t *testing.T, err error) {
	t.Helper()
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "grace period (--grace-period) ended before the call did") {
		t.Errorf("the call stopped past the grace period: %v; want UNAVAILABLE saying that the grace period ended before it did", err)
	}
}

// sleepingCall starts a call whose function sleeps under marker's name,
// waits for its process to run, and returns where the call's error comes.
func sleepingCall(t *testing.T, s *server, tag, marker string) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := s.callErr(context.Background(), shRequest(t, tag, "exec sleep "+marker))
		done <- err
	}()
	eventually(t, 5*time.Second, "the call's process runs", func() bool { return len(processesWith(t, marker)) > 0 })
	return done
}

// assertStoppedClean waits for s to exit, and fails unless it exited 0
// and left nothing of the call under marker: no process, nothing in its
// cache directory.
func assertStoppedClean(t *testing.T, s *server, cache, marker string) {
	t.Helper()
	s.wait(t)
	if !s.cmd.ProcessState.Success() {
		t.Errorf("exit: %v\n%s", s.cmd.ProcessState, s.stderr)
	}
	if pids := processesWith(t, marker); len(pids) != 0 {
		t.Errorf("processes of the stopped call left: %v", pids)
	}
	if left, _ := os.ReadDir(cache); len(left) != 0 {
		t.Errorf("left in the cache directory: %v", left)
	}
}

// TestRestartAfterKill: SIGKILL the server mid-call; a new server on the
// same cache directory removes what was left (the call's container and the
// old bundle) and serves.
func TestRestartAfterKill(t *testing.T) {
	cache := cacheDir(t)
	marker := "6464" + strconv.Itoa(os.Getpid())
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache})
	sleepingCall(t, s, "t-orphan", marker)
	old, _ := filepath.Glob(filepath.Join(cache, "bundle-*"))
	memory := memoryStateDirs(t, cache)
	_ = s.cmd.Process.Kill()
	s.wait(t)

	s2 := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache})
	if pids := processesWith(t, marker); len(pids) != 0 {
		t.Errorf("the killed server's function still runs: %v", pids)
	}
	assertRemoved(t, "the killed server's bundle", old)
	assertRemoved(t, "the killed server's runtime state directory", memory)
	mustContain(t, "restart log", s2.stderr.String(), "removed what an earlier run left")
	s2.call(t, shRequest(t, "t-after-restart", okScript))
}

// TestHealthWhileUnpacking: the server answers health checks with
// NOT_SERVING, and calls with UNAVAILABLE, until the image is unpacked.
func TestHealthWhileUnpacking(t *testing.T) {
	big := bigImage(t, 96<<20)
	s := startProcess(t, []string{"--insecure", "--tarball", big})
	addr := s.awaitListening(t)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecureCreds()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	s.conn = conn
	h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("health while unpacking: %v %v", h.GetStatus(), err)
	}
	_, err = s.callErr(context.Background(), shRequest(t, "t-early", okScript))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("call while unpacking: got %v, want UNAVAILABLE", err)
	}
	eventually(t, 60*time.Second, "SERVING", func() bool {
		h, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
		return err == nil && h.GetStatus() == healthpb.HealthCheckResponse_SERVING
	})
}

// TestGrpcurlReflection lists and calls the service with grpcurl, which
// knows nothing of the protocol but what server reflection tells it.
func TestGrpcurlReflection(t *testing.T) {
	grpcurl := buildGrpcurl(t)
	s := startServer(t, []string{"--tarball", image("labelizer.tar")})
	out, err := exec.Command(grpcurl, "-plaintext", s.addr, "list").CombinedOutput()
	if err != nil {
		t.Fatalf("grpcurl list: %v\n%s", err, out)
	}
	mustContain(t, "grpcurl list", string(out), "apiextensions.fn.proto.v1.FunctionRunnerService", "apiextensions.fn.proto.v1beta1.FunctionRunnerService", "grpc.health.v1.Health")
	out, err = exec.Command(grpcurl, "-plaintext", s.addr, "describe", "apiextensions.fn.proto.v1.RunFunctionRequest").CombinedOutput()
	if err != nil {
		t.Fatalf("grpcurl describe: %v\n%s", err, out)
	}
	mustContain(t, "grpcurl describe", string(out), "desired", "observed")
	req, err := os.ReadFile(filepath.Join(repoRoot, "testdata/functions/labelizer/request.json"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(grpcurl, "-plaintext", "-d", "@", s.addr, "apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction")
	cmd.Stdin = strings.NewReader(string(req))
	out, err = cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("grpcurl RunFunction: %v\n%s", err, out)
	}
	mustContain(t, "grpcurl RunFunction", string(out), `"ocifn.dev/labelized": "true"`, "labelized 2 resources")
}

// buildGrpcurl installs grpcurl from the Go module proxy into a temp dir.
func buildGrpcurl(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "install", "github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3")
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOFLAGS=", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cannot install grpcurl: %v\n%s", err, out)
	}
	return filepath.Join(dir, "grpcurl")
}

// TestMutualTLS: with --tls-server-certs-dir, a client with a certificate
// from the CA is served; without one, or with one from another CA, it is
// refused.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ocifn-test-ca")
	other := newCA(t, "another-ca")
	serverCert := ca.issue(t, "ocifn-server", true)
	writePEM(t, filepath.Join(dir, "tls.crt"), "CERTIFICATE", serverCert.Certificate[0])
	key, err := x509.MarshalECPrivateKey(serverCert.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, "tls.key"), "EC PRIVATE KEY", key)
	writePEM(t, filepath.Join(dir, "ca.crt"), "CERTIFICATE", ca.cert.Raw)

	s := startProcess(t, []string{"--tarball", image("labelizer.tar"), "--tls-server-certs-dir", dir})
	eventually(t, 60*time.Second, "serving", func() bool { return servingLine.MatchString(s.stderr.String()) })
	s.addr = servingLine.FindStringSubmatch(s.stderr.String())[1]
	mustContain(t, "log", s.stderr.String(), "tls=true")

	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	call := func(certs []tls.Certificate) error {
		creds := credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: certs, ServerName: "ocifn-server", MinVersion: tls.VersionTLS12})
		conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = fnv1.NewFunctionRunnerServiceClient(conn).RunFunction(ctx, loadRequest(t, "labelizer", "request.json"))
		return err
	}
	if err := call([]tls.Certificate{ca.issue(t, "crossplane", false)}); err != nil {
		t.Errorf("client with a certificate from the CA: %v", err)
	}
	if err := call(nil); err == nil {
		t.Errorf("client without a certificate was served")
	}
	if err := call([]tls.Certificate{other.issue(t, "intruder", false)}); err == nil {
		t.Errorf("client with a certificate from another CA was served")
	}
}

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

func (ca *testCA) issue(t *testing.T, name string, server bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{name}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func writePEM(t *testing.T, path, kind string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func structString(s string) *structpb.Value { return structpb.NewStringValue(s) }

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }

// bigImage returns the sh-function image with an extra layer holding a file
// of size bytes, so that unpacking it takes a noticeable time.
func bigImage(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	layerTar := filepath.Join(dir, "layer.tar")
	f, err := os.Create(layerTar)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	if err := tw.WriteHeader(&tar.Header{Name: "big.bin", Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeroReader{}, size); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	layer, err := tarball.LayerFromFile(layerTar, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		t.Fatal(err)
	}
	base, err := tarball.ImageFromPath(image("sh-function.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "big.tar")
	ref, err := name.ParseReference("example.org/big:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		t.Fatal(err)
	}
	return out
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestHangupStopsCleanly: SIGHUP, which a closed terminal sends to the
// server it started, stops the server as SIGTERM does (its default action
// would end ocifn on the spot): the call running is stopped once the grace
// period ends, and the unpacked image, the state directory and every
// container go with the server, which exits 0.
func TestHangupStopsCleanly(t *testing.T) {
	cache := cacheDir(t)
	marker := "4242" + strconv.Itoa(os.Getpid())
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--grace-period", "500ms"})
	done := sleepingCall(t, s, "t-hangup", marker)
	memory := memoryStateDirs(t, cache)
	_ = s.cmd.Process.Signal(syscall.SIGHUP)
	select {
	case <-done:
	case <-time.After(patient(30 * time.Second)):
		t.Fatalf("the call running at SIGHUP is still unanswered after %s\n%s", patient(30*time.Second), s.stderr)
	}
	assertStoppedClean(t, s, cache, marker)
	mustContain(t, "server log", s.stderr.String(), "shutting down")
	assertRemoved(t, "the runtime state directory", memory)

	// Started with SIGHUP ignored (nohup), the server keeps it ignored,
	// and serves on.
	nohup := startServer(t, []string{"--tarball", image("sh-function.tar")}, func(c *exec.Cmd) {
		c.Args = append([]string{"sh", "-c", `trap "" HUP; exec "$0" "$@"`}, c.Args...)
		c.Path = "/bin/sh"
	})
	_ = nohup.cmd.Process.Signal(syscall.SIGHUP)
	time.Sleep(time.Second)
	nohup.call(t, shRequest(t, "t-after-hangup", okScript))
	if strings.Contains(nohup.stderr.String(), "shutting down") {
		t.Errorf("a server started with SIGHUP ignored stopped on SIGHUP:\n%s", nohup.stderr)
	}
}
