package e2e

import (
	"fmt"
	"os"
	"path/filepath"
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
// but every call still gets a fresh container of its own (new namespaces,
// a clean /tmp), and shutdown removes the containers that never ran.
func TestWarmContainers(t *testing.T) {
	cache := cacheDir(t)
	s := startServer(t, []string{"--tarball", image("nsprobe.tar"), "--cache-dir", cache, "--warm", "3"})
	seen := map[string]bool{}
	for i := range 5 {
		got := probe(t, s)
		ns := got["ns"].(map[string]any)
		key := fmt.Sprint(ns["pid"], ns["mnt"], ns["user"])
		if seen[key] {
			t.Errorf("call %d ran in namespaces an earlier call used: %s", i, key)
		}
		seen[key] = true
		if got["tmp_write"] != "ok" || got["pid"] != "1" {
			t.Errorf("call %d: tmp_write %v, pid %v", i, got["tmp_write"], got["pid"])
		}
	}

	// The pool refills: three created containers wait, their processes
	// handed to ocifn (the subreaper) by crun.
	server := s.cmd.Process.Pid
	if c := childrenOf(t, server); len(c) == 1 {
		server = c[0] // the re-executed ocifn
	}
	var pooled []int
	eventually(t, 10*time.Second, "three warm containers", func() bool {
		pooled = childrenOf(t, server)
		return len(pooled) >= 3
	})

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
