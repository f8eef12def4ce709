package pipeline

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/types/known/structpb"
)

func TestDiffResponses(t *testing.T) {
	want, err := ParseResponse([]byte("# a comment, as an author may write\nresults:\n- {severity: SEVERITY_FATAL, message: spec.to must be a string}\nmeta: {tag: t}\n"))
	if err != nil {
		t.Fatal(err)
	}
	// The same response in JSON, its keys in another order.
	same, err := ParseResponse([]byte(`{"meta": {"tag": "t"}, "results": [{"message": "spec.to must be a string", "severity": "SEVERITY_FATAL"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := DiffResponses(want, same); err != nil || d != "" {
		t.Errorf("the same response differs: %v\n%s", err, d)
	}
	other := &fnv1.RunFunctionResponse{Meta: &fnv1.ResponseMeta{Tag: "t"}, Results: []*fnv1.Result{{Severity: fnv1.Severity_SEVERITY_FATAL, Message: "spec.to must be a list"}}}
	d, err := DiffResponses(want, other)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d, "\n-- message: spec.to must be a string\n+- message: spec.to must be a list\n") {
		t.Errorf("diff:\n%s", d)
	}
	if FatalResult(want).GetMessage() != "spec.to must be a string" || FatalResult(&fnv1.RunFunctionResponse{}) != nil {
		t.Error("FatalResult")
	}
	for _, bad := range []string{"desird: {}\n", "meta: {tag: a}\n---\nmeta: {tag: b}\n", "# nothing\n"} {
		if _, err := ParseResponse([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestUnifiedDiff: the diff is GNU diff -u's (the headers name expected
// and got instead of files), whether go-difflib writes it or, past
// maxLines, it is one hunk of the lines between the first change and the
// last.
func TestUnifiedDiff(t *testing.T) {
	numbered := func(n int, f func(i int) string) string {
		var b strings.Builder
		for i := 1; i <= n; i++ {
			b.WriteString(f(i) + "\n")
		}
		return b.String()
	}
	changed := func(at ...int) func(i int) string {
		return func(i int) string {
			if slices.Contains(at, i) {
				return "changed"
			}
			return fmt.Sprint(i)
		}
	}
	same := changed()
	for _, tc := range []struct {
		name, a, b string
		// oneHunk: GNU diff writes one hunk, which the bound's fallback
		// writes too.
		oneHunk bool
	}{
		{"one_changed_line", "a\nb\nc\n", "a\nB\nc\n", true},
		{"added_at_the_end", "a\nb\n", "a\nb\nc\nd\n", true},
		{"removed_at_the_start", "x\ny\na\nb\n", "a\nb\n", true},
		{"every_line_changed", numbered(10, same), numbered(10, changed(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)), true},
		{"a_run_changed_far_from_both_ends", numbered(30, same), numbered(30, changed(12, 13, 14)), true},
		{"empty_want", "", "a\n", true},
		{"empty_got", "a\nb\n", "", true},
		{"two_hunks", numbered(30, same), numbered(30, changed(3, 25)), false},
		{"changes_close_together_share_a_hunk", numbered(20, same), numbered(20, changed(5, 11)), false},
		{"interleaved", "a\nb\nc\nd\ne\nf\n", "a\nx\nc\ny\nz\nf\ng\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
			if err := os.WriteFile(a, []byte(tc.a), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(b, []byte(tc.b), 0o644); err != nil {
				t.Fatal(err)
			}
			want, _ := exec.Command("diff", "-u", "--label", "expected", "--label", "got", a, b).Output()
			bounds := []int{maxDiffLines}
			if tc.oneHunk {
				bounds = append(bounds, 0)
			}
			for _, maxLines := range bounds {
				got, err := unifiedDiff(lines([]byte(tc.a)), lines([]byte(tc.b)), maxLines)
				if err != nil {
					t.Fatal(err)
				}
				if got != string(want) {
					t.Errorf("at most %d lines compared:\n%s\nwant (diff -u)\n%s", maxLines, got, want)
				}
			}
		})
	}
}

// TestDiffResponsesOfManyChangesTakesLittleTime: two responses of 8,000
// resources (2 MB of YAML) that differ in a label of each are diffed in
// well under ten seconds; go-difflib alone took 37 s.
func TestDiffResponsesOfManyChangesTakesLittleTime(t *testing.T) {
	response := func(version string) *fnv1.RunFunctionResponse {
		rs := map[string]*fnv1.Resource{}
		for i := range 8000 {
			s, err := structpb.NewStruct(map[string]any{
				"apiVersion": "s3.example.org/v1", "kind": "Bucket",
				"metadata": map[string]any{"name": fmt.Sprintf("bucket-%d", i), "labels": map[string]any{"team": "a", "version": version}},
				"spec":     map[string]any{"region": "eu-west-1", "size": float64(i)},
			})
			if err != nil {
				t.Fatal(err)
			}
			rs[fmt.Sprintf("bucket-%05d", i)] = &fnv1.Resource{Resource: s}
		}
		return &fnv1.RunFunctionResponse{Desired: &fnv1.State{Resources: rs}}
	}
	want, got := response("v1"), response("v2")
	start := time.Now()
	d, err := DiffResponses(want, got)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d, "\n-            version: v1\n") || !strings.Contains(d, "\n+            version: v2\n") {
		t.Errorf("the diff does not show the change:\n%.600s", d)
	}
	if took > 10*time.Second {
		t.Errorf("the diff took %v", took)
	}
}

// TestParseResponseTellsAnotherFile: what ocifn test --update must not
// write over is told apart from a response with a mistake in it, which it
// mends, a stream of several documents too: the composed resources of
// --observed, render's Functions.
func TestParseResponseTellsAnotherFile(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		other     bool
	}{
		{"an XR", "apiVersion: example.org/v1\nkind: XR\nmetadata: {name: x}\n", true},
		{"a request", "observed: {}\ndesired: {}\n", true},
		{"composed resources", "apiVersion: s3.aws.upbound.io/v1beta1\nkind: Bucket\nmetadata: {name: a}\n---\napiVersion: s3.aws.upbound.io/v1beta1\nkind: Bucket\nmetadata: {name: b}\n", true},
		{"a response, then an XR", "meta: {tag: a}\n---\napiVersion: example.org/v1\nkind: XR\nmetadata: {name: x}\n", true},
		{"a misspelt response", "desird: {}\n", false},
		{"two responses", "meta: {tag: a}\n---\nmeta: {tag: b}\n", false},
	} {
		_, err := ParseResponse([]byte(c.doc))
		if err == nil {
			t.Errorf("%s: parsed", c.name)
			continue
		}
		if errors.Is(err, ErrOtherFile) != c.other {
			t.Errorf("%s: %v; another file: %v, want %v", c.name, err, errors.Is(err, ErrOtherFile), c.other)
		}
	}
	_, err := ParseResponse([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n"))
	if want := "not a RunFunctionResponse: holds 2 YAML documents; want one RunFunctionResponse, and its document 1 looks like a Kubernetes object (apiVersion v1, kind ConfigMap)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error: %v, want it to say %q", err, want)
	}
}
