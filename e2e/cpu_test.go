package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// TestFunctionCPUMetric: ocifn_function_cpu_seconds_total counts what the
// functions' processes used, as they count it themselves. A script that
// burns about 400 ms of CPU in a child reports the CPU of its whole tree
// (the container's first process, sh-function.sh, with the children it
// reaped, by /proc/1/stat; the script's shell, which that process's
// pipeline forked, with the burning child it reaped, by `times`), and the
// counter grows by as much, with warm containers and without.
func TestFunctionCPUMetric(t *testing.T) {
	const script = `( i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done ); times > /tmp/t
read -r _ _ _ _ _ _ _ _ _ _ _ _ _ u s cu cs _ < /proc/1/stat
printf '{"results": [{"severity": "SEVERITY_NORMAL", "message": "%s %s %s %s %s"}]}' "$(tr '\n' ' ' < /tmp/t)" $u $s $cu $cs`
	for _, warm := range []string{"0", "2"} {
		t.Run("warm "+warm, func(t *testing.T) {
			s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cacheDir(t), "--warm", warm, "--metrics-address", "127.0.0.1:0"})
			before := s.metric(t, "ocifn_function_cpu_seconds_total")
			var reported time.Duration
			const calls = 3
			for i := range calls {
				rsp := s.call(t, shRequest(t, fmt.Sprintf("cpu-%d", i), script))
				// The answer has no desired state: a warning follows.
				if len(rsp.GetResults()) == 0 || rsp.GetResults()[0].GetSeverity() != fnv1.Severity_SEVERITY_NORMAL {
					t.Fatalf("call %d: %v", i, rsp.GetResults())
				}
				reported += reportedCPU(t, rsp.GetResults()[0].GetMessage())
			}
			// Counted once each container has been removed, after its answer.
			counted := func() time.Duration {
				return time.Duration((s.metric(t, "ocifn_function_cpu_seconds_total") - before) * float64(time.Second))
			}
			eventually(t, 10*time.Second, "the calls' CPU counted", func() bool { return counted() >= reported*9/10 })
			time.Sleep(200 * time.Millisecond)
			// The script's eight figures are each rounded down to 10 ms;
			// what runs after it reads them (tr, printf, the exits) adds a
			// few ms a call. The first process's figures include crun's
			// set-up of the container, which ocifn leaves out: 1-2 ms.
			got := counted()
			if got < reported-calls*5*time.Millisecond || got > reported+calls*95*time.Millisecond {
				t.Errorf("ocifn_function_cpu_seconds_total grew by %s over %d calls whose functions reported %s of their own", got, calls, reported)
			}
			t.Logf("counted %s, reported by the functions %s", got, reported)
		})
	}
}

// reportedCPU adds up what the script reports: the four figures of
// busybox's times ("0m0.22s 0m0.00s 0m0.01s 0m0.00s"), then utime, stime,
// cutime and cstime of /proc/1/stat in clock ticks of 10 ms.
func reportedCPU(t *testing.T, s string) time.Duration {
	t.Helper()
	fields := strings.Fields(s)
	if len(fields) != 8 {
		t.Fatalf("the script reported %q, want eight figures", s)
	}
	var sum time.Duration
	for i, f := range fields {
		if i < 4 {
			d, err := time.ParseDuration(f)
			if err != nil {
				t.Fatalf("the script reported %q: %v", s, err)
			}
			sum += d
			continue
		}
		ticks, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("the script reported %q: %v", s, err)
		}
		sum += time.Duration(ticks) * 10 * time.Millisecond
	}
	return sum
}
