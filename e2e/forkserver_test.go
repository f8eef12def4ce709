package e2e

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// servingPID is the ocifn process that serves: the re-executed child of the
// one started (the same binary), if there is one.
func servingPID(t *testing.T, s *server) int {
	t.Helper()
	pid := s.cmd.Process.Pid
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	for _, c := range childrenOf(t, pid) {
		if e, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", c)); e == exe {
			return c
		}
	}
	return pid
}

// forkServerOf returns the resident crun that creates the containers of
// the serving ocifn process pid (bundle/forkserver.go), or 0 if none. Warm
// containers, also its children, show the same command line until they
// run the function (they are forks of it), but each has a pid namespace of
// its own.
func forkServerOf(t *testing.T, pid int) int {
	t.Helper()
	own, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return 0
	}
	for _, c := range childrenOf(t, pid) {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c))
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", c))
		if ns == own && slices.Contains(strings.Split(string(cmdline), "\x00"), "--ocifn-fork-server") {
			return c
		}
	}
	return 0
}

// helpers counts the server's processes under the one started that are not
// containers: its re-executed self, if any, and that one's fork server.
func (s *server) helpers(t *testing.T) int {
	t.Helper()
	n, serving := 0, servingPID(t, s)
	if serving != s.cmd.Process.Pid {
		n++
	}
	if forkServerOf(t, serving) != 0 {
		n++
	}
	return n
}

// TestForkServer: ocifn serve creates containers with a resident crun that
// forks once per container instead of executing crun
// (hack/crun-patches/fork-server.patch), and its log says so. When that
// crun dies, calls go on, crun being executed per container again.
func TestForkServer(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--warm", "0"})
	mustContain(t, "server log", s.stderr.String(), "crun=fork-server")
	pid := forkServerOf(t, servingPID(t, s))
	if pid == 0 {
		t.Fatal("no fork server among the serving process's children")
	}
	for i := range 3 {
		rsp := s.call(t, shRequest(t, fmt.Sprintf("served-%d", i), okScript))
		if len(rsp.GetResults()) != 0 || rsp.GetDesired().GetResources()["a"] == nil {
			t.Fatalf("call %d through the fork server: %v", i, rsp)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Once it is gone (ocifn reaps it), nothing is sent to it any more.
	eventually(t, 5*time.Second, "the fork server reaped", func() bool { return syscall.Kill(pid, 0) != nil })
	for i := range 3 {
		rsp := s.call(t, shRequest(t, fmt.Sprintf("executed-%d", i), okScript))
		if len(rsp.GetResults()) != 0 || rsp.GetDesired().GetResources()["a"] == nil {
			t.Fatalf("call %d after the fork server died: %v", i, rsp)
		}
	}
	if got := forkServerOf(t, servingPID(t, s)); got != 0 {
		t.Errorf("a fork server (%d) is back; crun should be executed now", got)
	}
}

// TestForkServerEndsWithOcifn: ocifn serve stops its fork server before it
// exits, and waits for it, so that it leaves no process behind (a cgroup
// it leaves could not be removed otherwise).
func TestForkServerEndsWithOcifn(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("sh-function.tar")})
	if rsp := s.call(t, shRequest(t, "before-stop", okScript)); len(rsp.GetResults()) != 0 {
		t.Fatalf("call: %v", rsp.GetResults())
	}
	pid := forkServerOf(t, servingPID(t, s))
	if pid == 0 {
		t.Fatal("no fork server among the serving process's children")
	}
	s.stop()
	if err := syscall.Kill(pid, 0); err == nil {
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		t.Errorf("the fork server %d outlived ocifn serve: %s", pid, stat)
	}
}
