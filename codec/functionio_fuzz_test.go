package codec

import (
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
)

// FuzzFunctionIORoundTrip: for any request, a 1.13 function that prints
// its FunctionIO document back unchanged leaves the desired resources, the
// readiness an earlier step decided, and the XR and its connection details
// as they were, and neither Encode nor Decode changes the request.
func FuzzFunctionIORoundTrip(f *testing.F) {
	addRequestSeeds(f)
	f.Add([]byte(`{"observed": {"resources": {"a": {"resource": {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, "connectionDetails": {"k": "dg=="}}}}, "desired": {"composite": {"resource": {"kind": "X"}, "connectionDetails": {"u": "dg=="}}, "resources": {"a": {"resource": {"kind": "A"}}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, ok := encodeDecode(t, FunctionIO{}, data)
		if !ok {
			return
		}
		req, out, rsp := e.req, e.out, e.rsp
		if e.err != nil {
			if _, ok := req.GetDesired().GetResources()[""]; ok {
				return // a resource without a name is refused
			}
			if _, ok := req.GetDesired().GetComposite().GetConnectionDetails()[""]; ok {
				// So is a connection detail without a name, as a
				// resource without one is: no Secret can hold it.
				return
			}
			if req.GetDesired().GetComposite().GetResource() == nil && len(req.GetDesired().GetResources()) == 0 && req.GetObserved().GetComposite().GetResource() == nil {
				return // a document with no state at all is refused
			}
			t.Fatalf("Decode of Encode's own output: %v\n%s", e.err, out)
		}
		for name, r := range req.GetDesired().GetResources() {
			got := rsp.GetDesired().GetResources()[name]
			if d := cmp.Diff(r.GetResource(), got.GetResource(), protocmp.Transform()); d != "" {
				t.Fatalf("desired resource %q after a round trip (-want +got):\n%s\ndocument:\n%s", name, d, out)
			}
			// FunctionIO carries no readiness: one an earlier step
			// decided is kept, an undecided one is computed afresh.
			if r.GetReady() != fnv1.Ready_READY_UNSPECIFIED && got.GetReady() != r.GetReady() {
				t.Fatalf("desired resource %q is %v after a round trip, want %v", name, got.GetReady(), r.GetReady())
			}
		}
		if len(rsp.GetDesired().GetResources()) != len(req.GetDesired().GetResources()) {
			t.Fatalf("%d desired resources after a round trip, want %d", len(rsp.GetDesired().GetResources()), len(req.GetDesired().GetResources()))
		}
		if d := cmp.Diff(req.GetDesired().GetComposite().GetResource(), rsp.GetDesired().GetComposite().GetResource(), protocmp.Transform()); d != "" {
			t.Fatalf("desired XR after a round trip (-want +got):\n%s\ndocument:\n%s", d, out)
		}
		if d := cmp.Diff(req.GetDesired().GetComposite().GetConnectionDetails(), rsp.GetDesired().GetComposite().GetConnectionDetails(), cmpopts.EquateEmpty()); d != "" {
			t.Fatalf("desired XR's connection details after a round trip (-want +got):\n%s\ndocument:\n%s", d, out)
		}
	})
}

// FuzzFunctionIODecode: whatever a function prints, Decode answers or
// errs, and an answer carries the request's tag and a desired resources map.
func FuzzFunctionIODecode(f *testing.F) {
	f.Add([]byte("desired:\n  resources:\n  - name: a\n    resource: {kind: A}\n    readinessChecks: [{type: MatchInteger, fieldPath: status.n, matchInteger: 1}]\n    connectionDetails: [{type: FromFieldPath, name: x, fromFieldPath: 'status.a[0]'}]\n"))
	f.Add([]byte("results: [{severity: Fatal, message: m}]\ndesired: {composite: {resource: {a: 1}}}\n"))
	req := &fnv1.RunFunctionRequest{
		Meta: &fnv1.RequestMeta{Tag: "fuzz"},
		Observed: &fnv1.State{Resources: map[string]*fnv1.Resource{
			"a": {Resource: mustStruct(map[string]any{"status": map[string]any{"n": 1, "a": []any{"x", map[string]any{"b": true}}}})},
		}},
	}
	fuzzDecode(f, FunctionIO{}, req)
}

func mustStruct(m map[string]any) *structpb.Struct {
	s, err := structpb.NewStruct(m)
	if err != nil {
		panic(err)
	}
	return s
}
