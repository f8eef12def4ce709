package adaptor

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ocifn/ocifn/hook"
)

// scriptedRunner stands in for a container in unit tests of the contract:
// it records stdin and answers with fixed output.
type scriptedRunner struct {
	stdout, stderr string
	code           int
	oom            string
	err            error
	block          bool
	// unstarted, with block, stands for a container that was still being
	// made when ctx ended: the function never started (Start is 0).
	unstarted bool
	stdin     []byte
	// chunk, when not 0, writes stdout in pieces of that size, as a pipe
	// is read.
	chunk int
	// hangOnError, when a write to stdout fails, waits for ctx to end, as
	// a function that ignores EPIPE would if nothing killed it.
	hangOnError bool
}

func (r *scriptedRunner) Run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (Exit, error) {
	r.stdin, _ = io.ReadAll(stdin)
	if r.block {
		<-ctx.Done()
		if r.unstarted {
			return Exit{}, ctx.Err()
		}
		// As the runner reports a function that started, then was killed.
		return Exit{Code: 137, Start: time.Millisecond}, ctx.Err()
	}
	_, _ = io.WriteString(stderr, r.stderr)
	out := r.stdout
	for len(out) > 0 {
		n := len(out)
		if r.chunk > 0 {
			n = min(n, r.chunk)
		}
		if _, err := io.WriteString(stdout, out[:n]); err != nil {
			if r.hangOnError {
				<-ctx.Done()
				return Exit{Code: 137}, ctx.Err()
			}
			return Exit{}, err
		}
		out = out[n:]
	}
	return Exit{Code: r.code, OOMKilled: r.oom}, r.err
}

func request(t *testing.T, text string) *fnv1.RunFunctionRequest {
	t.Helper()
	req := &fnv1.RunFunctionRequest{}
	if err := protojson.Unmarshal([]byte(text), req); err != nil {
		t.Fatal(err)
	}
	return req
}

func quiet() Option { return WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))) }

const req1 = `{"meta": {"tag": "t1"}, "desired": {"resources": {"a": {"resource": {"kind": "A"}}}}, "context": {"k": "v"}}`

func TestRun(t *testing.T) {
	cases := []struct {
		name     string
		runner   scriptedRunner
		opts     []Option
		severity fnv1.Severity
		message  []string
	}{
		{"exit_code_1_gives_fatal_result", scriptedRunner{stderr: "line1\nboom\n", code: 1}, nil, fnv1.Severity_SEVERITY_FATAL, []string{"exited with code 1", "boom"}},
		// A KRM validator exits 1 with its results: run in json mode, the
		// failure still says which mode it was written for.
		{"exit_code_1_with_another_modes_answer_names_the_mode", scriptedRunner{stdout: "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nresults:\n- severity: error\n  message: bad\n", code: 1}, nil, fnv1.Severity_SEVERITY_FATAL, []string{"exited with code 1", "a KRM ResourceList", "--io krm"}},
		{"oom_kill_is_named", scriptedRunner{code: 137, oom: "the kernel's OOM killer killed 1 process(es) of container ocifn-1"}, nil, fnv1.Severity_SEVERITY_FATAL, []string{"ran out of memory and exited with code 137", "OOM killer", "container ocifn-1"}},
		// A script that printed what its killed command printed, nothing.
		{"oom_kill_is_named_when_it_exits_0_with_unusable_output", scriptedRunner{oom: "the kernel's OOM killer killed 1 process(es) of container ocifn-1"}, nil, fnv1.Severity_SEVERITY_FATAL, []string{"ran out of memory and exited with code 0", "OOM killer", "container ocifn-1", "printed nothing"}},
		{"invalid_json_gives_fatal_result", scriptedRunner{stdout: "{not json"}, nil, fnv1.Severity_SEVERITY_FATAL, []string{"not a valid RunFunctionResponse", `"{not json"`}},
		{"unknown_field_gives_fatal_result", scriptedRunner{stdout: `{"desired": {}, "desried": {}}`}, nil, fnv1.Severity_SEVERITY_FATAL, []string{`unknown field "desried"`}},
		{"invalid_utf8_gives_fatal_result", scriptedRunner{stdout: "{\"results\": [{\"message\": \"\xff\"}]}"}, nil, fnv1.Severity_SEVERITY_FATAL, []string{"not valid UTF-8"}},
		{"empty_output_gives_fatal_result", scriptedRunner{stdout: "  \n"}, nil, fnv1.Severity_SEVERITY_FATAL, []string{"printed nothing"}},
		{"output_over_limit_gives_fatal_result", scriptedRunner{stdout: strings.Repeat("x", 100)}, []Option{WithMaxOutputBytes(10)}, fnv1.Severity_SEVERITY_FATAL, []string{"more than the limit of 10 bytes"}},
		// Output past the cap ends a call at once; should its timeout
		// pass before the runner returns, the call is still over the
		// output limit, not a timeout.
		{"output_over_limit_then_timeout_gives_output_limit", scriptedRunner{stdout: strings.Repeat("x", 100), hangOnError: true}, []Option{WithMaxOutputBytes(10), WithTimeout(50 * time.Millisecond)}, fnv1.Severity_SEVERITY_FATAL, []string{"more than the limit of 10 bytes on stdout"}},
		// 4 KiB of JSON zeros take about 2.5 times as much in protobuf's
		// Struct: within the output limit, beyond what gRPC may send.
		{"response_over_send_limit_gives_fatal_result", scriptedRunner{stdout: `{"desired":{"resources":{"a":{"resource":{"list":[0` + strings.Repeat(",0", 2048) + `]}}}}}`}, []Option{WithMaxOutputBytes(1 << 20), WithMaxResponseBytes(8 << 10)}, fnv1.Severity_SEVERITY_FATAL, []string{"bytes in protobuf, more than the 8192 bytes a response may have", "printed 4"}},
		// Decoded from JSON, but nested deeper than the caller's gRPC
		// client can decode.
		{"response_nested_too_deep_for_protobuf_gives_fatal_result", scriptedRunner{stdout: `{"desired":{"resources":{"a":{"resource":` + strings.Repeat(`{"a":`, 3400) + "1" + strings.Repeat("}", 3400) + `}}}}`}, nil, fnv1.Severity_SEVERITY_FATAL, []string{`nests more than 10000 levels deep in protobuf under "desired"`}},
		{"runtime_failure_gives_fatal_result", scriptedRunner{err: errors.New("cannot start crun")}, nil, fnv1.Severity_SEVERITY_FATAL, []string{"could not be run", "cannot start crun"}},
		{"timeout_gives_fatal_result", scriptedRunner{block: true}, []Option{WithTimeout(50 * time.Millisecond)}, fnv1.Severity_SEVERITY_FATAL, []string{"longer than the limit of 50ms"}},
		{"timeout_before_the_start_says_the_function_did_not_start", scriptedRunner{block: true, unstarted: true}, []Option{WithTimeout(50 * time.Millisecond)}, fnv1.Severity_SEVERITY_FATAL, []string{"did not start within the limit of 50ms", "context deadline exceeded"}},
		{"missing_desired_gives_warning", scriptedRunner{stdout: `{"results": []}`}, nil, fnv1.Severity_SEVERITY_WARNING, []string{`no "desired" field`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := request(t, req1)
			f := NewFunction(&tc.runner, append([]Option{quiet()}, tc.opts...)...)
			rsp, err := f.Run(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if rsp.GetMeta().GetTag() != "t1" {
				t.Errorf("tag: got %q", rsp.GetMeta().GetTag())
			}
			if len(rsp.GetDesired().GetResources()) != 1 || rsp.GetDesired().GetResources()["a"] == nil {
				t.Errorf("desired not kept: %v", rsp.GetDesired())
			}
			if rsp.GetContext().AsMap()["k"] != "v" {
				t.Errorf("context not kept: %v", rsp.GetContext())
			}
			res := rsp.GetResults()
			if len(res) != 1 || res[0].GetSeverity() != tc.severity {
				t.Fatalf("results: got %v, want one %v", res, tc.severity)
			}
			for _, m := range tc.message {
				if !strings.Contains(res[0].GetMessage(), m) {
					t.Errorf("message %q does not contain %q", res[0].GetMessage(), m)
				}
			}
		})
	}
}

func TestRunValidResponse(t *testing.T) {
	r := &scriptedRunner{stdout: `{"desired": {"resources": {"b": {"resource": {"kind": "B"}}}}, "context": {"x": 1}}` + "\n"}
	rsp, err := NewFunction(r, quiet()).Run(context.Background(), request(t, req1))
	if err != nil {
		t.Fatal(err)
	}
	if rsp.GetMeta().GetTag() != "t1" || rsp.GetDesired().GetResources()["b"] == nil || len(rsp.GetResults()) != 0 {
		t.Errorf("got %v", rsp)
	}
	if rsp.GetContext().AsMap()["x"] != 1.0 {
		t.Errorf("the function's own context must win: %v", rsp.GetContext())
	}
}

func TestRunCallerDeadlineIsAStatus(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := NewFunction(&scriptedRunner{block: true}, quiet()).Run(ctx, request(t, req1))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
}

// TestCallerGone: a caller's cancellation is its deadline's only when it
// comes within deadlineSlack of the deadline.
func TestCallerGone(t *testing.T) {
	for _, tc := range []struct {
		name string
		left time.Duration // to the deadline when the caller cancels; 0: none
		want codes.Code
	}{
		{"no_deadline", 0, codes.Canceled},
		{"far_from_the_deadline", time.Hour, codes.Canceled},
		{"at_the_deadline", deadlineSlack / 2, codes.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			if tc.left > 0 {
				ctx, cancel = context.WithTimeout(context.Background(), tc.left)
			}
			cancel()
			if got := status.Code(callerGone(ctx)); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// heldHook's After, for a call that ran its function (not from the
// cache), waits until held is closed, then sets done.
type heldHook struct {
	held chan struct{}
	done *atomic.Bool
}

func (h heldHook) Before(ctx context.Context, _ *hook.Call) (context.Context, error) { return ctx, nil }

func (h heldHook) After(_ context.Context, c *hook.Call) error {
	if c.Cached == nil {
		<-h.held
		h.done.Store(true)
	}
	return nil
}

// TestHooksAfterAnswer: with WithHooksAfterAnswer, Run answers before the
// call's hooks run, the log line measures the call up to its answer and
// not to when the hooks ran, and Drain waits for them; without it, Run
// returns once they have run.
func TestHooksAfterAnswer(t *testing.T) {
	const holdFor = 200 * time.Millisecond
	for _, after := range []bool{true, false} {
		// Read once Drain has returned, after the hooks wrote it.
		var logs bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		h := heldHook{held: make(chan struct{}), done: new(atomic.Bool)}
		cache := hook.Cache{Store: NewCache(1 << 20)}
		opts := []Option{WithLogger(log), WithHooks(hook.NewChain(log, cache, hook.Log{Logger: log}, h), 0)}
		if after {
			opts = append(opts, WithHooksAfterAnswer())
		}
		r := &scriptedRunner{stdout: `{"meta": {"ttl": "60s"}}`}
		f := NewFunction(r, opts...)
		// The hold starts after start, so that a call its hooks held is
		// measured holdFor at least: started before, it let calls go
		// measured a few µs short of it, when the set-up in between took
		// longer than the wake-up after the hold.
		start := time.Now()
		time.AfterFunc(holdFor, func() { close(h.held) })
		if _, err := f.Run(context.Background(), request(t, req1)); err != nil {
			t.Fatal(err)
		}
		answered := time.Since(start)
		// The cache kept the answer before Run returned it: the same call
		// at once is answered from it, while the other hooks still wait.
		r.stdin = nil
		if _, err := f.Run(context.Background(), request(t, req1)); err != nil || r.stdin != nil {
			t.Errorf("the same call right after the answer ran the function (error %v)", err)
		}
		f.Drain()
		drained := time.Since(start)
		if after && answered >= holdFor {
			t.Errorf("answered after %s, when the hooks were held for %s", answered, holdFor)
		}
		if !after && answered < holdFor {
			t.Errorf("without WithHooksAfterAnswer, answered after %s, before the hooks ran", answered)
		}
		if !h.done.Load() || drained < holdFor {
			t.Errorf("Drain returned after %s, before the hooks had run", drained)
		}
		lines := regexp.MustCompile(`tag=t1 .*outcome=ok .*duration=(\S+)`).FindAllStringSubmatch(logs.String(), -1)
		if len(lines) != 2 {
			t.Fatalf("%d log lines of the two calls: %q", len(lines), logs.String())
		}
		for _, m := range lines {
			if d, err := time.ParseDuration(m[1]); err != nil || d >= holdFor {
				t.Errorf("a log line says duration=%s: it counts the hooks, held %s", m[1], holdFor)
			}
		}
	}
}
