package adaptor

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	fnv1beta1 "github.com/crossplane/function-sdk-go/proto/v1beta1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ocifn/ocifn/hook"
)

// withUnknown returns m with an unknown varint field num appended.
func withUnknown(m proto.Message, num protowire.Number) {
	r := m.ProtoReflect()
	b := protowire.AppendTag(r.GetUnknown(), num, protowire.VarintType)
	r.SetUnknown(protowire.AppendVarint(b, 1))
}

// TestUnknownFields: a request with fields the compiled protocol does not
// know, at the top and nested, is served; each (message, field number) is
// logged once per process and counted on every call.
func TestUnknownFields(t *testing.T) {
	req := request(t, `{"meta": {"tag": "t1"}, "observed": {"resources": {"a": {"resource": {"kind": "A"}}, "b": {"resource": {"kind": "B"}}}}}`)
	withUnknown(req, 100)
	withUnknown(req, 101)
	withUnknown(req.Meta, 99)
	for _, r := range req.Observed.Resources {
		withUnknown(r, 50)
	}
	// The request crosses the wire as Crossplane sends it.
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	m := hook.NewMetrics(prometheus.NewRegistry())
	r := &scriptedRunner{stdout: `{"desired": {}}`}
	f := NewFunction(r, WithLogger(slog.New(slog.NewTextHandler(&logged, nil))), WithMetrics(m))
	for i := 0; i < 2; i++ {
		in := &fnv1.RunFunctionRequest{}
		if err := proto.Unmarshal(b, in); err != nil {
			t.Fatal(err)
		}
		rsp, err := f.Run(context.Background(), in)
		if err != nil || len(rsp.GetResults()) != 0 {
			t.Fatalf("call %d: %v %v", i, rsp, err)
		}
	}
	warnings := map[string]int{}
	for _, l := range strings.Split(logged.String(), "\n") {
		if strings.Contains(l, "does not know") {
			i := strings.Index(l, "message=")
			warnings[l[i:]]++
			for _, w := range []string{"level=WARN", "cannot reach the function", "Upgrading ocifn"} {
				if !strings.Contains(l, w) {
					t.Errorf("warning lacks %q: %s", w, l)
				}
			}
		}
	}
	want := map[string]int{
		"message=RunFunctionRequest field=100 tag=t1":                      1,
		"message=RunFunctionRequest field=101 tag=t1":                      1,
		"message=RunFunctionRequest.meta field=99 tag=t1":                  1,
		"message=RunFunctionRequest.observed.resources[*] field=50 tag=t1": 1,
	}
	if len(warnings) != len(want) {
		t.Errorf("warnings %v, want %v", warnings, want)
	}
	for k, n := range want {
		if warnings[k] != n {
			t.Errorf("%q logged %d times, want %d (all: %v)", k, warnings[k], n, warnings)
		}
	}
	for _, c := range []struct {
		message, field string
		want           float64
	}{
		{"RunFunctionRequest", "100", 2},
		{"RunFunctionRequest.meta", "99", 2},
		// Two resources carry it, on each of two calls.
		{"RunFunctionRequest.observed.resources[*]", "50", 4},
	} {
		got := testutil.ToFloat64(m.UnknownFields.WithLabelValues(c.message, c.field))
		if got != c.want {
			t.Errorf("ocifn_unknown_fields_total{message=%q,field=%q} = %v, want %v", c.message, c.field, got, c.want)
		}
	}
}

// TestUnknownFieldsBounded: a request carrying more kinds of unknown fields
// than ocifn tells apart costs a bounded number of log lines and metric
// series; the rest are counted as "other".
func TestUnknownFieldsBounded(t *testing.T) {
	const sent = 10 * maxUnknownKinds
	req := request(t, `{"meta": {"tag": "flood"}}`)
	for n := protowire.Number(1000); n < 1000+sent; n++ {
		withUnknown(req, n)
	}
	var logged bytes.Buffer
	reg := prometheus.NewRegistry()
	m := hook.NewMetrics(reg)
	f := NewFunction(&scriptedRunner{stdout: `{"desired": {}}`}, WithLogger(slog.New(slog.NewTextHandler(&logged, nil))), WithMetrics(m))
	for i := 0; i < 2; i++ {
		if _, err := f.Run(context.Background(), proto.Clone(req).(*fnv1.RunFunctionRequest)); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logged.String(), "does not know"); n != maxUnknownKinds {
		t.Errorf("%d warnings of single fields, want %d", n, maxUnknownKinds)
	}
	if n := strings.Count(logged.String(), "more kinds of unknown fields"); n != 1 {
		t.Errorf("%d warnings of the fields beyond the bound, want 1", n)
	}
	if n := testutil.CollectAndCount(m.UnknownFields); n != maxUnknownKinds+1 {
		t.Errorf("%d series of ocifn_unknown_fields_total, want %d", n, maxUnknownKinds+1)
	}
	if got, want := testutil.ToFloat64(m.UnknownFields.WithLabelValues(otherField, otherField)), float64(2*(sent-maxUnknownKinds)); got != want {
		t.Errorf("fields counted as other: %v, want %v", got, want)
	}
}

// wireCheckedRunner records, for each call, whether its request was
// counted on the wire with no unknown field (noUnknownFields).
type wireCheckedRunner struct {
	scriptedRunner
	none []bool
}

func (r *wireCheckedRunner) Run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (Exit, error) {
	r.none = append(r.none, noUnknownFields(ctx))
	return r.scriptedRunner.Run(ctx, stdin, stdout, stderr)
}

// TestUnknownFieldsOverGRPC: served over gRPC with the in-flight bound, a
// request's unknown fields are found by counting its wire bytes, nested
// ones too, and still warned about and counted; a request with none skips
// the walk that looks for them.
func TestUnknownFieldsOverGRPC(t *testing.T) {
	const limit = 1 << 20
	var logged bytes.Buffer
	m := hook.NewMetrics(prometheus.NewRegistry())
	r := &wireCheckedRunner{scriptedRunner: scriptedRunner{stdout: `{"desired": {}}`}}
	srv := NewServer(nil, limit, WithMaxInflightBytes(largestCost(limit)))
	srv.Ready(NewFunction(r, WithLogger(slog.New(slog.NewTextHandler(&logged, nil))), WithMetrics(m)))
	client := fnv1.NewFunctionRunnerServiceClient(serveInMemory(t, srv))

	unknown := request(t, `{"meta": {"tag": "t-unknown"}}`)
	withUnknown(unknown.Meta, 99)
	for _, req := range []*fnv1.RunFunctionRequest{unknown, request(t, `{"meta": {"tag": "t-known"}}`)} {
		if _, err := client.RunFunction(context.Background(), req); err != nil {
			t.Fatalf("%s: %v", req.GetMeta().GetTag(), err)
		}
	}
	if want := []bool{false, true}; !slices.Equal(r.none, want) {
		t.Errorf("counted with no unknown field: %v, want %v", r.none, want)
	}
	if got := testutil.ToFloat64(m.UnknownFields.WithLabelValues("RunFunctionRequest.meta", "99")); got != 1 {
		t.Errorf("ocifn_unknown_fields_total{message=\"RunFunctionRequest.meta\",field=\"99\"} = %v, want 1", got)
	}
	if !strings.Contains(logged.String(), "message=RunFunctionRequest.meta field=99 tag=t-unknown") {
		t.Errorf("no warning about the unknown field:\n%s", logged.String())
	}
}

// TestV1beta1RequestIsV1OnTheWire: a v1beta1 request's unknown fields are
// counted against v1beta1's descriptor (inflight.bounded) but the call
// checks the v1 request converted from it (noUnknownFields), which holds
// only while every v1beta1 field is the v1 field of the same number, kind
// and cardinality, at every depth.
func TestV1beta1RequestIsV1OnTheWire(t *testing.T) {
	seen := map[protoreflect.FullName]bool{}
	var same func(b, v protoreflect.MessageDescriptor)
	same = func(b, v protoreflect.MessageDescriptor) {
		if seen[b.FullName()] {
			return
		}
		seen[b.FullName()] = true
		for i := 0; i < b.Fields().Len(); i++ {
			bf := b.Fields().Get(i)
			vf := v.Fields().ByNumber(bf.Number())
			if vf == nil || vf.Kind() != bf.Kind() || vf.Cardinality() != bf.Cardinality() || vf.IsMap() != bf.IsMap() || vf.IsPacked() != bf.IsPacked() {
				t.Errorf("%s field %d (%s) is not %s's", b.FullName(), bf.Number(), bf.Name(), v.FullName())
				continue
			}
			if bf.Message() != nil {
				same(bf.Message(), vf.Message())
			}
		}
	}
	same((&fnv1beta1.RunFunctionRequest{}).ProtoReflect().Descriptor(), (&fnv1.RunFunctionRequest{}).ProtoReflect().Descriptor())
	if len(seen) < 5 {
		t.Errorf("only %d messages compared", len(seen))
	}
}
