package pipeline

import (
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
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
