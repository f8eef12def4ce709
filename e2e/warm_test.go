package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// childrenOf returns the child pids of pid.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			n, _ := strconv.Atoi(s)
			out = append(out, n)
		}
	}
	return out
}

// TestWarmContainers: with --warm, containers are created ahead of calls,
// but every call still gets a fresh container of its own (an empty /tmp, no
// process but its own), and shutdown removes the containers that never ran.
// (Namespace inode numbers are no proof: the kernel reuses those of
// namespaces that are gone.)
func TestWarmContainers(t *testing.T) {
	cache := cacheDir(t)
	s := startServer(t, []string{"--tarball", image("probe.tar"), "--cache-dir", cache, "--warm", "3"})
	for i := range 5 {
		got := probeReport(t, s, probeRequest(t, fmt.Sprintf("warm-%d", i), nil, "no-marker", fmt.Sprintf("call-%d", i)))
		if tmp := sub(got, "tmp"); tmp["before"] != nil || tmp["write"] != "ok" {
			t.Errorf("call %d: /tmp %v, want empty and writable: a container serves one call only", i, tmp)
		}
		if procs := sub(got, "processes"); procs["count"] != 1.0 || procs["self"] != "1" {
			t.Errorf("call %d: processes %v, want only itself, as pid 1", i, procs)
		}
	}

	// The pool refills: three created containers wait, their processes
	// handed to ocifn (the subreaper) by crun; or more, when a call found
	// it empty on a loaded machine and it grew to meet the calls.
	server := servingPID(t, s)
	serverPIDNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", server))
	if err != nil {
		t.Fatal(err)
	}
	var pooled []int
	eventually(t, 10*time.Second, "three warm containers or more", func() bool {
		// Besides the containers, the crun that creates them.
		fs := forkServerOf(t, server)
		pooled = slices.DeleteFunc(childrenOf(t, server), func(pid int) bool { return pid == fs })
		if len(pooled) < 3 {
			return false
		}
		// A child in the server's own pid namespace is a crun that
		// is still creating its container.
		for _, pid := range pooled {
			if ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); ns == "" || ns == serverPIDNS {
				return false
			}
		}
		return true
	})
	// Each waits with its seccomp filter loaded already, so that the
	// kernel's compilation of the filter is not on a call's path
	// (hack/crun-patches/seccomp-before-the-exec-fifo.patch).
	for _, pid := range pooled {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"\nNoNewPrivs:\t1\n", "\nSeccomp:\t2\n"} {
			if !strings.Contains(string(status), want) {
				t.Errorf("warm container process %d waits without %q in its status", pid, strings.TrimSpace(want))
			}
		}
	}

	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	s.wait(t)
	for _, pid := range pooled {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			t.Errorf("warm container process %d still exists after shutdown", pid)
		}
	}
	if left, _ := os.ReadDir(cache); len(left) != 0 {
		t.Errorf("left in the cache directory: %v", left)
	}
}
