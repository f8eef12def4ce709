// Package memtest measures the memory code holds at its peak, for tests
// that check a cost model against what the code really allocates, and
// builds the requests of the shapes that cost most per byte on the wire.
package memtest

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

var (
	mu   sync.Mutex // one measurement at a time
	peak atomic.Int64
	once sync.Once
)

// gcWatch records the live heap at the end of every collection: a
// finalizer runs once per cycle, and arms the next.
type gcWatch struct{ _ [16]byte }

func watch() {
	w := &gcWatch{}
	runtime.SetFinalizer(w, func(*gcWatch) {
		if v := live(); v > peak.Load() {
			peak.Store(v)
		}
		watch()
	})
}

func live() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// Peak runs f and returns the most heap that was live while it ran, beyond
// what was live before: the collector runs whenever the heap grows by 2%,
// and the live heap is read at the end of each cycle, so the figure is
// within a few percent of the true peak. Peak is not meant to run
// alongside other tests that allocate.
func Peak(f func()) int64 {
	mu.Lock()
	defer mu.Unlock()
	once.Do(watch)
	old := debug.SetGCPercent(2)
	defer debug.SetGCPercent(old)
	runtime.GC()
	runtime.GC()
	base := live()
	peak.Store(0)
	f()
	runtime.GC()
	end := live()
	time.Sleep(20 * time.Millisecond) // the finalizer of the last cycle
	return max(end, peak.Load()) - base
}

// PeakWithin is Peak for a test of a bound: a figure past bound is measured
// again, three times in all at most, and the least is returned. Peak
// overstates on a busy machine: what f allocates while a collection runs
// counts as live at its end, and a collection slowed by other processes
// sees more of it; the same decode measured 2.5 and 10.2 MB in four runs
// on a loaded machine, 2 CPUs. Code that holds more than bound does so at
// every measure, and still fails.
func PeakWithin(bound int64, f func()) int64 {
	used := Peak(f)
	for try := 1; try < 3 && used > bound; try++ {
		used = min(used, Peak(f))
	}
	return used
}

// Shape is a request of one shape on the wire.
type Shape struct {
	Name string
	Wire []byte
}

// Wire is Shapes(n) on the wire, sorted by name.
func Wire(n int) []Shape {
	var out []Shape
	for name, req := range Shapes(n) {
		b, err := proto.Marshal(req)
		if err != nil {
			panic(err)
		}
		out = append(out, Shape{name, b})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Shapes are requests of n units each (n of 1,000 or more), one for each
// shape of content that decodes or encodes to the most memory per byte
// on the wire: long strings, strings to escape, many small values, many
// keys, deep nesting, connection details and realistic composed
// resources.
func Shapes(n int) map[string]*fnv1.RunFunctionRequest {
	xr := func(m map[string]any) *fnv1.RunFunctionRequest {
		s, err := structpb.NewStruct(m)
		if err != nil {
			panic(err)
		}
		return &fnv1.RunFunctionRequest{Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: s}}}
	}
	list := func(v func(i int) any) []any {
		l := make([]any, n)
		for i := range l {
			l[i] = v(i)
		}
		return l
	}
	out := map[string]*fnv1.RunFunctionRequest{
		"long string":   xr(map[string]any{"a": strings.Repeat("x", 20*n)}),
		"control bytes": xr(map[string]any{"a": strings.Repeat("\x01", 5*n)}),
		"quotes":        xr(map[string]any{"a": strings.Repeat(`"\`, 5*n)}),
		"non-ASCII":     xr(map[string]any{"a": strings.Repeat("é\u0085\U0001F600", n)}),
		"nulls":         xr(map[string]any{"a": list(func(int) any { return nil })}),
		"booleans":      xr(map[string]any{"a": list(func(int) any { return true })}),
		"numbers":       xr(map[string]any{"a": list(func(int) any { return -1.2345678901234567e-300 })}),
		"empty strings": xr(map[string]any{"a": list(func(int) any { return "" })}),
		"empty maps":    xr(map[string]any{"a": list(func(int) any { return map[string]any{} })}),
		"empty lists":   xr(map[string]any{"a": list(func(int) any { return []any{} })}),
		"small maps":    xr(map[string]any{"a": list(func(int) any { return map[string]any{"a": 1} })}),
	}
	keys := map[string]any{}
	for i := range n {
		keys[fmt.Sprint(i)] = true
	}
	out["keys"] = xr(keys)
	var deep any = "x"
	for range min(n, 3000) {
		deep = map[string]any{"a": deep}
	}
	out["deep maps"] = xr(map[string]any{"a": deep})
	var deepList any = "x"
	for range min(n, 4000) {
		deepList = []any{deepList}
	}
	out["deep lists"] = xr(map[string]any{"a": deepList})
	details := map[string][]byte{}
	for i := range n {
		details[fmt.Sprint(i)] = nil
	}
	out["connection details"] = &fnv1.RunFunctionRequest{Observed: &fnv1.State{Composite: &fnv1.Resource{ConnectionDetails: details}}}
	desired := map[string]*fnv1.Resource{}
	for i := range n / 50 {
		s, err := structpb.NewStruct(map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": fmt.Sprint("d", i), "labels": map[string]any{"app": "x", "tier": "web"}},
			"spec": map[string]any{"replicas": 3, "template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "c", "image": "nginx:1.25", "ports": []any{map[string]any{"containerPort": 80}}}},
			}}},
		})
		if err != nil {
			panic(err)
		}
		desired[fmt.Sprint(i)] = &fnv1.Resource{Resource: s}
	}
	out["deployments"] = &fnv1.RunFunctionRequest{Desired: &fnv1.State{Resources: desired}}
	return out
}
