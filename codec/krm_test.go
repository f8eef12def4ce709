package codec

import (
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/google/go-cmp/cmp"
	yamlv3 "go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"
)

// krmRequest has an XR (observed, with a status an earlier step desired)
// and two desired composed resources, one of them ready.
func krmRequest(t *testing.T) *fnv1.RunFunctionRequest {
	return &fnv1.RunFunctionRequest{
		Meta:    &fnv1.RequestMeta{Tag: "k1"},
		Input:   obj(t, "apiVersion: fn.example.org/v1\nkind: Labels\nlabels: {team: a}\n"),
		Context: &structpb.Struct{Fields: map[string]*structpb.Value{"k": structpb.NewStringValue("v")}},
		Observed: &fnv1.State{
			Composite: &fnv1.Resource{Resource: obj(t, "apiVersion: example.org/v1\nkind: XApp\nmetadata: {name: xa, labels: {env: dev}}\nspec: {size: 2}\n")},
		},
		Desired: &fnv1.State{
			Composite: &fnv1.Resource{Resource: obj(t, "apiVersion: example.org/v1\nkind: XApp\nstatus: {phase: Pending}\n")},
			Resources: map[string]*fnv1.Resource{
				"bucket": {Resource: obj(t, "apiVersion: s3.example.org/v1\nkind: Bucket\nmetadata: {name: b1}\n"), Ready: fnv1.Ready_READY_TRUE},
				"queue":  {Resource: obj(t, "apiVersion: sqs.example.org/v1\nkind: Queue\n")},
			},
		},
	}
}

func TestKRMEncode(t *testing.T) {
	b, err := KRM{}.Encode(krmRequest(t))
	if err != nil {
		t.Fatal(err)
	}
	var got, want map[string]any
	if err := yaml.Unmarshal(b, &got); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, b)
	}
	if err := yaml.Unmarshal([]byte(`
apiVersion: config.kubernetes.io/v1
kind: ResourceList
functionConfig: {apiVersion: fn.example.org/v1, kind: Labels, labels: {team: a}}
items:
- apiVersion: example.org/v1
  kind: XApp
  metadata: {name: xa, labels: {env: dev}, annotations: {ocifn.io/composite: "true"}}
  spec: {size: 2}
  status: {phase: Pending}
- apiVersion: s3.example.org/v1
  kind: Bucket
  metadata: {name: b1, annotations: {ocifn.io/composition-resource-name: bucket}}
- apiVersion: sqs.example.org/v1
  kind: Queue
  metadata: {annotations: {ocifn.io/composition-resource-name: queue}}
`), &want); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ResourceList (-want +got):\n%s", d)
	}
}

// TestKRMEncodeSendsTheDesiredStatus: the XR item's status is what
// earlier steps desired, not the observed status, so that a function that
// sets a field the XR already has still desires it (TestKRMDecodeStatusSetAgain).
func TestKRMEncodeSendsTheDesiredStatus(t *testing.T) {
	req := krmRequest(t)
	req.Observed.Composite.Resource = obj(t, "apiVersion: example.org/v1\nkind: XApp\nmetadata: {name: xa}\nspec: {size: 2}\nstatus: {phase: Ready, endpoint: e.example.org}\n")
	xr, err := krmComposite(req)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "example.org/v1", "kind": "XApp",
		"metadata": map[string]any{"name": "xa", "annotations": map[string]any{AnnotationComposite: "true"}},
		"spec":     map[string]any{"size": 2.0},
		"status":   map[string]any{"phase": "Pending"},
	}
	if d := cmp.Diff(want, xr); d != "" {
		t.Errorf("XR item (-want +got):\n%s", d)
	}
}

// TestKRMDecodeStatusSetAgain: a status field the function sets to what the
// observed XR already holds is desired: Crossplane would remove a status
// field the desired XR leaves out.
func TestKRMDecodeStatusSetAgain(t *testing.T) {
	req := krmRequest(t)
	req.Observed.Composite.Resource = obj(t, "apiVersion: example.org/v1\nkind: XApp\nmetadata: {name: xa}\nstatus: {endpoint: e.example.org}\n")
	rsp, err := KRM{}.Decode(req, []byte(`
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- {apiVersion: example.org/v1, kind: XApp, metadata: {name: xa, annotations: {ocifn.io/composite: "true"}}, status: {phase: Pending, endpoint: e.example.org}}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := obj(t, "apiVersion: example.org/v1\nkind: XApp\nstatus: {phase: Pending, endpoint: e.example.org}\n")
	if d := cmp.Diff(want, rsp.Desired.Composite.Resource, protocmp.Transform()); d != "" {
		t.Errorf("desired XR (-want +got):\n%s", d)
	}
}

func TestKRMEncodeWithoutComposite(t *testing.T) {
	req := krmRequest(t)
	req.Observed.Composite, req.Desired.Composite, req.Input = nil, nil, nil
	b, err := KRM{}.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), AnnotationComposite) || strings.Contains(string(b), "functionConfig") {
		t.Errorf("an XR item or a functionConfig for a call that has neither:\n%s", b)
	}
}

func TestKRMDecode(t *testing.T) {
	cases := map[string]struct {
		out     string
		want    *fnv1.State
		results []*fnv1.Result
	}{
		"round_trip_changes_nothing": {
			out: `
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: example.org/v1
  kind: XApp
  metadata: {name: xa, labels: {env: dev}, annotations: {ocifn.io/composite: "true", config.kubernetes.io/index: "0", internal.config.kubernetes.io/index: "0"}}
  spec: {size: 2}
  status: {phase: Pending}
- apiVersion: s3.example.org/v1
  kind: Bucket
  metadata: {name: b1, annotations: {ocifn.io/composition-resource-name: bucket, config.kubernetes.io/index: "1"}}
- apiVersion: sqs.example.org/v1
  kind: Queue
  metadata: {annotations: {ocifn.io/composition-resource-name: queue}}
`,
			want: krmRequest(t).Desired,
		},
		"labels_added_everywhere": {
			out: `
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: example.org/v1
  kind: XApp
  metadata: {name: xa, labels: {env: dev, team: a}, annotations: {ocifn.io/composite: "true"}}
  spec: {size: 2}
  status: {phase: Pending}
- apiVersion: s3.example.org/v1
  kind: Bucket
  metadata: {name: b1, labels: {team: a}, annotations: {ocifn.io/composition-resource-name: bucket}}
- apiVersion: sqs.example.org/v1
  kind: Queue
  metadata: {labels: {team: a}, annotations: {ocifn.io/composition-resource-name: queue}}
`,
			want: &fnv1.State{
				Composite: &fnv1.Resource{Resource: obj(t, "apiVersion: example.org/v1\nkind: XApp\nmetadata: {labels: {team: a}}\nstatus: {phase: Pending}\n")},
				Resources: map[string]*fnv1.Resource{
					"bucket": {Resource: obj(t, "apiVersion: s3.example.org/v1\nkind: Bucket\nmetadata: {name: b1, labels: {team: a}}\n"), Ready: fnv1.Ready_READY_TRUE},
					"queue":  {Resource: obj(t, "apiVersion: sqs.example.org/v1\nkind: Queue\nmetadata: {labels: {team: a}}\n")},
				},
			},
		},
		"dropped_item_is_no_longer_desired_and_new_items_get_names": {
			out: `
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: s3.example.org/v1
  kind: Bucket
  metadata: {name: b1, annotations: {ocifn.io/composition-resource-name: bucket}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: Settings_1}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: settings-1, namespace: other}}
- {apiVersion: v1, kind: ConfigMap, metadata: {name: a, annotations: {ocifn.io/composition-resource-name: configmap-settings-1}}}
`,
			want: &fnv1.State{
				Composite: krmRequest(t).Desired.Composite,
				Resources: map[string]*fnv1.Resource{
					"bucket":                 {Resource: obj(t, "apiVersion: s3.example.org/v1\nkind: Bucket\nmetadata: {name: b1}\n"), Ready: fnv1.Ready_READY_TRUE},
					"configmap-settings-1":   {Resource: obj(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")},
					"configmap-settings-1-2": {Resource: obj(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Settings_1}\n")},
					"configmap-settings-1-3": {Resource: obj(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings-1, namespace: other}\n")},
				},
			},
		},
		"results_map_with_where_they_point": {
			out: `
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: s3.example.org/v1
  kind: Bucket
  metadata: {name: b1, annotations: {ocifn.io/composition-resource-name: bucket}}
results:
- message: bucket is public
  severity: error
  resourceRef: {apiVersion: s3.example.org/v1, kind: Bucket, name: b1}
  field: {path: spec.acl, currentValue: public-read, proposedValue: private}
- {message: size is large, severity: warning, resourceRef: {apiVersion: v1, kind: ConfigMap, name: c, namespace: ns}}
- {message: checked 1 resource, severity: info, file: {path: a.yaml, index: 2}, tags: {b: "2", a: "1"}}
- {message: no severity}
`,
			want: &fnv1.State{
				Composite: krmRequest(t).Desired.Composite,
				Resources: map[string]*fnv1.Resource{
					"bucket": {Resource: obj(t, "apiVersion: s3.example.org/v1\nkind: Bucket\nmetadata: {name: b1}\n"), Ready: fnv1.Ready_READY_TRUE},
				},
			},
			results: []*fnv1.Result{
				{Severity: fnv1.Severity_SEVERITY_FATAL, Message: `bucket is public (resource s3.example.org/v1 Bucket b1 (composition resource "bucket"); field spec.acl, current value "public-read", proposed value "private")`},
				{Severity: fnv1.Severity_SEVERITY_WARNING, Message: `size is large (resource v1 ConfigMap ns/c)`},
				{Severity: fnv1.Severity_SEVERITY_NORMAL, Message: `checked 1 resource (file a.yaml index 2; tags a=1,b=2)`},
				{Severity: fnv1.Severity_SEVERITY_WARNING, Message: `no severity`},
			},
		},
		"legacy_results_object_and_v1beta1": {
			out: `
apiVersion: config.kubernetes.io/v1beta1
kind: ResourceList
items: []
results:
  name: old
  results:
  - {message: hello, severity: info}
`,
			want:    &fnv1.State{Composite: krmRequest(t).Desired.Composite, Resources: map[string]*fnv1.Resource{}},
			results: []*fnv1.Result{{Severity: fnv1.Severity_SEVERITY_NORMAL, Message: "hello"}},
		},
		// What kyaml's framework before v0.13 prints (v0.10.21's
		// framework.Result): the object's list is items, and a field's
		// proposed value is its suggestedValue.
		"kyaml_v0_10_results_object": {
			out: `
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
  - apiVersion: s3.example.org/v1
    kind: Bucket
    metadata: {name: b1, annotations: {ocifn.io/composition-resource-name: bucket}}
results:
  name: validate-labels
  items:
    - message: label team is required
      severity: error
      resourceRef:
        apiVersion: s3.example.org/v1
        kind: Bucket
        name: b1
      field:
        path: metadata.labels.team
        suggestedValue: platform
    - message: checked 1 resource
      severity: info
      file: {path: a.yaml, index: 2}
`,
			want: &fnv1.State{
				Composite: krmRequest(t).Desired.Composite,
				Resources: map[string]*fnv1.Resource{
					"bucket": {Resource: obj(t, "apiVersion: s3.example.org/v1\nkind: Bucket\nmetadata: {name: b1}\n"), Ready: fnv1.Ready_READY_TRUE},
				},
			},
			results: []*fnv1.Result{
				{Severity: fnv1.Severity_SEVERITY_FATAL, Message: `label team is required (resource s3.example.org/v1 Bucket b1 (composition resource "bucket"); field metadata.labels.team, suggested value "platform")`},
				{Severity: fnv1.Severity_SEVERITY_NORMAL, Message: `checked 1 resource (file a.yaml index 2)`},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rsp, err := KRM{}.Decode(krmRequest(t), []byte(tc.out))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, rsp.Desired, protocmp.Transform()); d != "" {
				t.Errorf("desired (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.results, rsp.Results, protocmp.Transform()); d != "" {
				t.Errorf("results (-want +got):\n%s", d)
			}
			if rsp.GetMeta().GetTag() != "k1" || rsp.GetContext().GetFields()["k"].GetStringValue() != "v" {
				t.Errorf("tag %q and context %v, want the request's", rsp.GetMeta().GetTag(), rsp.GetContext())
			}
		})
	}
}

func TestKRMDecodeRemovedXRFieldWarns(t *testing.T) {
	rsp, err := KRM{}.Decode(krmRequest(t), []byte(`
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- {apiVersion: example.org/v1, kind: XApp, metadata: {name: xa, annotations: {ocifn.io/composite: "true"}}, spec: {size: 3}}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := obj(t, "apiVersion: example.org/v1\nkind: XApp\nspec: {size: 3}\nstatus: {phase: Pending}\n")
	if d := cmp.Diff(want, rsp.Desired.Composite.Resource, protocmp.Transform()); d != "" {
		t.Errorf("desired XR (-want +got):\n%s", d)
	}
	if len(rsp.Results) != 1 || !strings.Contains(rsp.Results[0].Message, "removed metadata.labels, status from the composite resource") {
		t.Errorf("results %v, want one Warning naming metadata.labels and status", rsp.Results)
	}
}

func TestKRMDecodeErrors(t *testing.T) {
	cases := map[string]struct {
		out  string
		want string
	}{
		"empty":         {"", "in the krm I/O mode it must print a ResourceList"},
		"not_a_list":    {"apiVersion: v1\nkind: ConfigMap\n", `is "v1" "ConfigMap", not a ResourceList`},
		"unknown_field": {"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitemz: []\n", `unknown field "itemz"`},
		"unknown_field_deep": {"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nresults: [{message: a, severity: info}, {message: b, sevrity: error}]\n",
			`unknown field "sevrity" at results[1]; did you mean "severity"?`},
		"bad_severity": {"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nresults: [{message: m, severity: fatal}]\n", `results[0]: unknown severity "fatal" (want error, warning or info)`},
		"bad_severity_keeps_the_others": {"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nresults: [{message: found a problem, severity: error}, {message: m, severity: critical}]\n",
			`results[1]: unknown severity "critical" (want error, warning or info) (the function's other results; fatal: found a problem)`},
		"item_not_an_object_keeps_the_results": {"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [oops]\nresults: [{message: region not set, severity: warning}, {message: no quota left, severity: error}]\n",
			`cannot unmarshal string into Go struct field resourceList.items of type map[string]interface {}; output began with "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [oops]\nresults: [{message: region not set, severity: warning}, {message: no quota left, severity: error}]\n" (the function's results; warning: region not set; fatal: no quota left)`},
		"older_results_keep_them": {"apiVersion: config.kubernetes.io/v1beta1\nkind: ResourceList\nitems: [[]]\nresults: {name: v, results: [{message: no quota left, severity: error}]}\n",
			`(the function's results; fatal: no quota left)`},
		"kyaml_v0_10_results_keep_them": {"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [[]]\nresults: {name: v, items: [{message: no quota left, severity: error}]}\n",
			`(the function's results; fatal: no quota left)`},
		"unknown_field_keeps_the_results": {"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitemz: []\nresults: [{message: no quota left, severity: error}]\n",
			`unknown field "itemz" at the top level; did you mean "items"? (the function's results; fatal: no quota left)`},
		"infinity_keeps_the_results": {"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [{apiVersion: v1, kind: ConfigMap, metadata: {name: a}, data: {x: .inf}}]\nresults: [{message: no quota left, severity: error}]\n",
			`items[0].data.x is .inf, and JSON, so Crossplane, has no infinity or NaN; print a finite number or a string (the function's results; fatal: no quota left)`},
		"unreadable_result_keeps_the_others": {"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nresults: [{message: no quota left, severity: error}, {message: b, sevrity: error}, {message: c, severity: critical}, {message: d, severity: info}]\n",
			`unknown field "sevrity" at results[1]; did you mean "severity"? (the function's other results; fatal: no quota left; normal: d)`},
		"unnamed_no_name": {"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [{kind: ConfigMap}]\n", "items[0] has no ocifn.io/composition-resource-name annotation and no kind and metadata.name"},
		"name_twice":      {"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [{kind: A, metadata: {annotations: {ocifn.io/composition-resource-name: x}}}, {kind: B, metadata: {annotations: {ocifn.io/composition-resource-name: x}}}]\n", "items[1]: a second item is annotated ocifn.io/composition-resource-name: x"},
		"name_twice_keeps_the_results": {"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [{apiVersion: v1, kind: A, metadata: {name: a, annotations: {ocifn.io/composition-resource-name: x}}}, {kind: B, metadata: {annotations: {ocifn.io/composition-resource-name: x}}}]\nresults: [{message: copied, severity: warning, resourceRef: {apiVersion: v1, kind: A, name: a}}]\n",
			`items[1]: a second item is annotated ocifn.io/composition-resource-name: x (the function's results; warning: copied (resource v1 A a (composition resource "x")))`},
		"two_xrs":           {"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [{kind: A, metadata: {annotations: {ocifn.io/composite: 'true'}}}, {kind: A, metadata: {annotations: {ocifn.io/composite: 'true'}}}]\n", "items[1]: a second item is annotated ocifn.io/composite"},
		"xr_and_a_copy":     {"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [{apiVersion: example.org/v1, kind: XApp, metadata: {name: xa, annotations: {ocifn.io/composite: 'true'}}}, {apiVersion: example.org/v1, kind: XApp, metadata: {name: xa}}]\n", "items[1]: a second item is the composite resource (its apiVersion, kind and name)"},
		"json_mode":         {`{"meta":{"tag":"k1"},"desired":{"resources":{}}}`, "run it with --io json"},
		"functionio_mode":   {"desired:\n  composite:\n    resource: {kind: X}\n  resources:\n  - name: a\n    resource: {kind: Y}\n", "run it with --io functionio"},
		"functionio_as_krm": {"observed: {composite: {resource: {}}}\ndesired: {resources: []}\n", "FunctionIO document"},
		"infinity": {"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [{apiVersion: v1, kind: ConfigMap, metadata: {name: a}}, {apiVersion: v1, kind: ConfigMap, metadata: {name: b, annotations: {example.org/x: y}}, spec: {y: 1, x: -.inf}}]\n",
			"items[1].spec.x is -.inf, and JSON, so Crossplane, has no infinity or NaN"},
		"nan_in_a_key_with_periods": {"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: [{apiVersion: v1, kind: ConfigMap, metadata: {name: a}, data: {a.b: .NaN}}]\n",
			"items[0].data[a.b] is .NaN, and JSON"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := KRM{}.Decode(krmRequest(t), []byte(tc.out))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestKRMDecodeFailure(t *testing.T) {
	var fd FailureDecoder = KRM{}
	rsp, err := fd.DecodeFailure(krmRequest(t), []byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nresults: [{message: bad, severity: error}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []*fnv1.Result{{Severity: fnv1.Severity_SEVERITY_FATAL, Message: "bad"}}
	if d := cmp.Diff(want, rsp.Results, protocmp.Transform()); d != "" {
		t.Errorf("results (-want +got):\n%s", d)
	}
	if _, err := fd.DecodeFailure(krmRequest(t), nil); err == nil || !strings.Contains(err.Error(), "printed nothing") {
		t.Errorf("no output: error %v, want one saying the function printed nothing", err)
	}
}

func TestKRMEncodeRefusesMetadataThatIsNotAnObject(t *testing.T) {
	req := krmRequest(t)
	req.Desired.Resources["queue"].Resource = obj(t, "kind: Queue\nmetadata: oops\n")
	if _, err := (KRM{}).Encode(req); err == nil || !strings.Contains(err.Error(), `desired resource "queue": metadata is not an object`) {
		t.Errorf("error %v, want one naming the queue's metadata", err)
	}
}

// TestKRMMessageKeepsFieldsWithoutAPath: a result's field or file without
// a path still says what the function printed of it.
func TestKRMMessageKeepsFieldsWithoutAPath(t *testing.T) {
	for _, c := range []struct {
		r    krmResult
		want string
	}{
		{krmResult{Message: "m", Field: &krmField{CurrentValue: "a", ProposedValue: "b"}}, `m (field, current value "a", proposed value "b")`},
		{krmResult{Message: "m", File: &krmFile{Index: 2}}, "m (file index 2)"},
		{krmResult{Message: "m", Field: &krmField{}, File: &krmFile{}}, "m"},
		{krmResult{Message: "m", Field: &krmField{Path: "spec.a"}, File: &krmFile{Path: "f.yaml"}}, "m (field spec.a; file f.yaml index 0)"},
	} {
		if got := krmMessage(c.r, nil, nil); got != c.want {
			t.Errorf("%+v: %q, want %q", c.r, got, c.want)
		}
	}
}

// TestKRMRoundTripKeepsNEL: a string holding a NEL (U+0085), a line break
// to YAML 1.1 that JSON leaves unescaped, reaches the function as it is
// (kyaml reads it with go.yaml.in/yaml/v3), and an answer that printed the
// ResourceList back unchanged changes nothing, the XR included.
func TestKRMRoundTripKeepsNEL(t *testing.T) {
	const s = "a\u0085b\u0085\u0085c\u0085"
	req := krmRequest(t)
	req.Observed.Composite.Resource.Fields["spec"].GetStructValue().Fields["note"] = structpb.NewStringValue(s)
	req.Desired.Resources["queue"].Resource.Fields["spec"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"note": structpb.NewStringValue(s)}})
	b, err := KRM{}.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	var sent struct {
		Items []struct {
			Spec struct {
				Note string `yaml:"note"`
			} `yaml:"spec"`
		} `yaml:"items"`
	}
	if err := yamlv3.Unmarshal(b, &sent); err != nil {
		t.Fatal(err)
	}
	for i, item := range sent.Items {
		if i != 1 && item.Spec.Note != s { // items[1] is the bucket, without a note
			t.Errorf("items[%d].spec.note reaches the function as %q, want %q:\n%s", i, item.Spec.Note, s, b)
		}
	}
	rsp, err := KRM{}.Decode(req, b)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(req.Desired, rsp.Desired, protocmp.Transform()); d != "" {
		t.Errorf("desired state after a function that changed nothing (-want +got):\n%s", d)
	}
	if len(rsp.Results) != 0 {
		t.Errorf("results %v, want none", rsp.Results)
	}
}

// TestKRMDecodeReadsYAML12Booleans: the ResourceList is read as kyaml (and
// yq, which KRM functions in shell use) reads it, by YAML 1.2, where only
// true and false are booleans: a plain on, off, yes, no, y or n, which
// YAML 1.1 reads as a boolean, is a string, as a value and as a key.
func TestKRMDecodeReadsYAML12Booleans(t *testing.T) {
	rsp, err := KRM{}.Decode(krmRequest(t), []byte(`apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: s3.example.org/v1
  kind: Bucket
  metadata: {name: b1, annotations: {ocifn.io/composition-resource-name: bucket}}
  spec:
    versioning: on
    public: no   # a comment
    flags: [yes, Off,N]
    modes: {y: 1, n: YES}
    on: 2
    y:
      Y: [off]
    enabled: true
    disabled: False
    quoted: "on"
    text: |
      on
    sentence: no region set
    anchored: &a # the scalar follows on the next line
      off
    again: *a
results:
- message: no
  severity: info
`))
	if err != nil {
		t.Fatal(err)
	}
	want := obj(t, `apiVersion: s3.example.org/v1
kind: Bucket
metadata: {name: b1}
spec:
  versioning: "on"
  public: "no"
  flags: ["yes", "Off", "N"]
  modes: {"y": 1, "n": "YES"}
  "on": 2
  "y":
    "Y": ["off"]
  enabled: true
  disabled: false
  quoted: "on"
  text: "on\n"
  sentence: no region set
  anchored: "off"
  again: "off"
`)
	if d := cmp.Diff(want, rsp.Desired.Resources["bucket"].GetResource(), protocmp.Transform()); d != "" {
		t.Errorf("bucket (-want +got):\n%s", d)
	}
	if len(rsp.Results) != 1 || rsp.Results[0].Message != "no" {
		t.Errorf("results %v, want one with the message \"no\"", rsp.Results)
	}
}

// TestKRMDecodeReadsYAML12BooleansAlone: a plain on, off, y or n is read
// as the string it is to YAML 1.2 when it is the only one in the output,
// wherever YAML lets a plain scalar begin and end.
func TestKRMDecodeReadsYAML12BooleansAlone(t *testing.T) {
	for name, c := range map[string]struct{ spec, want string }{
		"after a quoted key's colon": {`{"versioning":on}`, `{versioning: "on"}`},
		"after a single-quoted key":  {`{'versioning':off}`, `{versioning: "off"}`},
		"in a flow sequence's value": {`{"modes":[y]}`, `{modes: ["y"]}`},
		"before a NEL":               {"{a: n\u0085}", `{a: "n"}`},
		"before and after a LS":      {"\u2028    on: 1\u2028", `{"on": 1}`},
		"before a PS in a block":     {"\n    versioning: on\u2029", `{versioning: "on"}`},
	} {
		t.Run(name, func(t *testing.T) {
			doc := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: s3.example.org/v1\n  kind: Bucket\n  metadata: {name: b1, annotations: {ocifn.io/composition-resource-name: bucket}}\n  spec: " + c.spec + "\n"
			rsp, err := KRM{}.Decode(krmRequest(t), []byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			want := obj(t, "apiVersion: s3.example.org/v1\nkind: Bucket\nmetadata: {name: b1}\nspec: "+c.want+"\n")
			if d := cmp.Diff(want, rsp.Desired.Resources["bucket"].GetResource(), protocmp.Transform()); d != "" {
				t.Errorf("%q: bucket (-want +got):\n%s", doc, d)
			}
		})
	}
}

// TestKRMDecodeXRWithoutItsAnnotation: an XR item whose annotations the
// function replaced, ocifn's with them, is still the XR (it has the XR's
// apiVersion, kind and name), not a new composed resource of the XR's
// kind.
func TestKRMDecodeXRWithoutItsAnnotation(t *testing.T) {
	rsp, err := KRM{}.Decode(krmRequest(t), []byte(`
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: example.org/v1
  kind: XApp
  metadata: {name: xa, labels: {env: dev}, annotations: {team: a}}
  spec: {size: 2}
  status: {phase: Pending}
- apiVersion: s3.example.org/v1
  kind: Bucket
  metadata: {name: b1, annotations: {ocifn.io/composition-resource-name: bucket}}
- apiVersion: sqs.example.org/v1
  kind: Queue
  metadata: {annotations: {ocifn.io/composition-resource-name: queue}}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := &fnv1.State{
		Composite: &fnv1.Resource{Resource: obj(t, "apiVersion: example.org/v1\nkind: XApp\nmetadata: {annotations: {team: a}}\nstatus: {phase: Pending}\n")},
		Resources: krmRequest(t).Desired.Resources,
	}
	if d := cmp.Diff(want, rsp.Desired, protocmp.Transform()); d != "" {
		t.Errorf("desired (-want +got):\n%s", d)
	}
}

// TestKRMDecodeResourceWithoutItsAnnotation: a composed item whose
// annotations the function replaced, ocifn's with them, is still the
// desired resource of the request with its apiVersion, kind and name, not
// a new one beside it (which would delete the old).
func TestKRMDecodeResourceWithoutItsAnnotation(t *testing.T) {
	rsp, err := KRM{}.Decode(krmRequest(t), []byte(`
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: v1
  kind: Bucket
  metadata: {name: b1}
- apiVersion: s3.example.org/v1
  kind: Bucket
  metadata: {name: b1, annotations: {team: a}}
- apiVersion: sqs.example.org/v1
  kind: Queue
  metadata: {annotations: {ocifn.io/composition-resource-name: queue}}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := &fnv1.State{
		Composite: krmRequest(t).Desired.Composite,
		Resources: map[string]*fnv1.Resource{
			"bucket":    {Resource: obj(t, "apiVersion: s3.example.org/v1\nkind: Bucket\nmetadata: {name: b1, annotations: {team: a}}\n"), Ready: fnv1.Ready_READY_TRUE},
			"bucket-b1": {Resource: obj(t, "apiVersion: v1\nkind: Bucket\nmetadata: {name: b1}\n")},
			"queue":     krmRequest(t).Desired.Resources["queue"],
		},
	}
	if d := cmp.Diff(want, rsp.Desired, protocmp.Transform()); d != "" {
		t.Errorf("desired (-want +got):\n%s", d)
	}
}

// TestKRMDecodeLocalConfig: an item the function annotates
// config.kubernetes.io/local-config: "true", which kpt and kustomize never
// apply, is not composed, and a result says so: a Warning when it was a
// desired resource (now deleted), a Normal result for a new one. A desired
// resource an earlier step had marked so is passed on as it was.
func TestKRMDecodeLocalConfig(t *testing.T) {
	req := krmRequest(t)
	req.Desired.Resources["topic"] = &fnv1.Resource{Resource: obj(t, "apiVersion: sns.example.org/v1\nkind: Topic\nmetadata: {name: t1, annotations: {config.kubernetes.io/local-config: 'true'}}\n")}
	rsp, err := KRM{}.Decode(req, []byte(`
apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: s3.example.org/v1
  kind: Bucket
  metadata: {name: b1, annotations: {ocifn.io/composition-resource-name: bucket, config.kubernetes.io/local-config: "true"}}
- apiVersion: sqs.example.org/v1
  kind: Queue
  metadata: {annotations: {ocifn.io/composition-resource-name: queue, config.kubernetes.io/local-config: "false"}}
- apiVersion: sns.example.org/v1
  kind: Topic
  metadata: {name: t1, annotations: {ocifn.io/composition-resource-name: topic, config.kubernetes.io/local-config: "true"}}
- apiVersion: v1
  kind: ConfigMap
  metadata: {name: settings, annotations: {config.kubernetes.io/local-config: "true"}}
  data: {region: eu}
`))
	if err != nil {
		t.Fatal(err)
	}
	res := rsp.GetDesired().GetResources()
	if len(res) != 2 || res["queue"] == nil || res["topic"] == nil {
		t.Errorf("desired resources %v, want queue and topic alone", res)
	}
	want := []*fnv1.Result{
		{Severity: fnv1.Severity_SEVERITY_WARNING, Message: `items[0] (Bucket b1) is annotated config.kubernetes.io/local-config: "true", which kpt and kustomize never apply, so it is not composed; the composed resource "bucket" is no longer desired, so Crossplane deletes it`},
		{Severity: fnv1.Severity_SEVERITY_NORMAL, Message: `items[3] (ConfigMap settings) is annotated config.kubernetes.io/local-config: "true", which kpt and kustomize never apply, so it is not composed`},
	}
	if d := cmp.Diff(want, rsp.GetResults(), protocmp.Transform()); d != "" {
		t.Errorf("results (-want +got):\n%s", d)
	}
}
