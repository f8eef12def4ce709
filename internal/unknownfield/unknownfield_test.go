package unknownfield

import (
	"reflect"
	"testing"
)

type check struct {
	Type        string `json:"type"`
	MatchString string `json:"matchString,omitempty"`
}

type resource struct {
	Name   string         `json:"name"`
	Body   map[string]any `json:"resource"`
	Checks []check        `json:"readinessChecks"`
	Ptr    *check         `json:"ptr"`
}

type doc struct {
	Resources []resource `json:"resources"`
	Results   []any      `json:"results"`
	skipped   int
	Dash      int `json:"-"`
}

func TestAll(t *testing.T) {
	in := `
resources:
- name: a
  resource: {anything: [1, 2], goes: here}
  readinessChecks:
  - {type: MatchString, matchStrin: Available}
  ptr: {tipe: x}
- nmae: b
results: [{free: form}]
skipped: 1
Dash: 2
extra: {nested: {deep: 1}}
`
	want := []Field{
		{Path: "", Key: "Dash"},
		{Path: "", Key: "extra"},
		{Path: "resources[0].ptr", Key: "tipe", Suggestion: "type"},
		{Path: "resources[0].readinessChecks[0]", Key: "matchStrin", Suggestion: "matchString"},
		{Path: "resources[1]", Key: "nmae", Suggestion: "name"},
		{Path: "", Key: "skipped"},
	}
	got := All([]byte(in), reflect.TypeFor[doc]())
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if f, ok := Find([]byte(in), reflect.TypeFor[doc]()); !ok || f != want[0] {
		t.Errorf("Find: %+v %v, want the first of All", f, ok)
	}
	if _, ok := Find([]byte("resources: [{name: a}]"), reflect.TypeFor[doc]()); ok {
		t.Error("Find found a key in a document with none unknown")
	}
	if got := All([]byte("{{{"), reflect.TypeFor[doc]()); got != nil {
		t.Errorf("All of a document that is not YAML: %v", got)
	}
}

func TestFieldString(t *testing.T) {
	for _, tc := range []struct {
		f    Field
		want string
	}{
		{Field{Key: "itemz", Suggestion: "items"}, `unknown field "itemz" at the top level; did you mean "items"?`},
		{Field{Path: "spec", Key: "zzz"}, `unknown field "zzz" at spec`},
	} {
		if got := tc.f.String(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestClosest(t *testing.T) {
	candidates := []string{"desired", "observed", "message", "SEVERITY_NORMAL", "composition"}
	for in, want := range map[string]string{
		"desried":         "desired",         // a typo
		"Desired":         "desired",         // case
		"severity_normal": "SEVERITY_NORMAL", // case and separators
		"normal":          "SEVERITY_NORMAL", // a suffix
		"msg":             "message",         // an abbreviation
		"compositon":      "composition",
		"obsevred":        "observed", // two characters swapped
		"zzz":             "",
	} {
		if got := Closest(in, candidates); got != want {
			t.Errorf("Closest(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"abc", "", 3}, {"name", "name", 0},
		{"nmae", "name", 1}, {"name", "naem", 1}, {"kitten", "sitting", 3},
		{"ca", "abc", 3}, // no substring is edited twice
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
