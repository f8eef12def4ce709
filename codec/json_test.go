package codec

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

func TestJSONEncode(t *testing.T) {
	cases := []struct {
		name, req string
	}{
		{"empty", `{}`},
		{"meta_only", `{"meta": {"tag": "x"}}`},
		{"composite_without_resources", `{"desired": {"composite": {"resource": {"kind": "XR"}}}, "observed": {"composite": {"resource": {"kind": "XR"}}}}`},
		{"with_resources", `{"desired": {"resources": {"a": {"resource": {"kind": "A"}}}}, "input": {"filter": "."}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := &fnv1.RunFunctionRequest{}
			if err := protojson.Unmarshal([]byte(tc.req), req); err != nil {
				t.Fatal(err)
			}
			b, err := JSON{}.Encode(req)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, b)
			}
			for _, k := range []string{"desired", "observed"} {
				st, ok := got[k].(map[string]any)
				if !ok {
					t.Fatalf("%s missing: %s", k, b)
				}
				if _, ok := st["resources"].(map[string]any); !ok {
					t.Errorf("%s.resources missing: %s", k, b)
				}
			}
			// Nothing is lost: the encoded request reads back as the
			// original.
			back := &fnv1.RunFunctionRequest{}
			if err := protojson.Unmarshal(b, back); err != nil {
				t.Fatal(err)
			}
			if req.Desired == nil {
				req.Desired = &fnv1.State{}
			}
			if req.Observed == nil {
				req.Observed = &fnv1.State{}
			}
			want, _ := protojson.Marshal(req)
			have, _ := protojson.Marshal(back)
			if !bytes.Equal(compact(t, want), compact(t, have)) {
				t.Errorf("round trip changed the request:\nwant %s\ngot  %s", want, have)
			}
		})
	}
}

func compact(t *testing.T, b []byte) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(v)
	return out
}

// TestJSONByteOrderMark: a response that begins with a UTF-8 byte order
// mark (PowerShell and .NET print one) is read, as RFC 8259 allows and
// the YAML modes do, not taken for YAML and told to print JSON.
func TestJSONByteOrderMark(t *testing.T) {
	out := []byte("\uFEFF{\"desired\": {\"resources\": {\"a\": {\"resource\": {\"kind\": \"A\"}}}}}\n")
	rsp, err := JSON{}.Decode(&fnv1.RunFunctionRequest{}, out)
	if err != nil {
		t.Fatalf("a response after a byte order mark: %v", err)
	}
	if rsp.GetDesired().GetResources()["a"] == nil {
		t.Errorf("desired resource a lost: %v", rsp)
	}
	// A function that exits non-zero is told of the wrong mode alone.
	if hint := Mismatch("json", out); hint != "" {
		t.Errorf("Mismatch of JSON after a byte order mark: %q, want none", hint)
	}
}

// TestJSONUnknownEnumNumber: protojson keeps an enum's number that no
// value has, and Crossplane drops a result of a severity it does not know;
// such a number is refused, named by where it is and with the values
// there are. A number that is a value is taken as its name is.
func TestJSONUnknownEnumNumber(t *testing.T) {
	for out, want := range map[string]string{
		`{"results": [{"severity": "SEVERITY_NORMAL", "message": "a"}, {"severity": 99, "message": "b"}]}`: `results[1].severity is 99, which is no Severity (SEVERITY_UNSPECIFIED, SEVERITY_FATAL, SEVERITY_WARNING, SEVERITY_NORMAL)`,
		`{"conditions": [{"type": "T", "status": 7, "reason": "R"}]}`:                                      `conditions[0].status is 7, which is no Status`,
		`{"desired": {"resources": {"a": {"resource": {"kind": "A"}, "ready": 5}}}}`:                       `desired.resources["a"].ready is 5, which is no Ready`,
	} {
		_, err := JSON{}.Decode(&fnv1.RunFunctionRequest{}, []byte(out))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", out, err, want)
		}
	}
	rsp, err := JSON{}.Decode(&fnv1.RunFunctionRequest{}, []byte(`{"results": [{"severity": 3, "message": "m"}], "desired": {"resources": {"a": {"resource": {"k": null}, "ready": 1}}}}`))
	if err != nil || rsp.GetResults()[0].GetSeverity() != fnv1.Severity_SEVERITY_NORMAL {
		t.Errorf("known numbers: %v, %v", rsp, err)
	}
}
