package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	fnv1beta1 "github.com/crossplane/function-sdk-go/proto/v1beta1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ocifn/ocifn/internal/protofill"
)

// TestEveryFieldOverGRPC: a request with every field set (by walking the
// proto descriptors, so a field added by an upgrade is covered too) reaches
// a real function in its container whole, and a response with every field
// set comes back whole, over v1 and over v1beta1. The jq function prints
// the response it is given in its input, with the request it read on stdin
// added to the response's context.
func TestEveryFieldOverGRPC(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("jq-function.tar"), "--warm", "0"})
	v1 := fnv1.NewFunctionRunnerServiceClient(s.conn)
	v1beta1 := fnv1beta1.NewFunctionRunnerServiceClient(s.conn)
	t.Run("v1", func(t *testing.T) {
		everyField(t, s, "v1",
			func() proto.Message { return &fnv1.RunFunctionRequest{} },
			func() proto.Message { return &fnv1.RunFunctionResponse{} },
			func(ctx context.Context, req proto.Message) (proto.Message, error) {
				return v1.RunFunction(ctx, req.(*fnv1.RunFunctionRequest))
			})
	})
	t.Run("v1beta1", func(t *testing.T) {
		everyField(t, s, "v1beta1",
			func() proto.Message { return &fnv1beta1.RunFunctionRequest{} },
			func() proto.Message { return &fnv1beta1.RunFunctionResponse{} },
			func(ctx context.Context, req proto.Message) (proto.Message, error) {
				return v1beta1.RunFunction(ctx, req.(*fnv1beta1.RunFunctionRequest))
			})
	})
}

func everyField(t *testing.T, s *server, version string, newReq, newRsp func() proto.Message, call func(context.Context, proto.Message) (proto.Message, error)) {
	reqs, missing := protofill.Messages(newReq)
	if len(missing) > 0 {
		t.Fatalf("no request sets %v", missing)
	}
	rsps, missing := protofill.Messages(newRsp)
	if len(missing) > 0 {
		t.Fatalf("no response sets %v", missing)
	}
	for i := 0; i < max(len(reqs), len(rsps)); i++ {
		req, want := reqs[i%len(reqs)], rsps[i%len(rsps)]
		// A tag of its own per call: the response has a TTL, and the
		// server would answer a repeated tag from its cache.
		tag := fmt.Sprintf("%s-%d", version, i)
		setTag(req, tag)
		setTag(want, tag)
		printed, err := protojson.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		// JSON is jq syntax: the program prints the response as given.
		input, err := structpb.NewStruct(map[string]any{"filter": ". as $req | " + string(printed) + " | .context.request = $req"})
		if err != nil {
			t.Fatal(err)
		}
		setField(req, "input", input)

		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		got, err := call(ctx, req)
		cancel()
		if err != nil {
			t.Fatalf("variant %d: RunFunction: %v\nlog:\n%s", i, err, s.stderr)
		}
		gotCtx := field(got, "context").(*structpb.Struct)
		echoed, ok := gotCtx.GetFields()["request"]
		if !ok {
			t.Fatalf("variant %d: the response has no context.request: %v", i, got)
		}
		delete(gotCtx.Fields, "request")
		if !proto.Equal(want, got) {
			t.Errorf("variant %d: the response lost or changed fields:\nprinted %v\ngot     %v", i, want, got)
		}
		b, err := protojson.Marshal(echoed)
		if err != nil {
			t.Fatal(err)
		}
		stdin := newReq()
		if err := protojson.Unmarshal(b, stdin); err != nil {
			t.Fatalf("variant %d: the function's stdin is not a %s: %v", i, version, err)
		}
		if !proto.Equal(req, stdin) {
			t.Errorf("variant %d: the function's stdin lacks or changes fields:\nsent %v\ngot  %v", i, req, stdin)
		}
	}
}

// setTag sets meta.tag of a request or response.
func setTag(m proto.Message, tag string) {
	r := m.ProtoReflect()
	meta := r.Mutable(r.Descriptor().Fields().ByName("meta")).Message()
	meta.Set(meta.Descriptor().Fields().ByName("tag"), protoreflect.ValueOfString(tag))
}

// setField sets a message field of m by name.
func setField(m proto.Message, name string, v proto.Message) {
	r := m.ProtoReflect()
	r.Set(r.Descriptor().Fields().ByName(protoreflect.Name(name)), protoreflect.ValueOfMessage(v.ProtoReflect()))
}

// field returns a message field of m by name.
func field(m proto.Message, name string) proto.Message {
	r := m.ProtoReflect()
	return r.Get(r.Descriptor().Fields().ByName(protoreflect.Name(name))).Message().Interface()
}
