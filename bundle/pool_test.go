package bundle

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// idlePool is a pool with one ready container and no call in flight, as
// after a call at a low rate; settle holds a clean-up back for delay.
func idlePool(delay time.Duration) (*Bundle, *warmPool) {
	p := &warmPool{
		max: 2, target: 1, made: 1, settleDelay: delay,
		ready: []*container{{id: "ready"}},
		wake:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
	}
	return &Bundle{pool: p}, p
}

// settled runs settle in the background and says when it returned.
func settled(p *warmPool) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		p.settle()
		close(done)
	}()
	return done
}

func returnsSoon(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("settle still waits after %s", what)
	}
}

// waiting waits until a settle is waiting for the next call, so that a
// take that follows is what lets it go.
func waiting(t *testing.T, p *warmPool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		p.mu.Lock()
		w := p.next != nil
		p.mu.Unlock()
		if w {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("settle never waited for the next call")
		}
		time.Sleep(time.Millisecond)
	}
}

func stillWaits(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
		t.Fatalf("settle returned %s", what)
	case <-time.After(50 * time.Millisecond):
	}
}

// TestSettleWaitsForTheNextCall: while nothing runs, the clean-up waits
// until the next call takes a container, and that call lets it go; once
// that call has left, the next clean-up waits again.
func TestSettleWaitsForTheNextCall(t *testing.T) {
	b, p := idlePool(time.Hour)
	done := settled(p)
	waiting(t, p)
	stillWaits(t, done, "with no call in flight and a container ready")
	if c := b.take(); c == nil || c.id != "ready" {
		t.Fatalf("take = %v, want the ready container", c)
	}
	returnsSoon(t, done, "the next call came")
	if p.next != nil {
		t.Error("take left the channel of the next call set")
	}
	// That call runs: a clean-up now does not wait for it.
	p.ready = append(p.ready, &container{id: "refilled"})
	returnsSoon(t, settled(p), "with a call in flight")
	// Once it has left, the clean-up of its container waits again.
	b.leave()
	done = settled(p)
	waiting(t, p)
	stillWaits(t, done, "after the call left")
	close(p.stop)
	returnsSoon(t, done, "the pool stopped")
}

// TestSettleWaitsAtMostTheDelay: without a next call, the clean-up starts
// after the delay.
func TestSettleWaitsAtMostTheDelay(t *testing.T) {
	_, p := idlePool(30 * time.Millisecond)
	start := time.Now()
	returnsSoon(t, settled(p), "its delay")
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("settle returned after %v, before its delay of 30ms", d)
	}
}

// TestSettleDoesNotWait: under load (a call in flight, or crun making a
// container for the pool), or once the pool stops, the clean-up starts at
// once.
func TestSettleDoesNotWait(t *testing.T) {
	for _, c := range []struct {
		when string
		set  func(*warmPool)
	}{
		{"with a call in flight", func(p *warmPool) { p.inFlight = 1 }},
		// Calls came often enough to keep crun busy refilling.
		{"with a container being created", func(p *warmPool) { p.creating = 1 }},
		{"with the pool stopped", func(p *warmPool) { p.stopped = true }},
	} {
		_, p := idlePool(time.Hour)
		c.set(p)
		returnsSoon(t, settled(p), c.when)
	}

	_, p := idlePool(time.Hour)
	done := settled(p)
	stillWaits(t, done, "before the pool stopped")
	close(p.stop)
	returnsSoon(t, done, "the pool stopped")
}

// TestSettleRefillsAShortPoolAtOnce: while the clean-up waits, the refill
// waits with it if the pool holds a container for the next call, however
// many calls came at once lately; an empty pool is refilled at once.
func TestSettleRefillsAShortPoolAtOnce(t *testing.T) {
	poked := func(p *warmPool) bool {
		select {
		case <-p.wake:
			return true
		default:
			return false
		}
	}
	for _, c := range []struct {
		pool  string
		set   func(*warmPool)
		short bool
	}{
		{"with a container ready for the one call at a time", func(*warmPool) {}, false},
		{"with no container ready", func(p *warmPool) { p.ready = nil }, true},
		// Two calls came at once lately: the next burst's first take lets
		// the refill go.
		{"with fewer containers ready than calls came at once", func(p *warmPool) { p.lastPeak, p.peak = 2, 2 }, false},
		{"with none ready after calls came at once", func(p *warmPool) { p.lastPeak, p.ready = 2, nil }, true},
	} {
		_, p := idlePool(time.Hour)
		c.set(p)
		done := settled(p)
		waiting(t, p)
		if c.short {
			deadline := time.Now().Add(5 * time.Second)
			for !poked(p) {
				if time.Now().After(deadline) {
					t.Fatalf("%s: the refill was held back with the clean-up", c.pool)
				}
				time.Sleep(time.Millisecond)
			}
		}
		stillWaits(t, done, "(the clean-up) "+c.pool)
		if !c.short && poked(p) {
			t.Errorf("%s: the refill started while the clean-up waited", c.pool)
		}
		close(p.stop)
		returnsSoon(t, done, "the pool stopped")
	}
}

// TestDiscardKillsWhatCrunDidNot: a warm container the pool lets go of is
// killed and reaped even when crun delete fails, instead of waiting
// forever for a process parked on its exec fifo.
func TestDiscardKillsWhatCrunDidNot(t *testing.T) {
	failing := filepath.Join(t.TempDir(), "crun")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	parked := exec.Command("sleep", "100")
	if err := parked.Start(); err != nil {
		t.Fatal(err)
	}
	pid := parked.Process.Pid
	t.Cleanup(func() { _ = unix.Kill(pid, unix.SIGKILL) })
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	stdinR, stdinW, _ := os.Pipe()
	stdoutR, stdoutW, _ := os.Pipe()
	stderrR, stderrW, _ := os.Pipe()
	logR, logW, _ := os.Pipe()
	for _, f := range []*os.File{stdinR, stdoutW, stderrW, logW} {
		f.Close()
	}
	c := &container{
		rt: &Runtime{path: failing, sealed: &sealedBinary{}, fork: &forkServer{}},
		id: "ocifn-test", pid: pid, pidfd: os.NewFile(uintptr(pidfd), "pidfd"),
		stdin: stdinW, stdout: stdoutR, stderr: stderrR, log: readLog(logR),
	}
	done := make(chan struct{})
	go func() { c.discard(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("discard did not return with crun delete failing")
	}
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
		t.Errorf("the container's process %d is still there (kill 0: %v)", pid, err)
	}
}

// TestSpareWorkerClaimsWhileCPUsAreFree: the spare refill worker creates a
// container only while fewer calls run than there are CPUs; the others
// whenever the pool is short.
func TestSpareWorkerClaimsWhileCPUsAreFree(t *testing.T) {
	p := &warmPool{target: 4}
	if !p.claim(true) || !p.claim(false) {
		t.Fatal("with no call running, neither worker claimed a creation for a short pool")
	}
	p.inFlight = runtime.NumCPU()
	if p.claim(true) {
		t.Errorf("the spare worker claimed a creation with %d calls running on %d CPUs", p.inFlight, runtime.NumCPU())
	}
	if !p.claim(false) {
		t.Error("a worker did not claim a creation for a short pool while calls ran")
	}
	p.creating = p.target
	if p.claim(false) {
		t.Error("a worker claimed a creation beyond the pool's target")
	}
}

// TestOnIdleOncePerIdlePeriod: the pool calls OnIdle when it lets every
// container go after Idle without a call, once, not at each of its checks
// while it stays idle; and again after the next call and idle period.
func TestOnIdleOncePerIdlePeriod(t *testing.T) {
	idled := make(chan struct{}, 10)
	p := &warmPool{
		min: 1, max: 2, target: 1, made: 1, idle: 20 * time.Millisecond, window: 20 * time.Millisecond,
		onIdle:   func() { idled <- struct{}{} },
		lastCall: time.Now(),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	p.wg.Add(1)
	go p.housekeep()
	defer func() { close(p.stop); p.wg.Wait() }()

	calls := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); len(idled) < want && time.Now().Before(deadline); {
			time.Sleep(p.window)
		}
		// Ten more checks at least (one per window).
		time.Sleep(10 * p.window)
		if got := len(idled); got != want {
			t.Fatalf("OnIdle called %d times; want %d", got, want)
		}
	}
	calls(1)
	// A call, as take counts it.
	b := &Bundle{pool: p}
	if c := b.take(); c != nil {
		t.Fatal("an idle pool had a container")
	}
	b.done()
	calls(2)
}

// TestFailingRefillsAddNoHeadroom: while the pool's creations fail, a call
// that finds it empty says nothing about its size, and adds no headroom;
// the pool reports the failure once, not at each retry.
func TestFailingRefillsAddNoHeadroom(t *testing.T) {
	b := standIn(t, "echo '{\"msg\":\"cannot create\",\"level\":\"error\"}' >&3\nexit 1")
	errs := make(chan error, 10)
	b.startPool(PoolOptions{Min: 2, Max: 8, OnRefill: func(err error) { errs <- err }})
	defer b.stopPool()
	select {
	case err := <-errs:
		if err == nil || !strings.Contains(err.Error(), "cannot create") {
			t.Errorf("OnRefill(%v), want crun's error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnRefill not called while every creation fails")
	}
	p := b.pool
	p.mu.Lock()
	p.made = p.target // as after a pool that had filled once
	p.mu.Unlock()
	for range 5 {
		if c := b.take(); c != nil {
			t.Fatal("a failing pool gave a container")
		}
		b.done()
	}
	// The workers retry every second (refillBackoff), and fail again.
	time.Sleep(refillBackoff + refillBackoff/2)
	p.mu.Lock()
	target, headroom := p.target, p.headroom
	p.mu.Unlock()
	if headroom != 0 || target != 2 {
		t.Errorf("after 5 calls that found a failing pool empty: target %d, headroom %d; want 2 and 0", target, headroom)
	}
	if n := len(errs); n != 0 {
		t.Errorf("OnRefill called %d more times while the creations kept failing, want once in all", n)
	}
}

// TestStopCutsCreationsOffQuietly: stopping the pool ends the creations
// under way at once (a crun that would take 30 s), and does not report
// them as the pool failing to create containers.
func TestStopCutsCreationsOffQuietly(t *testing.T) {
	b := standIn(t, `case " $* " in *" create "*) exec sleep 30 ;; esac`)
	errs := make(chan error, 10)
	b.startPool(PoolOptions{Min: 1, Max: 2, OnRefill: func(err error) { errs <- err }})
	time.Sleep(300 * time.Millisecond) // the creation under way
	start := time.Now()
	b.stopPool()
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("stopping the pool took %s: its creation was not cut off", took)
	}
	if len(errs) > 0 {
		t.Errorf("OnRefill(%v) on stop", <-errs)
	}
}

// standIn returns a bundle whose runtime is a shell script standing in for
// crun, body its commands (run for every crun command, with crun's log on
// descriptor 3), executed as a wrapper is: no fork server.
func standIn(t *testing.T, body string) *Bundle {
	t.Helper()
	dir := t.TempDir()
	crun := filepath.Join(dir, "crun")
	if err := os.WriteFile(crun, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Bundle{dir: dir, runtime: &Runtime{path: crun, sealed: &sealedBinary{}, fork: &forkServer{}, stateDir: t.TempDir()}}
}
