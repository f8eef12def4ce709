package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// privateTmp gives the server a TMPDIR of its own, so a test can check that
// it leaves no temp files, whatever else runs on the machine.
func privateTmp(dir string) serverOption {
	return func(c *exec.Cmd) { c.Env = append(c.Env, "TMPDIR="+dir) }
}

// statFields returns the fields of /proc/PID/stat after the command's name
// (state, ppid, ...), or nil if there is no such process: the name, in
// parentheses, may hold spaces and parentheses itself.
func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// descendants returns the pids of every process below pid.
func descendants(t *testing.T, pid int) []int {
	t.Helper()
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		self, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if f := statFields(self); len(f) > 1 {
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], self)
		}
	}
	var out []int
	var walk func(int)
	walk = func(p int) {
		for _, c := range children[p] {
			out = append(out, c)
			walk(c)
		}
	}
	walk(pid)
	return out
}

// assertNoLeaks checks, once calls are answered, that the server keeps no
// process but itself (with its helpers) and its warm containers, no
// container state but theirs, no file in the cache directory but its
// bundle, no temp file, and no mount that the host can see.
func assertNoLeaks(t *testing.T, s *server, cache, tmp string) {
	t.Helper()
	// The warm pool may have grown to the calls that overlapped.
	eventually(t, 5*time.Second, "no function process left", func() bool {
		return len(descendants(t, s.cmd.Process.Pid)) <= s.helpers(t)+s.warmContainers(t)
	})
	eventually(t, 5*time.Second, "no container state left", func() bool { return len(containerStates(t, cache)) == s.warmContainers(t) })
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("temp files left in the server's TMPDIR: %v", left)
	}
	entries, _ := os.ReadDir(cache)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "bundle-") {
			t.Errorf("left in the cache directory: %s", e.Name())
		}
	}
	bundles, _ := filepath.Glob(filepath.Join(cache, "bundle-*", "*"))
	for _, b := range bundles {
		switch filepath.Base(b) {
		case "rootfs", "config.json", "state", "lock", "dev":
		default:
			t.Errorf("unexpected file in the bundle: %s", b)
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), cache) {
		t.Errorf("the host sees mounts under %s:\n%s", cache, mounts)
	}
}

// TestFaultyFunctions: each way a function can misbehave gets the
// contract's answer, the server keeps answering, and nothing is left
// behind. (TestMisbehavingFunctionsNeverTakeTheServerDown runs crashes,
// stderr floods and half-written JSON next to good calls.)
func TestFaultyFunctions(t *testing.T) {
	cache, tmp := cacheDir(t), t.TempDir()
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--timeout", "3s"}, privateTmp(tmp))
	marker := "7373" + strconv.Itoa(os.Getpid())

	// A request far larger than a pipe's buffer, for the function that
	// never reads it.
	big := shRequest(t, "t-no-read", "exit 0")
	big.Input.Fields["padding"] = structString(strings.Repeat("p", 4<<20))

	// JSON objects nested 3,400 deep: 10,200 levels in protobuf, which
	// no gRPC client decodes, though JSON decoders read them.
	deep := `printf '{"desired":{"resources":{"a":{"resource":'; i=0; while [ $i -lt 3400 ]; do printf '{"a":'; i=$((i+1)); done; ` +
		`printf 1; i=0; while [ $i -lt 3400 ]; do printf '}'; i=$((i+1)); done; printf '}}}}'`

	cases := []struct {
		name     string
		req      *fnv1.RunFunctionRequest
		fatal    []string // want a Fatal result containing these
		warning  string   // want a Warning result containing this
		maxTime  time.Duration
		noResult bool
	}{
		{name: "exits_without_reading_stdin", req: big, fatal: []string{"printed nothing on stdout"}},
		{name: "leaves_a_background_child_running", req: shRequest(t, "t-bg", "sleep "+marker+"1 >/dev/null 2>&1 & "+okScript), noResult: true},
		{name: "loops_forever", req: shRequest(t, "t-loop", "while :; do :; done"), fatal: []string{"ran longer than the limit of 3s"}, maxTime: 6 * time.Second},
		{name: "writes_1GiB_to_stdout", req: shRequest(t, "t-gib", "head -c 1073741824 /dev/zero"), fatal: []string{"more than the limit of 67108864 bytes"}, maxTime: 10 * time.Second},
		{name: "floods_stderr", req: shRequest(t, "t-err", "head -c 100000000 /dev/zero | tr '\\0' e >&2; "+okScript), noResult: true},
		{name: "exits_0_with_empty_output", req: shRequest(t, "t-empty", "exit 0"), fatal: []string{"printed nothing on stdout"}},
		{name: "prints_invalid_utf8", req: shRequest(t, "t-utf8", `printf '{"desired": {}, "results": [{"message": "\377\376"}]}'`), fatal: []string{"not valid UTF-8"}},
		// Empty files fill no tmpfs's size, but each holds kernel memory.
		{name: "makes_20000_files_in_each_tmpfs", req: shRequest(t, "t-files", `for d in /tmp /dev/shm; do mkdir $d/many && cd $d/many && seq 20000 | xargs touch 2>/dev/null; echo "$d: $(ls | wc -l) files" >&2; done; exit 1`),
			fatal: []string{"/tmp: 16382 files", "/dev/shm: 16382 files"}},
		{name: "prints_json_nested_deeper_than_protobuf_decodes", req: shRequest(t, "t-deep", deep), fatal: []string{`nests more than 10000 levels deep in protobuf under "desired"`}},
		{name: "prints_invalid_json", req: shRequest(t, "t-json", `echo '{"desired": {]'`), fatal: []string{"not a valid RunFunctionResponse"}},
		{name: "prints_the_wrong_tag", req: shRequest(t, "t-tag", `jq -c '{meta: {tag: "someone-else"}, desired: .desired}'`), warning: `meta.tag "someone-else", not the request's "t-tag"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			rsp := s.call(t, tc.req)
			took := time.Since(start)
			if rsp.GetMeta().GetTag() != tc.req.GetMeta().GetTag() {
				t.Errorf("tag %q, want the request's %q", rsp.GetMeta().GetTag(), tc.req.GetMeta().GetTag())
			}
			switch {
			case len(tc.fatal) > 0:
				wantFatal(t, tc.req, rsp, tc.fatal...)
			case tc.warning != "":
				rs := rsp.GetResults()
				if len(rs) != 1 || rs[0].GetSeverity() != fnv1.Severity_SEVERITY_WARNING || !strings.Contains(rs[0].GetMessage(), tc.warning) {
					t.Errorf("results %v, want one Warning with %q", rs, tc.warning)
				}
				if rsp.GetDesired().GetResources()["a"] == nil {
					t.Errorf("desired lost: %v", rsp.GetDesired())
				}
			case tc.noResult:
				if len(rsp.GetResults()) != 0 || rsp.GetDesired().GetResources()["a"] == nil {
					t.Errorf("got %v, want the function's own answer", rsp)
				}
			}
			if tc.maxTime > 0 && took > tc.maxTime {
				t.Errorf("the call took %s, want at most %s", took, tc.maxTime)
			}
			t.Logf("answered in %s", took.Round(time.Millisecond))
		})
	}
	if pids := processesWith(t, marker); len(pids) != 0 {
		t.Errorf("the background child survived its call: %v", pids)
	}
	// The server never held the 1 GiB: its peak memory stays far below.
	if hwm := peakRSS(t, s); hwm > 512<<20 {
		t.Errorf("the server's peak RSS is %d MiB", hwm>>20)
	}
	s.call(t, shRequest(t, "t-after", okScript))
	assertNoLeaks(t, s, cache, tmp)
}

// peakRSS is the largest VmHWM of the server and its re-executed self.
func peakRSS(t *testing.T, s *server) int64 { return largestOfServer(t, s, "VmHWM") }

// largestOfServer is the largest of a /proc/PID/status field in kB (VmRSS,
// VmHWM), in bytes, over the server and its re-executed self.
func largestOfServer(t *testing.T, s *server, key string) int64 {
	t.Helper()
	return largestOf(t, s.cmd.Process.Pid, key)
}

// largestOf is largestOfServer of the server whose process is pid.
func largestOf(t *testing.T, pid int, key string) int64 {
	t.Helper()
	var most int64
	for _, pid := range append([]int{pid}, descendants(t, pid)...) {
		kb, _ := strconv.ParseInt(strings.TrimSuffix(statusField(pid, key), " kB"), 10, 64)
		most = max(most, kb<<10)
	}
	return most
}

// statusField is the value of key in /proc/PID/status, or "" if the
// process or the key is not there.
func statusField(pid int, key string) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// TestResourceLimitsWithoutCgroups: on a host that does not delegate cgroup
// v2 (this one mounts cgroups in hybrid mode), the server says once at
// startup that per-call limits fall back to rlimits; a fork bomb and a
// memory hog are contained by them, and the server keeps answering other
// calls meanwhile.
func TestResourceLimitsWithoutCgroups(t *testing.T) {
	cache, tmp := cacheDir(t), t.TempDir()
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--timeout", "30s",
		"--memory-limit", "256Mi", "--pids-limit", "64"}, privateTmp(tmp))
	const fallback = "per-call limits fall back to rlimits"
	// Here the reason is the host's layout; on a pure cgroup v2 host (the
	// guest of `make test-cgroupv2`), that the server's cgroup is not
	// delegated to it.
	mustContain(t, "startup log", s.stderr.String(), fallback, fallbackReason(t))

	calls := &backgroundCalls{s: s}
	run := func(name, script string) { calls.run(t, name, script) }
	// A bounded fork bomb: each shell forks two more until fork fails; the
	// call ends when its first shell does, which ends its pid namespace.
	// (The timeout is long for the emulated guest of make test-cgroupv2,
	// where five calls beside the bomb take seconds.)
	run("fork-bomb", `b() { b | b & }; b; sleep 10`)
	// A memory hog: awk doubles a string up to 4 GiB.
	run("memory-hog", `awk 'BEGIN { s = "x"; for (i = 0; i < 32; i++) s = s s; print "survived" > "/dev/stderr" }'; exit 9`)
	// Meanwhile, other calls are answered.
	time.Sleep(500 * time.Millisecond)
	for i := range 5 {
		tag := fmt.Sprintf("bystander-%d", i)
		rsp, err := s.callErr(context.Background(), shRequest(t, tag, okScript))
		if err != nil || len(rsp.GetResults()) != 0 || rsp.GetMeta().GetTag() != tag {
			t.Errorf("%s during the bomb: %v %v", tag, err, rsp.GetResults())
		}
	}
	results := calls.wait()

	// The fork bomb ran into RLIMIT_NPROC (64 processes for its call) and
	// ended with its first shell, printing nothing.
	if r := results["fork-bomb"]; r == nil || len(r.GetResults()) != 1 || r.GetResults()[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
		t.Errorf("fork bomb: %v, want a Fatal result", r)
	}
	// The memory hog's tail could not grow past RLIMIT_DATA.
	if r := results["memory-hog"]; r == nil || len(r.GetResults()) != 1 || strings.Contains(r.GetResults()[0].GetMessage(), "survived") {
		t.Errorf("memory hog: %v, want a Fatal result without \"survived\"", r)
	} else {
		t.Logf("memory hog: %s", r.GetResults()[0].GetMessage())
	}
	if n := strings.Count(s.stderr.String(), fallback); n != 1 {
		t.Errorf("the fallback was logged %d times, want once", n)
	}
	assertNoLeaks(t, s, cache, tmp)
}

// TestCallsWithoutACgroupFilesystem: a server started where no cgroup
// filesystem is mounted (a container whose runtime mounted none) says so
// in its fallback line, not that the host has cgroup v1 only, and runs its
// calls: crun refuses every container without a cgroupfs or a tmpfs at
// /sys/fs/cgroup, so ocifn mounts an empty tmpfs there in its own mount
// namespace. Run as root here and in the pure cgroup v2 guest.
func TestCallsWithoutACgroupFilesystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("unmounting the cgroup filesystems in a mount namespace of the test's needs root")
	}
	s := startServer(t, []string{"--tarball", image("sh-function.tar")}, func(c *exec.Cmd) {
		script := `mount --make-rprivate / && umount -R /sys/fs/cgroup && exec "$@"`
		c.Args = append([]string{"sh", "-c", script, "sh", c.Path}, c.Args[1:]...)
		c.Path = "/bin/sh"
		if c.SysProcAttr == nil {
			c.SysProcAttr = &syscall.SysProcAttr{}
		}
		c.SysProcAttr.Cloneflags |= syscall.CLONE_NEWNS
	})
	mustContain(t, "startup log", s.stderr.String(), "per-call limits fall back to rlimits", "no cgroup filesystem is mounted")
	if rsp := s.call(t, shRequest(t, "t-no-cgroupfs", okScript)); len(rsp.GetResults()) != 0 {
		t.Errorf("a call where no cgroup filesystem is mounted: %v\nlog:\n%s", rsp.GetResults(), s.stderr)
	}
}

// backgroundCalls runs calls of the sh-function image on goroutines of
// their own and keeps each response by its tag, for tests that check
// other calls are answered while these run.
type backgroundCalls struct {
	s       *server
	wg      sync.WaitGroup
	mu      sync.Mutex
	results map[string]*fnv1.RunFunctionResponse
}

// run starts a call tagged name that runs script.
func (b *backgroundCalls) run(t *testing.T, name, script string) {
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		rsp, err := b.s.callErr(context.Background(), shRequest(t, name, script))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			return
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.results == nil {
			b.results = map[string]*fnv1.RunFunctionResponse{}
		}
		b.results[name] = rsp
	}()
}

// wait waits for every call and returns their responses by tag.
func (b *backgroundCalls) wait() map[string]*fnv1.RunFunctionResponse {
	b.wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.results
}

// TestCallsCancelledWhileTheirContainerIsMade: calls whose callers give
// up while crun is still creating their containers (deadlines of a few
// milliseconds) leave no process behind: the container's first process,
// which comes to ocifn when its crun is killed and then ends, is reaped
// too, not left a zombie for the life of the server; whether crun runs in
// the fork server or, once that is gone, is executed.
func TestCallsCancelledWhileTheirContainerIsMade(t *testing.T) {
	cache, tmp := cacheDir(t), t.TempDir()
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--warm", "0"}, privateTmp(tmp))
	cancelled := func(round string) {
		t.Helper()
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// From before crun starts to after the container exists.
				for i := range 40 {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration((i*4+w)%60+1)*time.Millisecond)
					_, _ = s.callErr(ctx, shRequest(t, fmt.Sprintf("%s-%d-%d", round, w, i), okScript))
					cancel()
				}
			}()
		}
		wg.Wait()
		s.call(t, shRequest(t, round+"-after", okScript))
		assertNoLeaks(t, s, cache, tmp)
	}
	cancelled("fork-server")
	if pid := forkServerOf(t, servingPID(t, s)); pid != 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	cancelled("exec")
}

// strayRuntime writes a wrapper of crun for --runtime that, for a `crun
// create` while the file "next" is in the returned directory (once, it is
// removed) or "always" is, runs crun, then leaves a sleep behind whose
// command line holds marker: it inherits the container's standard streams
// and crun's log pipe. Otherwise it is crun.
func strayRuntime(t *testing.T) (wrapper, control, marker string) {
	t.Helper()
	return runtimeWrapper(t, "crun-stray", `#!/bin/sh
case " $* " in
*" create "*)
	if [ -e %[1]s/next ] || [ -e %[1]s/always ]; then
		rm -f %[1]s/next
		%[2]s "$@"; rc=$?
		sleep %[3]s &
		exit $rc
	fi ;;
esac
exec %[2]s "$@"
`)
}

// TestRuntimeLeavesAProcessHoldingTheOutput: a runtime that leaves a
// process of its own behind, holding the container's standard streams and
// crun's log pipe (here a wrapper that runs crun create, then a sleep in
// the background), neither holds the call past --timeout nor keeps the
// server from stopping: the call gets a Fatal result naming the runtime
// (whether the function ended by itself or at --timeout), the process is
// killed, and the next call works.
func TestRuntimeLeavesAProcessHoldingTheOutput(t *testing.T) {
	wrapper, control, marker := strayRuntime(t)
	cache, tmp := cacheDir(t), t.TempDir()
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--warm", "0", "--runtime", wrapper, "--timeout", "2s"}, privateTmp(tmp))
	for _, tc := range []struct {
		name, script string
		want         []string
	}{
		{"function_ends", okScript, []string{"the container runtime", "a process it left behind", "open after the function's process ended"}},
		{"function_times_out", "echo still running >&2; while :; do :; done", []string{"ran longer than the limit of 2s", "still running"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(control, "next"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			req := shRequest(t, "stray-"+tc.name, tc.script)
			// Without a bound the call would last as long as the
			// stray process.
			ctx, cancel := context.WithTimeout(context.Background(), patient(20*time.Second))
			defer cancel()
			rsp, err := s.callErr(ctx, req)
			if err != nil {
				t.Fatalf("RunFunction: %v\n%s", err, s.stderr)
			}
			wantFatal(t, req, rsp, tc.want...)
			eventually(t, 5*time.Second, "the runtime's stray process killed", func() bool { return len(processesWith(t, marker)) == 0 })
			next := s.call(t, shRequest(t, "after-"+tc.name, okScript))
			if len(next.GetResults()) != 0 || next.GetDesired().GetResources()["a"] == nil {
				t.Errorf("the call after: %v", next)
			}
		})
	}
	assertNoLeaks(t, s, cache, tmp)
}

// TestRuntimeLeavesAProcessHoldingAWarmContainersLog: warm containers whose
// creation left a process of the runtime's behind, holding crun's log pipe,
// are removed at shutdown without waiting for it: the server stops within
// its grace period, and the process is killed.
func TestRuntimeLeavesAProcessHoldingAWarmContainersLog(t *testing.T) {
	wrapper, control, marker := strayRuntime(t)
	if err := os.WriteFile(filepath.Join(control, "always"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--warm", "2", "--runtime", wrapper, "--grace-period", "5s"})
	eventually(t, 10*time.Second, "the warm containers made", func() bool { return len(processesWith(t, marker)) == 2 })
	stopWithin(t, s, 20*time.Second)
	if pids := processesWith(t, marker); len(pids) != 0 {
		t.Errorf("the runtime's processes outlived the server: %v", pids)
	}
}

// TestShutdownWithAStuckCrunDelete: when every `crun delete` hangs (killed
// after 5 s each), the shutdown's removal of the warm containers does not
// take 5 s per container, twice (once to discard each, once for the state
// left behind), but about that once or twice whatever their number: the
// server stops, exits 0, and no hung crun is left.
func TestShutdownWithAStuckCrunDelete(t *testing.T) {
	wrapper, control, marker := runtimeWrapper(t, "crun-stuck-delete", "#!/bin/sh\ncase \" $* \" in *\" delete \"*) [ -e %[1]s/stuck ] && exec sleep %[3]s ;; esac\nexec %[2]s \"$@\"\n")
	cache := cacheDir(t)
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--warm", "6", "--max-concurrency", "8", "--runtime", wrapper, "--grace-period", "5s"})
	eventually(t, 20*time.Second, "6 warm containers", func() bool { return s.warmContainers(t) == 6 })
	if err := os.WriteFile(filepath.Join(control, "stuck"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// 6 containers, 5 s for each delete, twice: a minute before.
	stopWithin(t, s, 25*time.Second)
	if pids := processesWith(t, marker); len(pids) != 0 {
		t.Errorf("hung crun deletes outlived the server: %v", pids)
	}
	if left, _ := filepath.Glob(filepath.Join(cache, "bundle-*")); len(left) != 0 {
		t.Errorf("the cache directory still holds %v", left)
	}
}

// TestStuckCrunDeleteUnderAWrapper: a --runtime wrapper that runs crun as
// a child rather than exec'ing it (here a sleep stands for the crun
// delete that hangs) is killed after 5 s with what it started: the hung
// command is not left running for as long as it likes, nor, once it ends,
// as a zombie of the server. The pool's containers let go after
// --warm-idle are deleted so.
func TestStuckCrunDeleteUnderAWrapper(t *testing.T) {
	wrapper, control, marker := runtimeWrapper(t, "crun-wrapper", "#!/bin/sh\ncase \" $* \" in *\" delete \"*) [ -e %[1]s/stuck ] && sleep %[3]s ;; esac\n%[2]s \"$@\"\n")
	cache, tmp := cacheDir(t), t.TempDir()
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--warm", "2", "--warm-idle", "2s", "--runtime", wrapper}, privateTmp(tmp))
	eventually(t, 20*time.Second, "2 warm containers", func() bool { return s.warmContainers(t) == 2 })
	if err := os.WriteFile(filepath.Join(control, "stuck"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the pool let go for idle", func() bool { return len(processesWith(t, marker)) > 0 })
	// Each delete is killed 5 s after it started.
	eventually(t, 15*time.Second, "the hung deletes killed", func() bool { return len(processesWith(t, marker)) == 0 })
	// And said so, once for each container. The sleep leaves
	// processesWith as it dies (a zombie's cmdline is empty); the server
	// writes the line after it has reaped the sleep and the wrapper.
	lines, deadline := stuckLines(s.stderr.String()), time.Now().Add(patient(5*time.Second))
	for len(lines) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		lines = stuckLines(s.stderr.String())
	}
	named := map[string]bool{}
	for _, l := range lines {
		_, c, _ := strings.Cut(l, "command=delete container=")
		c, _, _ = strings.Cut(c, " ")
		if !strings.Contains(l, "level=WARN") || !strings.HasPrefix(c, "ocifn-") || named[c] {
			t.Errorf("not one WARN line for each hung delete: %q", lines)
			break
		}
		named[c] = true
	}
	if len(lines) == 0 {
		t.Errorf("no WARN line for the hung deletes:\n%s", s.stderr)
	}
	if err := os.Remove(filepath.Join(control, "stuck")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "no zombie under the server", func() bool {
		for _, pid := range descendants(t, s.cmd.Process.Pid) {
			if processState(pid) == "Z" {
				return false
			}
		}
		return true
	})
	rsp := s.call(t, shRequest(t, "after", okScript))
	if len(rsp.GetResults()) != 0 || rsp.GetDesired().GetResources()["a"] == nil {
		t.Errorf("the call after: %v", rsp)
	}
	assertNoLeaks(t, s, cache, tmp)
}

// TestStuckCrunStart: with a crun whose containers have no exec fifo
// where ocifn looks for it (another version; here a wrapper moves it
// away), ocifn starts each container with `crun start`; one that hangs is
// killed at the call's end, and the call gets the Fatal result of a
// function that did not start, instead of waiting as long as crun does.
func TestStuckCrunStart(t *testing.T) {
	wrapper, control, marker := runtimeWrapper(t, "crun-no-fifo", `#!/bin/sh
root=; id=
for a in "$@"; do case $a in --root=*) root=${a#--root=} ;; esac; id=$a; done
if [ -e %[1]s/stuck ]; then
	case " $* " in
	*" create "*) %[2]s "$@"; rc=$?; mv "$root/$id/exec.fifo" "$root/$id/exec.fifo.moved"; exit $rc ;;
	*" start "*) rm -f %[1]s/stuck; exec sleep %[3]s ;;
	esac
fi
exec %[2]s "$@"
`)
	cache, tmp := cacheDir(t), t.TempDir()
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--warm", "0", "--runtime", wrapper, "--timeout", "2s"}, privateTmp(tmp))
	if err := os.WriteFile(filepath.Join(control, "stuck"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	req := shRequest(t, "stuck-start", okScript)
	ctx, cancel := context.WithTimeout(context.Background(), patient(20*time.Second))
	defer cancel()
	rsp, err := s.callErr(ctx, req)
	if err != nil {
		t.Fatalf("RunFunction: %v\n%s", err, s.stderr)
	}
	wantFatal(t, req, rsp, "did not start within the limit of 2s", "crun start")
	eventually(t, 5*time.Second, "the hung crun start killed", func() bool { return len(processesWith(t, marker)) == 0 })
	next := s.call(t, shRequest(t, "after", okScript))
	if len(next.GetResults()) != 0 || next.GetDesired().GetResources()["a"] == nil {
		t.Errorf("the call after: %v", next)
	}
	assertNoLeaks(t, s, cache, tmp)
}

// TestRuntimeVersionHangs: a runtime whose --version, which ocifn runs to
// check it at startup, never answers stops the start with an error that
// says so, instead of a server that never listens and never logs why.
func TestRuntimeVersionHangs(t *testing.T) {
	wrapper, _, marker := runtimeWrapper(t, "crun-version-hangs", "#!/bin/sh\ncase \"$1\" in --version) sleep %[3]s ;; esac\nexec %[2]s \"$@\"\n")
	s := startProcess(t, []string{"--insecure", "--tarball", image("sh-function.tar"), "--runtime", wrapper})
	log := s.wait(t)
	if s.cmd.ProcessState.Success() {
		t.Errorf("ocifn serve exited 0 with a runtime that hangs\n%s", log)
	}
	mustContain(t, "log", log, wrapper+" --version did not answer within 10s")
	if pids := processesWith(t, marker); len(pids) != 0 {
		t.Errorf("the hung --version outlived the start: %v", pids)
	}
}

// stopForkServerChild stops (SIGSTOP) the first child of the fork server
// fs that has started a process of its own: a `crun create` stuck after it
// has cloned its container's first process. The stopped pid is sent on
// the returned channel; the watch ends with the test.
func stopForkServerChild(t *testing.T, fs int) <-chan int {
	t.Helper()
	stopped := make(chan int, 1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(done); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			for _, c := range childrenOf(t, fs) {
				if len(childrenOf(t, c)) > 0 && syscall.Kill(c, syscall.SIGSTOP) == nil {
					stopped <- c
					return
				}
			}
		}
	}()
	return stopped
}

// zombiesUnder lists the zombies among the processes below pid.
func zombiesUnder(t *testing.T, pid int) []int {
	t.Helper()
	var out []int
	for _, p := range descendants(t, pid) {
		if processState(p) == "Z" {
			out = append(out, p)
		}
	}
	return out
}

// stuckLines are the server's log lines that say a crun command was
// killed at its deadline.
func stuckLines(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `msg="crun did not end in time and was killed"`) {
			out = append(out, l)
		}
	}
	return out
}

// TestStoppedCrunCreateInTheForkServer: a `crun create` that the fork
// server forked and that hangs (here stopped with SIGSTOP once it has
// cloned the container's first process) is killed 1 s after the call's
// end with what it started, and those are reaped: the container's first
// process, which comes to ocifn, is not left a zombie of the server.
func TestStoppedCrunCreateInTheForkServer(t *testing.T) {
	cache, tmp := cacheDir(t), t.TempDir()
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--warm", "0", "--timeout", "1s"}, privateTmp(tmp))
	fs := forkServerOf(t, servingPID(t, s))
	if fs == 0 {
		t.Fatal("no fork server among the serving process's children")
	}
	stopped := stopForkServerChild(t, fs)
	// A crun create takes milliseconds: the watch may miss one.
	for i := 0; ; i++ {
		req := shRequest(t, fmt.Sprintf("stopped-create-%d", i), okScript)
		start := time.Now()
		rsp := s.call(t, req)
		select {
		case pid := <-stopped:
			t.Logf("stopped the fork server's child %d; answered in %s", pid, time.Since(start).Round(time.Millisecond))
			wantFatal(t, req, rsp, "did not start within the limit of 1s", "crun create")
		default:
			if i < 10 {
				continue
			}
			t.Fatal("every crun create ran before the test could stop it")
		}
		break
	}
	eventually(t, 5*time.Second, "no zombie under the server", func() bool { return len(zombiesUnder(t, s.cmd.Process.Pid)) == 0 })
	next := s.call(t, shRequest(t, "after", okScript))
	if len(next.GetResults()) != 0 || next.GetDesired().GetResources()["a"] == nil {
		t.Errorf("the call after: %v", next)
	}
	assertNoLeaks(t, s, cache, tmp)
}

// stopForkServer stops (SIGSTOP) the fork server of s, and lets it go on
// (SIGCONT) when the test ends, should ocifn not have killed it.
func stopForkServer(t *testing.T, s *server) int {
	t.Helper()
	fs := forkServerOf(t, servingPID(t, s))
	if fs == 0 {
		t.Fatal("no fork server among the serving process's children")
	}
	if err := syscall.Kill(fs, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(fs, syscall.SIGCONT) })
	return fs
}

// TestCallWithAStoppedForkServer: a call whose crun create the fork
// server never runs (it is stopped) is answered 1 s after --timeout, as
// for any crun create that hangs, with the Fatal result of a function that
// did not start; the server is killed then, not 5 s later for a crun
// delete sent to it too, and the next calls execute crun.
func TestCallWithAStoppedForkServer(t *testing.T) {
	cache, tmp := cacheDir(t), t.TempDir()
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--warm", "0", "--timeout", "1s"}, privateTmp(tmp))
	fs := stopForkServer(t, s)
	req := shRequest(t, "stopped-server", okScript)
	start := time.Now()
	rsp := s.call(t, req)
	took := time.Since(start)
	t.Logf("answered in %s", took.Round(time.Millisecond))
	// The cause is the call's timeout, not the end of a context.
	wantFatal(t, req, rsp, "did not start within the limit of 1s", "crun create", "function timeout")
	if rs := rsp.GetResults(); len(rs) == 1 && strings.Contains(rs[0].GetMessage(), "context canceled") {
		t.Errorf("the Fatal result blames a cancelled context: %s", rs[0].GetMessage())
	}
	// --timeout, then 1 s for crun create; 5 s more before.
	if limit := 3 * time.Second; took > patient(limit) {
		t.Errorf("the call took %s, want at most %s", took, patient(limit))
	}
	eventually(t, 5*time.Second, "the stopped fork server killed and reaped", func() bool { return syscall.Kill(fs, 0) != nil })
	// Once, naming the command and the container, with what ended it;
	// the delete of that container after, executed, is not stuck.
	if lines := stuckLines(s.stderr.String()); len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") ||
		!strings.Contains(lines[0], "command=create container=ocifn-") || !strings.Contains(lines[0], "function timeout") {
		t.Errorf("want one WARN line for the stuck crun create, got %q\n%s", lines, s.stderr)
	}
	for i := range 2 {
		start := time.Now()
		next := s.call(t, shRequest(t, fmt.Sprintf("after-%d", i), okScript))
		if len(next.GetResults()) != 0 || next.GetDesired().GetResources()["a"] == nil {
			t.Errorf("call %d after: %v", i, next)
		}
		t.Logf("call %d after answered in %s", i, time.Since(start).Round(time.Millisecond))
	}
	assertNoLeaks(t, s, cache, tmp)
}

// TestShutdownWithAStoppedForkServer: a server whose fork server is
// stopped stops in about 5 s, the time a crun delete sent to it is given,
// once, whatever the pool's size: not 5 s for the warm containers'
// deletes and 5 s more for the fork server's own end; and at once when
// nothing is sent to it, rather than after 5 s for an end that a stopped
// server never comes to.
func TestShutdownWithAStoppedForkServer(t *testing.T) {
	for _, tc := range []struct {
		warm  int
		limit time.Duration
	}{{0, 2 * time.Second}, {6, 7 * time.Second}} {
		warm, limit := tc.warm, tc.limit
		t.Run(fmt.Sprintf("warm_%d", warm), func(t *testing.T) {
			cache := cacheDir(t)
			s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--warm", strconv.Itoa(warm), "--max-concurrency", "8", "--grace-period", "5s"})
			eventually(t, 20*time.Second, "the warm containers made", func() bool { return s.warmContainers(t) == warm })
			fs := stopForkServer(t, s)
			took := stopWithin(t, s, 25*time.Second)
			if took > patient(limit) {
				t.Errorf("the shutdown took %s, want at most %s", took, patient(limit))
			}
			if syscall.Kill(fs, 0) == nil {
				t.Errorf("the fork server %d outlived the server", fs)
			}
			if left, _ := filepath.Glob(filepath.Join(cache, "bundle-*")); len(left) != 0 {
				t.Errorf("the cache directory still holds %v", left)
			}
		})
	}
}

// stopWithin sends the server SIGTERM and returns how long it took to
// exit; the test fails if it takes longer than d (patient), or exits with
// anything but 0.
func stopWithin(t *testing.T, s *server, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
	case <-time.After(patient(d)):
		_ = s.cmd.Process.Kill()
		t.Fatalf("the server did not stop within %s of SIGTERM\n%s", patient(d), s.stderr)
	}
	took := time.Since(start)
	t.Logf("stopped in %s", took.Round(time.Millisecond))
	if !s.cmd.ProcessState.Success() {
		t.Errorf("ocifn serve: %v\n%s", s.cmd.ProcessState, s.stderr)
	}
	return took
}

// wrappers counts the runtime wrappers written, for their markers.
var wrappers atomic.Int32

// runtimeWrapper writes a shell script, name, to give --runtime in crun's
// place, in a new control directory the test drives it through, and
// returns it, the directory and a number unique to it. script is a format
// that gets the control directory (%[1]s), the real crun (%[2]s) and that
// number (%[3]s), as the seconds of a sleep, say, by which ps finds the
// processes it leaves behind.
func runtimeWrapper(t *testing.T, name, script string) (wrapper, control, marker string) {
	t.Helper()
	crun, err := exec.LookPath("crun")
	if err != nil {
		t.Fatal(err)
	}
	control = t.TempDir()
	wrapper = filepath.Join(control, name)
	marker = strconv.Itoa(7400+int(wrappers.Add(1))) + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(wrapper, []byte(fmt.Sprintf(script, control, crun, marker)), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper, control, marker
}
