package bundle

import (
	"time"
)

// warmPool keeps containers created ahead of calls, so that a call only
// has to start one. Each container still serves exactly one call: the pool
// holds containers that never ran, with their standard streams attached
// and nothing else shared.
type warmPool struct {
	ready chan *container
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

// refillBackoff is how long the pool waits after crun failed to create a
// container before trying again; calls still create their own meanwhile.
const refillBackoff = time.Second

func (b *Bundle) startPool(n int) {
	p := &warmPool{
		ready: make(chan *container, n),
		wake:  make(chan struct{}, 1),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
	b.pool = p
	p.poke()
	go b.refill(p)
}

// poke asks the refill loop to top up the pool.
func (p *warmPool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take returns a warm container, or nil when the pool is empty or off. The
// pool is topped up when the call has ended (see release), so that creating
// the next container does not compete with the function for the CPU.
func (b *Bundle) take() *container {
	if b.pool == nil {
		return nil
	}
	select {
	case c := <-b.pool.ready:
		return c
	default:
		return nil
	}
}

func (b *Bundle) refill(p *warmPool) {
	defer close(p.done)
	for {
		select {
		case <-p.stop:
			return
		case <-p.wake:
		}
		for len(p.ready) < cap(p.ready) {
			c, err := b.create()
			if err != nil {
				select {
				case <-p.stop:
					return
				case <-time.After(refillBackoff):
				}
				continue
			}
			select {
			case p.ready <- c:
			case <-p.stop:
				c.discard()
				return
			}
		}
	}
}

// stopPool stops the refill loop and removes every container still waiting
// in the pool.
func (b *Bundle) stopPool() {
	if b.pool == nil {
		return
	}
	close(b.pool.stop)
	<-b.pool.done
	for {
		select {
		case c := <-b.pool.ready:
			c.discard()
		default:
			return
		}
	}
}

// discard removes a container that never ran and reaps its process.
func (c *container) discard() {
	c.stdin.Close()
	c.stdout.Close()
	c.stderr.Close()
	c.rt.forceDelete(c.id)
	_, _ = waitPid(c.pid)
	c.log.wait()
}
