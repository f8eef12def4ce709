package codec

import (
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	fnv1beta1 "github.com/crossplane/function-sdk-go/proto/v1beta1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ocifn/ocifn/internal/protofill"
)

// filled returns the Fill variants of m's type, which together set every
// field reachable from it, and fails the test if they do not.
func filled[M proto.Message](t *testing.T, newMsg func() M) []M {
	t.Helper()
	md := newMsg().ProtoReflect().Descriptor()
	var out []M
	set := map[protoreflect.FullName]bool{}
	for v := 0; v < protofill.Variants(md); v++ {
		f := &protofill.Filler{Variant: v}
		m := newMsg()
		f.Fill(m.ProtoReflect())
		for n := range f.Set {
			set[n] = true
		}
		out = append(out, m)
	}
	for n := range protofill.Fields(md) {
		if !set[n] {
			t.Errorf("no variant of %s sets %s", md.FullName(), n)
		}
	}
	return out
}

// wire converts a message to another type with the same wire format
// (v1beta1 and v1), as the adaptor's v1beta1 service does.
func wire[M proto.Message](t *testing.T, from proto.Message, to M) M {
	t.Helper()
	b, err := proto.Marshal(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(b, to); err != nil {
		t.Fatal(err)
	}
	if u := to.ProtoReflect().GetUnknown(); len(u) > 0 {
		t.Fatalf("%s has fields that %s does not know: the two versions differ", from.ProtoReflect().Descriptor().FullName(), to.ProtoReflect().Descriptor().FullName())
	}
	return to
}

// TestJSONCarriesEveryField: every field of RunFunctionRequest, set by
// walking its descriptor, reaches the function's stdin, and every field of
// RunFunctionResponse the function prints comes back, over v1 and v1beta1.
func TestJSONCarriesEveryField(t *testing.T) {
	t.Run("v1_request", func(t *testing.T) {
		for i, req := range filled(t, func() *fnv1.RunFunctionRequest { return &fnv1.RunFunctionRequest{} }) {
			checkRequest(t, i, req)
		}
	})
	t.Run("v1beta1_request", func(t *testing.T) {
		for i, old := range filled(t, func() *fnv1beta1.RunFunctionRequest { return &fnv1beta1.RunFunctionRequest{} }) {
			req := wire(t, old, &fnv1.RunFunctionRequest{})
			checkRequest(t, i, req)
			if back := wire(t, req, &fnv1beta1.RunFunctionRequest{}); !proto.Equal(old, back) {
				t.Errorf("variant %d: the v1beta1 request changed on its way to v1 and back", i)
			}
		}
	})
	t.Run("v1_response", func(t *testing.T) {
		for i, rsp := range filled(t, func() *fnv1.RunFunctionResponse { return &fnv1.RunFunctionResponse{} }) {
			checkResponse(t, i, rsp)
		}
	})
	t.Run("v1beta1_response", func(t *testing.T) {
		for i, old := range filled(t, func() *fnv1beta1.RunFunctionResponse { return &fnv1beta1.RunFunctionResponse{} }) {
			rsp := wire(t, old, &fnv1.RunFunctionResponse{})
			got := checkResponse(t, i, rsp)
			if back := wire(t, got, &fnv1beta1.RunFunctionResponse{}); !proto.Equal(old, back) {
				t.Errorf("variant %d: the v1beta1 response changed on its way from v1", i)
			}
		}
	})
}

// checkRequest encodes req and reads the function's stdin back.
func checkRequest(t *testing.T, variant int, req *fnv1.RunFunctionRequest) {
	t.Helper()
	before := proto.Clone(req)
	in, err := JSON{}.Encode(req)
	if err != nil {
		t.Fatalf("variant %d: %v", variant, err)
	}
	if !proto.Equal(before, req) {
		t.Fatalf("variant %d: Encode changed the request", variant)
	}
	got := &fnv1.RunFunctionRequest{}
	if err := protojson.Unmarshal(in, got); err != nil {
		t.Fatalf("variant %d: the function's stdin is not a request: %v", variant, err)
	}
	if !proto.Equal(req, got) {
		t.Errorf("variant %d: the function's stdin lacks or changes fields:\nsent %v\ngot  %v", variant, req, got)
	}
}

// checkResponse prints rsp as a function would and decodes it.
func checkResponse(t *testing.T, variant int, rsp *fnv1.RunFunctionResponse) *fnv1.RunFunctionResponse {
	t.Helper()
	out, err := protojson.Marshal(rsp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := JSON{}.Decode(&fnv1.RunFunctionRequest{}, out)
	if err != nil {
		t.Fatalf("variant %d: %v", variant, err)
	}
	if !proto.Equal(rsp, got) {
		t.Errorf("variant %d: the response lost or changed fields:\nprinted %v\ngot     %v", variant, rsp, got)
	}
	return got
}
