package codec

import (
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"
)

// obj parses a YAML object into a Struct, for building requests.
func obj(t *testing.T, y string) *structpb.Struct {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal([]byte(y), &m); err != nil {
		t.Fatalf("bad test YAML: %v", err)
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatalf("bad test object: %v", err)
	}
	return s
}

// fioRequest is a request with an XR, one observed bucket that is ready and
// has connection details, and the bucket desired.
func fioRequest(t *testing.T) *fnv1.RunFunctionRequest {
	return &fnv1.RunFunctionRequest{
		Meta:  &fnv1.RequestMeta{Tag: "t1"},
		Input: obj(t, "apiVersion: example.org/v1\nkind: Config\nregion: eu\n"),
		Observed: &fnv1.State{
			Composite: &fnv1.Resource{
				Resource:          obj(t, "apiVersion: example.org/v1\nkind: XBucket\nmetadata: {name: xb}\n"),
				ConnectionDetails: map[string][]byte{"old": []byte("o")},
			},
			Resources: map[string]*fnv1.Resource{
				"bucket": {
					Resource: obj(t, `
apiVersion: s3.example.org/v1
kind: Bucket
metadata: {name: b1}
status:
  phase: Available
  replicas: 3
  endpoint: {host: h.example, port: 443}
  conditions:
  - {type: Ready, status: "True"}
  - {type: Synced, status: "False"}
`),
					ConnectionDetails: map[string][]byte{"password": []byte("s3cr3t"), "user": []byte("admin")},
				},
			},
		},
		Desired: &fnv1.State{
			Composite: &fnv1.Resource{Resource: obj(t, "apiVersion: example.org/v1\nkind: XBucket\nmetadata: {name: xb}\n")},
			Resources: map[string]*fnv1.Resource{
				"bucket": {Resource: obj(t, "apiVersion: s3.example.org/v1\nkind: Bucket\n")},
			},
		},
	}
}

func TestFunctionIOEncode(t *testing.T) {
	b, err := FunctionIO{}.Encode(fioRequest(t))
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := yaml.Unmarshal(b, &got); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, b)
	}
	var want map[string]any
	if err := yaml.Unmarshal([]byte(`
config: {apiVersion: example.org/v1, kind: Config, region: eu}
observed:
  composite:
    resource: {apiVersion: example.org/v1, kind: XBucket, metadata: {name: xb}}
    connectionDetails: [{name: old, value: o}]
  resources:
  - name: bucket
    resource:
      apiVersion: s3.example.org/v1
      kind: Bucket
      metadata: {name: b1}
      status:
        phase: Available
        replicas: 3
        endpoint: {host: h.example, port: 443}
        conditions:
        - {type: Ready, status: "True"}
        - {type: Synced, status: "False"}
    connectionDetails: [{name: password, value: s3cr3t}, {name: user, value: admin}]
desired:
  composite:
    resource: {apiVersion: example.org/v1, kind: XBucket, metadata: {name: xb}}
    connectionDetails: []
  resources:
  - name: bucket
    resource: {apiVersion: s3.example.org/v1, kind: Bucket}
`), &want); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("FunctionIO document (-want +got):\n%s", d)
	}
	if strings.Contains(string(b), "apiVersion: apiextensions") || strings.Contains(string(b), "kind: FunctionIO") {
		t.Errorf("the document has an apiVersion or kind, which 1.13 did not send:\n%s", b)
	}
}

// TestFunctionIOEncodeFirstStep: a pipeline's first step, whose desired
// state Crossplane starts empty, reads the XR as null in desired, not the
// observed one 1.13 put there; echoed back, no XR is desired, so the
// observed object is never applied as the XR's desired state.
func TestFunctionIOEncodeFirstStep(t *testing.T) {
	req := fioRequest(t)
	req.Desired = &fnv1.State{}
	b, err := FunctionIO{}.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Desired struct {
			Composite map[string]any `json:"composite"`
		} `json:"desired"`
	}
	if err := yaml.Unmarshal(b, &got); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, b)
	}
	if r, ok := got.Desired.Composite["resource"]; !ok || r != nil {
		t.Errorf("desired.composite.resource: %v (present: %v), want null\n%s", r, ok, b)
	}
	rsp, err := FunctionIO{}.Decode(req, b)
	if err != nil {
		t.Fatal(err)
	}
	if xr := rsp.GetDesired().GetComposite(); xr.GetResource() != nil || len(xr.GetConnectionDetails()) > 0 {
		t.Errorf("an echoed first step desires the XR %v, want none", xr)
	}
}

// fioOutput is a function's output: the XR, the bucket with the given
// readiness checks and connection details, and a new queue resource.
func fioOutput(bucketExtra string) string {
	return `
desired:
  composite:
    resource: {apiVersion: example.org/v1, kind: XBucket, metadata: {name: xb}, status: {x: 1}}
    connectionDetails: []
  resources:
  - name: bucket
    resource: {apiVersion: s3.example.org/v1, kind: Bucket, spec: {size: 2}}
` + bucketExtra + `
observed:
  composite:
    resource: {apiVersion: example.org/v1, kind: XBucket}
`
}

func TestFunctionIODecodeReadiness(t *testing.T) {
	cases := map[string]struct {
		checks string
		want   fnv1.Ready
		err    string
	}{
		"no_checks_ready_condition_true":  {"", fnv1.Ready_READY_TRUE, ""},
		"match_string_matches":            {"[{type: MatchString, fieldPath: status.phase, matchString: Available}]", fnv1.Ready_READY_TRUE, ""},
		"match_string_differs":            {"[{type: MatchString, fieldPath: status.phase, matchString: Pending}]", fnv1.Ready_READY_FALSE, ""},
		"match_string_missing_field":      {"[{type: MatchString, fieldPath: status.nope, matchString: x}]", fnv1.Ready_READY_FALSE, ""},
		"match_integer_matches":           {"[{type: MatchInteger, fieldPath: status.replicas, matchInteger: 3}]", fnv1.Ready_READY_TRUE, ""},
		"match_integer_differs":           {"[{type: MatchInteger, fieldPath: status.replicas, matchInteger: 4}]", fnv1.Ready_READY_FALSE, ""},
		"non_empty_present":               {"[{type: NonEmpty, fieldPath: status.endpoint.host}]", fnv1.Ready_READY_TRUE, ""},
		"non_empty_absent":                {"[{type: NonEmpty, fieldPath: status.endpoint.path}]", fnv1.Ready_READY_FALSE, ""},
		"match_condition_true":            {"[{type: MatchCondition, matchCondition: {type: Ready, status: 'True'}}]", fnv1.Ready_READY_TRUE, ""},
		"match_condition_false":           {"[{type: MatchCondition, matchCondition: {type: Synced, status: 'True'}}]", fnv1.Ready_READY_FALSE, ""},
		"match_condition_absent_unknown":  {"[{type: MatchCondition, matchCondition: {type: Healthy, status: Unknown}}]", fnv1.Ready_READY_TRUE, ""},
		"none":                            {"[{type: None}]", fnv1.Ready_READY_TRUE, ""},
		"all_must_pass":                   {"[{type: None}, {type: MatchString, fieldPath: status.phase, matchString: Pending}]", fnv1.Ready_READY_FALSE, ""},
		"unknown_type_is_an_error":        {"[{type: Sometimes}]", 0, `desired.resources[0] (bucket): readinessChecks[0]: unknown type "Sometimes"`},
		"match_string_without_string":     {"[{type: MatchString, fieldPath: status.phase}]", 0, `readinessChecks[0]: type "MatchString" requires matchString`},
		"non_empty_without_path":          {"[{type: NonEmpty}]", 0, `type "NonEmpty" requires fieldPath`},
		"match_integer_not_an_integer":    {"[{type: MatchInteger, fieldPath: status.phase, matchInteger: 1}]", 0, `status.phase: a string, not an integer`},
		"match_condition_without_details": {"[{type: MatchCondition}]", 0, `requires matchCondition`},
		"invalid_field_path":              {"[{type: NonEmpty, fieldPath: 'status..phase'}]", 0, `readinessChecks[0]: invalid field path "status..phase": unexpected '.' at position 7`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			extra := ""
			if tc.checks != "" {
				extra = "    readinessChecks: " + tc.checks
			}
			rsp, err := FunctionIO{}.Decode(fioRequest(t), []byte(fioOutput(extra)))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := rsp.GetDesired().GetResources()["bucket"].GetReady(); got != tc.want {
				t.Errorf("ready = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFunctionIODecodeReadinessOfUnobservedResource(t *testing.T) {
	req := fioRequest(t)
	delete(req.Observed.Resources, "bucket")
	rsp, err := FunctionIO{}.Decode(req, []byte(fioOutput("    readinessChecks: [{type: None}]")))
	if err != nil {
		t.Fatal(err)
	}
	if got := rsp.Desired.Resources["bucket"].GetReady(); got != fnv1.Ready_READY_FALSE {
		t.Errorf("a resource that does not exist yet: ready = %v, want READY_FALSE", got)
	}
}

func TestFunctionIODecodeKeepsAnEarlierStepsReadiness(t *testing.T) {
	req := fioRequest(t)
	req.Observed.Resources["bucket"].Resource = obj(t, "kind: Bucket\n")
	req.Desired.Resources["bucket"].Ready = fnv1.Ready_READY_TRUE
	rsp, err := FunctionIO{}.Decode(req, []byte(fioOutput("")))
	if err != nil {
		t.Fatal(err)
	}
	if got := rsp.Desired.Resources["bucket"].GetReady(); got != fnv1.Ready_READY_TRUE {
		t.Errorf("ready = %v, want the earlier step's READY_TRUE", got)
	}
}

func TestFunctionIODecodeConnectionDetails(t *testing.T) {
	cases := map[string]struct {
		details string
		want    map[string]string
		err     string
	}{
		"from_connection_secret_key":           {"[{name: pw, type: FromConnectionSecretKey, fromConnectionSecretKey: password}]", map[string]string{"pw": "s3cr3t"}, ""},
		"from_connection_secret_key_no_name":   {"[{type: FromConnectionSecretKey, fromConnectionSecretKey: user}]", map[string]string{"user": "admin"}, ""},
		"from_connection_secret_key_missing":   {"[{name: k, type: FromConnectionSecretKey, fromConnectionSecretKey: nope}]", nil, ""},
		"from_field_path_string":               {"[{name: host, type: FromFieldPath, fromFieldPath: status.endpoint.host}]", map[string]string{"host": "h.example"}, ""},
		"from_field_path_number_as_json":       {"[{name: port, type: FromFieldPath, fromFieldPath: status.endpoint.port}]", map[string]string{"port": "443"}, ""},
		"from_field_path_object_as_json":       {"[{name: ep, type: FromFieldPath, fromFieldPath: status.endpoint}]", map[string]string{"ep": `{"host":"h.example","port":443}`}, ""},
		"from_field_path_missing":              {"[{name: x, type: FromFieldPath, fromFieldPath: status.nope}]", nil, ""},
		"from_value":                           {"[{name: region, type: FromValue, value: eu-west-1}]", map[string]string{"region": "eu-west-1"}, ""},
		"all_three":                            {"[{name: pw, type: FromConnectionSecretKey, fromConnectionSecretKey: password}, {name: host, type: FromFieldPath, fromFieldPath: status.endpoint.host}, {name: region, type: FromValue, value: eu}]", map[string]string{"pw": "s3cr3t", "host": "h.example", "region": "eu"}, ""},
		"from_value_without_value":             {"[{name: region, type: FromValue}]", nil, `connectionDetails[0]: type "FromValue" requires value`},
		"from_field_path_without_name":         {"[{type: FromFieldPath, fromFieldPath: status.phase}]", nil, `type "FromFieldPath" requires name`},
		"from_connection_secret_key_without_k": {"[{name: a, type: FromConnectionSecretKey}]", nil, `requires fromConnectionSecretKey`},
		"unknown_type":                         {"[{name: a, type: FromMagic}]", nil, `unknown type "FromMagic"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			rsp, err := FunctionIO{}.Decode(fioRequest(t), []byte(fioOutput("    connectionDetails: "+tc.details)))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for k, v := range rsp.GetDesired().GetComposite().GetConnectionDetails() {
				got[k] = string(v)
			}
			if tc.want == nil {
				tc.want = map[string]string{}
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("XR connection details (-want +got):\n%s", d)
			}
		})
	}
}

func TestFunctionIODecode(t *testing.T) {
	rsp, err := FunctionIO{}.Decode(fioRequest(t), []byte(`
config: {region: eu}
observed:
  composite:
    resource: {kind: XBucket}
desired:
  composite:
    resource: {apiVersion: example.org/v1, kind: XBucket, status: {ok: true}}
    connectionDetails: [{name: url, value: "https://x"}, {name: user, value: admin}]
  resources:
  - name: bucket
    resource: {apiVersion: s3.example.org/v1, kind: Bucket}
    connectionDetails: [{name: url, type: FromValue, value: derived}]
  - name: queue
    resource: {apiVersion: sqs.example.org/v1, kind: Queue}
results:
- {severity: Normal, message: composed 2}
- {severity: Warning, message: careful}
- {severity: Fatal, message: broken}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := &fnv1.RunFunctionResponse{
		Meta: &fnv1.ResponseMeta{Tag: "t1"},
		Desired: &fnv1.State{
			Composite: &fnv1.Resource{
				Resource: obj(t, "apiVersion: example.org/v1\nkind: XBucket\nstatus: {ok: true}\n"),
				// A derived detail wins over the XR's own of its name, as
				// in 1.13, which derived them after taking the XR's.
				ConnectionDetails: map[string][]byte{"url": []byte("derived"), "user": []byte("admin")},
			},
			Resources: map[string]*fnv1.Resource{
				"bucket": {Resource: obj(t, "apiVersion: s3.example.org/v1\nkind: Bucket\n"), Ready: fnv1.Ready_READY_TRUE},
				"queue":  {Resource: obj(t, "apiVersion: sqs.example.org/v1\nkind: Queue\n"), Ready: fnv1.Ready_READY_FALSE},
			},
		},
		Results: []*fnv1.Result{
			{Severity: fnv1.Severity_SEVERITY_NORMAL, Message: "composed 2"},
			{Severity: fnv1.Severity_SEVERITY_WARNING, Message: "careful"},
			{Severity: fnv1.Severity_SEVERITY_FATAL, Message: "broken"},
		},
	}
	if d := cmp.Diff(want, rsp, protocmp.Transform()); d != "" {
		t.Errorf("response (-want +got):\n%s", d)
	}
}

// TestFunctionIODecodeDropsServerSetMetadata: the fields the API server
// sets, which a 1.13 function passes on from what 1.13 gave it, or copies
// from an observed object, are not desired: Crossplane v2 server-side
// applies desired objects, and the API server refuses an apply with
// managedFields or a stale resourceVersion. The rest of metadata stays.
func TestFunctionIODecodeDropsServerSetMetadata(t *testing.T) {
	md := `{name: n, labels: {a: b}, resourceVersion: "7", uid: u-1, generation: 2, creationTimestamp: "2026-01-02T03:04:05Z", selfLink: /x, deletionTimestamp: "2026-01-03T00:00:00Z", deletionGracePeriodSeconds: 0, managedFields: [{manager: m, operation: Apply}]}`
	rsp, err := FunctionIO{}.Decode(fioRequest(t), []byte(`
desired:
  composite:
    resource: {apiVersion: example.org/v1, kind: XBucket, metadata: `+md+`}
  resources:
  - name: bucket
    resource: {apiVersion: s3.example.org/v1, kind: Bucket, metadata: `+md+`}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := &fnv1.State{
		Composite: &fnv1.Resource{Resource: obj(t, "apiVersion: example.org/v1\nkind: XBucket\nmetadata: {name: n, labels: {a: b}}\n")},
		Resources: map[string]*fnv1.Resource{
			"bucket": {Resource: obj(t, "apiVersion: s3.example.org/v1\nkind: Bucket\nmetadata: {name: n, labels: {a: b}}\n"), Ready: fnv1.Ready_READY_TRUE},
		},
	}
	if d := cmp.Diff(want, rsp.GetDesired(), protocmp.Transform()); d != "" {
		t.Errorf("desired (-want +got):\n%s", d)
	}
}

func TestFunctionIODecodeErrors(t *testing.T) {
	cases := map[string]struct {
		out  string
		want string
	}{
		"empty":         {"", "printed nothing on stdout; in the functionio I/O mode it must print a FunctionIO YAML document"},
		"not_yaml":      {"{{{", "not a valid FunctionIO document"},
		"unknown_field": {"desired: {composite: {resource: {}}, resourcez: []}", `unknown field "resourcez"`},
		"unknown_field_deep": {"desired:\n  resources:\n  - name: a\n    resource: {kind: A}\n    readinessChecks:\n    - type: MatchString\n      fieldPath: status.phase\n      matchStrin: Available\n",
			`unknown field "matchStrin" at desired.resources[0].readinessChecks[0]; did you mean "matchString"?`},
		"no_state":     {"results: []", "has neither desired nor observed state"},
		"bad_severity": {"desired: {composite: {resource: {a: 1}}}\nresults: [{severity: Error, message: m}]", `results[0]: unknown severity "Error" (want Fatal, Warning or Normal)`},
		"bad_severity_keeps_the_others": {"desired: {composite: {resource: {a: 1}}}\nresults: [{severity: Fatal, message: it broke}, {severity: Error, message: what}]",
			`results[1]: unknown severity "Error" (want Fatal, Warning or Normal) (the function's other results; fatal: it broke)`},
		"bad_readiness_check_keeps_the_results": {"desired: {resources: [{name: a, resource: {a: 1}, readinessChecks: [{type: Bogus}]}]}\nresults: [{severity: Fatal, message: no region set}]",
			`desired.resources[0] (a): readinessChecks[0]: unknown type "Bogus" (want one of NonEmpty, MatchString, MatchInteger, MatchCondition, None) (the function's results; fatal: no region set)`},
		"bad_connection_detail_results": {"desired: {resources: [{name: a, resource: {a: 1}, connectionDetails: [{type: FromValue}]}]}\nresults: [{severity: Warning, message: w}, {severity: Bogus, message: b}]",
			`desired.resources[0] (a): connectionDetails[0]: type "FromValue" requires value (the function's results; warning: w)`},
		"resources_not_a_list_keep_the_results": {"desired: {resources: oops}\nresults: [{severity: Warning, message: region not set}, {severity: Fatal, message: no quota left}]",
			`cannot unmarshal string into Go struct field fioDesired.desired.resources of type []codec.fioDesiredResource; output began with "desired: {resources: oops}\nresults: [{severity: Warning, message: region not set}, {severity: Fatal, message: no quota left}]" (the function's results; warning: region not set; fatal: no quota left)`},
		"unknown_field_keeps_the_results": {"desired: {composite: {resource: {}}, resourcez: []}\nresults: [{severity: Fatal, message: no quota left}]",
			`unknown field "resourcez" at desired; did you mean "resources"? (the function's results; fatal: no quota left)`},
		"infinity_keeps_the_results": {"desired: {resources: [{name: a, resource: {x: .nan}}]}\nresults: [{severity: Fatal, message: no quota left}]",
			`desired.resources[0].resource.x is .nan, and JSON, so Crossplane, has no infinity or NaN; print a finite number or a string (the function's results; fatal: no quota left)`},
		"unreadable_result_keeps_the_others": {"desired: {resources: []}\nresults: [{severity: Fatal, message: no quota left}, {severity: Fatal, mesage: b}, {severity: Error, message: c}]",
			`unknown field "mesage" at results[1]; did you mean "message"? (the function's other results; fatal: no quota left)`},
		"infinity":           {"desired: {resources: [{name: a, resource: {spec: {list: [1, .inf]}}}]}", "desired.resources[0].resource.spec.list[1] is .inf, and JSON, so Crossplane, has no infinity or NaN"},
		"resource_no_name":   {"desired: {resources: [{resource: {a: 1}}]}", "desired.resources[0] has no name"},
		"resource_twice":     {"desired: {resources: [{name: a, resource: {a: 1}}, {name: a, resource: {a: 1}}]}", "desired.resources[1] (a): the name is used twice"},
		"resource_no_body":   {"desired: {resources: [{name: a}]}", "desired.resources[0] (a) has no resource"},
		"other_kind":         {"apiVersion: v1\nkind: ConfigMap\ndesired: {resources: []}", "is v1 ConfigMap, not a FunctionIO document"},
		"json_mode_response": {`{"meta":{"tag":"t1"},"desired":{"resources":{"a":{"resource":{}}}}}`, "run it with --io json"},
		"krm_resource_list":  {"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n", "run it with --io krm"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := FunctionIO{}.Decode(fioRequest(t), []byte(tc.out))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestFunctionIORoundTrip(t *testing.T) {
	// A function that prints its input back unchanged leaves desired as it
	// was, its readiness evaluated by the default check.
	req := fioRequest(t)
	b, err := FunctionIO{}.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	rsp, err := FunctionIO{}.Decode(req, b)
	if err != nil {
		t.Fatal(err)
	}
	want := &fnv1.State{
		Composite: req.Desired.Composite,
		Resources: map[string]*fnv1.Resource{
			"bucket": {Resource: req.Desired.Resources["bucket"].Resource, Ready: fnv1.Ready_READY_TRUE},
		},
	}
	if d := cmp.Diff(want, rsp.Desired, protocmp.Transform()); d != "" {
		t.Errorf("desired after a round trip (-want +got):\n%s", d)
	}
}

// TestFunctionIORoundTripKeepsNEL: a string holding a NEL (U+0085), which
// YAML 1.1 reads as a line break, survives a function that prints its
// input back unchanged.
func TestFunctionIORoundTripKeepsNEL(t *testing.T) {
	req := fioRequest(t)
	req.Desired.Resources["bucket"].Resource.Fields["spec"] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"note": structpb.NewStringValue("a\u0085b\u0085")}})
	b, err := FunctionIO{}.Encode(req)
	if err != nil {
		t.Fatal(err)
	}
	rsp, err := FunctionIO{}.Decode(req, b)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(req.Desired.Resources["bucket"].Resource, rsp.Desired.Resources["bucket"].GetResource(), protocmp.Transform()); d != "" {
		t.Errorf("desired bucket after a round trip (-want +got):\n%s", d)
	}
}
