package codec

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ocifn/ocifn/internal/memtest"
)

// responseOutputs are, for each costly shape, what a function prints in
// each mode to answer with that shape as its desired state.
func responseOutputs(t *testing.T, n int) map[string]map[string][]byte {
	out := map[string]map[string][]byte{}
	for name, shape := range memtest.Shapes(n) {
		desired := shape.GetDesired()
		if desired == nil {
			desired = &fnv1.State{Composite: shape.GetObserved().GetComposite()}
		}
		j, err := protojson.Marshal(&fnv1.RunFunctionResponse{Desired: desired})
		if err != nil {
			t.Fatal(err)
		}
		req := &fnv1.RunFunctionRequest{Observed: &fnv1.State{Composite: &fnv1.Resource{}}, Desired: proto.Clone(desired).(*fnv1.State)}
		if req.Desired.Composite == nil {
			req.Desired.Composite = &fnv1.Resource{}
		}
		if req.Desired.Composite.Resource == nil {
			// FunctionIO wants a composite resource in the state.
			req.Desired.Composite.Resource = &structpb.Struct{}
		}
		out[name] = map[string][]byte{"json": j}
		for _, cd := range []Codec{FunctionIO{}, KRM{}} {
			b, err := cd.Encode(req)
			if err != nil {
				t.Fatalf("%s, %s: %v", cd.Name(), name, err)
			}
			out[name][cd.Name()] = b
		}
	}
	return out
}

func marks(cd Codec, c outCounts) int64 {
	if cd.Name() == "json" {
		return c.jsonMarks
	}
	return c.yamlMarks
}

// TestDecodeMemoryBoundsDecode: each codec's DecodeMemory is at least
// what its Decode holds at once for outputs of every costly shape.
func TestDecodeMemoryBoundsDecode(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap of large responses")
	}
	req := &fnv1.RunFunctionRequest{Observed: &fnv1.State{Composite: &fnv1.Resource{}}, Desired: &fnv1.State{Composite: &fnv1.Resource{}}}
	for name, outs := range responseOutputs(t, 30000) {
		for _, cd := range []Codec{JSON{}, FunctionIO{}, KRM{}} {
			out := outs[cd.Name()]
			var rsp *fnv1.RunFunctionResponse
			var err error
			used := memtest.Peak(func() { rsp, err = cd.Decode(req, out) })
			if err != nil {
				t.Fatalf("%s, %s: %v", cd.Name(), name, err)
			}
			runtime.KeepAlive(rsp)
			c := countOutput(out)
			bound := cd.DecodeMemory(out)
			t.Logf("%-10s %-18s %9d bytes, %8d marks: decoding held %10d (%5.1f/byte, %6.1f/mark), bound %10d (%.1fx)", cd.Name(), name, len(out), marks(cd, c), used, float64(used)/float64(len(out)), float64(used)/float64(marks(cd, c)+1), bound, float64(bound)/float64(used))
			if used > bound {
				t.Errorf("%s, %s: decoding held %d bytes, past the bound of %d", cd.Name(), name, used, bound)
			}
		}
	}
}

// TestDecodeMemoryBoundsAliases: YAML output whose aliases expand to a
// hundred thousand values and more stays within its bound.
func TestDecodeMemoryBoundsAliases(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap of large responses")
	}
	var b strings.Builder
	// The YAML decoder refuses a document of which more than 99% comes
	// from aliases: a plain list makes up the rest.
	fmt.Fprintf(&b, "plain: [%s]\n", strings.TrimSuffix(strings.Repeat("0, ", 10000), ", "))
	b.WriteString("l0: &l0 [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]\n")
	for i := 1; i <= 4; i++ {
		fmt.Fprintf(&b, "l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 10), ", "))
	}
	resource := "    resource:\n      apiVersion: example.org/v1\n      kind: XR\n      spec:\n" + indent(b.String(), "        ")
	outs := map[Codec]string{
		FunctionIO{}: "apiVersion: apiextensions.crossplane.io/v1alpha1\nkind: FunctionIO\ndesired:\n  composite:\n" + resource,
		KRM{}:        "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: example.org/v1\n  kind: XR\n  metadata:\n    name: x\n  spec:\n" + indent(b.String(), "    "),
	}
	req := &fnv1.RunFunctionRequest{Observed: &fnv1.State{Composite: &fnv1.Resource{}}, Desired: &fnv1.State{Composite: &fnv1.Resource{}}}
	for cd, out := range outs {
		var err error
		used := memtest.Peak(func() { _, err = cd.Decode(req, []byte(out)) })
		if err != nil {
			t.Fatalf("%s: %v", cd.Name(), err)
		}
		bound := cd.DecodeMemory([]byte(out))
		t.Logf("%-10s %d bytes: decoding held %d, bound %d (%.1fx)", cd.Name(), len(out), used, bound, float64(bound)/float64(used))
		if used > bound {
			t.Errorf("%s: decoding held %d bytes, past the bound of %d", cd.Name(), used, bound)
		}
	}
}

func indent(lines, prefix string) string {
	return prefix + strings.ReplaceAll(strings.TrimSuffix(lines, "\n"), "\n", "\n"+prefix) + "\n"
}
