package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// krmRequest is a call with an XR (observed, and a status an earlier step
// desired) and three desired composed resources, the bucket ready, the
// given functionConfig as the step's input.
func krmRequest(t *testing.T, tag, functionConfig string) *fnv1.RunFunctionRequest {
	t.Helper()
	return &fnv1.RunFunctionRequest{
		Meta:  &fnv1.RequestMeta{Tag: tag},
		Input: yamlStruct(t, "apiVersion: fn.example.org/v1\nkind: Config\nmetadata: {name: cfg}\n"+functionConfig),
		Observed: &fnv1.State{
			Composite: &fnv1.Resource{Resource: yamlStruct(t, "apiVersion: example.org/v1\nkind: XApp\nmetadata: {name: demo, labels: {env: dev}}\nspec: {size: 2}\n")},
		},
		Desired: &fnv1.State{
			Composite: &fnv1.Resource{Resource: yamlStruct(t, "apiVersion: example.org/v1\nkind: XApp\nstatus: {phase: Composing}\n")},
			Resources: map[string]*fnv1.Resource{
				"bucket": {Resource: yamlStruct(t, "apiVersion: s3.example.org/v1\nkind: Bucket\nmetadata: {name: demo-bucket}\nspec: {acl: private}\n"), Ready: fnv1.Ready_READY_TRUE},
				"queue":  {Resource: yamlStruct(t, "apiVersion: sqs.example.org/v1\nkind: Queue\nmetadata: {name: demo-queue}\n")},
				"topic":  {Resource: yamlStruct(t, "apiVersion: sns.example.org/v1\nkind: Topic\nmetadata: {name: demo-topic, labels: {team: data}}\n")},
			},
		},
		Context: yamlStruct(t, "k: v\n"),
	}
}

// structField returns the value at a dotted path of a Struct, nil if absent.
func structField(s *structpb.Struct, path string) *structpb.Value {
	parts := strings.Split(path, ".")
	for i, p := range parts {
		v := s.GetFields()[p]
		if i == len(parts)-1 || v == nil {
			return v
		}
		s = v.GetStructValue()
	}
	return nil
}

// TestKRMTransformer: the kyaml transformer behind --io krm: its labels
// reach every composed resource and the XR (only what it changed becomes
// the desired XR), a dropped item is no longer desired, the item it adds
// gets a name from its kind and name, ocifn's and kyaml's annotations do
// not come back, readiness is kept and its info result is Normal.
func TestKRMTransformer(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("krm-labels.tar"), "--io", "krm", "--warm", "0"})
	rsp := s.call(t, krmRequest(t, "labels", "labels: {team: platform}\ndrop: [Queue]\nconfigMap: summary\n"))

	res := rsp.GetDesired().GetResources()
	if len(res) != 3 || res["bucket"] == nil || res["topic"] == nil || res["configmap-summary"] == nil {
		t.Fatalf("desired resources %v, want bucket, topic and configmap-summary (queue dropped)", res)
	}
	for name, r := range res {
		if got := structField(r.GetResource(), "metadata.labels.team").GetStringValue(); got != "platform" && name != "configmap-summary" {
			t.Errorf("%s: label team = %q, want platform", name, got)
		}
		if a := structField(r.GetResource(), "metadata.annotations"); a != nil {
			t.Errorf("%s: annotations came back: %v", name, a)
		}
	}
	if got := structField(res["configmap-summary"].GetResource(), "data.labelled").GetStringValue(); got != "XApp/demo,Bucket/demo-bucket,Topic/demo-topic" {
		t.Errorf("configmap-summary data.labelled = %q", got)
	}
	if res["bucket"].GetReady() != fnv1.Ready_READY_TRUE {
		t.Errorf("bucket ready = %v, want the request's READY_TRUE", res["bucket"].GetReady())
	}
	if got := structField(res["bucket"].GetResource(), "spec.acl").GetStringValue(); got != "private" {
		t.Errorf("bucket spec.acl = %q, want private", got)
	}

	xr := rsp.GetDesired().GetComposite().GetResource()
	if got := structField(xr, "metadata.labels.team").GetStringValue(); got != "platform" {
		t.Errorf("desired XR %v, want label team=platform", xr)
	}
	if structField(xr, "metadata.labels.env") != nil || structField(xr, "spec") != nil || structField(xr, "metadata.name") != nil {
		t.Errorf("desired XR %v carries fields the function did not change", xr)
	}
	if got := structField(xr, "status.phase").GetStringValue(); got != "Composing" {
		t.Errorf("desired XR %v lost what an earlier step desired (status.phase)", xr)
	}

	rs := rsp.GetResults()
	if len(rs) != 1 || rs[0].GetSeverity() != fnv1.Severity_SEVERITY_NORMAL || rs[0].GetMessage() != "labelled 3 resources" {
		t.Errorf("results %v, want one Normal \"labelled 3 resources\"", rs)
	}
	if rsp.GetMeta().GetTag() != "labels" || structField(rsp.GetContext(), "k").GetStringValue() != "v" {
		t.Errorf("tag %q, context %v: want the request's", rsp.GetMeta().GetTag(), rsp.GetContext())
	}

	// A function error (exit 1, no results) is Fatal, with its stderr.
	rsp = s.call(t, krmRequest(t, "nolabels", "labels: {}\n"))
	rs = rsp.GetResults()
	if len(rs) != 1 || rs[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
		t.Fatalf("results %v, want one Fatal", rs)
	}
	mustContain(t, "the Fatal result", rs[0].GetMessage(), "exited with code 1", "functionConfig.labels is empty")
	if len(rsp.GetDesired().GetResources()) != 3 {
		t.Errorf("desired after a failure %v, want the request's", rsp.GetDesired().GetResources())
	}
}

// TestKRMValidator: the kyaml validator behind --io krm, the
// "validate-composed-resources" step: good resources give its info result,
// a bad one its error results as Fatal ones naming the resource, its name
// in the Composition and the field, although the function exits 1.
func TestKRMValidator(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("krm-validate.tar"), "--io", "krm", "--warm", "0"})
	cfg := "requiredLabels: [team]\ndeny: [{fieldPath: spec.acl, value: public-read}]\n"

	good := krmRequest(t, "good", cfg)
	for _, r := range good.Desired.Resources {
		meta := r.Resource.GetFields()["metadata"].GetStructValue()
		meta.Fields["labels"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"team": structpb.NewStringValue("data")}})
	}
	rsp := s.call(t, good)
	rs := rsp.GetResults()
	if len(rs) != 1 || rs[0].GetSeverity() != fnv1.Severity_SEVERITY_NORMAL || rs[0].GetMessage() != "validated 3 composed resources" {
		t.Errorf("results %v, want one Normal \"validated 3 composed resources\"", rs)
	}
	if len(rsp.GetDesired().GetResources()) != 3 {
		t.Errorf("desired %v, want the three resources unchanged", rsp.GetDesired().GetResources())
	}

	bad := krmRequest(t, "bad", cfg)
	bad.Desired.Resources["bucket"].Resource = yamlStruct(t, "apiVersion: s3.example.org/v1\nkind: Bucket\nmetadata: {name: demo-bucket, labels: {team: web}}\nspec: {acl: public-read}\n")
	rsp = s.call(t, bad)
	var msgs []string
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
			t.Errorf("result %v, want Fatal", r)
		}
		msgs = append(msgs, r.GetMessage())
	}
	want := []string{
		`spec.acl must not be "public-read" (resource s3.example.org/v1 Bucket demo-bucket (composition resource "bucket"); field spec.acl, current value "public-read")`,
		`label team is required (resource sqs.example.org/v1 Queue demo-queue (composition resource "queue"); field metadata.labels.team)`,
	}
	if strings.Join(msgs, "\n") != strings.Join(want, "\n") {
		t.Errorf("results:\n%s\nwant:\n%s", strings.Join(msgs, "\n"), strings.Join(want, "\n"))
	}
	if got := structField(rsp.GetDesired().GetResources()["bucket"].GetResource(), "spec.acl").GetStringValue(); got != "public-read" {
		t.Errorf("desired bucket changed: %v", rsp.GetDesired().GetResources()["bucket"])
	}
}

// TestKRMModeMismatch: a json image served in krm mode gets a Fatal result
// that names json.
func TestKRMModeMismatch(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("trivial.tar"), "--io", "krm", "--warm", "0"})
	rsp := s.call(t, krmRequest(t, "mismatch", "labels: {a: b}\n"))
	rs := rsp.GetResults()
	if len(rs) != 1 || rs[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
		t.Fatalf("results %v, want one Fatal", rs)
	}
	mustContain(t, "the Fatal result", rs[0].GetMessage(), "not a valid ResourceList", "a RunFunctionResponse", "--io json")
}

// TestKRMRenderPipeline: both KRM functions run as steps of a rendered
// pipeline next to a native json function: jq composes a bucket and a
// queue, krm-labels labels them, krm-validate (the
// "validate-composed-resources" step) checks them. The KRM steps are
// `ocifn serve --io krm`, called through the Development runtime as
// Crossplane's render calls any function. A bucket the validator refuses
// stops the pipeline with its error result.
func TestKRMRenderPipeline(t *testing.T) {
	labels := startServer(t, []string{"--tarball", image("krm-labels.tar"), "--io", "krm", "--warm", "0"})
	validate := startServer(t, []string{"--tarball", image("krm-validate.tar"), "--io", "krm", "--warm", "0"})
	for _, tc := range []struct {
		name, acl string
		exit      int
		stdout    []string
		stderr    []string
	}{
		{"valid", "private", 0,
			[]string{"kind: Bucket", "acl: private", "kind: Queue", "team: platform",
				"crossplane.io/composition-resource-name: bucket", "crossplane.io/composition-resource-name: queue",
				"labelled 3 resources", "validated 2 composed resources"},
			nil},
		{"refused", "public-read", 1, nil,
			[]string{"validate-composed-resources", `spec.acl must not be "public-read"`, `composition resource "bucket"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(name, text string) {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write("xr.yaml", "apiVersion: example.org/v1\nkind: XApp\nmetadata:\n  name: demo\nspec:\n  size: 2\n")
			write("composition.yaml", `apiVersion: apiextensions.crossplane.io/v1
kind: Composition
metadata:
  name: xapps.example.org
spec:
  compositeTypeRef:
    apiVersion: example.org/v1
    kind: XApp
  mode: Pipeline
  pipeline:
  - step: compose
    functionRef:
      name: function-jq
    input:
      apiVersion: ocifn.dev/v1alpha1
      kind: Input
      filter: '{desired: (.desired | .resources.bucket = {resource: {apiVersion: "s3.example.org/v1", kind: "Bucket", spec: {acl: "`+tc.acl+`"}}} | .resources.queue = {resource: {apiVersion: "sqs.example.org/v1", kind: "Queue"}})}'
  - step: labels
    functionRef:
      name: function-krm-labels
    input:
      apiVersion: fn.example.org/v1
      kind: Labels
      metadata:
        name: labels
      labels:
        team: platform
  - step: validate-composed-resources
    functionRef:
      name: function-krm-validate
    input:
      apiVersion: fn.example.org/v1
      kind: Rules
      metadata:
        name: rules
      requiredLabels: [team]
      deny:
      - fieldPath: spec.acl
        value: public-read
`)
			write("functions.yaml", `apiVersion: pkg.crossplane.io/v1
kind: Function
metadata:
  name: function-jq
  annotations:
    render.ocifn.dev/tarball: `+image("jq-function.tar")+`
spec:
  package: registry.example.com/function-jq:v0.1.0
---
apiVersion: pkg.crossplane.io/v1
kind: Function
metadata:
  name: function-krm-labels
  annotations:
    render.crossplane.io/runtime: Development
    render.crossplane.io/runtime-development-target: `+labels.addr+`
spec:
  package: registry.example.com/function-krm-labels:v0.1.0
---
apiVersion: pkg.crossplane.io/v1
kind: Function
metadata:
  name: function-krm-validate
  annotations:
    render.crossplane.io/runtime: Development
    render.crossplane.io/runtime-development-target: `+validate.addr+`
spec:
  package: registry.example.com/function-krm-validate:v0.1.0
`)
			r := runIn(t, dir, nil, "render", "--cache-dir", cacheDir(t), "-r", "xr.yaml", "composition.yaml", "functions.yaml")
			if r.exit != tc.exit {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.exit, tc.exit, r.stdout, r.stderr)
			}
			mustContain(t, "render's output", r.stdout, tc.stdout...)
			mustContain(t, "render's error", r.stderr, tc.stderr...)
			if strings.Contains(r.stdout, "ocifn.io/") {
				t.Errorf("ocifn's KRM annotations leaked into the rendered output:\n%s", r.stdout)
			}
		})
	}
}

// TestKRMRoundTripKeepsNEL: a string holding a NEL (U+0085) reaches a KRM
// function and comes back as it was: cat, which prints its ResourceList
// back, changes neither a composed resource nor the XR.
func TestKRMRoundTripKeepsNEL(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("echo.tar"), "--io", "krm", "--warm", "0"})
	req := krmRequest(t, "nel", "")
	note := structpb.NewStringValue("caf\u0085e\u0085")
	req.Observed.Composite.Resource.Fields["spec"].GetStructValue().Fields["note"] = note
	req.Desired.Resources["bucket"].Resource.Fields["spec"].GetStructValue().Fields["note"] = note
	rsp := s.call(t, req)
	if len(rsp.GetResults()) != 0 {
		t.Fatalf("results %v, want none", rsp.GetResults())
	}
	if got := structField(rsp.GetDesired().GetResources()["bucket"].GetResource(), "spec.note").GetStringValue(); got != note.GetStringValue() {
		t.Errorf("bucket spec.note came back as %q, want %q", got, note.GetStringValue())
	}
	if !proto.Equal(rsp.GetDesired().GetComposite(), req.GetDesired().GetComposite()) {
		t.Errorf("desired XR %v, want the request's %v: cat changed nothing", rsp.GetDesired().GetComposite(), req.GetDesired().GetComposite())
	}
}

// TestKRMReadsYAML12Booleans: a KRM function in yq (YAML 1.2, as kyaml)
// that sets the strings "on" and "no" and a key "y" prints them plain;
// they reach Crossplane as the strings and the key they are, not as the
// booleans and the key "true" YAML 1.1 would make of them.
func TestKRMReadsYAML12Booleans(t *testing.T) {
	yq := configuredImage(t, "yq-function.tar", func(c *v1.Config) {
		c.Entrypoint = []string{"/bin/yq", `(.items[] | select(.kind == "Bucket") | .spec) += {"versioning": "on", "public": "no", "y": 1, "enabled": true}`}
		c.Cmd = nil
	})
	s := startServer(t, []string{"--tarball", yq, "--io", "krm", "--warm", "0"})
	rsp := s.call(t, krmRequest(t, "yaml12", ""))
	if len(rsp.GetResults()) != 0 {
		t.Fatalf("results %v, want none", rsp.GetResults())
	}
	spec := structField(rsp.GetDesired().GetResources()["bucket"].GetResource(), "spec").GetStructValue()
	want := map[string]*structpb.Value{
		"acl":        structpb.NewStringValue("private"),
		"versioning": structpb.NewStringValue("on"),
		"public":     structpb.NewStringValue("no"),
		"y":          structpb.NewNumberValue(1),
		"enabled":    structpb.NewBoolValue(true),
	}
	if len(spec.GetFields()) != len(want) {
		t.Errorf("bucket spec %v, want %v", spec, want)
	}
	for k, v := range want {
		if !proto.Equal(spec.GetFields()[k], v) {
			t.Errorf("bucket spec.%s = %v, want %v", k, spec.GetFields()[k], v)
		}
	}
}

// TestKRMXRWithoutItsAnnotation: a yq function that replaces the XR's
// annotations, ocifn's with them, still changes the XR: its annotation
// reaches the desired XR, and the XR does not come back as a composed
// resource of its own kind and name.
func TestKRMXRWithoutItsAnnotation(t *testing.T) {
	yq := configuredImage(t, "yq-function.tar", func(c *v1.Config) {
		c.Entrypoint = []string{"/bin/yq", `(.items[] | select(.kind == "XApp") | .metadata.annotations) = {"team": "platform"}`}
		c.Cmd = nil
	})
	s := startServer(t, []string{"--tarball", yq, "--io", "krm", "--warm", "0"})
	rsp := s.call(t, krmRequest(t, "xr-annotations", ""))
	if len(rsp.GetResults()) != 0 {
		t.Fatalf("results %v, want none", rsp.GetResults())
	}
	if res := rsp.GetDesired().GetResources(); len(res) != 3 || res["bucket"] == nil || res["queue"] == nil || res["topic"] == nil {
		t.Errorf("desired resources %v, want the request's bucket, queue and topic alone", res)
	}
	xr := rsp.GetDesired().GetComposite().GetResource()
	if got := structField(xr, "metadata.annotations.team").GetStringValue(); got != "platform" {
		t.Errorf("desired XR %v, want the annotation team=platform", xr)
	}
	if got := structField(xr, "status.phase").GetStringValue(); got != "Composing" {
		t.Errorf("desired XR %v lost what an earlier step desired (status.phase)", xr)
	}
}

// TestKRMResourcesWithoutTheirAnnotation: a yq function that replaces
// every item's annotations, ocifn's with them, returns the same desired
// resources, under their names and with their readiness, not new ones
// named after their kind and name (which would delete the old).
func TestKRMResourcesWithoutTheirAnnotation(t *testing.T) {
	yq := configuredImage(t, "yq-function.tar", func(c *v1.Config) {
		c.Entrypoint = []string{"/bin/yq", `.items[].metadata.annotations = {"team": "platform"}`}
		c.Cmd = nil
	})
	s := startServer(t, []string{"--tarball", yq, "--io", "krm", "--warm", "0"})
	rsp := s.call(t, krmRequest(t, "annotations", ""))
	if len(rsp.GetResults()) != 0 {
		t.Fatalf("results %v, want none", rsp.GetResults())
	}
	res := rsp.GetDesired().GetResources()
	if len(res) != 3 || res["bucket"] == nil || res["queue"] == nil || res["topic"] == nil {
		t.Fatalf("desired resources %v, want the request's bucket, queue and topic alone", res)
	}
	for name, r := range res {
		if got := structField(r.GetResource(), "metadata.annotations.team").GetStringValue(); got != "platform" {
			t.Errorf("%s: annotation team = %q, want platform", name, got)
		}
	}
	if res["bucket"].GetReady() != fnv1.Ready_READY_TRUE {
		t.Errorf("bucket ready = %v, want the request's READY_TRUE", res["bucket"].GetReady())
	}
}

// TestKRMInfinityNamesItsPath: a yq function that prints an infinity
// (.inf, which YAML has and JSON has not) in a composed item gets a Fatal
// result naming the item's field, not the JSON encoder's "unsupported
// value: +Inf" alone.
func TestKRMInfinityNamesItsPath(t *testing.T) {
	yq := configuredImage(t, "yq-function.tar", func(c *v1.Config) {
		c.Entrypoint = []string{"/bin/yq", `(.items[] | select(.kind == "Topic") | .spec.ratio) = ("+.inf" | from_yaml)`}
		c.Cmd = nil
	})
	s := startServer(t, []string{"--tarball", yq, "--io", "krm", "--warm", "0"})
	rsp := s.call(t, krmRequest(t, "infinity", ""))
	rs := rsp.GetResults()
	if len(rs) != 1 || rs[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL || !strings.Contains(rs[0].GetMessage(), "items[3].spec.ratio is +.inf") {
		t.Fatalf("results %v, want one Fatal result naming items[3].spec.ratio", rs)
	}
}

// TestKRMLocalConfigIsNotComposed: a yq function that adds an item
// annotated config.kubernetes.io/local-config: "true" and marks the queue
// so, as kpt functions mark what kpt and kustomize never apply: neither is
// composed, and results say so.
func TestKRMLocalConfigIsNotComposed(t *testing.T) {
	yq := configuredImage(t, "yq-function.tar", func(c *v1.Config) {
		c.Entrypoint = []string{"/bin/yq", `.items += [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "annotations": {"config.kubernetes.io/local-config": "true"}}, "data": {"region": "eu"}}]
			| (.items[] | select(.kind == "Queue") | .metadata.annotations["config.kubernetes.io/local-config"]) = "true"`}
		c.Cmd = nil
	})
	s := startServer(t, []string{"--tarball", yq, "--io", "krm", "--warm", "0"})
	rsp := s.call(t, krmRequest(t, "local-config", ""))
	if res := rsp.GetDesired().GetResources(); len(res) != 2 || res["bucket"] == nil || res["topic"] == nil {
		t.Errorf("desired resources %v, want bucket and topic alone", res)
	}
	rs := rsp.GetResults()
	if len(rs) != 2 ||
		rs[0].GetSeverity() != fnv1.Severity_SEVERITY_WARNING || !strings.Contains(rs[0].GetMessage(), `(Queue demo-queue) is annotated config.kubernetes.io/local-config: "true"`) || !strings.Contains(rs[0].GetMessage(), `"queue" is no longer desired`) ||
		rs[1].GetSeverity() != fnv1.Severity_SEVERITY_NORMAL || !strings.Contains(rs[1].GetMessage(), `(ConfigMap settings) is annotated config.kubernetes.io/local-config: "true", which kpt and kustomize never apply, so it is not composed`) {
		t.Errorf("results %v, want a Warning for the queue and a Normal result for the ConfigMap", rs)
	}
}

// TestYAMLModesKeepAMergeKeyName: a resource that has the key "<<"
// reaches a KRM function written with kyaml (krm-labels), one in yq, one
// that prints its input back (cat) and a FunctionIO function (cat), and
// comes back with that key. Written plain, YAML readers take "<<" for a
// merge key: one whose value is an object was merged away without a word,
// one whose value is a string refused (kyaml prints it back as
// "!!merge <<").
func TestYAMLModesKeepAMergeKeyName(t *testing.T) {
	const config = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: demo-config}\ndata: {\"<<\": merged, a: \"<<\"}\n"
	const table = "apiVersion: example.org/v1\nkind: Table\nmetadata: {name: demo-table}\nspec: {\"<<\": {replicas: 1}, size: 2}\n"
	yq := configuredImage(t, "yq-function.tar", func(c *v1.Config) {
		c.Entrypoint = []string{"/bin/yq", `.items[0].metadata.labels.team = "platform"`}
		c.Cmd = nil
	})
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"krm_kyaml", []string{"--tarball", image("krm-labels.tar"), "--io", "krm"}},
		{"krm_yq", []string{"--tarball", yq, "--io", "krm"}},
		{"krm_cat", []string{"--tarball", image("echo.tar"), "--io", "krm"}},
		{"functionio_cat", []string{"--tarball", image("echo.tar"), "--io", "functionio"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, append(tc.args, "--warm", "0"))
			for _, r := range []struct{ name, body, field string }{{"config", config, "data"}, {"table", table, "spec"}} {
				req := krmRequest(t, "merge-key-"+r.name, "labels: {team: platform}\n")
				req.Desired.Resources[r.name] = &fnv1.Resource{Resource: yamlStruct(t, r.body)}
				rsp := s.call(t, req)
				if slices.ContainsFunc(rsp.GetResults(), func(res *fnv1.Result) bool { return res.GetSeverity() == fnv1.Severity_SEVERITY_FATAL }) {
					t.Errorf("%s: results %v, want no Fatal one", r.name, rsp.GetResults())
					continue
				}
				got := structField(rsp.GetDesired().GetResources()[r.name].GetResource(), r.field)
				if want := structField(yamlStruct(t, r.body), r.field); !proto.Equal(got, want) {
					t.Errorf("%s %s came back as %v, want %v", r.name, r.field, got, want)
				}
			}
		})
	}
}

// TestUnreadableAnswerKeepsTheFunctionsResults: a krm function whose
// ResourceList has an item that is no object, and a functionio function
// whose desired resources are no list, are refused with a Fatal result
// that quotes the results they printed too: often why they printed what
// they did.
func TestUnreadableAnswerKeepsTheFunctionsResults(t *testing.T) {
	for _, tc := range []struct {
		name, io, filter, want string
	}{
		{"krm", "krm", `.items += ["oops"] | .results = [{"message": "region not set", "severity": "warning"}, {"message": "no quota left", "severity": "error"}]`,
			`(the function's results; warning: region not set; fatal: no quota left)`},
		{"functionio", "functionio", `.desired.resources = "oops" | .results = [{"severity": "Warning", "message": "region not set"}, {"severity": "Fatal", "message": "no quota left"}]`,
			`(the function's results; warning: region not set; fatal: no quota left)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yq := configuredImage(t, "yq-function.tar", func(c *v1.Config) {
				c.Entrypoint = []string{"/bin/yq", tc.filter}
				c.Cmd = nil
			})
			s := startServer(t, []string{"--tarball", yq, "--io", tc.io, "--warm", "0"})
			rs := s.call(t, krmRequest(t, "unreadable-"+tc.name, "")).GetResults()
			if len(rs) != 1 || rs[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL || !strings.Contains(rs[0].GetMessage(), tc.want) {
				t.Fatalf("results %v, want one Fatal result quoting %s", rs, tc.want)
			}
		})
	}
}

// TestDeepUnreadableAnswerHoldsLittle: a krm function that prints 20 KB,
// an item that is no object beside lists nested 9,900 deep, is refused
// without the server's peak memory growing by 64 MiB (it grows by about
// 18): the search for an infinity to name wrote a path at every level,
// and the peak grew by 152 MiB, ten times what the server charges such
// output before decoding it.
func TestDeepUnreadableAnswerHoldsLittle(t *testing.T) {
	sh := configuredImage(t, "sh-function.tar", func(c *v1.Config) {
		c.Entrypoint = []string{"/bin/sh", "-c", `cat >/dev/null
printf 'apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- oops\n- {apiVersion: v1, kind: X, metadata: {name: a}, spec: '
yes '[' | head -n 9900 | tr -d '\n'
yes ']' | head -n 9900 | tr -d '\n'
printf '}\n'`}
		c.Cmd = nil
	})
	s := startServer(t, []string{"--tarball", sh, "--io", "krm", "--warm", "0"})
	before := peakRSS(t, s)
	rs := s.call(t, krmRequest(t, "deep", "")).GetResults()
	if len(rs) != 1 || !strings.Contains(rs[0].GetMessage(), "cannot unmarshal string into Go struct field resourceList.items") {
		t.Fatalf("results %v, want one Fatal result naming the item", rs)
	}
	grew := peakRSS(t, s) - before
	t.Logf("the server's peak RSS grew by %d MiB", grew>>20)
	if grew > 64<<20 {
		t.Errorf("the server's peak RSS grew by %d MiB", grew>>20)
	}
}

// TestKRMOlderKyamlResults: a validator built with kyaml's fn/framework
// before v0.13 prints its results as an object, {name, items: [...]}, with
// a field's suggestedValue, and exits 1. The script prints what one built
// with kyaml v0.10.21 printed for the bucket: its error result reaches
// Crossplane as the Fatal result, naming the resource and the field,
// rather than being dropped with the answer as an "unknown field items".
func TestKRMOlderKyamlResults(t *testing.T) {
	sh := configuredImage(t, "sh-function.tar", func(c *v1.Config) {
		c.Entrypoint = []string{"/bin/sh", "-c", `cat >/dev/null
cat <<'END'
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
  - apiVersion: s3.example.org/v1
    kind: Bucket
    metadata: {name: demo-bucket, annotations: {ocifn.io/composition-resource-name: bucket}}
results:
  name: validate-labels
  items:
    - message: label team is required
      severity: error
      resourceRef:
        apiVersion: s3.example.org/v1
        kind: Bucket
        name: demo-bucket
      field:
        path: metadata.labels.team
        suggestedValue: platform
END
exit 1`}
		c.Cmd = nil
	})
	s := startServer(t, []string{"--tarball", sh, "--io", "krm", "--warm", "0"})
	rs := s.call(t, krmRequest(t, "kyaml-v0.10", "")).GetResults()
	const want = `label team is required (resource s3.example.org/v1 Bucket demo-bucket (composition resource "bucket"); field metadata.labels.team, suggested value "platform")`
	if len(rs) != 1 || rs[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL || rs[0].GetMessage() != want {
		t.Fatalf("results %v, want one Fatal result %q", rs, want)
	}
}

// TestKRMStatusSetOnEveryRunStays: a yq function that sets the XR's
// status.endpoint on every run, called as Crossplane calls it on two
// reconciles, the second with the first's desired status in its observed
// XR. Crossplane applies the desired status under one field owner, so the
// second call's desired XR must hold status.endpoint too: without it, the
// field is removed, and set again on the third reconcile. Nothing of the
// observed status that no step desired is claimed.
func TestKRMStatusSetOnEveryRunStays(t *testing.T) {
	yq := configuredImage(t, "yq-function.tar", func(c *v1.Config) {
		c.Entrypoint = []string{"/bin/yq", `(.items[] | select(.kind=="XApp") | .status.endpoint) = "demo.example.org"`}
		c.Cmd = nil
	})
	s := startServer(t, []string{"--tarball", yq, "--io", "krm", "--warm", "0"})
	const xr = "apiVersion: example.org/v1\nkind: XApp\nmetadata: {name: demo}\nspec: {size: 2}\n"
	want := yamlStruct(t, "apiVersion: example.org/v1\nkind: XApp\nstatus: {endpoint: demo.example.org}\n")

	first := s.call(t, &fnv1.RunFunctionRequest{
		Meta:     &fnv1.RequestMeta{Tag: "first"},
		Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: yamlStruct(t, xr)}},
		Desired:  &fnv1.State{},
	})
	if !proto.Equal(first.GetDesired().GetComposite().GetResource(), want) || len(first.GetResults()) != 0 {
		t.Fatalf("first reconcile: desired XR %v, results %v; want %v and no results", first.GetDesired().GetComposite(), first.GetResults(), want)
	}

	second := s.call(t, &fnv1.RunFunctionRequest{
		Meta: &fnv1.RequestMeta{Tag: "second"},
		Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: yamlStruct(t, xr+
			"status: {endpoint: demo.example.org, conditions: [{type: Ready, status: \"True\", reason: Available}]}\n")}},
		Desired: &fnv1.State{},
	})
	if !proto.Equal(second.GetDesired().GetComposite().GetResource(), want) || len(second.GetResults()) != 0 {
		t.Errorf("second reconcile: desired XR %v, results %v; want %v and no results (Crossplane would remove status.endpoint)", second.GetDesired().GetComposite(), second.GetResults(), want)
	}
}

// TestKRMStatusAnEarlierStepDesiredIsKept: the XR item's status is what
// earlier steps desired, not the observed one: a status.phase an earlier
// step desired reaches the function and stays desired beside the
// status.endpoint the function sets again, though the observed XR already
// has both; a status field no step desired (stale) does not reach it (the
// function records the status keys it was sent in status.seen).
func TestKRMStatusAnEarlierStepDesiredIsKept(t *testing.T) {
	yq := configuredImage(t, "yq-function.tar", func(c *v1.Config) {
		c.Entrypoint = []string{"/bin/yq", `with(.items[] | select(.kind=="XApp"); (.status | keys | sort | join(",")) as $seen | .status.endpoint = "demo.example.org" | .status.seen = $seen)`}
		c.Cmd = nil
	})
	s := startServer(t, []string{"--tarball", yq, "--io", "krm", "--warm", "0"})
	rsp := s.call(t, &fnv1.RunFunctionRequest{
		Meta: &fnv1.RequestMeta{Tag: "kept"},
		Observed: &fnv1.State{Composite: &fnv1.Resource{Resource: yamlStruct(t,
			"apiVersion: example.org/v1\nkind: XApp\nmetadata: {name: demo}\nspec: {size: 2}\nstatus: {phase: Composing, endpoint: demo.example.org, stale: old}\n")}},
		Desired: &fnv1.State{Composite: &fnv1.Resource{Resource: yamlStruct(t, "apiVersion: example.org/v1\nkind: XApp\nstatus: {phase: Composing}\n")}},
	})
	want := yamlStruct(t, "apiVersion: example.org/v1\nkind: XApp\nstatus: {phase: Composing, endpoint: demo.example.org, seen: phase}\n")
	if !proto.Equal(rsp.GetDesired().GetComposite().GetResource(), want) || len(rsp.GetResults()) != 0 {
		t.Errorf("desired XR %v, results %v; want %v and no results", rsp.GetDesired().GetComposite(), rsp.GetResults(), want)
	}
}
