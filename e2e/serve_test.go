package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	fnv1beta1 "github.com/crossplane/function-sdk-go/proto/v1beta1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/google/go-cmp/cmp"
)

// withTag returns the expected response with the request's tag, which the
// adaptor fills in when the function leaves it out.
func withTag(rsp *fnv1.RunFunctionResponse, req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
	if rsp.GetMeta().GetTag() == "" {
		rsp.Meta = &fnv1.ResponseMeta{Tag: req.GetMeta().GetTag()}
	}
	if rsp.Context == nil {
		rsp.Context = req.GetContext()
	}
	return rsp
}

func diff(want, got proto.Message) string { return cmp.Diff(want, got, protocmp.Transform()) }

// TestFunctionsAnswerTheirExamples runs each testdata function on its example
// request and compares the whole response with the expected one.
func TestFunctionsAnswerTheirExamples(t *testing.T) {
	for _, fn := range []string{"labelizer", "jq-function", "yq-function", "passthrough"} {
		t.Run(fn, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, []string{"--tarball", image(fn + ".tar")})
			req := loadRequest(t, fn, "request.json")
			want := withTag(loadResponse(t, fn, "expected.json"), req)
			if d := diff(want, s.call(t, req)); d != "" {
				t.Errorf("response (-want +got):\n%s", d)
			}
		})
	}
}

// TestV1beta1 calls the older API of the same server.
func TestV1beta1(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("labelizer.tar")})
	req := &fnv1beta1.RunFunctionRequest{}
	data, err := os.ReadFile(repoRoot + "/testdata/functions/labelizer/request.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := protojson.Unmarshal(data, req); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rsp, err := fnv1beta1.NewFunctionRunnerServiceClient(s.conn).RunFunction(ctx, req)
	if err != nil {
		t.Fatalf("v1beta1 RunFunction: %v\n%s", err, s.stderr)
	}
	if rsp.GetMeta().GetTag() != "labelizer-example" {
		t.Errorf("tag: got %q", rsp.GetMeta().GetTag())
	}
	for name, r := range rsp.GetDesired().GetResources() {
		labels := r.GetResource().GetFields()["metadata"].GetStructValue().GetFields()["labels"].GetStructValue().GetFields()
		if labels["ocifn.dev/labelized"].GetStringValue() != "true" {
			t.Errorf("resource %s not labelized: %v", name, r.GetResource())
		}
	}
	if got := rsp.GetResults(); len(got) != 1 || got[0].GetMessage() != "labelized 2 resources" {
		t.Errorf("results: got %v", got)
	}
}

// TestImageFormats serves the same function from each tarball format users
// have: docker save, gzip-compressed docker save, and an OCI archive.
func TestImageFormats(t *testing.T) {
	for _, tarball := range []string{"labelizer.tar", "labelizer.tgz", "labelizer.oci.tar"} {
		t.Run(tarball, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, []string{"--tarball", image(tarball)})
			req := loadRequest(t, "labelizer", "request.json")
			want := withTag(loadResponse(t, "labelizer", "expected.json"), req)
			if d := diff(want, s.call(t, req)); d != "" {
				t.Errorf("response (-want +got):\n%s", d)
			}
		})
	}
}

// TestContract checks the adaptor's answers when a function misbehaves.
func TestContract(t *testing.T) {
	desired := `"desired": {"composite": {"resource": {"kind": "XR"}}, "resources": {"a": {"resource": {"kind": "A"}}}}`
	cases := []struct {
		name    string
		tarball string
		request string
		check   func(t *testing.T, req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse)
	}{
		{
			name:    "exit_code_1_gives_fatal_result_with_stderr",
			tarball: "failing.tar",
			request: `{"meta": {"tag": "t-fail"}, ` + desired + `}`,
			check: func(t *testing.T, req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse) {
				wantFatal(t, req, rsp, "exited with code 1", "boom: the function failed on purpose")
			},
		},
		{
			name:    "output_that_is_not_a_response_gives_fatal_result",
			tarball: "echo.tar",
			request: `{"meta": {"tag": "t-echo"}, ` + desired + `}`,
			check: func(t *testing.T, req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse) {
				// The request echoed back has "observed", which no
				// response has.
				wantFatal(t, req, rsp, "not a valid RunFunctionResponse", `unknown field "observed"`, "output began with")
			},
		},
		{
			name:    "missing_desired_keeps_request_desired_with_warning",
			tarball: "jq-function.tar",
			request: `{"meta": {"tag": "t-nodesired"}, "input": {"filter": "{results: [{severity: \"SEVERITY_NORMAL\", message: \"hi\"}]}"}, ` + desired + `}`,
			check: func(t *testing.T, req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse) {
				if d := diff(req.GetDesired(), rsp.GetDesired()); d != "" {
					t.Errorf("desired changed (-want +got):\n%s", d)
				}
				if len(rsp.GetResults()) != 2 || rsp.GetResults()[1].GetSeverity() != fnv1.Severity_SEVERITY_WARNING {
					t.Fatalf("want the function's result and a warning, got %v", rsp.GetResults())
				}
				mustContain(t, "warning", rsp.GetResults()[1].GetMessage(), `no "desired" field`)
				if rsp.GetMeta().GetTag() != "t-nodesired" {
					t.Errorf("tag: got %q", rsp.GetMeta().GetTag())
				}
			},
		},
		{
			name:    "empty_output_gives_fatal_result",
			tarball: "jq-function.tar",
			request: `{"meta": {"tag": "t-empty"}, "input": {"filter": "empty"}, ` + desired + `}`,
			check: func(t *testing.T, req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse) {
				wantFatal(t, req, rsp, "printed nothing on stdout")
			},
		},
		{
			name:    "jq_error_gives_fatal_result_with_jq_message",
			tarball: "jq-function.tar",
			request: `{"meta": {"tag": "t-jqerr"}, "input": {"filter": "error(\"custom failure\")"}, ` + desired + `}`,
			check: func(t *testing.T, req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse) {
				wantFatal(t, req, rsp, "exited with code 5", "custom failure")
			},
		},
		{
			// A response always carries the request's tag (Crossplane
			// matches and caches responses by it); the function's TTL stays.
			name:    "function_tag_other_than_the_request_is_replaced_with_a_warning",
			tarball: "jq-function.tar",
			request: `{"meta": {"tag": "t-own"}, "input": {"filter": "{meta: {tag: \"chosen\", ttl: \"60s\"}, desired: .desired}"}, ` + desired + `}`,
			check: func(t *testing.T, req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse) {
				if rsp.GetMeta().GetTag() != "t-own" || rsp.GetMeta().GetTtl().AsDuration() != time.Minute {
					t.Errorf("meta: got %v", rsp.GetMeta())
				}
				if rs := rsp.GetResults(); len(rs) != 1 || rs[0].GetSeverity() != fnv1.Severity_SEVERITY_WARNING || !strings.Contains(rs[0].GetMessage(), `"chosen"`) {
					t.Errorf("results %v, want one Warning naming the function's tag", rs)
				}
			},
		},
		{
			name:    "empty_request_still_has_desired_and_observed_resources",
			tarball: "jq-function.tar",
			request: `{"input": {"filter": "{desired: {resources: {n: {resource: {count: ([.desired.resources[], .observed.resources[]] | length)}}}}}"}}`,
			check: func(t *testing.T, req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse) {
				n := rsp.GetDesired().GetResources()["n"].GetResource().GetFields()["count"].GetNumberValue()
				if n != 0 || len(rsp.GetResults()) != 0 {
					t.Errorf("got %v", rsp)
				}
			},
		},
	}
	servers := map[string]*server{}
	for _, tc := range cases {
		if servers[tc.tarball] == nil {
			servers[tc.tarball] = startServer(t, []string{"--tarball", image(tc.tarball)})
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := jsonRequest(t, tc.request)
			tc.check(t, req, servers[tc.tarball].call(t, req))
		})
	}
}

// wantFatal checks the adaptor's Fatal answer: the request's desired state
// unchanged and one Fatal result whose message holds every part of msg.
func wantFatal(t *testing.T, req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse, msg ...string) {
	t.Helper()
	want := req.GetDesired()
	if want == nil {
		want = &fnv1.State{}
	}
	if d := diff(want, rsp.GetDesired()); d != "" {
		t.Errorf("desired changed (-want +got):\n%s", d)
	}
	if rsp.GetMeta().GetTag() != req.GetMeta().GetTag() {
		t.Errorf("tag: got %q, want %q", rsp.GetMeta().GetTag(), req.GetMeta().GetTag())
	}
	if len(rsp.GetResults()) != 1 || rsp.GetResults()[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
		t.Fatalf("want one Fatal result, got %v", rsp.GetResults())
	}
	mustContain(t, "fatal message", rsp.GetResults()[0].GetMessage(), msg...)
}

// TestConcurrentCalls sends 20 calls at once, each with its own payload, and
// checks that each gets its own answer.
func TestConcurrentCalls(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("labelizer.tar")})
	const n = 20
	var wg sync.WaitGroup
	rsps := make([]*fnv1.RunFunctionResponse, n)
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := jsonRequest(t, fmt.Sprintf(`{"meta": {"tag": "tag-%d"}, "desired": {"resources": {"res-%d": {"resource": {"kind": "ConfigMap", "metadata": {"name": "cm-%d"}}}}}}`, i, i, i))
			<-start
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rsps[i], errs[i] = fnv1.NewFunctionRunnerServiceClient(s.conn).RunFunction(ctx, req)
		}()
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("call %d: %v", i, errs[i])
			continue
		}
		rsp := rsps[i]
		if got := rsp.GetMeta().GetTag(); got != fmt.Sprintf("tag-%d", i) {
			t.Errorf("call %d: tag %q", i, got)
		}
		res := rsp.GetDesired().GetResources()
		r, ok := res[fmt.Sprintf("res-%d", i)]
		if len(res) != 1 || !ok {
			t.Errorf("call %d: resources %v", i, res)
			continue
		}
		md := r.GetResource().GetFields()["metadata"].GetStructValue().GetFields()
		if md["name"].GetStringValue() != fmt.Sprintf("cm-%d", i) || md["labels"].GetStructValue().GetFields()["ocifn.dev/labelized"].GetStringValue() != "true" {
			t.Errorf("call %d: resource %v", i, r.GetResource())
		}
	}
	if t.Failed() {
		t.Logf("server log:\n%s", s.stderr)
	}
}

// TestStartupErrors checks that bad configurations stop the server at once
// with a message naming the problem.
func TestStartupErrors(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"no_transport_choice", []string{"serve", "--tarball", image("labelizer.tar")}, []string{"--insecure", "--tls-server-certs-dir"}},
		{"missing_crun", []string{"serve", "--insecure", "--runtime", "/nonexistent/crun", "--tarball", image("labelizer.tar")}, []string{"crun", "/nonexistent/crun"}},
		{"missing_tarball", []string{"serve", "--insecure", "--tarball", "/nonexistent/function.tar"}, []string{"/nonexistent/function.tar"}},
		{"not_a_tarball", []string{"serve", "--insecure", "--tarball", repoRoot + "/go.mod"}, []string{"go.mod"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runOcifn(t, tc.args...)
			if err == nil {
				t.Fatalf("ocifn %s succeeded:\n%s", strings.Join(tc.args, " "), out)
			}
			mustContain(t, "output", out, tc.want...)
		})
	}
}

// TestVersion checks that `ocifn version` reports the crun it found.
func TestVersion(t *testing.T) {
	out, err := runOcifn(t, "version")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	mustContain(t, "version output", out, "ocifn ", "crun version")
}

// TestCredentialsNeverLogged sends credentials and checks that neither they
// nor their names appear in the server's log, even with --debug.
func TestCredentialsNeverLogged(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("failing.tar"), "--debug"})
	req := jsonRequest(t, `{"meta": {"tag": "t-creds"}, "credentials": {"aws-creds": {"credentialData": {"data": {"secretKey": "c3VwZXJzZWNyZXQ="}}}}}`)
	rsp := s.call(t, req)
	wantFatal(t, req, rsp, "exited with code 1")
	// The call's log line may still be in the pipe from the server.
	eventually(t, 5*time.Second, "the call logged", func() bool { return strings.Contains(s.stderr.String(), "msg=call tag=t-creds") })
	log := s.stderr.String()
	for _, secret := range []string{"supersecret", "c3VwZXJzZWNyZXQ=", "aws-creds", "secretKey"} {
		if strings.Contains(log, secret) {
			t.Errorf("server log contains %q:\n%s", secret, log)
		}
	}
	mustContain(t, "server log", log, "t-creds")
}
