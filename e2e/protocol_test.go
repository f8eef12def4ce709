package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	fnv1beta1 "github.com/crossplane/function-sdk-go/proto/v1beta1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
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

// TestUnknownFieldsOverGRPC: a request from a newer Crossplane, with field
// numbers ocifn's protocol does not know (top-level and nested), is served
// over v1 and v1beta1; ocifn warns once per field per process and counts
// every occurrence in ocifn_unknown_fields_total.
func TestUnknownFieldsOverGRPC(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("passthrough.tar"), "--warm", "0", "--cache=false"})
	req := jsonRequest(t, `{"meta": {"tag": "t-unknown"}, "desired": {"resources": {"a": {"resource": {"kind": "A"}}}}}`)
	appendUnknown(req, 1000, "from the future")
	appendUnknown(req.Meta, 99, "capability-x")
	appendUnknown(req.Desired.Resources["a"], 77, "nested")
	wantDesired := proto.Clone(req.Desired).(*fnv1.State)
	wantDesired.Resources["a"].ProtoReflect().SetUnknown(nil)

	v1beta1 := fnv1beta1.NewFunctionRunnerServiceClient(s.conn)
	for i := 0; i < 3; i++ {
		var desired proto.Message
		if i < 2 {
			desired = s.call(t, req).GetDesired()
		} else {
			// The same bytes through the v1beta1 service.
			b, err := proto.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			old := &fnv1beta1.RunFunctionRequest{}
			if err := proto.Unmarshal(b, old); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			rsp, err := v1beta1.RunFunction(ctx, old)
			cancel()
			if err != nil {
				t.Fatalf("v1beta1: %v\n%s", err, s.stderr)
			}
			got := &fnv1.State{}
			b, _ = proto.Marshal(rsp.GetDesired())
			_ = proto.Unmarshal(b, got)
			desired = got
		}
		if !proto.Equal(desired, wantDesired) {
			t.Errorf("call %d: desired %v, want %v", i, desired, wantDesired)
		}
	}
	eventually(t, 5*time.Second, "three calls logged", func() bool { return strings.Count(s.stderr.String(), "msg=call tag=t-unknown") >= 3 })
	log := s.stderr.String()
	for _, w := range []string{
		`message=RunFunctionRequest field=1000 `,
		`message=RunFunctionRequest.meta field=99 `,
		`message=RunFunctionRequest.desired.resources[*] field=77 `,
	} {
		if n := strings.Count(log, w); n != 1 {
			t.Errorf("%q logged %d times, want once:\n%s", w, n, log)
		}
	}
	mustContain(t, "the warning", log, "level=WARN", "cannot reach the function", "Upgrading ocifn")
	metrics := scrape(t, s.metricsURL(t))
	for _, series := range []string{
		`ocifn_unknown_fields_total{field="1000",message="RunFunctionRequest"}`,
		`ocifn_unknown_fields_total{field="99",message="RunFunctionRequest.meta"}`,
		`ocifn_unknown_fields_total{field="77",message="RunFunctionRequest.desired.resources[*]"}`,
	} {
		if v := metricValue(t, metrics, series); v != 3 {
			t.Errorf("%s = %v, want 3", series, v)
		}
	}
}

// TestUnknownFieldWarningCutsALongTag: the warning about a field ocifn
// does not know carries the request's tag as the call's line does, cut to
// its first bytes and its length (hook.MaxLogTag): meta.tag is the
// caller's, of any length a request may have.
func TestUnknownFieldWarningCutsALongTag(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("passthrough.tar"), "--warm", "0", "--cache=false"})
	tag := strings.Repeat("t", 100<<10)
	req := jsonRequest(t, `{"meta": {"tag": "`+tag+`"}, "desired": {}}`)
	appendUnknown(req, 1000, "from the future")
	s.call(t, req)
	eventually(t, 5*time.Second, "the call logged", func() bool { return strings.Contains(s.stderr.String(), "msg=call tag=") })
	log := s.stderr.String()
	mustContain(t, "the log", log, `message=RunFunctionRequest field=1000 tag="`+tag[:256]+`…(102400 bytes)"`)
	if strings.Contains(log, tag[:257]) {
		t.Errorf("the log holds more of the tag than its first 256 bytes: %d bytes of log", len(log))
	}
}

// appendUnknown adds a length-delimited field num, which the message's
// compiled type does not have, to m.
func appendUnknown(m proto.Message, num protowire.Number, value string) {
	r := m.ProtoReflect()
	b := protowire.AppendTag(r.GetUnknown(), num, protowire.BytesType)
	r.SetUnknown(protowire.AppendString(b, value))
}

// TestAnswerOverTheSendLimit: Crossplane's gRPC client keeps gRPC's default
// receive limit of 4 MiB, so an answer larger than that is a Fatal result
// naming the limit, which a client with the default limit, as Crossplane's,
// reads; with --max-send-msg-size raised, a client that accepts more gets
// the answer itself.
func TestAnswerOverTheSendLimit(t *testing.T) {
	// About 5 MB in protobuf: a string of 5,000,000 bytes.
	script := `jq -c '{desired: (.desired | .composite = {resource: {pad: ("x" * 5000000)}})}'`
	req := shRequest(t, "t-large-answer", script)
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache=false"})
	wantFatal(t, req, s.call(t, req), "more than the 4194304 bytes a response may have", "--max-send-msg-size")

	// A request may be larger than a response: with a desired state of 5
	// MB, the Fatal answer cannot carry it, and still says why.
	large := func(tag, script string) *fnv1.RunFunctionRequest {
		r := shRequest(t, tag, script)
		r.Desired.Composite = &fnv1.Resource{Resource: &structpb.Struct{Fields: map[string]*structpb.Value{"pad": structpb.NewStringValue(strings.Repeat("x", 5000000))}}}
		return r
	}
	for _, c := range []struct {
		tag, script string
		want        []string
	}{
		{"t-large-request-fails", `echo boom >&2; exit 3`, []string{"the function exited with code 3", "stderr: boom"}},
		{"t-large-request-echoed", `jq -c '{desired: .desired}'`, []string{"more than the 4194304 bytes a response may have"}},
	} {
		rsp := s.call(t, large(c.tag, c.script))
		if len(rsp.GetResults()) != 1 || rsp.GetResults()[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL || rsp.GetMeta().GetTag() != c.tag || rsp.GetDesired() != nil {
			t.Fatalf("%s: want one Fatal result, the tag and no desired state, got %v %v", c.tag, rsp.GetMeta(), rsp.GetResults())
		}
		mustContain(t, c.tag+" fatal message", rsp.GetResults()[0].GetMessage(), append(c.want, "leaves out the request's desired state and context, 5000", "--max-send-msg-size")...)
	}

	// A Fatal result of the function's own, in an answer that its desired
	// state alone takes past the limit (carried over from the request, or
	// echoed), is sent without it: the caller reads why the function
	// failed, not that its answer was too large.
	for _, c := range []struct{ tag, script string }{
		{"t-large-request-own-fatal", `echo '{"results": [{"severity": "SEVERITY_WARNING", "message": "look"}, {"severity": "SEVERITY_FATAL", "message": "replicas must be below 10"}]}'`},
		{"t-large-request-own-fatal-echoed", `jq -c '{desired: .desired, results: [{severity: "SEVERITY_WARNING", message: "look"}, {severity: "SEVERITY_FATAL", message: "replicas must be below 10"}]}'`},
	} {
		rsp := s.call(t, large(c.tag, c.script))
		res := rsp.GetResults()
		if len(res) != 2 || res[0].GetMessage() != "look" || res[1].GetSeverity() != fnv1.Severity_SEVERITY_FATAL || rsp.GetMeta().GetTag() != c.tag || rsp.GetDesired() != nil {
			t.Fatalf("%s: want the function's two results, the tag and no desired state, got %v %v", c.tag, rsp.GetMeta(), res)
		}
		mustContain(t, c.tag+" fatal message", res[1].GetMessage(), "replicas must be below 10", "this answer leaves out its desired state and context, 5000", "--max-send-msg-size")
	}

	raised := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache=false", "--max-send-msg-size", "8Mi"})
	ctx, cancel := context.WithTimeout(context.Background(), patient(60*time.Second))
	defer cancel()
	rsp, err := fnv1.NewFunctionRunnerServiceClient(raised.conn).RunFunction(ctx, req, grpc.MaxCallRecvMsgSize(16<<20))
	if err != nil {
		t.Fatalf("RunFunction with --max-send-msg-size 8Mi: %v\n%s", err, raised.stderr)
	}
	if pad := rsp.GetDesired().GetComposite().GetResource().AsMap()["pad"]; len(fmt.Sprint(pad)) != 5000000 || len(rsp.GetResults()) != 0 {
		t.Errorf("with --max-send-msg-size 8Mi: an answer with a pad of %d bytes and results %v, want the function's answer", len(fmt.Sprint(pad)), rsp.GetResults())
	}
}
