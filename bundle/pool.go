package bundle

import (
	"context"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// warmPool keeps containers created ahead of calls, so that a call only
// has to start one. Each container still serves exactly one call: the pool
// holds containers that never ran, with their standard streams attached
// and nothing else shared.
//
// Its size follows the calls. It holds at least min containers, and as
// many as the most calls that ran at once in the current or the last
// window (up to max): a closed loop or a burst of N clients then finds N
// containers ready on its next round. Calls that come faster than crun
// refills it need more: a call that finds no container although the pool
// was as large as the calls running (the refill was outrun, not the size)
// adds one container of headroom, and each window without such a miss
// takes one back. A call that comes before the pool has made its first
// fill's worth of containers, at start or after idle, or while its
// creations fail, says nothing about the refill and adds none. At each window's end the size falls back to
// what that window needed. After idle without a call it holds none at
// all, and the next call refills it.
type warmPool struct {
	min, max int
	idle     time.Duration
	onIdle   func()
	onRefill func(error)
	window   time.Duration
	// settleDelay bounds settle's wait (the const of that name; tests
	// change it).
	settleDelay time.Duration

	mu    sync.Mutex
	ready []*container
	// creating counts containers being created for the pool.
	creating int
	// target is how many containers the pool fills up to now.
	target int
	// inFlight counts calls between take and leave (or done).
	inFlight int
	// peak and lastPeak are the most calls in flight at once in the
	// current and the previous window.
	peak, lastPeak int
	// headroom is how many containers the pool holds beyond the calls
	// that run at once, for calls that come faster than it refills;
	// outrun says that a call found it empty in the current window
	// although it was as large as the calls running.
	headroom int
	outrun   bool
	// failing says that the last container the pool's workers tried to
	// create failed: a call that finds the pool empty meanwhile says
	// nothing about its size, and adds no headroom.
	failing bool
	// reported is the last state onRefill was told of, under reportMu,
	// which orders the reports.
	reported bool
	reportMu sync.Mutex
	// made counts the containers made since the pool started filling (at
	// start, or after idle let every container go), up to its target.
	made int
	// idled says that the pool let every container go for idle, and no
	// call came since.
	idled    bool
	lastCall time.Time
	stopped  bool
	// next is closed by the next call's take, which ends the wait of the
	// clean-ups that settle holds back; nil while none waits.
	next chan struct{}

	wake chan struct{}
	stop chan struct{}
	// stopping ends with stop: the creations under way end with it.
	stopping context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// PoolOptions sizes the warm pool.
type PoolOptions struct {
	// Min is the fewest containers kept ready (0: none while no call
	// comes, see Idle).
	Min int
	// Max is the most containers kept ready, however many calls run at
	// once; it is raised to Min.
	Max int
	// Idle is how long the pool waits without a call before it lets
	// every container go, Min included (0: never).
	Idle time.Duration
	// OnIdle, if set, is called after the pool let every container go
	// for Idle (once each time it does, not at each of its checks).
	OnIdle func()
	// OnRefill, if set, hears when the pool's creations start failing,
	// with the first error, and when one succeeds again, with nil.
	OnRefill func(error)
}

// refillBackoff is how long a pool worker waits after crun failed to
// create a container before trying again; calls still create their own
// meanwhile.
const refillBackoff = time.Second

// poolWindow is how long the pool remembers how many calls ran at once:
// it shrinks back at most one window after a burst.
const poolWindow = 30 * time.Second

// startPool starts the pool when it could hold any container; the bundle
// runs without one otherwise.
func (b *Bundle) startPool(o PoolOptions) {
	if o.Max < o.Min {
		o.Max = o.Min
	}
	if o.Max <= 0 {
		return
	}
	p := &warmPool{
		min: o.Min, max: o.Max, idle: o.Idle, onIdle: o.OnIdle, onRefill: o.OnRefill, window: poolWindow,
		settleDelay: settleDelay,
		target:      o.Min,
		lastCall:    time.Now(),
		// One worker per CPU, and one spare (see claim).
		wake: make(chan struct{}, runtime.NumCPU()+1),
		stop: make(chan struct{}),
	}
	if p.idle > 0 && p.idle < p.window {
		p.window = p.idle
	}
	p.stopping, p.cancel = context.WithCancel(context.Background())
	b.pool = p
	for i := range cap(p.wake) {
		p.wg.Add(1)
		go p.worker(b, i == cap(p.wake)-1)
	}
	p.wg.Add(1)
	go p.housekeep()
	p.poke()
}

// poke wakes every refill worker.
func (p *warmPool) poke() {
	for range cap(p.wake) {
		select {
		case p.wake <- struct{}{}:
		default:
			return
		}
	}
}

// want is the size the pool should have for the calls seen lately.
// p.mu is held.
func (p *warmPool) want() int {
	return min(p.max, max(p.min, p.peak, p.lastPeak)+p.headroom)
}

// take returns a warm container, or nil when the pool is empty or off, and
// counts the call as running until leave (or done). The pool is topped up
// when a call has ended (see release and settle), so that creating the
// next container does not compete with the function for the CPU; a pool
// that has just grown is filled at once. A call also lets go at once of
// the clean-ups and refills that settle holds back.
func (b *Bundle) take() *container {
	p := b.pool
	if p == nil {
		b.misses.Add(1)
		return nil
	}
	p.mu.Lock()
	p.inFlight++
	p.peak = max(p.peak, p.inFlight)
	p.lastCall, p.idled = time.Now(), false
	if p.next != nil {
		close(p.next)
		p.next = nil
	}
	var c *container
	if n := len(p.ready); n > 0 {
		c = p.ready[0]
		p.ready[0] = nil
		p.ready = p.ready[1:]
	} else if !p.failing && p.made >= p.target && p.inFlight <= p.target {
		// Outrun: noted even at max, so that the headroom is kept there.
		p.outrun = true
		if p.want() < p.max {
			p.headroom++
		}
	}
	grew := false
	if w := p.want(); w > p.target {
		p.target, grew = w, true
	}
	p.mu.Unlock()
	if c == nil {
		b.misses.Add(1)
	}
	if grew {
		p.poke()
	}
	return c
}

// done ends a call counted by take and lets the pool refill at once, for a
// call that got no container to release.
func (b *Bundle) done() {
	b.leave()
	if p := b.pool; p != nil {
		p.poke()
	}
}

// leave ends a call counted by take; the release of its container refills
// the pool.
func (b *Bundle) leave() {
	p := b.pool
	if p == nil {
		return
	}
	p.mu.Lock()
	p.inFlight--
	p.lastCall = time.Now()
	p.mu.Unlock()
}

// settleDelay is how long, at most, settle holds back the clean-up of a
// call's container (and, with a container ready, the refill).
const settleDelay = 3 * time.Millisecond

// settle holds back the clean-up of a container whose call, one served by
// the pool, has ended, while the server has nothing else to do (no other
// such call in flight, no container being made for the pool): until the
// next call takes a container, or for settleDelay, whichever is first.
// The refill that follows the clean-up is held back with it while the
// pool holds a warm container for the next call; when it holds none,
// settle lets the refill start at once. Under load, or once the pool
// stops, it returns at once.
//
// The clean-up and the refill cost about 3 ms of CPU across every CPU
// (the kernel tearing down the last container's namespaces, crun creating
// the next). Started as the answer leaves, they compete with the caller
// that reads it: on 2 CPUs, side by side at 20 calls/s, the load tool's
// median was about 0.2 ms higher, 0.1 ms of it for each
// (docs/performance.md). Held back, the same work runs in the gap before
// the next call. A client calling again at once (a closed loop) lets it
// go with its next call, a turnaround of the client later than before;
// with calls in flight, it starts as before.
//
// One warm container is enough to hold the refill back, even when calls
// came many at once lately: the refill is late by settleDelay at most,
// and the first call of the next burst lets it go. A burst larger than
// the containers ready that comes within that delay and a creation after
// the last call may find the pool one short where the refill, started at
// once, would have been done: that call makes its own container on its
// path (and, below the pool's most, adds one of headroom for a window,
// as any call that finds the pool empty does). Requiring as many
// containers as that burst's calls (the pool's target after it, up to
// --max-concurrency) kept every refill at a low rate unheld for a window
// or two after a burst: the load tool's median at 20 calls/s was
// 0.14-0.19 ms higher after 16 clients for 2 s than without them
// (docs/performance.md).
func (p *warmPool) settle() {
	p.mu.Lock()
	if p.inFlight > 0 || p.creating > 0 || p.stopped {
		p.mu.Unlock()
		return
	}
	short := len(p.ready) == 0
	if p.next == nil {
		p.next = make(chan struct{})
	}
	next := p.next
	p.mu.Unlock()
	if short {
		p.poke()
	}
	t := time.NewTimer(p.settleDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-next:
	case <-p.stop:
	}
}

// claim reserves the creation of one container if the pool is short of
// its target. The spare worker claims one only while fewer calls run than
// there are CPUs: a creation spends part of its time waiting on hand-overs
// between crun's processes, so with a worker per CPU the CPUs idled then
// while the pool was short, and one client in a closed loop found it
// empty in 2-3% of its calls, which made its p99 (docs/performance.md).
// With as many calls running as CPUs, the spare would only take CPU from
// them.
func (p *warmPool) claim(spare bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || len(p.ready)+p.creating >= p.target || (spare && p.inFlight >= runtime.NumCPU()) {
		return false
	}
	p.creating++
	return true
}

func (p *warmPool) worker(b *Bundle, spare bool) {
	defer p.wg.Done()
	for {
		select {
		case <-p.stop:
			return
		case <-p.wake:
		}
		for p.claim(spare) {
			c, err := b.createIn(p.stopping)
			p.mu.Lock()
			p.creating--
			// A creation the pool's stop cut off says nothing.
			changed := !p.stopped && (err != nil) != p.failing
			if changed {
				p.failing = err != nil
			}
			keep := err == nil && !p.stopped && len(p.ready) < p.target
			if keep {
				p.ready = append(p.ready, c)
			}
			if err == nil {
				p.made = min(p.made+1, p.target)
			}
			p.mu.Unlock()
			if changed {
				p.reportRefill(err)
			}
			if err != nil {
				select {
				case <-p.stop:
					return
				case <-time.After(refillBackoff):
				}
				continue
			}
			if !keep {
				// The pool shrank or stopped while crun worked.
				c.discard()
			}
		}
	}
}

// reportRefill tells onRefill that the creations fail (err) or succeed
// again (nil), in order: workers race to report, so what is reported is
// the pool's state when it is, and only if it differs from the last one
// reported.
func (p *warmPool) reportRefill(err error) {
	if p.onRefill == nil {
		return
	}
	p.reportMu.Lock()
	defer p.reportMu.Unlock()
	p.mu.Lock()
	failing := p.failing
	p.mu.Unlock()
	if failing != (err != nil) || failing == p.reported {
		return
	}
	p.reported = failing
	p.onRefill(err)
}

// housekeep shrinks the pool at the end of each window to what that
// window's calls needed, and to nothing after idle without a call.
func (p *warmPool) housekeep() {
	defer p.wg.Done()
	tick := time.NewTicker(min(p.window, time.Second))
	defer tick.Stop()
	windowEnd := time.Now().Add(p.window)
	for {
		select {
		case <-p.stop:
			return
		case now := <-tick.C:
			p.mu.Lock()
			if !now.Before(windowEnd) {
				p.lastPeak, p.peak = p.peak, p.inFlight
				if !p.outrun && p.headroom > 0 {
					p.headroom--
				}
				p.outrun = false
				windowEnd = now.Add(p.window)
				p.target = p.want()
			}
			wentIdle := false
			if p.idle > 0 && p.inFlight == 0 && now.Sub(p.lastCall) >= p.idle {
				wentIdle, p.idled = !p.idled, true
				p.target, p.peak, p.lastPeak, p.headroom, p.made = 0, 0, 0, 0, 0
			}
			var excess []*container
			if n := len(p.ready) - p.target; n > 0 {
				// The oldest go first.
				excess = append(excess, p.ready[:n]...)
				p.ready = append(p.ready[:0], p.ready[n:]...)
			}
			p.mu.Unlock()
			for _, c := range excess {
				c.discard()
			}
			if wentIdle && p.onIdle != nil {
				p.onIdle()
			}
		}
	}
}

// stopPool stops the pool's goroutines and removes every container still
// waiting in it.
func (b *Bundle) stopPool() {
	p := b.pool
	if p == nil {
		return
	}
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	close(p.stop)
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	// Together: a stuck crun delete takes 5 s to be killed, which one
	// after another, for a pool grown to --max-concurrency, held the
	// shutdown for minutes.
	together(ready, (*container).discard)
}

// PoolStats is what the warm pool did so far.
type PoolStats struct {
	// Ready is how many containers wait for a call now.
	Ready int
	// Target is how many the pool fills up to now.
	Target int
	// Misses counts calls that found no warm container and had to wait
	// for crun to create one.
	Misses uint64
}

// PoolStats reports the warm pool's state (Ready and Target are 0 when it
// is off, and every call is a miss).
func (b *Bundle) PoolStats() PoolStats {
	s := PoolStats{Misses: b.misses.Load()}
	if p := b.pool; p != nil {
		p.mu.Lock()
		s.Ready, s.Target = len(p.ready), p.target
		p.mu.Unlock()
	}
	return s
}

// FunctionCPU is the CPU time, user and system, that the containers'
// processes used from their start to their end, their children's
// included: the functions' own, without crun's set-up of each container
// before its start. A container counts once it has been reaped, after its
// call has been answered.
func (b *Bundle) FunctionCPU() time.Duration { return time.Duration(b.functionCPU.Load()) }

// discard removes a container that never ran and reaps its process.
func (c *container) discard() {
	c.stdin.Close()
	c.stdout.Close()
	c.stderr.Close()
	c.rt.forceDelete(c.id)
	// crun delete kills the process; should it have failed (or timed
	// out), the wait below would last forever. Not reaped yet, the pid
	// still names this process.
	_ = unix.Kill(c.pid, unix.SIGKILL)
	awaitPid(c.pid, c.pidfd)
	_, _ = reap(c.pid)
	if cgroupManagerFlag() == "--cgroup-manager=disabled" {
		// Reaped, and with no cgroup of its own: its state is all that a
		// crun delete that failed left, and a second one (the bundle's
		// Close) would be as stuck (see release).
		_ = removeState(filepath.Join(c.rt.stateDir, c.id))
	}
	c.closeFifo()
	c.closePidfd()
	c.releaseNamespaces()
	if _, closed := c.log.waitFor(logGrace); !closed {
		// With its process gone, a process outside the container holds
		// crun's log pipe: one the runtime left behind (a --runtime
		// wrapper's child, say), which waiting for would hold the pool's
		// stop, and the server's shutdown, as long as it lives.
		killLogHolders(c.log.inode(), c.rt.fork.pid())
		if _, closed = c.log.waitFor(logGrace); !closed {
			_ = c.log.r.SetReadDeadline(time.Now())
			c.log.wait()
		}
	}
}
