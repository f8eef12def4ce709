package protocount

import (
	"errors"
	"runtime"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ocifn/ocifn/internal/memtest"
)

var requestType = (&fnv1.RunFunctionRequest{}).ProtoReflect().Descriptor()

func TestCount(t *testing.T) {
	s, err := structpb.NewStruct(map[string]any{"name": "a\"é", "n": 1, "l": []any{true, nil}})
	if err != nil {
		t.Fatal(err)
	}
	req := &fnv1.RunFunctionRequest{
		Meta:     &fnv1.RequestMeta{Tag: "t"},
		Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: s, ConnectionDetails: map[string][]byte{"k": {0}}}},
	}
	wire, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Count(wire, requestType)
	if err != nil {
		t.Fatal(err)
	}
	// The request, Meta, State, Resource, Struct; three field entries and
	// their Values, a ListValue and its two Values; a connection detail.
	want := Counts{
		Wire:     int64(len(wire)),
		Messages: 5 + 6 + 3 + 1,
		Scalars:  3, // 1, true, null
		// "t", the keys name, n, l, the value "a\"é", the detail's key
		// and value.
		Strings:     7,
		StringBytes: 1 + 4 + 1 + 1 + 4 + 1 + 1,
		Bytes:       1,
		BytesLen:    1,
		Controls:    1, // the detail's 0
		Quotes:      1,
		NonASCII:    2,
	}
	got.Indent = 0
	if got != want {
		t.Errorf("Count:\n got %+v\nwant %+v", got, want)
	}
}

// TestCountAgreesWithUnmarshal: input proto.Unmarshal takes is counted,
// fields of a wire type they do not have included (it keeps those as
// unknown fields, and Count counts them as such, nested ones too); input
// it refuses for its framing is refused.
func TestCountAgreesWithUnmarshal(t *testing.T) {
	var wrongType []byte
	wrongType = protowire.AppendTag(wrongType, 1, protowire.VarintType) // meta is a message
	wrongType = protowire.AppendVarint(wrongType, 7)
	var unknown []byte
	unknown = protowire.AppendTag(unknown, 999, protowire.BytesType)
	unknown = protowire.AppendBytes(unknown, []byte("kept"))
	// The same unknown field, in the request's meta.
	nested := protowire.AppendTag(nil, 1, protowire.BytesType)
	nested = protowire.AppendBytes(nested, unknown)
	for name, b := range map[string][]byte{"wrong wire type": wrongType, "unknown field": unknown, "unknown field in meta": nested} {
		var req fnv1.RunFunctionRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Fatalf("%s: proto.Unmarshal: %v", name, err)
		}
		if len(req.ProtoReflect().GetUnknown())+len(req.GetMeta().ProtoReflect().GetUnknown()) == 0 {
			t.Fatalf("%s: proto.Unmarshal kept no unknown field", name)
		}
		if c, err := Count(b, requestType); err != nil || c.StringBytes == 0 || c.Unknown != 1 {
			t.Errorf("%s: Count = %+v, %v; want the bytes counted as one unknown field", name, c, err)
		}
	}
	truncated := protowire.AppendTag(nil, 1, protowire.BytesType)
	truncated = protowire.AppendVarint(truncated, 10)
	if _, err := Count(truncated, requestType); err == nil {
		t.Error("a field longer than the message was counted")
	}
	var deep any = "x"
	for range maxDepth {
		deep = []any{deep}
	}
	v, err := structpb.NewValue(deep)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.MarshalOptions{}.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Count(b, v.ProtoReflect().Descriptor()); !errors.Is(err, ErrTooDeep) {
		t.Errorf("a Value nested %d deep: %v, want ErrTooDeep", maxDepth, err)
	}
	if err := proto.Unmarshal(b, &structpb.Value{}); err == nil {
		t.Error("proto.Unmarshal took what Count refuses as too deep")
	}
}

// TestDecodedBoundsUnmarshal: Decoded is at least what proto.Unmarshal
// allocates for requests of every costly shape, and within 4 times of it
// where that is more than a megabyte.
func TestDecodedBoundsUnmarshal(t *testing.T) {
	if testing.Short() {
		t.Skip("measures the heap of large requests")
	}
	for _, shape := range memtest.Wire(100000) {
		name, wire := shape.Name, shape.Wire
		c, err := Count(wire, requestType)
		if err != nil {
			t.Fatal(err)
		}
		bound := c.Decoded()
		// A new message each time: one decoded into again would let go of
		// what the measure before it held, which counts in its start.
		var req *fnv1.RunFunctionRequest
		used := memtest.PeakWithin(bound, func() {
			r := &fnv1.RunFunctionRequest{}
			if err := proto.Unmarshal(wire, r); err != nil {
				t.Fatal(err)
			}
			req = r
		})
		runtime.KeepAlive(wire) // both live until the end, as in a call
		runtime.KeepAlive(req)
		t.Logf("%-18s %8d bytes on the wire: decoded %9d, bound %9d", name, len(wire), used, bound)
		if used > bound {
			t.Errorf("%s: decoding took %d bytes, past the bound of %d", name, used, bound)
		}
		if used > 1<<20 && bound > 4*used {
			t.Errorf("%s: the bound of %d bytes is more than 4 times the %d decoding took", name, bound, used)
		}
	}
}
