package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/ocifn/ocifn/host"
)

// envCgroupV2 is set by `make test-cgroupv2` in its guest: the tests that
// need a pure cgroup v2 host then fail, rather than skip, without one.
const envCgroupV2 = "OCIFN_E2E_CGROUPV2"

// requireCgroupV2 skips the test on a host that does not mount cgroup v2
// alone with the memory and pids controllers (this project's CI machines
// are hybrid), unless envCgroupV2 says such a host is expected.
func requireCgroupV2(t *testing.T) {
	t.Helper()
	cg, err := host.DetectCgroups()
	why := ""
	switch {
	case err != nil:
		why = err.Error()
	case cg.Layout != host.CgroupUnified:
		why = fmt.Sprintf("the host mounts cgroups in %s mode", cg.Layout)
	default:
		b, _ := os.ReadFile(filepath.Join(cg.Unified, "cgroup.subtree_control"))
		if f := strings.Fields(string(b)); !slices.Contains(f, "memory") || !slices.Contains(f, "pids") {
			why = fmt.Sprintf("the root cgroup does not enable memory and pids for its children (%q)", b)
		}
	}
	if why == "" {
		return
	}
	if os.Getenv(envCgroupV2) == "1" {
		t.Fatalf("%s=1 but this is not a pure cgroup v2 host: %s", envCgroupV2, why)
	}
	t.Skipf("needs a pure cgroup v2 host with memory and pids (%s); `make test-cgroupv2` runs it in one", why)
}

// testCgroups is the cgroup the tests make their delegated cgroups in.
const testCgroups = "/sys/fs/cgroup/ocifn-e2e"

// delegate makes a cgroup with the memory and pids controllers for the
// test and removes it (children first) when the test ends. With uid >= 0 it
// does by hand what systemd's Delegate=yes does for a user's service: the
// cgroup and its files belong to the user, who gets the child cgroup "svc"
// to run in; the function returns that child. Otherwise it returns the
// cgroup itself.
func delegate(t *testing.T, uid, gid int) string {
	t.Helper()
	enable := func(dir string) {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+memory +pids"), 0); err != nil {
			t.Fatalf("cannot enable memory and pids in %s: %v", dir, err)
		}
	}
	if err := os.Mkdir(testCgroups, 0o755); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	enable(testCgroups)
	dir, err := os.MkdirTemp(testCgroups, strings.ReplaceAll(t.Name(), "/", "-")+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeCgroup(t, dir) })
	if uid < 0 {
		return dir
	}
	enable(dir)
	svc := filepath.Join(dir, "svc")
	if err := os.Mkdir(svc, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, svc} {
		for _, f := range []string{"", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"} {
			if err := os.Chown(filepath.Join(d, f), uid, gid); err != nil {
				t.Fatal(err)
			}
		}
	}
	return svc
}

// removeCgroup removes a cgroup and the cgroups below it.
func removeCgroup(t *testing.T, dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeCgroup(t, filepath.Join(dir, e.Name()))
		}
	}
	if err := syscall.Rmdir(dir); err != nil && !os.IsNotExist(err) {
		t.Errorf("cannot remove the test cgroup %s: %v", dir, err)
	}
}

// inCgroup starts the server in the cgroup dir (clone3's
// CLONE_INTO_CGROUP). With ownNamespace, it also gets a cgroup namespace
// rooted there and that namespace's cgroupfs at /sys/fs/cgroup, as a
// container runtime gives a container with a private cgroup namespace and
// a writable cgroupfs.
func inCgroup(t *testing.T, dir string, ownNamespace bool) serverOption {
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return func(c *exec.Cmd) {
		if c.SysProcAttr == nil {
			c.SysProcAttr = &syscall.SysProcAttr{}
		}
		c.SysProcAttr.UseCgroupFD, c.SysProcAttr.CgroupFD = true, int(f.Fd())
		if !ownNamespace {
			return
		}
		c.SysProcAttr.Cloneflags |= syscall.CLONE_NEWCGROUP | syscall.CLONE_NEWNS
		script := `mount --make-rprivate / && umount -l /sys/fs/cgroup && mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup && exec "$@"`
		c.Args = append([]string{"sh", "-c", script, "sh", c.Path}, c.Args[1:]...)
		c.Path = "/bin/sh"
	}
}

// callCgroups returns the cgroups below ocifn's cgroup dir other than its
// own leaf: those crun made for calls (running, or warm and waiting).
func callCgroups(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != "ocifn" {
			out = append(out, e.Name())
		}
	}
	return out
}

// readCgroupFile reads one file of a cgroup, trimmed ("" if it is gone).
func readCgroupFile(dir, name string) string {
	b, _ := os.ReadFile(filepath.Join(dir, name))
	return strings.TrimSpace(string(b))
}

// eventValue reads "key N" from a cgroup's events file.
func eventValue(dir, file, key string) int {
	for _, line := range strings.Split(readCgroupFile(dir, file), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

const (
	testMemoryLimit = 64 << 20
	testPidsLimit   = 32
)

// TestPerCallLimitsInCgroups: on a pure cgroup v2 host, with a cgroup
// delegated to ocifn — as root, at the root of a cgroup namespace of its
// own like a container; and as an unprivileged user, in a cgroup that user
// owns — every call gets a cgroup of its own with --memory-limit and
// --pids-limit as memory.max and pids.max, read back while it runs; a
// memory hog is OOM-killed and its Fatal result names the limit, the OOM
// kill and the container; a fork bomb stops at pids.max; other calls are
// answered meanwhile; and no call's cgroup is left after a call, a
// timeout, or SIGKILL of the server and a restart.
func TestPerCallLimitsInCgroups(t *testing.T) {
	requireCgroupV2(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test makes cgroups and must run as root")
	}
	t.Run("root_in_its_own_cgroup_namespace", func(t *testing.T) {
		start := func(cache string) (*server, string) {
			dir := delegate(t, -1, -1)
			return startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--timeout", "30s",
				"--memory-limit", strconv.Itoa(testMemoryLimit), "--pids-limit", strconv.Itoa(testPidsLimit)}, inCgroup(t, dir, true)), dir
		}
		checkPerCallLimits(t, cacheDir(t), start)
	})
	t.Run("unprivileged_in_a_delegated_cgroup", func(t *testing.T) {
		u, home, as := unprivileged(t, "sh-function.tar")
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		tarball := filepath.Join(home, "sh-function.tar")
		start := func(cache string) (*server, string) {
			dir := delegate(t, uid, gid)
			return startServer(t, []string{"--tarball", tarball, "--cache-dir", cache, "--timeout", "30s",
				"--memory-limit", strconv.Itoa(testMemoryLimit), "--pids-limit", strconv.Itoa(testPidsLimit)},
				inCgroup(t, dir, false), as), dir
		}
		checkPerCallLimits(t, filepath.Join(home, "cache"), start)
	})
}

// checkPerCallLimits runs the checks of TestPerCallLimitsInCgroups on
// servers started by start, which makes a delegated cgroup for each and
// returns it.
func checkPerCallLimits(t *testing.T, cache string, start func(cache string) (*server, string)) {
	s, dir := start(cache)
	restart := start
	mustContain(t, "startup log", s.stderr.String(), "per-call limits enforced with cgroups")
	if strings.Contains(s.stderr.String(), "fall back to rlimits") {
		t.Fatalf("the server fell back to rlimits in a delegated cgroup:\n%s", s.stderr)
	}

	// The limits, read back from a running call's own cgroup.
	t.Run("limits_in_the_call_cgroup", func(t *testing.T) {
		done := make(chan *fnv1.RunFunctionResponse, 1)
		go func() {
			rsp, err := s.callErr(context.Background(), shRequest(t, "t-sleep", "sleep 3; "+okScript))
			if err != nil {
				t.Errorf("call: %v", err)
			}
			done <- rsp
		}()
		var got string
		eventually(t, 10*time.Second, "a running call in a cgroup of its own", func() bool {
			for _, c := range callCgroups(t, dir) {
				if d := filepath.Join(dir, c); cgroupRunsSleep(d) {
					got = fmt.Sprintf("memory.max=%s memory.swap.max=%s pids.max=%s",
						readCgroupFile(d, "memory.max"), readCgroupFile(d, "memory.swap.max"), readCgroupFile(d, "pids.max"))
					return true
				}
			}
			return false
		})
		want := fmt.Sprintf("memory.max=%d memory.swap.max=0 pids.max=%d", testMemoryLimit, testPidsLimit)
		if got != want {
			t.Errorf("the call's cgroup has %s, want %s", got, want)
		}
		if rsp := <-done; rsp == nil || len(rsp.GetResults()) != 0 {
			t.Errorf("the sleeping call: %v", rsp)
		}
	})

	// A memory hog and a fork bomb, next to calls that must be answered.
	t.Run("hog_and_fork_bomb_contained", func(t *testing.T) {
		calls := &backgroundCalls{s: s}
		run := func(name, script string) { calls.run(t, name, script) }
		// awk doubles a string up to 4 GiB; the call's cgroup allows 64 MiB.
		run("memory-hog", `awk 'BEGIN { s = "x"; for (i = 0; i < 32; i++) s = s s; print "survived" > "/dev/stderr" }'; exit 9`)
		// A script that prints what its killed command printed, nothing,
		// and exits 0: its answer fails too, for the same reason.
		run("memory-hog-exit-0", `out=$(awk 'BEGIN { s = "x"; for (i = 0; i < 32; i++) s = s s; print s }'); printf '%s' "$out"`)
		// Each shell forks two more until fork fails; the call ends when
		// its first shell exits, which ends its pid namespace.
		run("fork-bomb", `b() { b | b & }; b; sleep 8; exit 3`)
		// A call that outlives its timeout.
		run("sleeper", `sleep 120`)
		// The bomb's cgroup, seen from outside while it runs: pids.max
		// refused forks, and the count never passed it.
		bombed, peak, events := false, 0, map[string]string{}
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) && !bombed {
			for _, c := range callCgroups(t, dir) {
				d := filepath.Join(dir, c)
				n, _ := strconv.Atoi(readCgroupFile(d, "pids.current"))
				peak = max(peak, n)
				events[c] = readCgroupFile(d, "pids.events")
				if eventValue(d, "pids.events", "max") > 0 {
					bombed = true
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !bombed || peak > testPidsLimit {
			t.Errorf("the fork bomb's cgroup: pids.events max reached %t, peak pids.current %d (pids.max %d); pids.events: %v", bombed, peak, testPidsLimit, events)
		}
		for i := range 5 {
			tag := fmt.Sprintf("bystander-%d", i)
			rsp, err := s.callErr(context.Background(), shRequest(t, tag, okScript))
			if err != nil || len(rsp.GetResults()) != 0 || rsp.GetMeta().GetTag() != tag {
				t.Errorf("%s during the hog and the bomb: %v %v", tag, err, rsp.GetResults())
			}
		}
		results := calls.wait()
		hog := results["memory-hog"]
		if hog == nil || len(hog.GetResults()) != 1 || hog.GetResults()[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
			t.Fatalf("memory hog: %v, want one Fatal result", hog)
		}
		msg := hog.GetResults()[0].GetMessage()
		mustContain(t, "the memory hog's Fatal result", msg, "OOM killer", "container ocifn-", fmt.Sprintf("memory limit of %d bytes", testMemoryLimit))
		if strings.Contains(msg, "survived") {
			t.Errorf("the memory hog survived: %s", msg)
		}
		hog0 := results["memory-hog-exit-0"]
		if hog0 == nil || len(hog0.GetResults()) != 1 || hog0.GetResults()[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
			t.Fatalf("memory hog that exits 0: %v, want one Fatal result", hog0)
		}
		mustContain(t, "the Fatal result of the memory hog that exits 0", hog0.GetResults()[0].GetMessage(),
			"OOM killer", "container ocifn-", fmt.Sprintf("memory limit of %d bytes", testMemoryLimit))
		bomb := results["fork-bomb"]
		if bomb == nil || len(bomb.GetResults()) != 1 || !strings.Contains(bomb.GetResults()[0].GetMessage(), "exited with code 3") {
			t.Errorf("fork bomb: %v, want a Fatal result, exit code 3", bomb)
		}
		// The timeout is long for the emulated guest, where calls beside a
		// fork bomb take seconds.
		if r := results["sleeper"]; r == nil || len(r.GetResults()) != 1 || !strings.Contains(r.GetResults()[0].GetMessage(), "ran longer than the limit of 30s") {
			t.Errorf("sleeper: %v, want a Fatal result at the timeout", r)
		}
	})

	// After calls, an OOM kill and a timeout, only the warm containers'
	// cgroups are left: as many as the server reports, since the pool
	// grows to the calls that overlapped.
	eventually(t, 10*time.Second, "no call cgroup left but the warm containers'", func() bool { return len(callCgroups(t, dir)) == s.warmContainers(t) })

	// On SIGKILL the warm containers' processes end by themselves, their
	// exec fifo closed unwritten with the server
	// (hack/crun-patches/unwritten-exec-fifo-ends-the-wait.patch), and
	// their cgroups empty. A cgroup v2 tree whose controllers are enabled
	// cannot take processes again, so the server restarts in a new cgroup,
	// as a runtime restarts a container (systemd recreates a unit's
	// cgroup): its sweep removes the killed server's containers' state and
	// their empty cgroups with the old tree.
	if got := readCgroupFile(dir, "cgroup.events"); !strings.Contains(got, "populated 1") || s.warm == 0 {
		t.Fatalf("before the SIGKILL: %d warm containers, cgroup.events %q", s.warm, got)
	}
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.exited
	eventually(t, 20*time.Second, "the killed server's warm containers ended by themselves", func() bool {
		return strings.Contains(readCgroupFile(dir, "cgroup.events"), "populated 0")
	})
	s, next := restart(cache)
	if rsp := s.call(t, shRequest(t, "t-after-restart", okScript)); len(rsp.GetResults()) != 0 {
		t.Errorf("a call after the restart: %v", rsp.GetResults())
	}
	eventually(t, 10*time.Second, "only the new server's warm containers' state left", func() bool { return len(containerStates(t, cache)) == s.warm })
	s.stop()
	deadline := time.Now().Add(10 * time.Second)
	for left := callCgroups(t, next); len(left) > 0; left = callCgroups(t, next) {
		if time.Now().After(deadline) {
			// What each holds says which path left it.
			for i, name := range left {
				left[i] = fmt.Sprintf("%s (cgroup.procs %q)", name, readCgroupFile(filepath.Join(next, name), "cgroup.procs"))
			}
			t.Fatalf("call cgroups left 10s after the server stopped: %s", strings.Join(left, ", "))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOOMKillAboveTheCallsLimit: a call killed by the OOM killer because
// the memory of ocifn's own cgroup ran out (a container's or a systemd
// unit's memory.max below --memory-limit), not its own memory.max, gets a
// Fatal result that says so, rather than blaming a limit it never reached.
func TestOOMKillAboveTheCallsLimit(t *testing.T) {
	requireCgroupV2(t)
	if os.Geteuid() != 0 {
		t.Fatal("this test makes cgroups and must run as root")
	}
	dir := delegate(t, -1, -1)
	const above = 160 << 20
	if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(strconv.Itoa(above)), 0); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--timeout", "60s", "--memory-limit", "1Gi"}, inCgroup(t, dir, true))
	mustContain(t, "startup log", s.stderr.String(), "per-call limits enforced with cgroups")
	// awk doubles a string up to 4 GiB; the server's cgroup allows 160 MiB.
	rsp := s.call(t, shRequest(t, "t-hog", `awk 'BEGIN { s = "x"; for (i = 0; i < 32; i++) s = s s; print "survived" > "/dev/stderr" }'; exit 9`))
	if len(rsp.GetResults()) != 1 || rsp.GetResults()[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
		t.Fatalf("memory hog: %v, want one Fatal result\nlog:\n%s", rsp.GetResults(), s.stderr)
	}
	msg := rsp.GetResults()[0].GetMessage()
	mustContain(t, "the memory hog's Fatal result", msg, "OOM killer", "below its memory limit of 1073741824 bytes", "a cgroup above the call's")
	if strings.Contains(msg, "at its memory limit") {
		t.Errorf("the Fatal result blames the call's own limit, which the call never reached: %s", msg)
	}
}

// cgroupRunsSleep reports whether a process of the cgroup runs sleep.
func cgroupRunsSleep(dir string) bool {
	for _, pid := range strings.Fields(readCgroupFile(dir, "cgroup.procs")) {
		if comm, _ := os.ReadFile("/proc/" + pid + "/comm"); strings.TrimSpace(string(comm)) == "sleep" {
			return true
		}
	}
	return false
}

// fallbackReason is what the server's one fallback log line says on this
// host when its cgroup is not delegated to it.
func fallbackReason(t *testing.T) string {
	t.Helper()
	cg, err := host.DetectCgroups()
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case cg.Layout == host.CgroupHybrid:
		return "hybrid"
	case os.Geteuid() == 0:
		return "is not the root of its own cgroup namespace"
	}
	return "is not writable"
}

// checkPodFallback checks that the pod's server found no delegated cgroup,
// said so once, with the reason this host gives, and uses rlimits.
func checkPodFallback(t *testing.T, log string) {
	t.Helper()
	const fallback = "per-call limits fall back to rlimits"
	if n := strings.Count(log, fallback); n != 1 {
		t.Errorf("the pod logged %q %d times, want once:\n%s", fallback, n, log)
	}
	cg, err := host.DetectCgroups()
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "pod log", log, "RLIMIT_NPROC")
	// On a hybrid host the pod's crun (cgroups masked) mounts the v1
	// hierarchies: the pod sees cgroup v1 only.
	reason := "the host has cgroup v1 only"
	if cg.Layout == host.CgroupUnified {
		reason = "is not writable"
	}
	mustContain(t, "pod log", log, reason)
}
