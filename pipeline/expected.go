package pipeline

import (
	"errors"
	"fmt"
	"strings"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/pmezard/go-difflib/difflib"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/ocifn/ocifn/codec"
)

// ErrOtherFile is wrapped by ParseResponse's error when the document is
// another file an author has at hand (an XR, a request), not a response
// with a mistake in it: ocifn test --update must not write over it.
var ErrOtherFile = errors.New("another file than an expected response")

// otherFileError is ErrOtherFile in words of its own.
type otherFileError string

func (e otherFileError) Error() string        { return string(e) }
func (e otherFileError) Is(target error) bool { return target == ErrOtherFile }

// ParseResponse parses a RunFunctionResponse written in YAML or in JSON, as
// `ocifn test` prints one: an expected response.
func ParseResponse(data []byte) (*fnv1.RunFunctionResponse, error) {
	j, err := oneDocument(data, "RunFunctionResponse")
	var several *severalDocuments
	if errors.As(err, &several) {
		// A stream of composed resources or Functions (the files of
		// --observed and of render) is another file too, not a
		// response with a mistake in it for --update to mend.
		for i, d := range several.docs {
			if why := otherKind(d, "RunFunctionResponse"); why != "" {
				return nil, otherFileError(fmt.Sprintf("not a RunFunctionResponse: %s, and its document %d %s", err, i+1, strings.TrimPrefix(why, "it ")))
			}
		}
	}
	if err != nil {
		return nil, err
	}
	rsp := &fnv1.RunFunctionResponse{}
	if err := protojson.Unmarshal(j, rsp); err != nil {
		if why := otherKind(j, "RunFunctionResponse"); why != "" {
			return nil, otherFileError("not a RunFunctionResponse: " + why)
		}
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
	d, err := unifiedDiff(lines(w), lines(g), maxDiffLines)
	if err != nil {
		return "", err
	}
	if d == "" {
		// Values YAML prints alike (a NaN and another NaN) can still differ.
		return "the responses differ in values their YAML prints alike\n", nil
	}
	return d, nil
}

// maxDiffLines bounds the lines, between the first change and the last,
// that go-difflib's matcher compares: it takes time quadratic in them when
// the changes are many and spread out (a label changed on each of 4,000
// resources, 1 MB of YAML, took 9 s; on 8,000, 37 s). Beyond it the lines
// between the first change and the last are shown removed, then added: a
// correct diff, if not the shortest.
const maxDiffLines = 8000

// diffContext is how many unchanged lines a hunk shows around a change.
const diffContext = 3

// unifiedDiff is a unified diff of a (expected) and b (got), "" when they
// are the same, as GNU diff -u writes it; see maxDiffLines for maxLines.
func unifiedDiff(a, b []string, maxLines int) (string, error) {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	if len(a)+len(b)-2*(pre+suf) <= maxLines {
		return difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
			A: a, B: b,
			FromFile: "expected", ToFile: "got", Context: diffContext,
		})
	}
	// One hunk, from diffContext lines before the first change to
	// diffContext lines after the last.
	start := pre - min(pre, diffContext)
	after := min(suf, diffContext)
	aEnd, bEnd := len(a)-suf+after, len(b)-suf+after
	var out strings.Builder
	fmt.Fprintf(&out, "--- expected\n+++ got\n@@ -%s +%s @@\n", hunkRange(start, aEnd-start), hunkRange(start, bEnd-start))
	for _, l := range a[start:pre] {
		out.WriteString(" " + l)
	}
	for _, l := range a[pre : len(a)-suf] {
		out.WriteString("-" + l)
	}
	for _, l := range b[pre : len(b)-suf] {
		out.WriteString("+" + l)
	}
	for _, l := range a[len(a)-suf : aEnd] {
		out.WriteString(" " + l)
	}
	return out.String(), nil
}

// hunkRange is a hunk header's range of n lines after the first start
// lines, as diff -u writes it.
func hunkRange(start, n int) string {
	switch n {
	case 0:
		return fmt.Sprintf("%d,0", start)
	case 1:
		return fmt.Sprint(start + 1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
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
