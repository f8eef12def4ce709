package pipeline

import (
	"fmt"
	"strings"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/pmezard/go-difflib/difflib"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/ocifn/ocifn/codec"
)

// ParseResponse parses a RunFunctionResponse written in YAML or in JSON, as
// `ocifn test` prints one: an expected response.
func ParseResponse(data []byte) (*fnv1.RunFunctionResponse, error) {
	j, err := oneDocument(data, "RunFunctionResponse")
	if err != nil {
		return nil, err
	}
	rsp := &fnv1.RunFunctionResponse{}
	if err := protojson.Unmarshal(j, rsp); err != nil {
		if why := codec.ExplainMessage(j, rsp.ProtoReflect().Descriptor()); why != "" {
			return nil, fmt.Errorf("not a RunFunctionResponse: %s", why)
		}
		return nil, fmt.Errorf("not a RunFunctionResponse: %v (want fields such as meta, desired, results, context)", err)
	}
	return rsp, nil
}

// FatalResult returns the response's first Fatal result, or nil.
func FatalResult(rsp *fnv1.RunFunctionResponse) *fnv1.Result {
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			return r
		}
	}
	return nil
}

// DiffResponses returns how got differs from want, as a unified diff of the
// YAML `ocifn test` prints for each, or "" when they are the same response.
func DiffResponses(want, got *fnv1.RunFunctionResponse) (string, error) {
	if proto.Equal(want, got) {
		return "", nil
	}
	w, err := MessageYAML(want)
	if err != nil {
		return "", err
	}
	g, err := MessageYAML(got)
	if err != nil {
		return "", err
	}
	d, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: lines(w), B: lines(g),
		FromFile: "expected", ToFile: "got", Context: 3,
	})
	if err != nil {
		return "", err
	}
	if d == "" {
		// Values YAML prints alike (a NaN and another NaN) can still differ.
		return "the responses differ in values their YAML prints alike\n", nil
	}
	return d, nil
}

// lines splits YAML into its lines, each with its newline (difflib's
// SplitLines would add an empty last line, shown as context).
func lines(b []byte) []string {
	l := strings.SplitAfter(string(b), "\n")
	if l[len(l)-1] == "" {
		l = l[:len(l)-1]
	}
	return l
}
