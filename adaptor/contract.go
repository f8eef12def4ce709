// Package adaptor serves Crossplane's FunctionRunnerService by running each
// RunFunction call through a Runner and applying ocifn's function I/O
// contract to what the function prints.
package adaptor

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/ocifn/ocifn/hook"
)

// Exit is how one function process ended.
type Exit struct {
	// Code is the exit status; 128+N if signal N ended the process.
	Code int
	// RuntimeError is what the container runtime itself reported, if it
	// could not start the function.
	RuntimeError string
	// OOMKilled, when not empty, says how the kernel's OOM killer killed
	// processes of the call at its memory limit.
	OOMKilled string
	// Start is how long the container took to start the function's process.
	Start time.Duration
	// Duration is how long the whole run took, start included.
	Duration time.Duration
}

// Runner runs the function once, in a fresh container, with the given
// standard streams. It returns an error only when the call could not run to
// the end (cancelled, output copy failed); a function that exits non-zero is
// a normal Exit. A failed output copy (stdout past its cap) ends the run at
// once, as cancelling does: the function is not left running until ctx ends.
type Runner interface {
	Run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (Exit, error)
}

// Outcome classifies a call for logs and metrics.
type Outcome = hook.Outcome

// Outcomes.
const (
	// OutcomeOK means the function answered with a valid response.
	OutcomeOK = hook.OK
	// OutcomeFatal means the adaptor answered with a Fatal result on the
	// function's behalf.
	OutcomeFatal = hook.Fatal
	// OutcomeError is a call answered with a gRPC error (bad request,
	// caller gone, shutting down).
	OutcomeError = hook.Error
	// OutcomeTimeout is a call stopped at the adaptor's timeout or the
	// caller's deadline.
	OutcomeTimeout = hook.Timeout
	// OutcomeRejected is a call refused because the server was full.
	OutcomeRejected = hook.Rejected
)

// Result is the outcome of one call, for the caller's logs.
type Result struct {
	Response *fnv1.RunFunctionResponse
	Outcome  Outcome
	Exit     Exit
	// Reason is the one-line cause of a Fatal outcome.
	Reason string
}

// complete applies the contract to a valid response: the tag is filled in,
// and what the function left out of desired and context is carried over from
// the request rather than silently deleted.
//
// A response always carries the request's tag: Crossplane matches responses
// to requests, and caches them, by tag. A function that prints another tag
// gets it replaced and a Warning result that names both, rather than a
// Fatal one: the response is still the function's answer to this request.
func complete(req *fnv1.RunFunctionRequest, rsp *fnv1.RunFunctionResponse) {
	if got, want := rsp.GetMeta().GetTag(), req.GetMeta().GetTag(); got != want {
		if rsp.Meta == nil {
			rsp.Meta = &fnv1.ResponseMeta{}
		}
		rsp.Meta.Tag = want
		if got != "" {
			rsp.Results = append(rsp.Results, &fnv1.Result{
				Severity: fnv1.Severity_SEVERITY_WARNING,
				Message:  fmt.Sprintf("the function's response carried meta.tag %s, not the request's %q; the request's tag was kept", quoteTag(got), want),
			})
		}
	}
	if rsp.Desired == nil {
		rsp.Desired = desiredOf(req)
		// Only worth a word when there was something to lose: an
		// Operation's function, say, starts from an empty desired state
		// and often answers with its output alone.
		if d := req.GetDesired(); d.GetComposite() != nil || len(d.GetResources()) > 0 {
			rsp.Results = append(rsp.Results, &fnv1.Result{Severity: fnv1.Severity_SEVERITY_WARNING, Message: msgDesiredKept})
		}
	}
	if rsp.Context == nil && req.Context != nil {
		rsp.Context = req.Context
	}
}

// msgDesiredKept is the Warning result complete adds to a response
// without a desired state.
const msgDesiredKept = "the function's response has no \"desired\" field; the request's desired state was kept unchanged"

// fatal builds the adaptor's answer for a function that failed: the
// request's desired state unchanged and one Fatal result.
func fatal(req *fnv1.RunFunctionRequest, msg string) *fnv1.RunFunctionResponse {
	return &fnv1.RunFunctionResponse{
		Meta:    &fnv1.ResponseMeta{Tag: req.GetMeta().GetTag()},
		Desired: desiredOf(req),
		Context: req.GetContext(),
		Results: []*fnv1.Result{{Severity: fnv1.Severity_SEVERITY_FATAL, Message: msg}},
	}
}

func desiredOf(req *fnv1.RunFunctionRequest) *fnv1.State {
	if req.GetDesired() == nil {
		return &fnv1.State{}
	}
	// Shared, not copied: neither the request nor the response is
	// modified after this point.
	return req.GetDesired()
}

// withStderr appends the stderr tail to a Fatal message.
func withStderr(msg string, tail []byte) string {
	t := strings.TrimSpace(strings.ToValidUTF8(string(tail), "\uFFFD"))
	if t == "" {
		return msg + " (stderr was empty)"
	}
	return msg + "; stderr: " + t
}

// quoteTag quotes a tag a function printed, bounded.
func quoteTag(tag string) string {
	if len(tag) > 64 {
		return fmt.Sprintf("%q…", strings.ToValidUTF8(tag[:64], "\uFFFD"))
	}
	return fmt.Sprintf("%q", tag)
}
