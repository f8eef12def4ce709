package pipeline

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
)

// TestUnifiedDiff compares the diff with GNU diff -u's, of which it prints
// the hunks (the headers name expected and got instead of files).
func TestUnifiedDiff(t *testing.T) {
	lines := func(n int, f func(i int) string) string {
		var b strings.Builder
		for i := 1; i <= n; i++ {
			b.WriteString(f(i) + "\n")
		}
		return b.String()
	}
	for _, tc := range []struct{ name, a, b string }{
		{"one_changed_line", "a\nb\nc\n", "a\nB\nc\n"},
		{"added_at_the_end", "a\nb\n", "a\nb\nc\nd\n"},
		{"removed_at_the_start", "x\ny\na\nb\n", "a\nb\n"},
		{"two_hunks", lines(30, func(i int) string { return fmt.Sprint(i) }), lines(30, func(i int) string {
			if i == 3 || i == 25 {
				return "changed"
			}
			return fmt.Sprint(i)
		})},
		{"changes_close_together_share_a_hunk", lines(20, func(i int) string { return fmt.Sprint(i) }), lines(20, func(i int) string {
			if i == 5 || i == 11 {
				return "changed"
			}
			return fmt.Sprint(i)
		})},
		{"interleaved", "a\nb\nc\nd\ne\nf\n", "a\nx\nc\ny\nz\nf\ng\n"},
		{"empty_want", "", "a\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := unifiedDiff(strings.SplitAfter(tc.a, "\n"), strings.SplitAfter(tc.b, "\n"))
			dir := t.TempDir()
			a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
			if err := os.WriteFile(a, []byte(tc.a), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(b, []byte(tc.b), 0o644); err != nil {
				t.Fatal(err)
			}
			out, _ := exec.Command("diff", "-u", "--label", "expected", "--label", "got", a, b).Output()
			if got != string(out) {
				t.Errorf("got\n%s\nwant (diff -u)\n%s", got, out)
			}
		})
	}
	if d := unifiedDiff(strings.SplitAfter("a\nb\n", "\n"), strings.SplitAfter("a\nb\n", "\n")); d != "" {
		t.Errorf("the same lines differ: %q", d)
	}
}

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
