package adaptor

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/ocifn/ocifn/codec"
)

// TestRunFailureDecoder: in a mode whose functions answer when they fail
// (krm), a non-zero exit with an answer on stdout returns that answer; a
// Fatal result for the exit, with stderr, is added only when the answer has
// none; output that holds no answer gets today's Fatal result.
func TestRunFailureDecoder(t *testing.T) {
	list := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [{kind: A, metadata: {annotations: {ocifn.io/composition-resource-name: a}}}]\n"
	cases := []struct {
		name   string
		runner scriptedRunner
		want   []string // the results' messages
	}{
		{"error_results_are_the_answer",
			scriptedRunner{stdout: list + "results: [{message: bad a, severity: error}]\n", stderr: "1 validation error\n", code: 1},
			[]string{"bad a"}},
		{"no_error_result_gets_one_for_the_exit",
			scriptedRunner{stdout: list + "results: [{message: looked, severity: info}]\n", stderr: "boom\n", code: 2},
			[]string{"looked", "the function exited with code 2; stderr: boom"}},
		{"no_answer_is_the_exit",
			scriptedRunner{stdout: "panic: oh no\n", stderr: "goroutine 1\n", code: 2},
			[]string{"the function exited with code 2; stderr: goroutine 1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFunction(&tc.runner, quiet(), WithCodec(codec.KRM{}))
			rsp, err := f.Run(context.Background(), request(t, req1))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			fatal := false
			for _, r := range rsp.GetResults() {
				got = append(got, r.GetMessage())
				fatal = fatal || r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") || !fatal {
				t.Errorf("results %v, want %q with a Fatal one", rsp.GetResults(), tc.want)
			}
			if rsp.GetMeta().GetTag() != "t1" || rsp.GetDesired().GetResources()["a"] == nil {
				t.Errorf("response %v: want the request's tag and the resource a", rsp)
			}
		})
	}
}

// TestRunFailureDecoderUnreadableAnswer: a function that exits non-zero
// and prints its mode's answer that cannot be read (here an item with
// no name) gets a Fatal result that says what is wrong with it and quotes
// the results it reported, as it would had it exited 0, not the exit code
// alone: a KRM function exits 1 exactly when it reports an error.
func TestRunFailureDecoderUnreadableAnswer(t *testing.T) {
	out := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [{kind: A}]\nresults: [{message: bucket a is public, severity: error}]\n"
	f := NewFunction(&scriptedRunner{stdout: out, code: 1}, quiet(), WithCodec(codec.KRM{}))
	rsp, err := f.Run(context.Background(), request(t, req1))
	if err != nil {
		t.Fatal(err)
	}
	if len(rsp.GetResults()) != 1 || rsp.GetResults()[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
		t.Fatalf("results %v, want one Fatal result", rsp.GetResults())
	}
	msg := rsp.GetResults()[0].GetMessage()
	for _, want := range []string{"exited with code 1", "items[0] has no ocifn.io/composition-resource-name annotation", "bucket a is public"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Fatal result %q does not say %q", msg, want)
		}
	}
	if rsp.GetDesired().GetResources()["a"] == nil {
		t.Errorf("response %v: want the request's desired resource a", rsp)
	}
}

// TestRunFailureLogQuotesNoOutput: the log line of a call whose function
// exited non-zero with its mode's answer that cannot be read says why in
// general terms; what the function printed, which may hold connection
// details, is quoted to the caller in the Fatal result only, as for a
// function that exits 0.
func TestRunFailureLogQuotesNoOutput(t *testing.T) {
	out := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [{kind: Secret, stringData: {password: hunter2}}]\nresults: 5\n"
	for _, code := range []int{0, 1} {
		var log bytes.Buffer
		f := NewFunction(&scriptedRunner{stdout: out, code: code}, WithLogger(slog.New(slog.NewTextHandler(&log, nil))), WithCodec(codec.KRM{}))
		rsp, err := f.Run(context.Background(), request(t, req1))
		if err != nil {
			t.Fatal(err)
		}
		if len(rsp.GetResults()) != 1 || !strings.Contains(rsp.GetResults()[0].GetMessage(), "hunter2") {
			t.Errorf("exit %d: results %v, want a Fatal result quoting the output", code, rsp.GetResults())
		}
		if strings.Contains(log.String(), "hunter2") {
			t.Errorf("exit %d: the log quotes what the function printed:\n%s", code, log.String())
		}
	}
}
