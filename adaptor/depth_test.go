package adaptor

import (
	"fmt"
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// TestTooDeepIsWhatProtobufRefuses: a response is refused as too deep
// exactly when proto.Unmarshal, as a gRPC client decodes it, cannot read
// its encoding back, for objects and lists nested in each place a
// response holds free-form JSON, around the limit.
func TestTooDeepIsWhatProtobufRefuses(t *testing.T) {
	places := map[string]string{
		"composite": `{"desired": {"composite": {"resource": %s}}}`,
		"resource":  `{"desired": {"resources": {"a": {"resource": %s, "connectionDetails": {"k": "dg=="}}}}}`,
		"context":   `{"context": {"k": %s}}`,
		"output":    `{"output": {"k": %s}}`,
	}
	// Where the limit falls, for each shape, in each place: an object is
	// 3 levels on the wire, a list 2.
	shapes := map[string]struct {
		nest   func(n int) string
		lo, hi int
	}{
		"objects": {func(n int) string { return strings.Repeat(`{"a": `, n) + "1" + strings.Repeat("}", n) }, 3320, 3345},
		"lists":   {func(n int) string { return `{"a": ` + strings.Repeat("[", n) + "1" + strings.Repeat("]", n) + "}" }, 4985, 5010},
	}
	for place, doc := range places {
		for name, shape := range shapes {
			t.Run(place+"_"+name, func(t *testing.T) {
				refused := 0
				for n := shape.lo; n <= shape.hi; n++ {
					rsp := &fnv1.RunFunctionResponse{}
					if err := protojson.Unmarshal([]byte(fmt.Sprintf(doc, shape.nest(n))), rsp); err != nil {
						break // protojson's own limit: refused as invalid output
					}
					b, err := proto.Marshal(rsp)
					if err != nil {
						t.Fatal(err)
					}
					readErr := proto.Unmarshal(b, &fnv1.RunFunctionResponse{})
					msg := tooDeep(rsp)
					if (msg != "") != (readErr != nil) {
						t.Fatalf("nested %d: tooDeep says %q, proto.Unmarshal %v", n, msg, readErr)
					}
					if msg != "" {
						refused++
						mustContainAll(t, msg, "more than 10000 levels", fmt.Sprintf("under %q", strings.Split(doc, `"`)[1]))
					}
				}
				if refused == 0 {
					t.Error("no nesting tried was too deep")
				}
			})
		}
	}
}

func mustContainAll(t *testing.T, s string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(s, p) {
			t.Errorf("%q does not contain %q", s, p)
		}
	}
}
