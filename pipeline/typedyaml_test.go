package pipeline

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// typedTarget has a field of each kind sigs.k8s.io/yaml treats its own way.
type typedTarget struct {
	Name     string            `json:"name"`
	Ref      *string           `json:"ref,omitempty"`
	Labels   map[string]string `json:"labels"`
	Names    []string          `json:"names"`
	Count    int64             `json:"count"`
	Nested   *typedTarget      `json:"nested,omitempty"`
	Free     map[string]any    `json:"free"`
	Time     metav1.Time       `json:"time"`
	Untagged string
}

// TestParseObjectAsReadsAsSigsYAML: what parseObjectAs reads of a document
// for a type is what sigs.k8s.io/yaml.Unmarshal, which the crossplane CLI
// reads its files with, puts in a value of that type; and what the type
// has no field for is what ParseObject reads.
func TestParseObjectAsReadsAsSigsYAML(t *testing.T) {
	for name, doc := range map[string]string{
		"YAML 1.1 booleans":        "name: y\nref: off\nlabels: {a: yes, b: n, c: true, d: On}\nnames: [no, Y, false]",
		"numbers":                  "name: 0777\nref: 0x1F\nlabels: {a: 1.50, b: -3, c: 1e3, d: 3.14159265358979, e: 12345678901234567890}\nnames: [1, 2.5]\ncount: 7",
		"keys of other types":      "labels: {1: a, true: b, 2.5: c, off: d}",
		"fields in another case":   "NAME: yes\nLabels: {a: y}\nuntagged: 5",
		"nested and free":          "nested: {name: on, nested: {labels: {x: 1}}}\nfree: {a: yes, b: [y, 1], c: {d: off}}",
		"a type that reads itself": "time: \"2024-01-01T00:00:00Z\"",
		"strings as they are":      "name: \"yes\"\nlabels: {a: plain, b: \"0777\"}",
		"nulls":                    "name: null\nref: null\nlabels: {a: null}",
		"keys the type lacks":      "name: a\nother: {x: yes, y: 0777}\nlist: [on, 1.5]",
	} {
		t.Run(name, func(t *testing.T) {
			typ := reflect.TypeFor[typedTarget]()
			var want typedTarget
			if err := yaml.Unmarshal([]byte(doc), &want); err != nil {
				t.Fatal(err)
			}
			o, err := parseObjectAs([]byte(doc), typ)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(o)
			if err != nil {
				t.Fatal(err)
			}
			var got typedTarget
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("parseObjectAs reads otherwise than sigs.k8s.io/yaml (-sigs +parseObjectAs):\n%s", d)
			}
			// Without a type, and where the type has no field, as
			// ParseObject reads it.
			untyped, err := parseObjectAs([]byte(doc), nil)
			if err != nil {
				t.Fatal(err)
			}
			plain, err := ParseObject([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(plain, untyped); d != "" {
				t.Errorf("without a type, parseObjectAs reads otherwise than ParseObject (-ParseObject +parseObjectAs):\n%s", d)
			}
			for k, v := range plain {
				if !typedFieldNames[k] {
					if d := cmp.Diff(v, o[k]); d != "" {
						t.Errorf("%s, which the type has no field for, is read otherwise than ParseObject reads it (-ParseObject +parseObjectAs):\n%s", k, d)
					}
				}
			}
		})
	}
}

var typedFieldNames = map[string]bool{"name": true, "NAME": true, "ref": true, "labels": true, "Labels": true, "names": true, "count": true, "nested": true, "free": true, "time": true, "untagged": true}

// TestDropUnknownKeys: the keys a type has no field for are dropped, in the
// structs it holds too, and one in another case takes the field's name, as
// decoding into the type and encoding again does; a map's keys stay.
func TestDropUnknownKeys(t *testing.T) {
	o := mustObject(t, "name: a\nother: 1\nNested: {name: b, junk: 2, nested: {junk: 3}}\nfree: {junk: 4}\nlabels: {junk: 5}\n")
	dropUnknownKeys(map[string]any(o), reflect.TypeFor[typedTarget]())
	want := mustObject(t, "name: a\nnested: {name: b, nested: {}}\nfree: {junk: 4}\nlabels: {junk: 5}\n")
	if d := cmp.Diff(want, o); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
