package codec

import (
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
)

// FuzzKRMRoundTrip: for any request, a KRM function that prints its
// ResourceList back unchanged leaves the desired state as it was, and
// neither Encode nor Decode changes the request.
func FuzzKRMRoundTrip(f *testing.F) {
	addRequestSeeds(f)
	f.Add([]byte(`{"observed": {"composite": {"resource": {"kind": "X", "metadata": {"name": "x"}}}}, "desired": {"resources": {"a": {"resource": {"kind": "A", "metadata": {"annotations": {"config.kubernetes.io/index": "0"}}}, "ready": "READY_TRUE"}}}}`))
	f.Add([]byte(`{"desired": {"resources": {"a": {"resource": {"metadata": {}}}, "b": {"resource": {"metadata": {"annotations": {}}}}, "c": {"resource": {"metadata": "x"}}}}}`))
	f.Add([]byte(`{"desired": {"composite": {"resource": {"metadata": {}}}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, ok := encodeDecode(t, KRM{}, data)
		if !ok {
			return
		}
		req, out, rsp := e.req, e.out, e.rsp
		if e.err != nil {
			// Only names ocifn cannot send back as an annotation value.
			for name := range req.GetDesired().GetResources() {
				if name == "" {
					return
				}
			}
			t.Fatalf("Decode of Encode's own output: %v\n%s", e.err, out)
		}
		want := req.GetDesired()
		if want == nil {
			want = &fnv1.State{}
		}
		if d := cmp.Diff(want, rsp.GetDesired(), protocmp.Transform(), protocmp.IgnoreEmptyMessages()); d != "" {
			t.Fatalf("desired after a round trip (-want +got):\n%s\nResourceList:\n%s", d, out)
		}
	})
}

// FuzzKRMDecode: whatever a function prints, Decode answers or errs, and
// an answer carries the request's tag and a desired resources map.
func FuzzKRMDecode(f *testing.F) {
	f.Add([]byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [{kind: A, metadata: {name: a}}]\nresults: [{message: m, severity: error, resourceRef: {kind: A, name: a}}]\n"))
	f.Add([]byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [{kind: X, metadata: {annotations: {ocifn.io/composite: 'true'}}, spec: {a: [1]}}]\n"))
	f.Add([]byte(`{"meta": {"tag": "t"}}`))
	// No items, and no desired resources in the request to keep.
	f.Add([]byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\n"))
	fuzzDecode(f, KRM{}, &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "fuzz"}})
}
