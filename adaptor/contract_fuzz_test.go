package adaptor

import (
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/ocifn/ocifn/codec"
)

// FuzzContract: whatever a function prints is either refused, or becomes a
// response that carries the request's tag and a desired state (the
// request's, and its context, when the function left them out), and
// survives a protojson round trip once the contract is applied.
func FuzzContract(f *testing.F) {
	for _, s := range []string{
		`{"desired": {"resources": {"a": {"resource": {"kind": "A"}}}}, "results": [{"severity": "SEVERITY_NORMAL", "message": "m"}]}`,
		`{"meta": {"tag": "other", "ttl": "60s"}, "desired": {}}`,
		`{"meta": {"tag": "t"}, "context": {"k": "v"}}`,
		`{"results": [{"severity": "SEVERITY_FATAL", "message": "m"}]}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	req := &fnv1.RunFunctionRequest{}
	if err := protojson.Unmarshal([]byte(`{"meta": {"tag": "t"}, "desired": {"resources": {"a": {"resource": {"kind": "A"}}}}, "context": {"c": 1}}`), req); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		rsp, err := codec.JSON{}.Decode(req, out)
		if err != nil {
			return
		}
		noDesired, noContext := rsp.Desired == nil, rsp.Context == nil
		complete(req, rsp)
		if noDesired && !proto.Equal(rsp.Desired, req.Desired) {
			t.Fatalf("the function left desired out, and the response's is %v, not the request's", rsp.Desired)
		}
		if noContext && !proto.Equal(rsp.Context, req.Context) {
			t.Fatalf("the function left context out, and the response's is %v, not the request's", rsp.Context)
		}
		if rsp.GetMeta().GetTag() != "t" {
			t.Fatalf("tag %q, want the request's", rsp.GetMeta().GetTag())
		}
		if rsp.Desired == nil {
			t.Fatal("no desired state")
		}
		b, err := protojson.Marshal(rsp)
		if err != nil {
			t.Fatalf("the response cannot be sent: %v", err)
		}
		again := &fnv1.RunFunctionResponse{}
		if err := protojson.Unmarshal(b, again); err != nil || !proto.Equal(again, rsp) {
			t.Fatalf("round trip: %v\n%v\n%v", err, rsp, again)
		}
	})
}
