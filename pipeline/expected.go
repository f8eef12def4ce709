package pipeline

import (
	"fmt"
	"strings"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
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
	d := unifiedDiff(strings.SplitAfter(string(w), "\n"), strings.SplitAfter(string(g), "\n"))
	if d == "" {
		// Values YAML prints alike (a NaN and another NaN) can still differ.
		return "the responses differ in values their YAML prints alike\n", nil
	}
	return d, nil
}

// maxDiffCells bounds the table of the longest common subsequence, which
// takes a cell per pair of lines: a larger change is shown as its old
// lines removed and its new lines added, a correct diff if not the
// shortest.
const maxDiffCells = 4 << 20

// diffContext is how many unchanged lines a hunk shows around a change.
const diffContext = 3

type diffLine struct {
	op   byte // ' ', '-' or '+'
	text string
}

// unifiedDiff returns the lines of a (want) and b (got) as a unified
// diff, "" when they are the same.
func unifiedDiff(a, b []string) string {
	if n := len(a); n > 0 && a[n-1] == "" {
		a = a[:n-1]
	}
	if n := len(b); n > 0 && b[n-1] == "" {
		b = b[:n-1]
	}
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	if pre == len(a) && pre == len(b) {
		return ""
	}
	var lines []diffLine
	for _, l := range a[:pre] {
		lines = append(lines, diffLine{' ', l})
	}
	lines = append(lines, diffMiddle(a[pre:len(a)-suf], b[pre:len(b)-suf])...)
	for _, l := range a[len(a)-suf:] {
		lines = append(lines, diffLine{' ', l})
	}

	var out strings.Builder
	out.WriteString("--- expected\n+++ got\n")
	// Each hunk runs from diffContext lines before a change to diffContext
	// lines after the last change closer than twice that to the one before.
	aLine, bLine := 1, 1
	for i := 0; i < len(lines); {
		if lines[i].op == ' ' {
			i++
			aLine++
			bLine++
			continue
		}
		start := max(0, i-diffContext)
		end := i
		for j := i; j < len(lines); j++ {
			if lines[j].op != ' ' {
				end = j
			} else if j-end > 2*diffContext {
				break
			}
		}
		end = min(len(lines), end+diffContext+1)
		aStart, bStart := aLine-(i-start), bLine-(i-start)
		var aLen, bLen int
		for _, l := range lines[start:end] {
			if l.op != '+' {
				aLen++
			}
			if l.op != '-' {
				bLen++
			}
		}
		fmt.Fprintf(&out, "@@ -%s +%s @@\n", hunkRange(aStart, aLen), hunkRange(bStart, bLen))
		for _, l := range lines[start:end] {
			out.WriteByte(l.op)
			out.WriteString(l.text)
			if !strings.HasSuffix(l.text, "\n") {
				out.WriteString("\n\\ No newline at end of file\n")
			}
		}
		for _, l := range lines[i:end] {
			if l.op != '+' {
				aLine++
			}
			if l.op != '-' {
				bLine++
			}
		}
		i = end
	}
	return out.String()
}

// hunkRange is a hunk header's range: the first line and the count, or the
// line before an empty range.
func hunkRange(start, n int) string {
	if n == 0 {
		start--
	}
	if n == 1 {
		return fmt.Sprint(start)
	}
	return fmt.Sprintf("%d,%d", start, n)
}

// diffMiddle diffs two runs of lines that differ at both ends, through
// their longest common subsequence.
func diffMiddle(a, b []string) []diffLine {
	var out []diffLine
	if len(a)*len(b) > maxDiffCells {
		for _, l := range a {
			out = append(out, diffLine{'-', l})
		}
		for _, l := range b {
			out = append(out, diffLine{'+', l})
		}
		return out
	}
	// lcs[i][j] is the length of the longest common subsequence of a[i:]
	// and b[j:].
	w := len(b) + 1
	lcs := make([]int32, (len(a)+1)*w)
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i*w+j] = lcs[(i+1)*w+j+1] + 1
			} else {
				lcs[i*w+j] = max(lcs[(i+1)*w+j], lcs[i*w+j+1])
			}
		}
	}
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			out = append(out, diffLine{' ', a[i]})
			i++
			j++
		case lcs[(i+1)*w+j] >= lcs[i*w+j+1]:
			out = append(out, diffLine{'-', a[i]})
			i++
		default:
			out = append(out, diffLine{'+', b[j]})
			j++
		}
	}
	for ; i < len(a); i++ {
		out = append(out, diffLine{'-', a[i]})
	}
	for ; j < len(b); j++ {
		out = append(out, diffLine{'+', b[j]})
	}
	return out
}
