package pipeline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadDocuments(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "b.yaml", "---\n# only a comment\n---\napiVersion: v1\nkind: A\nmetadata: {name: a}\n---\napiVersion: v1\nkind: B\n")
	writeFile(t, dir, "a.yml", "apiVersion: v1\nkind: Yml\n")
	// Not read, as crossplane render does not read them: only .yaml and
	// .yml files are.
	writeFile(t, dir, "c.json", `{"apiVersion": "v1", "kind": "J"}`)
	writeFile(t, dir, "d.YAML", "apiVersion: v1\nkind: U\n")
	writeFile(t, dir, "notes.txt", "not read")
	docs, err := ReadDocuments(dir)
	if err != nil {
		t.Fatal(err)
	}
	var kinds, sources []string
	for _, d := range docs {
		kinds = append(kinds, d.Object.Kind())
		sources = append(sources, filepath.Base(d.Source))
	}
	if d := cmp.Diff([]string{"Yml", "A", "B"}, kinds); d != "" {
		t.Errorf("kinds in file then document order (-want +got):\n%s", d)
	}
	if sources[2] != "b.yaml, document 3" {
		t.Errorf("source of the last document: %q", sources[2])
	}

	// A directory without a YAML file is a mistake, as in crossplane
	// render, not an empty input.
	none := t.TempDir()
	writeFile(t, none, "c.json", `{"apiVersion": "v1", "kind": "J"}`)
	if _, err := ReadDocuments(none); err == nil || !strings.Contains(err.Error(), none) || !strings.Contains(err.Error(), "no YAML file") {
		t.Errorf("a directory without a YAML file: err = %v", err)
	}

	bad := writeFile(t, dir, "bad.yml", "apiVersion: v1\n---\n- a list\n")
	if _, err := ReadDocuments(bad); err == nil || !strings.Contains(err.Error(), "document 2: not an object") {
		t.Errorf("a list document: err = %v", err)
	}
}

func TestComposedResources(t *testing.T) {
	docs, err := ParseDocuments([]byte("kind: A\nmetadata:\n  name: x\n  annotations: {crossplane.io/composition-resource-name: one}\n---\nkind: B\nmetadata: {name: two}\n"), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rs, err := ComposedResources(docs, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := rs["one"]; !ok {
		t.Errorf("the annotation names the resource: %v", rs)
	}
	if _, ok := rs["two"]; !ok {
		t.Errorf("metadata.name stands in for a missing annotation: %v", rs)
	}
	if _, err := ComposedResources(docs, true); err == nil || !strings.Contains(err.Error(), "f.yaml, document 2 (B/two) has no crossplane.io/composition-resource-name annotation") {
		t.Errorf("annotation required: err = %v", err)
	}
	dup := append(docs, docs[1])
	if _, err := ComposedResources(dup, false); err == nil || !strings.Contains(err.Error(), `both named "two"`) {
		t.Errorf("duplicates: err = %v", err)
	}
}

func TestBuildRequest(t *testing.T) {
	dir := t.TempDir()
	f := RequestFiles{
		Request:   writeFile(t, dir, "req.yaml", "meta: {tag: t1}\ninput: {old: true}\ncontext: {kept: 1}\n"),
		Input:     writeFile(t, dir, "in.yaml", "filter: .\n"),
		XR:        writeFile(t, dir, "xr.yaml", "apiVersion: v1\nkind: X\nmetadata: {name: x}\n"),
		DesiredXR: writeFile(t, dir, "dxr.yaml", "status: {a: 1}\n"),
		Observed:  writeFile(t, dir, "obs.yaml", "kind: A\nmetadata: {name: a}\n"),
		Desired:   writeFile(t, dir, "des.yaml", "kind: B\nmetadata: {name: b}\n"),
		Context:   map[string]any{"added": "v"},
	}
	req, err := BuildRequest(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	if req.GetMeta().GetTag() != "t1" {
		t.Errorf("tag from the request file: %v", req.GetMeta())
	}
	if d := cmp.Diff(map[string]any{"filter": "."}, req.GetInput().AsMap()); d != "" {
		t.Errorf("--input replaces the input: %s", d)
	}
	if req.GetObserved().GetComposite().GetResource().AsMap()["kind"] != "X" || req.GetDesired().GetComposite().GetResource().AsMap()["status"] == nil {
		t.Errorf("composites: %v %v", req.GetObserved().GetComposite(), req.GetDesired().GetComposite())
	}
	if _, ok := req.GetObserved().GetResources()["a"]; !ok {
		t.Errorf("observed: %v", req.GetObserved())
	}
	if _, ok := req.GetDesired().GetResources()["b"]; !ok {
		t.Errorf("desired: %v", req.GetDesired())
	}
	if d := cmp.Diff(map[string]any{"kept": 1.0, "added": "v"}, req.GetContext().AsMap()); d != "" {
		t.Errorf("context (-want +got):\n%s", d)
	}

	// JSON with proto field names is a request too; stdin with "-".
	req, err = BuildRequest(RequestFiles{Request: "-"}, strings.NewReader(`{"meta": {"tag": "j"}, "extra_resources": {}}`))
	if err != nil || req.GetMeta().GetTag() != "j" {
		t.Errorf("JSON request on stdin: %v %v", req, err)
	}
	if _, err := ParseRequest([]byte("desired_state: {}\n")); err == nil || !strings.Contains(err.Error(), "not a RunFunctionRequest") {
		t.Errorf("unknown field: err = %v", err)
	}
	// A mistake deep in a YAML request is named by its path, not by a
	// position in the JSON it was converted to.
	if _, err := ParseRequest([]byte("meta:\n  tag: t\nobserved:\n  composite:\n    resource: {}\ninputt:\n  a: 1\n")); err == nil ||
		!strings.Contains(err.Error(), `unknown field "inputt" at $.inputt; did you mean "input"?`) || strings.Contains(err.Error(), "line 1") {
		t.Errorf("a misspelt field on line 6: err = %v, want its path and the field meant", err)
	}
}

// TestParseRequestIsOneDocument: a request file is one YAML document;
// another one after it is refused rather than dropped unsent, and empty
// documents (comments before "---") are skipped as in every other file.
func TestParseRequestIsOneDocument(t *testing.T) {
	for _, tc := range []struct{ name, yaml, tag, err string }{
		{"two_requests", "meta: {tag: one}\n---\nmeta: {tag: two}\n", "", "holds 2 YAML documents; want one RunFunctionRequest"},
		{"comment_document_first", "# the request\n---\nmeta: {tag: one}\n", "one", ""},
		{"comment_document_between_separators", "---\n# the request\n---\nmeta: {tag: one}\n", "one", ""},
		{"separator_after", "meta: {tag: one}\n---\n", "one", ""},
		{"empty", "", "", "holds no RunFunctionRequest"},
		{"only_comments", "# nothing yet\n", "", "holds no RunFunctionRequest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := ParseRequest([]byte(tc.yaml))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q (request %v)", err, tc.err, req)
				}
				return
			}
			if err != nil || req.GetMeta().GetTag() != tc.tag {
				t.Fatalf("got %v, %v; want the request tagged %q", req, err, tc.tag)
			}
		})
	}
}

// TestRequestKeyGivenTwice: a key written twice in one mapping of a
// request or an expected response (a second "observed:" further down) is
// refused, naming the key, its path and both lines: a YAML decoder keeps
// the last value alone, and the first would be dropped unsent, or an
// expected field never compared.
func TestRequestKeyGivenTwice(t *testing.T) {
	req := "# the request\nmeta: {tag: t}\nobserved:\n  composite:\n    resource: {kind: X}\ninput: {a: 1}\nobserved:\n  resources: {}\n"
	if _, err := ParseRequest([]byte(req)); err == nil || !strings.Contains(err.Error(), `key "observed" at $ is given twice, at lines 3 and 7`) {
		t.Errorf("request with observed twice: err = %v", err)
	}
	nested := "desired:\n  resources:\n    a:\n      resource: {kind: X}\n      ready: READY_TRUE\n      ready: READY_FALSE\n"
	if _, err := ParseRequest([]byte(nested)); err == nil || !strings.Contains(err.Error(), `key "ready" at $.desired.resources.a is given twice, at lines 5 and 6`) {
		t.Errorf("request with a nested key twice: err = %v", err)
	}
	rsp := "results:\n- {severity: SEVERITY_NORMAL, message: a, message: b}\n"
	if _, err := ParseResponse([]byte(rsp)); err == nil || !strings.Contains(err.Error(), `key "message" at $.results[0] is given twice, at lines 2 and 2`) {
		t.Errorf("response with a key twice: err = %v", err)
	}
	// In a second document, lines are the file's.
	if _, err := ParseRequest([]byte("# nothing\n---\nmeta: {tag: a}\nmeta: {tag: b}\n")); err == nil || !strings.Contains(err.Error(), "at lines 3 and 4") {
		t.Errorf("key twice after a comment document: err = %v", err)
	}
	// The same key in different mappings is no mistake.
	if _, err := ParseRequest([]byte("observed: {composite: {resource: {metadata: {name: a}}}}\ndesired: {composite: {resource: {metadata: {name: a}}}}\n")); err != nil {
		t.Errorf("same keys in different mappings: %v", err)
	}
}

// TestParseRequestNamesTheFileMeant: a file of another kind given as
// REQUEST or --expected (an XR, a request as the expected response) says
// what it looks like and where it goes, not only that its first key is
// unknown.
func TestParseRequestNamesTheFileMeant(t *testing.T) {
	xr := "apiVersion: example.org/v1alpha1\nkind: XGreeting\nmetadata: {name: hello}\nspec: {to: World}\n"
	if _, err := ParseRequest([]byte(xr)); err == nil || !strings.Contains(err.Error(), `not a RunFunctionRequest: it looks like a Kubernetes object (apiVersion example.org/v1alpha1, kind XGreeting); give a composite resource with --xr FILE`) {
		t.Errorf("an XR as the request: err = %v", err)
	}
	if _, err := ParseResponse([]byte(xr)); err == nil || !strings.Contains(err.Error(), `not a RunFunctionResponse: it looks like a Kubernetes object (apiVersion example.org/v1alpha1, kind XGreeting)`) {
		t.Errorf("an XR as the expected response: err = %v", err)
	}
	req := "meta: {tag: t}\nobserved: {composite: {resource: {kind: X}}}\ninput: {a: 1}\n"
	if _, err := ParseResponse([]byte(req)); err == nil || !strings.Contains(err.Error(), `not a RunFunctionResponse: it looks like a RunFunctionRequest (it has "observed")`) {
		t.Errorf("a request as the expected response: err = %v", err)
	}
	rsp := "meta: {tag: t}\nresults: [{severity: SEVERITY_NORMAL, message: m}]\n"
	if _, err := ParseRequest([]byte(rsp)); err == nil || !strings.Contains(err.Error(), `not a RunFunctionRequest: it looks like a RunFunctionResponse (it has "results")`) {
		t.Errorf("a response as the request: err = %v", err)
	}
	// A request with a stray key of the response's is a request still.
	if _, err := ParseRequest([]byte("observed: {}\nresults: []\n")); err == nil || !strings.Contains(err.Error(), `unknown field "results" at $.results`) {
		t.Errorf("a request with results: err = %v", err)
	}
}

// TestBuildRequestNamesTheFileMeant: a request or a response given to a
// flag that takes a Kubernetes object (--xr example/request.yaml) is
// refused, saying where it goes, rather than sent whole as the XR; a
// partial object, with its apiVersion and kind or with none of the
// messages' keys, is still taken.
func TestBuildRequestNamesTheFileMeant(t *testing.T) {
	dir := t.TempDir()
	req := writeFile(t, dir, "request.yaml", "meta: {tag: example}\nobserved:\n  composite:\n    resource: {apiVersion: example.org/v1alpha1, kind: XGreeting, metadata: {name: hello}}\ninput: {a: 1}\n")
	rsp := writeFile(t, dir, "expected.yaml", "desired: {}\nmeta: {tag: example}\nresults: [{severity: SEVERITY_NORMAL, message: m}]\n")
	passthrough := writeFile(t, dir, "passthrough.yaml", "desired: {}\nmeta: {tag: example}\n")
	for _, c := range []struct {
		flag string
		set  func(*RequestFiles, string)
	}{
		{"--xr", func(f *RequestFiles, p string) { f.XR = p }},
		{"--desired-xr", func(f *RequestFiles, p string) { f.DesiredXR = p }},
		{"--input", func(f *RequestFiles, p string) { f.Input = p }},
		{"--observed", func(f *RequestFiles, p string) { f.Observed = p }},
		{"--desired", func(f *RequestFiles, p string) { f.Desired = p }},
	} {
		for file, want := range map[string]string{
			req:         `looks like a RunFunctionRequest (it has "observed"), not a Kubernetes object (it has no apiVersion or kind): a whole request goes as REQUEST`,
			rsp:         `looks like a RunFunctionResponse (it has "results"), not a Kubernetes object (it has no apiVersion or kind): the response a function must give goes in the file --expected names`,
			passthrough: `looks like a RunFunctionRequest or RunFunctionResponse (it has "meta")`,
		} {
			var f RequestFiles
			c.set(&f, file)
			_, err := BuildRequest(f, nil)
			if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "; "+c.flag+" FILE takes ") {
				t.Errorf("%s %s: err = %v, want it to name the file, say %q and what %s takes", c.flag, filepath.Base(file), err, want, c.flag)
			}
		}
	}
	// Partial objects are objects still.
	f := RequestFiles{
		XR:        writeFile(t, dir, "xr.yaml", "apiVersion: example.org/v1alpha1\nkind: XGreeting\nstatus: {observed: 1}\n"),
		DesiredXR: writeFile(t, dir, "dxr.yaml", "status: {results: []}\n"),
		Input:     writeFile(t, dir, "in.yaml", "meta: {owner: me}\nfilter: .\n"),
		Observed:  writeFile(t, dir, "obs.yaml", "kind: A\nmetadata: {name: a}\nresults: []\n"),
	}
	if _, err := BuildRequest(f, nil); err != nil {
		t.Errorf("partial objects: %v", err)
	}
}

func TestParseContext(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "c.json", `{"a": [1, 2]}`)
	got, err := ParseContext([]string{"k=" + file, "both=" + file}, []string{`both={"from": "value"}`, "yamlish=region: eu"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"k": map[string]any{"a": []any{1.0, 2.0}}, "both": map[string]any{"from": "value"}, "yamlish": map[string]any{"region": "eu"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if _, err := ParseContext(nil, []string{"novalue"}); err == nil || !strings.Contains(err.Error(), "want KEY=JSON") {
		t.Errorf("err = %v", err)
	}
}

func TestParseComposition(t *testing.T) {
	ok := mustObject(t, `apiVersion: apiextensions.crossplane.io/v1
kind: Composition
metadata: {name: c, labels: {a: b}}
spec:
  compositeTypeRef: {apiVersion: example.org/v1, kind: XApp}
  mode: Pipeline
  pipeline:
  - step: one
    functionRef: {name: fn}
    input: {kind: Input, x: 1}
`)
	c, err := ParseComposition(ok)
	if err != nil {
		t.Fatal(err)
	}
	if c.Steps[0].FunctionRef.Name != "fn" || c.Steps[0].Input["x"] != 1.0 || c.Labels["a"] != "b" || c.CompositeTypeRef.Kind != "XApp" {
		t.Errorf("%+v", c)
	}
	for name, c := range map[string]struct{ yaml, want string }{
		"resources_mode":  {"apiVersion: apiextensions.crossplane.io/v1\nkind: Composition\nmetadata: {name: c}\nspec:\n  resources: [{}]\n", "must use spec.mode: Pipeline"},
		"not_composition": {"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n", "is not a Composition"},
		"no_steps":        {"apiVersion: apiextensions.crossplane.io/v1\nkind: Composition\nmetadata: {name: c}\nspec: {mode: Pipeline}\n", "has no spec.pipeline steps"},
		"duplicate_steps": {"apiVersion: apiextensions.crossplane.io/v1\nkind: Composition\nmetadata: {name: c}\nspec:\n  pipeline:\n  - {step: a, functionRef: {name: f}}\n  - {step: a, functionRef: {name: f}}\n", `two pipeline steps are named "a"`},
		"no_function":     {"apiVersion: apiextensions.crossplane.io/v1\nkind: Composition\nmetadata: {name: c}\nspec:\n  pipeline:\n  - {step: a}\n", "has no functionRef.name"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseComposition(mustObject(t, c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want %q", err, c.want)
			}
		})
	}
}

func TestFunctionRuntime(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "functions.yaml", `apiVersion: pkg.crossplane.io/v1
kind: Function
metadata:
  name: dev
  annotations: {render.crossplane.io/runtime-development-target: "dns:///fn:9443"}
spec: {package: xpkg.example.org/fn:v1}
---
apiVersion: pkg.crossplane.io/v1
kind: Function
metadata:
  name: dev-default
  annotations: {render.crossplane.io/runtime: Development}
spec: {package: xpkg.example.org/fn:v1}
---
apiVersion: pkg.crossplane.io/v1
kind: Function
metadata:
  name: tarball
  annotations: {render.ocifn.dev/tarball: build/fn.tar, render.ocifn.dev/image: "fn:v2"}
spec: {package: xpkg.example.org/fn:v1}
---
apiVersion: pkg.crossplane.io/v1beta1
kind: Function
metadata: {name: path}
spec: {package: ../fn.xpkg}
---
apiVersion: pkg.crossplane.io/v1
kind: Function
metadata: {name: registry}
spec: {package: xpkg.example.org/fn:v1}
---
apiVersion: pkg.crossplane.io/v1
kind: Function
metadata:
  name: docker
  annotations: {render.crossplane.io/runtime: Docker, render.crossplane.io/runtime-development-target: "fn:9443", render.ocifn.dev/tarball: build/fn.tar}
spec: {package: xpkg.example.org/fn:v1}
---
apiVersion: pkg.crossplane.io/v1
kind: Function
metadata:
  name: typo
  annotations: {render.crossplane.io/runtime: Developement, render.crossplane.io/runtime-development-target: "fn:9443"}
spec: {package: xpkg.example.org/fn:v1}
---
apiVersion: pkg.crossplane.io/v1
kind: Function
metadata:
  name: docker-image
  annotations: {render.crossplane.io/runtime-docker-image: "localhost:5000/fn:dev"}
spec: {package: xpkg.example.org/fn:v1}
---
apiVersion: pkg.crossplane.io/v1
kind: Function
metadata:
  name: docker-image-path
  annotations: {render.crossplane.io/runtime: Docker, render.crossplane.io/runtime-docker-image: "./build/fn.tar"}
spec: {package: xpkg.example.org/fn:v1}
---
apiVersion: pkg.crossplane.io/v1
kind: Function
metadata: {name: nothing}
`)
	docs, err := ReadDocuments(p)
	if err != nil {
		t.Fatal(err)
	}
	fns, err := ParseFunctions(docs)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Runtime{
		"dev":         {Kind: RuntimeTarget, Location: "dns:///fn:9443"},
		"dev-default": {Kind: RuntimeTarget, Location: "localhost:9443"},
		"tarball":     {Kind: RuntimeTarball, Location: filepath.Join(dir, "build/fn.tar"), Image: "fn:v2"},
		"path":        {Kind: RuntimeTarball, Location: filepath.Join(dir, "../fn.xpkg")},
		"registry":    {Kind: RuntimeRegistry, Location: "xpkg.example.org/fn:v1"},
		// Docker, said outright, is the image itself, as crossplane
		// render runs it: not the development target.
		"docker": {Kind: RuntimeTarball, Location: filepath.Join(dir, "build/fn.tar")},
		// crossplane render's image in place of spec.package.
		"docker-image":      {Kind: RuntimeRegistry, Location: "localhost:5000/fn:dev"},
		"docker-image-path": {Kind: RuntimeTarball, Location: filepath.Join(dir, "build/fn.tar")},
	}
	for _, f := range fns {
		rt, err := f.Runtime()
		switch f.Name {
		case "nothing":
			if err == nil || !strings.Contains(err.Error(), "has no spec.package") {
				t.Errorf("nothing: err = %v", err)
			}
			continue
		case "typo":
			// crossplane render refuses a runtime it does not know; the
			// Function must not run some other way without a word.
			if err == nil || !strings.Contains(err.Error(), `render.crossplane.io/runtime "Developement"`) {
				t.Errorf("typo: err = %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(want[f.Name], rt); d != "" {
			t.Errorf("%s (-want +got):\n%s", f.Name, d)
		}
	}

	if _, err := ParseFunctions([]Document{{Object: mustObject(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"), Source: "f, document 1"}}); err == nil || !strings.Contains(err.Error(), "is not a Function") {
		t.Errorf("err = %v", err)
	}
}

func TestMessageYAMLIsStable(t *testing.T) {
	rsp := &fnv1.RunFunctionResponse{Meta: &fnv1.ResponseMeta{Tag: "t"}, Results: []*fnv1.Result{{Severity: fnv1.Severity_SEVERITY_NORMAL, Message: "m"}}}
	b, err := MessageYAML(rsp)
	if err != nil {
		t.Fatal(err)
	}
	want := "meta:\n  tag: t\nresults:\n- message: m\n  severity: SEVERITY_NORMAL\n"
	if string(b) != want {
		t.Errorf("got:\n%s\nwant:\n%s", b, want)
	}
}

// TestMessageYAMLReadsBack: what ocifn test prints, and --update records,
// reads back as the same response, --expected's reading of it, whatever
// its values: a key "<<" is no merge key, a NEL no line break.
func TestMessageYAMLReadsBack(t *testing.T) {
	data, err := structpb.NewStruct(map[string]any{
		"<<":     map[string]any{"a": "1"},
		"string": map[string]any{"<<": "merged"},
		"nel":    "a\u0085b",
	})
	if err != nil {
		t.Fatal(err)
	}
	rsp := &fnv1.RunFunctionResponse{
		Meta:    &fnv1.ResponseMeta{Tag: "t"},
		Desired: &fnv1.State{Resources: map[string]*fnv1.Resource{"r": {Resource: data}}},
	}
	b, err := MessageYAML(rsp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseResponse(b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if !proto.Equal(got, rsp) {
		t.Errorf("read back as another response:\n%s", b)
	}
}
