package codec

import (
	"runtime"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/proto"

	"github.com/ocifn/ocifn/internal/memtest"
	"github.com/ocifn/ocifn/internal/protocount"
)

// TestEncodeMemoryBoundsEncode: each codec's EncodeMemory is at least
// what its Encode allocates for requests of every costly shape; with the
// wire bytes and the decoded request, the whole is within 8 times of what
// is measured, where that is more than a megabyte.
func TestEncodeMemoryBoundsEncode(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap of large requests")
	}
	for _, shape := range memtest.Wire(100000) {
		name, wire := shape.Name, shape.Wire
		var req fnv1.RunFunctionRequest
		decoded := memtest.Peak(func() {
			if err := proto.Unmarshal(wire, &req); err != nil {
				t.Fatal(err)
			}
		})
		c, err := protocount.Count(wire, req.ProtoReflect().Descriptor())
		if err != nil {
			t.Fatal(err)
		}
		for _, cd := range []Codec{JSON{}, FunctionIO{}, KRM{}} {
			var out []byte
			bound := cd.EncodeMemory(c)
			used := memtest.PeakWithin(bound, func() {
				if out, err = cd.Encode(&req); err != nil {
					t.Fatal(err)
				}
			})
			runtime.KeepAlive(out)
			t.Logf("%-10s %-18s %8d bytes on the wire, %9d decoded: encoding took %10d, bound %10d (%.1fx)", cd.Name(), name, len(wire), decoded, used, bound, float64(bound)/float64(used))
			if used > bound {
				t.Errorf("%s, %s: encoding took %d bytes, past the bound of %d", cd.Name(), name, used, bound)
			}
			whole, wholeBound := c.Wire+decoded+used, c.Wire+c.Decoded()+bound
			t.Logf("%-10s %-18s per byte on the wire: %.1f measured, bound %.1f", cd.Name(), name, float64(whole)/float64(c.Wire), float64(wholeBound)/float64(c.Wire))
			// KRM leaves connection details out, and YAML writes nested
			// lists on one line where it indents nested maps: counts of the
			// wire bytes cannot tell either apart, so the bound is loose
			// for them (5 to 10 times for the lists).
			loose := cd.Name() == "krm" && name == "connection details" ||
				cd.Name() != "json" && name == "deep lists"
			if whole > 1<<20 && wholeBound > 8*whole && !loose {
				t.Errorf("%s, %s: the bound of %d bytes for the wire, decoded and encoded request is more than 8 times the %d measured", cd.Name(), name, wholeBound, whole)
			}
		}
	}
}
