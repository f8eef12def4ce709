package adaptor

import (
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// TestCompleteTag: a response always carries the request's tag; a function
// that prints another one gets a Warning naming both.
func TestCompleteTag(t *testing.T) {
	cases := []struct {
		name, reqTag, rspTag string
		wantWarning          string
	}{
		{name: "missing_tag_is_filled_in", reqTag: "t1"},
		{name: "same_tag_is_kept", reqTag: "t1", rspTag: "t1"},
		{name: "other_tag_is_replaced_with_a_warning", reqTag: "t1", rspTag: "stale", wantWarning: `meta.tag "stale", not the request's "t1"`},
		{name: "tag_without_request_tag_is_dropped", reqTag: "", rspTag: "made-up", wantWarning: `meta.tag "made-up"`},
		{name: "long_tag_is_quoted_bounded", reqTag: "t1", rspTag: strings.Repeat("x", 5000), wantWarning: strings.Repeat("x", 64) + `"…`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: tc.reqTag}}
			rsp := &fnv1.RunFunctionResponse{Desired: &fnv1.State{}}
			if tc.rspTag != "" {
				rsp.Meta = &fnv1.ResponseMeta{Tag: tc.rspTag}
			}
			complete(req, rsp)
			if rsp.GetMeta().GetTag() != tc.reqTag {
				t.Errorf("tag %q, want %q", rsp.GetMeta().GetTag(), tc.reqTag)
			}
			switch rs := rsp.GetResults(); {
			case tc.wantWarning == "" && len(rs) != 0:
				t.Errorf("unexpected results %v", rs)
			case tc.wantWarning != "" && (len(rs) != 1 || rs[0].GetSeverity() != fnv1.Severity_SEVERITY_WARNING || !strings.Contains(rs[0].GetMessage(), tc.wantWarning)):
				t.Errorf("results %v, want one Warning containing %q", rs, tc.wantWarning)
			case tc.wantWarning != "" && len(rs[0].GetMessage()) > 300:
				t.Errorf("warning is %d bytes long", len(rs[0].GetMessage()))
			}
		})
	}
}

// TestCompleteDesired: a response without desired keeps the request's;
// the Warning is only for a request whose desired state was not empty.
func TestCompleteDesired(t *testing.T) {
	for _, tc := range []struct {
		name        string
		req         *fnv1.RunFunctionRequest
		wantWarning bool
	}{
		{"composed_resources_kept_with_a_warning", &fnv1.RunFunctionRequest{Desired: &fnv1.State{Resources: map[string]*fnv1.Resource{"a": {}}}}, true},
		{"composite_kept_with_a_warning", &fnv1.RunFunctionRequest{Desired: &fnv1.State{Composite: &fnv1.Resource{}}}, true},
		{"empty_desired_without_warning", &fnv1.RunFunctionRequest{Desired: &fnv1.State{}}, false},
		{"no_desired_without_warning", &fnv1.RunFunctionRequest{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rsp := &fnv1.RunFunctionResponse{}
			complete(tc.req, rsp)
			if rsp.Desired == nil || (tc.req.Desired != nil && rsp.Desired != tc.req.Desired) {
				t.Errorf("desired %v, want the request's %v", rsp.Desired, tc.req.Desired)
			}
			if got := len(rsp.GetResults()) == 1 && rsp.GetResults()[0].GetSeverity() == fnv1.Severity_SEVERITY_WARNING; got != tc.wantWarning || len(rsp.GetResults()) > 1 {
				t.Errorf("results %v, want a warning: %t", rsp.GetResults(), tc.wantWarning)
			}
		})
	}
}
