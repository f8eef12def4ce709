package codec

import (
	"strings"
	"testing"
)

// TestResultsOfAnUnreadableAnswerUnderTheAliasGuard: the results of an
// answer that cannot be read as a whole are decoded one by one, but where
// they hold aliases, as one, under the YAML decoder's guard against their
// expansion: 1,000 results that each alias a list of 900 values (8.6 KB)
// took 0.57 s of CPU, result by result, each within the guard (28 s for
// 0.5 MB in ocifn test, which has no in-flight budget). Without aliases,
// a result that cannot be read still leaves the others.
func TestResultsOfAnUnreadableAnswerUnderTheAliasGuard(t *testing.T) {
	var b strings.Builder
	b.WriteString("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [oops]\nanchor: &a [")
	for i := range 900 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("x")
	}
	b.WriteString("]\nresults:\n")
	for range 1000 {
		b.WriteString("- {message: m, severity: info, tags: *a}\n")
	}
	rs, unreadable := resultsOf[map[string]any]([]byte(b.String()))
	if !unreadable || len(rs) != 0 {
		t.Errorf("results aliasing a large list: %d read, unreadable %v; want none read, under the guard", len(rs), unreadable)
	}

	rs, unreadable = resultsOf[map[string]any]([]byte("items: [oops]\nresults:\n- {message: a, severity: info}\n- [not, a, result]\n- {message: b, severity: error}\n"))
	if !unreadable || len(rs) != 2 {
		t.Errorf("one result of three unreadable: %d read, unreadable %v; want the two others", len(rs), unreadable)
	}
}
