package bundle

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestTogetherBoundsItsCalls: together runs its calls side by side, but
// never more than togetherAtMost at once (crun processes, each one, within
// a pod's pids limit), and returns once all have.
func TestTogetherBoundsItsCalls(t *testing.T) {
	var running, most, done atomic.Int32
	items := make([]int, 3*togetherAtMost)
	together(items, func(int) {
		n := running.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		running.Add(-1)
		done.Add(1)
	})
	if done.Load() != int32(len(items)) {
		t.Errorf("together returned after %d of %d calls", done.Load(), len(items))
	}
	if m := most.Load(); m > togetherAtMost || m < 2 {
		t.Errorf("at most %d calls ran at once, want 2 to %d", m, togetherAtMost)
	}
}
