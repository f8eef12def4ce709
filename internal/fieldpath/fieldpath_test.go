package fieldpath

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	xpfieldpath "github.com/crossplane/crossplane-runtime/v2/pkg/fieldpath"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// This package must give crossplane-runtime's results. These tests run
// both on the same paths and objects and compare: the values, and for
// errors their kind (the messages are our own).

// doc is an object with every kind of JSON value, nested.
const doc = `{
	"apiVersion": "v1",
	"kind": "Thing",
	"metadata": {
		"name": "a",
		"labels": {"app.kubernetes.io/name": "x", "": "empty", "0": "zero", "'q'": "quoted", "*": "star"},
		"annotations": {"crossplane.io/external-name": "ext"}
	},
	"spec": {
		"replicas": 3,
		"ratio": 1.5,
		"whole": 2.0,
		"negative": -7,
		"big": 9223372036854775807,
		"bigger": 9223372036854775808,
		"huge": 1e300,
		"exp": 1e3,
		"enabled": true,
		"off": false,
		"nothing": null,
		"empty": {},
		"none": [],
		"containers": [
			{"name": "c0", "ports": [80, 443], "env": null},
			{"name": "c1", "args": ["a", "b", ["nested", 1]]}
		],
		"matrix": [[1, 2], [3, [4, 5]]]
	},
	"data": {".config.yml": "cfg", "a.b": {"c": 1}},
	"status": {
		"phase": "Available",
		"conditions": [
			{"type": "Ready", "status": "True", "reason": "Available"},
			{"Type": "Synced", "Status": "False"},
			{"type": "Other", "status": 1}
		]
	}
}`

// paths cover the syntax, valid and not, and every way a lookup can end.
var paths = []string{
	"", "apiVersion", "kind", "metadata", "metadata.name", "metadata.nope", "nope", "nope.deeper",
	"metadata.labels[app.kubernetes.io/name]", "metadata.labels['app.kubernetes.io/name']",
	`metadata.labels["app.kubernetes.io/name"]`, `metadata.labels['app.kubernetes.io/name"]`,
	"metadata.labels['']", `metadata.labels[""]`, "metadata.labels['0']", "metadata.labels[0]",
	"metadata.labels[''q'']", "metadata.labels[*]", "metadata.labels.*", "'metadata'.name", `"metadata"."name"`,
	"metadata.annotations[crossplane.io/external-name]", "data[.config.yml]", "data[a.b].c", "data[a.b][c]", "data.a.b",
	"spec.replicas", "spec.ratio", "spec.whole", "spec.negative", "spec.big", "spec.bigger", "spec.huge", "spec.exp",
	"spec.enabled", "spec.off", "spec.nothing", "spec.nothing.x", "spec.nothing[0]", "spec.nothing.x.y",
	"spec.empty", "spec.empty.x", "spec.empty[0]", "spec.none", "spec.none[0]", "spec.none.x",
	"spec.containers", "spec.containers[0]", "spec.containers[0].name", "spec.containers[1].name", "spec.containers[2]",
	"spec.containers[2].name", "spec.containers[-1]", "spec.containers[+1]", "spec.containers[01]", "spec.containers[ 1]",
	"spec.containers[1 ]", "spec.containers[0x1]", "spec.containers[1.0]", "spec.containers[4294967295]",
	"spec.containers[4294967296]", "spec.containers[18446744073709551616]", "spec.containers['0']", "spec.containers.0",
	"spec.containers[0].ports[1]", "spec.containers[0].ports[2]", "spec.containers[0].ports[1].x", "spec.containers[0].env",
	"spec.containers[0].env.x", "spec.containers[0].env[0]", "spec.containers[1].args[2][0]", "spec.containers[1].args[2][1]",
	"spec.containers[1].args[2][1][0]", "spec.containers[0]name", "spec.containers[0][name]", "spec[containers][0][name]",
	"spec.matrix[1][1][0]", "spec.matrix[1][1][2]", "spec.matrix[0][1]", "spec.replicas.x", "spec.replicas[0]",
	"kind[0]", "kind.x", "[0]", "[kind]", "['kind']", "[0].x", "status.phase", "status.conditions",
	"status.conditions[0].type", "status.conditions[1].Type", "status.conditions[1].type", "status.conditions[2].status",
	"spec.containers[*].name",
	// Not paths.
	".", "..", ".kind", "kind.", "metadata..name", "spec.containers.[0]", "spec.containers[", "spec.containers[0",
	"spec.containers[]", "spec.containers[[0]]", "spec.containers[0]]", "spec.containers]", "metadata.]name", "]", "[",
	"[]", "][", "spec[con[tainers]", "a[b]c[", ".[0]", "[0].", "[0]..x", "a.[", "a.]", "a[.]", "a[[]",
}

// objects are the objects the paths run on: doc decoded as Kubernetes
// (and ocifn's codec) decodes it, with whole numbers int64, and as
// encoding/json does, with every number float64; an empty object; none.
func objects(t testing.TB) map[string]map[string]any {
	var k8s, std map[string]any
	if err := utiljson.Unmarshal([]byte(doc), &k8s); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(doc), &std); err != nil {
		t.Fatal(err)
	}
	return map[string]map[string]any{"k8s": k8s, "std": std, "empty": {}, "nil": nil}
}

func TestSameAsCrossplane(t *testing.T) {
	for name, obj := range objects(t) {
		for _, p := range paths {
			t.Run(name+"/"+p, func(t *testing.T) { compare(t, obj, p) })
		}
	}
}

// TestKinds pins a few results outright, so that the comparison cannot
// pass by both packages changing together (a crossplane-runtime upgrade).
func TestKinds(t *testing.T) {
	o := Object(objects(t)["k8s"])
	for path, want := range map[string]string{
		"spec.replicas": "ok", "spec.containers[1].args[2][1]": "ok", "metadata.labels['0']": "ok", "data[.config.yml]": "ok",
		"spec.containers[0]name": "ok", "": "ok",
		"nope": "not found", "spec.containers[2]": "not found", "spec.nothing.x": "not found",
		"spec.nothing[0]": "wrong type", "kind.x": "wrong type", "kind[0]": "wrong type", "[0]": "wrong type",
		"kind.": "invalid path", ".kind": "invalid path", "a..b": "invalid path", "a.[0]": "invalid path",
		"a[]": "invalid path", "a[": "invalid path", "a]": "invalid path", "a[[0]]": "invalid path",
	} {
		_, err := o.GetValue(path)
		if got := kind(err, IsNotFound, isSyntaxError); got != want {
			t.Errorf("GetValue(%q): %s (%v), want %s", path, got, err, want)
		}
	}
	if _, err := o.GetInteger("spec.whole"); kind(err, IsNotFound, isSyntaxError) != "wrong type" {
		t.Errorf("GetInteger of 2.0: %v, want a wrong type: only an int64 is an integer", err)
	}
	if n, err := o.GetInteger("spec.big"); err != nil || n != 1<<63-1 {
		t.Errorf("GetInteger of the largest int64: %d, %v", n, err)
	}
}

// TestMessages checks that errors say where in the path they are, for
// the users that read them in readiness check errors.
func TestMessages(t *testing.T) {
	o := Object(objects(t)["k8s"])
	for path, want := range map[string]string{
		"spec.containers[0].name.x": `spec.containers[0].name.x: spec.containers[0].name is a string, not an object`,
		"spec.containers[5].name":   `spec.containers[5]: no such element (spec.containers has 2)`,
		"spec.nope.x":               `spec.nope: no such field`,
		"spec.nothing.x":            `spec.nothing.x: spec.nothing is null`,
		"[0]":                       `[0]: the top level is an object, not an array`,
		"a..b":                      `invalid field path "a..b": unexpected '.' at position 2`,
	} {
		if _, err := o.GetValue(path); err == nil || err.Error() != want {
			t.Errorf("GetValue(%q): %v, want %s", path, err, want)
		}
	}
	if _, err := o.GetInteger("status.phase"); err == nil || err.Error() != `status.phase: a string, not an integer` {
		t.Errorf("GetInteger of a string: %v", err)
	}
	if _, err := o.GetString("spec.ratio"); err == nil || err.Error() != `spec.ratio: the number 1.5, not a string` {
		t.Errorf("GetString of a number: %v", err)
	}
}

// FuzzFieldPath runs both packages on any path and any JSON object.
func FuzzFieldPath(f *testing.F) {
	for _, p := range paths {
		f.Add(p, doc)
	}
	f.Add("a[0]", `{"a": [1]}`)
	f.Add("a.b", `null`)
	f.Add("a", `{"a": 1e400}`)
	f.Fuzz(func(t *testing.T, path, js string) {
		var k8s, std map[string]any
		if utiljson.Unmarshal([]byte(js), &k8s) == nil {
			compare(t, k8s, path)
		}
		if json.Unmarshal([]byte(js), &std) == nil {
			compare(t, std, path)
		}
	})
}

// compare runs every reader of both packages on one path of obj.
func compare(t *testing.T, obj map[string]any, path string) {
	t.Helper()
	ours, theirs := Object(obj), xpfieldpath.Pave(obj)

	segs, err := Parse(path)
	xsegs, xerr := xpfieldpath.Parse(path)
	if (err == nil) != (xerr == nil) {
		t.Fatalf("Parse(%q): %v, crossplane-runtime: %v", path, err, xerr)
	}
	if err == nil {
		if len(segs) != len(xsegs) {
			t.Fatalf("Parse(%q): %v, crossplane-runtime: %v", path, segs, xsegs)
		}
		for i, s := range segs {
			x := xsegs[i]
			if s.IsIndex != (x.Type == xpfieldpath.SegmentIndex) || s.Field != x.Field || uint(s.Index) != x.Index {
				t.Fatalf("Parse(%q)[%d]: %+v, crossplane-runtime: %+v", path, i, s, x)
			}
		}
	} else if !isSyntaxError(err) {
		t.Fatalf("Parse(%q): %v is not a *SyntaxError", path, err)
	}

	v, err := ours.GetValue(path)
	xv, xerr := theirs.GetValue(path)
	same(t, "GetValue", path, v, err, xv, xerr)

	s, err := ours.GetString(path)
	xs, xerr := theirs.GetString(path)
	same(t, "GetString", path, s, err, xs, xerr)

	n, err := ours.GetInteger(path)
	xn, xerr := theirs.GetInteger(path)
	same(t, "GetInteger", path, n, err, xn, xerr)

	// What GetValueInto decodes into: anything, readiness's conditions,
	// and a few types a value may not fit.
	type condition struct {
		Type   string `json:"type"`
		Status string `json:"status"`
	}
	for _, newOut := range []func() any{
		func() any { return new(any) },
		func() any { return new([]condition) },
		func() any { return new(map[string]any) },
		func() any { return new(int64) },
		func() any { return new(string) },
	} {
		out, xout := newOut(), newOut()
		err, xerr := ours.GetValueInto(path, out), theirs.GetValueInto(path, xout)
		same(t, fmt.Sprintf("GetValueInto(%T)", out), path, out, err, xout, xerr)
	}
}

// same fails the test unless the two results are the same value, or
// errors of the same kind.
func same(t *testing.T, fn, path string, v any, err error, xv any, xerr error) {
	t.Helper()
	k := kind(err, IsNotFound, isSyntaxError)
	xk := kind(xerr, xpfieldpath.IsNotFound, func(error) bool {
		_, err := xpfieldpath.Parse(path)
		return err != nil
	})
	if k != xk {
		t.Fatalf("%s(%q): %s (%v), crossplane-runtime: %s (%v)", fn, path, k, err, xk, xerr)
	}
	if !reflect.DeepEqual(v, xv) {
		t.Fatalf("%s(%q): %#v, crossplane-runtime: %#v", fn, path, v, xv)
	}
}

// kind sorts a result: ok, not found, invalid path or wrong type (every
// other error).
func kind(err error, notFound, invalid func(error) bool) string {
	switch {
	case err == nil:
		return "ok"
	case notFound(err):
		return "not found"
	case invalid(err):
		return "invalid path"
	}
	return "wrong type"
}

func isSyntaxError(err error) bool {
	var se *SyntaxError
	return errors.As(err, &se)
}
