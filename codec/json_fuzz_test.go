package codec

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// addRequestSeeds adds the testdata functions' requests to a fuzz corpus.
func addRequestSeeds(f *testing.F) {
	files, _ := filepath.Glob("../testdata/functions/*/request*.json")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
}

// encoded is a request as a codec's Encode and Decode saw it in a round
// trip.
type encoded struct {
	req *fnv1.RunFunctionRequest
	out []byte
	rsp *fnv1.RunFunctionResponse
	// err is Decode's, of Encode's own output.
	err error
}

// encodeDecode reads data as a request and gives it to c's Encode, then
// Encode's output to c's Decode, as a function that prints its input back
// unchanged would, failing t if either changes the request. ok is false when
// data is not a request or Encode refuses it.
func encodeDecode(t *testing.T, c Codec, data []byte) (e encoded, ok bool) {
	t.Helper()
	e.req = &fnv1.RunFunctionRequest{}
	if err := protojson.Unmarshal(data, e.req); err != nil {
		return e, false
	}
	before := proto.Clone(e.req)
	out, err := c.Encode(e.req)
	if err != nil {
		return e, false
	}
	e.out = out
	e.rsp, e.err = c.Decode(e.req, out)
	if !proto.Equal(before, e.req) {
		t.Fatalf("the request changed:\n%v\n%v", before, e.req)
	}
	return e, true
}

// fuzzDecode fuzzes c's Decode: whatever a function prints, Decode answers
// or errs with a short, valid UTF-8 reason, and an answer carries the
// request's tag and a desired resources map, and survives a protojson round
// trip (Crossplane reads a resource as JSON). req's tag is "fuzz".
func fuzzDecode(f *testing.F, c Codec, req *fnv1.RunFunctionRequest) {
	f.Add([]byte("a: &x [1, {b: *x}]\nc: *x\nd: *y\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		// What a server charges before decoding: counted for any output
		// without fail.
		if n := decodeBound(c, out); n < decodeBase {
			t.Fatalf("decoding %q charged %d bytes", out, n)
		}
		rsp, err := c.Decode(req, out)
		if err != nil {
			// The results a refused answer carries follow its reason,
			// bounded apart: the reason alone is short.
			reason := err
			var r *refusal
			if errors.As(err, &r) {
				reason = r.reason
			}
			if msg := err.Error(); !utf8.ValidString(msg) || len(reason.Error()) > 4096 || len(msg) > 4096+resultsBytes+1024 {
				t.Fatalf("the reason is not short valid UTF-8 (%d bytes, %d with results): %.4096q", len(reason.Error()), len(msg), msg)
			}
			return
		}
		if rsp.GetMeta().GetTag() != "fuzz" || rsp.GetDesired().GetResources() == nil {
			t.Fatalf("response %v", rsp)
		}
		mustSurviveProtojson(t, rsp)
	})
}

// FuzzJSONEncode: any request a client can send is given to the
// function as JSON that parses back to the same request, with desired and
// observed resources always present, and the request itself is left as it
// was.
func FuzzJSONEncode(f *testing.F) {
	addRequestSeeds(f)
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"meta": {"tag": "t"}, "observed": {"composite": {"resource": {"kind": "X"}}}, "context": {"a": [1, "b", null]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &fnv1.RunFunctionRequest{}
		if err := protojson.Unmarshal(data, req); err != nil {
			return
		}
		before := proto.Clone(req)
		out, err := JSON{}.Encode(req)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		if !proto.Equal(before, req) {
			t.Fatalf("Encode changed the request:\n%v\n%v", before, req)
		}
		var shape struct {
			Desired, Observed *struct {
				Resources *map[string]json.RawMessage `json:"resources"`
			}
		}
		if err := json.Unmarshal(out, &shape); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, out)
		}
		if shape.Desired == nil || shape.Desired.Resources == nil || shape.Observed == nil || shape.Observed.Resources == nil {
			t.Fatalf("desired.resources or observed.resources missing:\n%s", out)
		}
		got := &fnv1.RunFunctionRequest{}
		if err := protojson.Unmarshal(out, got); err != nil {
			t.Fatalf("the function's stdin is not a request: %v\n%s", err, out)
		}
		want := proto.Clone(req).(*fnv1.RunFunctionRequest)
		if want.Desired == nil {
			want.Desired = &fnv1.State{}
		}
		if want.Observed == nil {
			want.Observed = &fnv1.State{}
		}
		if !proto.Equal(want, got) {
			t.Fatalf("round trip differs:\nwant %v\ngot  %v", want, got)
		}
	})
}

// FuzzJSONDecode: whatever a function prints is either refused with a short,
// valid UTF-8 reason, or becomes a response that survives a protojson round
// trip. (The contract the adaptor applies to it, tag and desired state, is
// fuzzed in the adaptor by FuzzContract.)
func FuzzJSONDecode(f *testing.F) {
	for _, s := range []string{
		`{"desired": {"resources": {"a": {"resource": {"kind": "A"}}}}, "results": [{"severity": "SEVERITY_NORMAL", "message": "m"}]}`,
		`{"meta": {"tag": "other", "ttl": "60s"}, "desired": {}}`,
		`{"meta": {"tag": "t"}, "context": {"k": "v"}}`,
		`{"desired": {"composite": {"resource": {"kind": "XR"}, "connectionDetails": {"k": "dg=="}}}, "requirements": {"extraResources": {"r": {"apiVersion": "v1", "kind": "Secret", "matchName": "s"}}}}`,
		"{\"results\": [{\"message\": \"\xff\"}]}",
		`{"desired": {`,
		``,
		`null`,
	} {
		f.Add([]byte(s))
	}
	req := &fnv1.RunFunctionRequest{}
	if err := protojson.Unmarshal([]byte(`{"meta": {"tag": "t"}, "desired": {"resources": {"a": {"resource": {"kind": "A"}}}}, "context": {"c": 1}}`), req); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		rsp, err := JSON{}.Decode(req, out)
		if err != nil {
			msg := err.Error()
			if !utf8.ValidString(msg) || len(msg) > 4096 {
				t.Fatalf("the reason is not short valid UTF-8 (%d bytes): %q", len(msg), msg)
			}
			return
		}
		mustSurviveProtojson(t, rsp)
	})
}

// mustSurviveProtojson fails unless rsp, an answer decoded from what a
// function printed, can be sent: protojson writes it, and reads back the
// same response.
func mustSurviveProtojson(t *testing.T, rsp *fnv1.RunFunctionResponse) {
	t.Helper()
	b, err := protojson.Marshal(rsp)
	if err != nil {
		t.Fatalf("the response cannot be sent: %v", err)
	}
	again := &fnv1.RunFunctionResponse{}
	if err := protojson.Unmarshal(b, again); err != nil || !proto.Equal(again, rsp) {
		t.Fatalf("round trip: %v\n%v\n%v", err, rsp, again)
	}
}
