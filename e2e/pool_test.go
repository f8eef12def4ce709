package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// TestWarmPoolFollowsCalls: the warm pool grows to as many containers as
// calls ran at once, so the next burst finds them ready; after --warm-idle
// without a call it lets every container go, --warm included, and the next
// call still gets its answer and refills the pool. Each call that found no
// warm container is counted.
func TestWarmPoolFollowsCalls(t *testing.T) {
	cache := cacheDir(t)
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache,
		"--warm", "1", "--warm-idle", "3s", "--max-concurrency", "8", "--metrics-address", "127.0.0.1:0"})
	eventually(t, 10*time.Second, "one warm container at start", func() bool { return s.metric(t, "ocifn_warm_containers") == 1 })

	burst := func(round int) {
		t.Helper()
		var wg sync.WaitGroup
		for i := range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rsp := s.call(t, shRequest(t, fmt.Sprintf("burst-%d-%d", round, i), "sleep 0.5; "+okScript))
				if len(rsp.GetResults()) > 0 && rsp.GetResults()[0].GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
					t.Errorf("burst %d call %d: %s", round, i, rsp.GetResults()[0].GetMessage())
				}
			}()
		}
		wg.Wait()
	}
	burst(1)
	// The one warm container serves one call; the pool grows with each call
	// that overlaps and fills at once, so a call that arrives a few
	// milliseconds late may find a container made meanwhile. How many do is
	// up to the scheduler; that some calls missed and were counted is not.
	if m := s.metric(t, "ocifn_warm_misses_total"); m < 1 || m > 5 {
		t.Errorf("ocifn_warm_misses_total = %v after 6 calls at once with 1 warm container, want 1 to 5", m)
	}
	eventually(t, 10*time.Second, "the pool grown to the six calls that overlapped", func() bool {
		return s.metric(t, "ocifn_warm_containers") == 6 && len(containerStates(t, cache)) == 6
	})
	before := s.metric(t, "ocifn_warm_misses_total")
	burst(2)
	if m := s.metric(t, "ocifn_warm_misses_total"); m != before {
		t.Errorf("a second burst of 6 calls found %v without a warm container, want none", m-before)
	}

	// Scale to zero: no container process and no container state left.
	eventually(t, 15*time.Second, "no warm container after --warm-idle", func() bool {
		return s.metric(t, "ocifn_warm_containers") == 0 && s.metric(t, "ocifn_warm_target") == 0 &&
			len(containerStates(t, cache)) == 0 && len(descendants(t, s.cmd.Process.Pid)) <= s.helpers(t)
	})
	before = s.metric(t, "ocifn_warm_misses_total")
	got := s.call(t, shRequest(t, "after-idle", okScript))
	if len(got.GetResults()) > 0 {
		t.Fatalf("the call after scale-down: %v", got.GetResults())
	}
	if r := got.GetDesired().GetResources()["a"]; r == nil {
		t.Fatalf("the call after scale-down answered %v, want desired unchanged", got)
	}
	if m := s.metric(t, "ocifn_warm_misses_total"); m != before+1 {
		t.Errorf("the first call after scale-down counted %v misses, want 1", m-before)
	}
	eventually(t, 10*time.Second, "the pool refilled to --warm", func() bool { return s.metric(t, "ocifn_warm_containers") == 1 })
}

// warmContainers is how many warm containers the server holds now, as its
// metrics report them.
func (s *server) warmContainers(t *testing.T) int {
	t.Helper()
	return int(s.metric(t, "ocifn_warm_containers"))
}

// TestWarmPoolKeepsUpWithAClosedLoop: one client calling again as soon as
// it has its answer keeps a single call running, yet consumes containers
// faster than crun makes them with a pool of --warm 2. A call that finds
// the pool empty although it was as large as the calls running grows it,
// so far fewer of the loop's calls find no container ready.
//
// How many still do depends on the machine: where a container costs more
// CPU than a call leaves free on it, no pool keeps up with a closed loop
// for long (on the 2026-11-23 machine under 2% of such calls found none,
// on one that makes containers at twice the cost 9-14%). So the yardstick
// is the same loop against a pool held at --warm 2, which
// --max-concurrency 2 keeps from growing (29% and 33% on those machines).
func TestWarmPoolKeepsUpWithAClosedLoop(t *testing.T) {
	const calls = 300
	held, _ := closedLoopMisses(t, calls, "--max-concurrency", "2")
	misses, target := closedLoopMisses(t, calls)
	t.Logf("of %d calls in a closed loop, %v found no warm container with the pool growing (up to %v), %v with it held at 2", calls, misses, target, held)
	if misses > 0 && target <= 2 {
		t.Errorf("%v calls found the pool empty while one call ran at a time, and it still fills up to %v, not more than --warm 2", misses, target)
	}
	if misses > held/2 {
		t.Errorf("%v of %d calls in a closed loop found no warm container, want at most half of the %v that did with the pool held at --warm 2", misses, calls, held)
	}
}

// closedLoopMisses makes calls, one after another, to a server of the
// trivial function with --warm 2 and the extra flags, and returns how many
// found no warm container and the pool's target after them.
func closedLoopMisses(t *testing.T, calls int, extra ...string) (misses, target float64) {
	t.Helper()
	s := startServer(t, append([]string{"--tarball", image("trivial.tar"), "--warm", "2", "--metrics-address", "127.0.0.1:0"}, extra...))
	defer s.stop() // the next server gets the machine to itself
	eventually(t, 10*time.Second, "two warm containers at start", func() bool { return s.metric(t, "ocifn_warm_containers") == 2 })
	for i := range calls {
		if rsp := s.call(t, &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: fmt.Sprint(i)}}); len(rsp.GetResults()) > 0 {
			t.Fatalf("call %d: %v", i, rsp.GetResults())
		}
	}
	return s.metric(t, "ocifn_warm_misses_total"), s.metric(t, "ocifn_warm_target")
}

// TestMountNamespacesHeldOnlyForLiveContainers: ocifn keeps a reference to
// each container's mount namespace, so that the kernel's unmounting is not
// on the call's path (docs/performance.md, what was tried), and lets it go
// once the call is answered. After many calls it holds exactly the
// namespaces of its warm containers, not one per call made, and after the
// pool scaled to zero it holds none. The server runs without a garbage
// collector (no GOGC, no memory limit), whose finalizers would otherwise
// close descriptors that ocifn forgot.
func TestMountNamespacesHeldOnlyForLiveContainers(t *testing.T) {
	cache := cacheDir(t)
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache,
		"--warm", "2", "--warm-idle", "5s", "--metrics-address", "127.0.0.1:0"}, withEnv("GOGC=off", "GOMEMLIMIT=off"))
	for i := range 12 {
		if rsp := s.call(t, shRequest(t, fmt.Sprintf("call-%d", i), okScript)); len(rsp.GetResults()) > 0 {
			t.Fatalf("call %d: %v", i, rsp.GetResults())
		}
	}
	var held, warm []string
	for deadline := time.Now().Add(4 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		held, warm = mountNamespaces(t, s.cmd.Process.Pid)
		// The pool may have grown past --warm (headroom): what counts is
		// that the namespaces held are those of the warm containers.
		n := s.warmContainers(t)
		if n >= 2 && len(warm) == n && slices.Equal(held, warm) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 12 calls ocifn holds %d mount namespaces %v; want those of its %d warm containers %v", len(held), held, n, warm)
		}
	}
	eventually(t, 15*time.Second, "no mount namespace held after --warm-idle", func() bool {
		held, warm = mountNamespaces(t, s.cmd.Process.Pid)
		return s.warmContainers(t) == 0 && len(held) == 0 && len(warm) == 0
	})
}

// mountNamespaces returns, sorted, the mount namespaces that the processes
// of the tree under pid (ocifn serve) hold by a descriptor, and those that
// its other processes (containers) run in.
func mountNamespaces(t *testing.T, pid int) (held, containers []string) {
	t.Helper()
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	ocifn, other := map[string]bool{}, map[string]bool{}
	for _, p := range append(descendants(t, pid), pid) {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", p))
		if err != nil {
			continue // gone meanwhile
		}
		if e, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p)); e == exe {
			ocifn[ns] = true
		} else {
			other[ns] = true
		}
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", p))
		for _, fd := range fds {
			if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "mnt:[") {
				held = append(held, l)
			}
		}
	}
	for ns := range other {
		if !ocifn[ns] {
			containers = append(containers, ns)
		}
	}
	slices.Sort(held)
	slices.Sort(containers)
	return held, containers
}

// TestWarmAtMostMaxConcurrency: a --warm above --max-concurrency, which no
// more calls could use at once, is lowered to it, with a warning.
func TestWarmAtMostMaxConcurrency(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("trivial.tar"), "--cache-dir", cacheDir(t),
		"--warm", "6", "--max-concurrency", "2", "--metrics-address", "127.0.0.1:0"})
	eventually(t, 10*time.Second, "two warm containers", func() bool { return s.metric(t, "ocifn_warm_containers") == 2 })
	// Give a pool of six the time to fill before looking again.
	time.Sleep(500 * time.Millisecond)
	if n, target := s.metric(t, "ocifn_warm_containers"), s.metric(t, "ocifn_warm_target"); n != 2 || target != 2 {
		t.Errorf("%v warm containers, target %v; want 2, --max-concurrency", n, target)
	}
	mustContain(t, "log", s.stderr.String(), "--warm is more than --max-concurrency")
}

// TestWarmContainersEndWithTheServer: when ocifn dies without cleaning up
// (SIGKILL), the processes of its warm containers, which wait for their
// start on an exec fifo whose write end ocifn held, end as well, rather
// than spinning on the fifo that the kernel closed unwritten
// (hack/crun-patches/unwritten-exec-fifo-ends-the-wait.patch).
func TestWarmContainersEndWithTheServer(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("trivial.tar"), "--warm", "2", "--metrics-address", "127.0.0.1:0"})
	eventually(t, 10*time.Second, "two warm containers", func() bool { return s.warmContainers(t) == 2 })
	serving := servingPID(t, s)
	fork := forkServerOf(t, serving)
	var warm []int
	for _, pid := range childrenOf(t, serving) {
		if pid != fork {
			warm = append(warm, pid)
		}
	}
	if len(warm) != 2 {
		t.Fatalf("the serving process's children but its fork server are %v, want its two warm containers", warm)
	}
	t.Cleanup(func() {
		// Should they have outlived the server, they spin until killed.
		if t.Failed() {
			for _, pid := range warm {
				if st := processState(pid); st != "" && st != "Z" {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	})
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	awaitExit(t, s.exited, "ocifn serve after SIGKILL", s.stderr)
	eventually(t, 10*time.Second, fmt.Sprintf("the warm containers' processes %v ended", warm), func() bool {
		for _, pid := range warm {
			if st := processState(pid); st != "" && st != "Z" {
				return false
			}
		}
		return true
	})
}

// processState is the state letter of a process (R, S, Z, ...), or "" if
// there is none with that pid.
func processState(pid int) string {
	if f := statFields(pid); len(f) > 0 {
		return f[0]
	}
	return ""
}
