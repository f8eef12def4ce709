package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
)

// scripted is a Function that answers from a Go function; these tests are
// about the pipeline around the functions (the e2e tests run real ones).
type scripted func(req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse

func (s scripted) Run(_ context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	return s(req), nil
}

func mustObject(t *testing.T, yaml string) Object {
	t.Helper()
	o, err := ParseObject([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func mustResource(t *testing.T, yaml string) *fnv1.Resource {
	t.Helper()
	s, err := mustObject(t, yaml).Struct()
	if err != nil {
		t.Fatal(err)
	}
	return &fnv1.Resource{Resource: s}
}

func composition(steps ...string) *Composition {
	c := &Composition{Name: "c", CompositeTypeRef: TypeRef{APIVersion: "example.org/v1", Kind: "XApp"}}
	for _, s := range steps {
		st := Step{Step: s}
		st.FunctionRef.Name = "fn-" + s
		c.Steps = append(c.Steps, st)
	}
	return c
}

const xrYAML = "apiVersion: example.org/v1\nkind: XApp\nmetadata:\n  name: demo\n  namespace: team-a\n  uid: u-1\nspec:\n  size: 2\n"

func TestRenderPassesStateAndContextFromStepToStep(t *testing.T) {
	var seen []*fnv1.RunFunctionRequest
	first := scripted(func(req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
		seen = append(seen, req)
		d := &fnv1.State{Resources: map[string]*fnv1.Resource{"a": mustResource(t, "apiVersion: v1\nkind: ConfigMap\n")}}
		ctx, _ := structpb.NewStruct(map[string]any{"k": "from-first", "given": req.GetContext().AsMap()["given"]})
		return &fnv1.RunFunctionResponse{Desired: d, Context: ctx, Results: []*fnv1.Result{{Severity: fnv1.Severity_SEVERITY_NORMAL, Message: "one"}}}
	})
	second := scripted(func(req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
		seen = append(seen, req)
		d := copyState(t, req.GetDesired())
		d.Resources["b"] = mustResource(t, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: fixed\n")
		d.Resources["b"].Ready = fnv1.Ready_READY_TRUE
		d.Composite = mustResource(t, "status:\n  phase: composed\n")
		return &fnv1.RunFunctionResponse{Desired: d, Context: req.GetContext(),
			Conditions: []*fnv1.Condition{{Type: "Custom", Status: fnv1.Status_STATUS_CONDITION_TRUE, Reason: "Done"}, {Type: "Ready", Status: fnv1.Status_STATUS_CONDITION_TRUE, Reason: "Nope"}}}
	})
	out, err := Render(context.Background(), Inputs{
		XR:          mustObject(t, xrYAML),
		Composition: composition("first", "second"),
		Functions:   map[string]Function{"fn-first": first, "fn-second": second},
		Context:     map[string]any{"given": "by-flag"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 {
		t.Fatalf("%d calls, want 2", len(seen))
	}
	// The functions observe the XR as Crossplane's reconciler prepared it.
	obsXR := Object(seen[0].GetObserved().GetComposite().GetResource().AsMap())
	if got := obsXR["spec"]; cmp.Diff(map[string]any{"size": 2.0, "crossplane": map[string]any{"compositionRef": map[string]any{"name": "c"}}}, got) != "" {
		t.Errorf("first step's observed XR spec: %v", got)
	}
	if obsXR.Labels()[LabelComposite] != "demo" || obsXR.metaString("uid") != "u-1" || obsXR.metaString("resourceVersion") != "999" {
		t.Errorf("first step's observed XR metadata: %v", obsXR["metadata"])
	}
	if len(seen[0].GetDesired().GetResources()) != 0 {
		t.Errorf("the first step must start with empty desired state: %v", seen[0].GetDesired())
	}
	if _, ok := seen[1].GetDesired().GetResources()["a"]; !ok {
		t.Errorf("the second step did not get the first step's desired state: %v", seen[1].GetDesired())
	}
	if got := seen[1].GetContext().AsMap(); got["k"] != "from-first" || got["given"] != "by-flag" {
		t.Errorf("context of the second step: %v", got)
	}
	if seen[0].GetMeta().GetTag() == "" || seen[0].GetMeta().GetTag() == seen[1].GetMeta().GetTag() {
		t.Errorf("each request needs its own tag: %q %q", seen[0].GetMeta().GetTag(), seen[1].GetMeta().GetTag())
	}
	wantCaps := []fnv1.Capability{
		fnv1.Capability_CAPABILITY_CAPABILITIES,
		fnv1.Capability_CAPABILITY_REQUIRED_RESOURCES,
		fnv1.Capability_CAPABILITY_CREDENTIALS,
		fnv1.Capability_CAPABILITY_CONDITIONS,
		fnv1.Capability_CAPABILITY_REQUIRED_SCHEMAS,
	}
	if got := seen[0].GetMeta().GetCapabilities(); cmp.Diff(wantCaps, got) != "" {
		t.Errorf("capabilities %v, want crossplane render's %v", got, wantCaps)
	}

	// Only the desired status reaches the XR, with Crossplane's conditions
	// after the functions' (Ready is Crossplane's alone), and references
	// to the composed resources.
	wantXR := mustObject(t, `apiVersion: example.org/v1
kind: XApp
metadata:
  name: demo
  namespace: team-a
spec:
  crossplane:
    resourceRefs:
    - {apiVersion: v1, kind: ConfigMap, name: demo-befee9f8a203}
    - {apiVersion: v1, kind: Secret, name: fixed}
status:
  phase: composed
  conditions:
  - {type: Responsive, status: "True", reason: WatchCircuitClosed, lastTransitionTime: "2024-01-01T00:00:00Z"}
  - {type: Custom, status: "True", reason: Done, lastTransitionTime: "2024-01-01T00:00:00Z"}
  - {type: Synced, status: "True", reason: ReconcileSuccess, lastTransitionTime: "2024-01-01T00:00:00Z"}
  - {type: Ready, status: "False", reason: Creating, message: "Unready resources: a", lastTransitionTime: "2024-01-01T00:00:00Z"}
`)
	if d := cmp.Diff(wantXR, out.XR); d != "" {
		t.Errorf("XR (-want +got):\n%s", d)
	}
	// The name is the generateName and sha256("u-1" + "a"), as Crossplane
	// derives it.
	wantA := mustObject(t, `apiVersion: v1
kind: ConfigMap
metadata:
  name: demo-befee9f8a203
  generateName: demo-
  namespace: team-a
  annotations: {crossplane.io/composition-resource-name: a}
  labels: {crossplane.io/composite: demo}
  ownerReferences:
  - {apiVersion: example.org/v1, kind: XApp, name: demo, uid: u-1, controller: true, blockOwnerDeletion: true}
`)
	if len(out.Composed) != 2 {
		t.Fatalf("composed: %v", out.Composed)
	}
	if d := cmp.Diff(wantA, out.Composed[0]); d != "" {
		t.Errorf("composed a (-want +got):\n%s", d)
	}
	if n := out.Composed[1].Name(); n != "fixed" || out.Composed[1].metaString("generateName") != "" {
		t.Errorf("a resource with a name keeps it and gets no generateName: %v", out.Composed[1])
	}
	wantResults := []Object{
		{"apiVersion": "render.crossplane.io/v1beta1", "kind": "Result", "severity": "Normal", "reason": "SelectComposition", "message": "Successfully selected composition: c"},
		{"apiVersion": "render.crossplane.io/v1beta1", "kind": "Result", "severity": "Normal", "reason": "ComposeResources", "message": `Pipeline step "first": one`},
		{"apiVersion": "render.crossplane.io/v1beta1", "kind": "Result", "severity": "Normal", "reason": "ComposeResources", "message": `Composed resource "a" is not yet ready`},
	}
	if d := cmp.Diff(wantResults, out.Results); d != "" {
		t.Errorf("results (-want +got):\n%s", d)
	}
	if got := out.Context["fields"].(map[string]any)["k"]; got != "from-first" {
		t.Errorf("context: %v", out.Context)
	}
}

func copyState(t *testing.T, s *fnv1.State) *fnv1.State {
	t.Helper()
	b, err := protojson.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	c := &fnv1.State{}
	if err := protojson.Unmarshal(b, c); err != nil {
		t.Fatal(err)
	}
	if c.Resources == nil {
		c.Resources = map[string]*fnv1.Resource{}
	}
	return c
}

func TestRenderStopsAtAFatalResult(t *testing.T) {
	calls := 0
	fatal := scripted(func(*fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
		calls++
		return &fnv1.RunFunctionResponse{Results: []*fnv1.Result{
			{Severity: fnv1.Severity_SEVERITY_WARNING, Message: "hm"},
			{Severity: fnv1.Severity_SEVERITY_FATAL, Message: "no way"},
		}}
	})
	_, err := Render(context.Background(), Inputs{
		XR: mustObject(t, xrYAML), Composition: composition("a", "b"),
		Functions: map[string]Function{"fn-a": fatal, "fn-b": fatal},
	})
	var fe *FatalError
	if !errors.As(err, &fe) || fe.Step != "a" || fe.Message != "no way" || len(fe.Results) != 1 {
		t.Fatalf("want a FatalError of step a, got %#v", err)
	}
	if calls != 1 {
		t.Errorf("%d calls: the pipeline must stop at the Fatal result", calls)
	}
	if !strings.Contains(err.Error(), `pipeline step "a" returned a fatal result: no way`) {
		t.Errorf("message: %v", err)
	}
}

func TestRenderObservedResourcesKeepTheirIdentity(t *testing.T) {
	obs := []Document{{Source: "observed.yaml, document 1", Object: mustObject(t,
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo-x1\n  namespace: other\n  annotations:\n    crossplane.io/composition-resource-name: a\n")}}
	var seen *fnv1.RunFunctionRequest
	fn := scripted(func(req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
		seen = req
		return &fnv1.RunFunctionResponse{Desired: &fnv1.State{Resources: map[string]*fnv1.Resource{
			"a": {Resource: mustResource(t, "apiVersion: v1\nkind: ConfigMap\n").Resource, Ready: fnv1.Ready_READY_TRUE},
		}}}
	})
	xr := mustObject(t, "apiVersion: example.org/v1\nkind: XApp\nmetadata:\n  name: demo\n")
	out, err := Render(context.Background(), Inputs{XR: xr, Composition: composition("s"), Functions: map[string]Function{"fn-s": fn}, Observed: obs})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := seen.GetObserved().GetResources()["a"]; !ok {
		t.Errorf("the observed resource did not reach the function: %v", seen.GetObserved())
	}
	cd := out.Composed[0]
	if cd.Name() != "demo-x1" || cd.Namespace() != "other" || cd.metaString("generateName") != "" {
		t.Errorf("the observed name and namespace must be kept: %v", cd)
	}
	conds := out.XR["status"].(map[string]any)["conditions"].([]any)
	cond := conds[len(conds)-1].(map[string]any)
	if cond["status"] != "True" || cond["reason"] != "Available" {
		t.Errorf("all resources ready: the XR should be Available: %v", cond)
	}
}

func TestRenderFetchesRequiredResourcesUntilStable(t *testing.T) {
	required := []Object{
		mustObject(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n  labels: {env: prod}\n"),
		mustObject(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels: {env: prod}\n"),
		mustObject(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  labels: {env: dev}\n"),
		mustObject(t, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: one\n  namespace: ns\n"),
	}
	var calls []*fnv1.RunFunctionRequest
	fn := scripted(func(req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
		calls = append(calls, req)
		return &fnv1.RunFunctionResponse{Desired: req.GetDesired(), Requirements: &fnv1.Requirements{
			ExtraResources: map[string]*fnv1.ResourceSelector{"prod": {ApiVersion: "v1", Kind: "ConfigMap",
				Match: &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: map[string]string{"env": "prod"}}}}},
			Resources: map[string]*fnv1.ResourceSelector{"secret": {ApiVersion: "v1", Kind: "Secret", Namespace: ptr("ns"),
				Match: &fnv1.ResourceSelector_MatchName{MatchName: "one"}}},
		}}
	})
	_, err := Render(context.Background(), Inputs{XR: mustObject(t, xrYAML), Composition: composition("s"),
		Functions: map[string]Function{"fn-s": fn}, Required: required})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 {
		t.Fatalf("%d calls, want 2: one to learn the requirements, one with the resources", len(calls))
	}
	var names []string
	for _, r := range calls[1].GetExtraResources()["prod"].GetItems() {
		names = append(names, r.GetResource().AsMap()["metadata"].(map[string]any)["name"].(string))
	}
	if cmp.Diff([]string{"a", "b"}, names) != "" {
		t.Errorf("extra resources, sorted by name: %v", names)
	}
	if n := len(calls[1].GetRequiredResources()["secret"].GetItems()); n != 1 {
		t.Errorf("required resources: %d items", n)
	}
}

func TestRenderGivesUpOnRequirementsThatNeverSettle(t *testing.T) {
	n := 0
	fn := scripted(func(req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
		n++
		return &fnv1.RunFunctionResponse{Requirements: &fnv1.Requirements{ExtraResources: map[string]*fnv1.ResourceSelector{
			"x": {ApiVersion: "v1", Kind: "ConfigMap", Match: &fnv1.ResourceSelector_MatchName{MatchName: strings.Repeat("x", n)}}}}}
	})
	_, err := Render(context.Background(), Inputs{XR: mustObject(t, xrYAML), Composition: composition("s"), Functions: map[string]Function{"fn-s": fn}})
	if err == nil || !strings.Contains(err.Error(), "gave up after 6 calls") {
		t.Fatalf("err = %v", err)
	}
}

func TestRenderCredentials(t *testing.T) {
	var seen *fnv1.RunFunctionRequest
	fn := scripted(func(req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
		seen = req
		return &fnv1.RunFunctionResponse{}
	})
	c := composition("s")
	c.Steps[0].Credentials = []StepCredentials{{Name: "db", Source: "Secret"}}
	c.Steps[0].Credentials[0].SecretRef = &struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	}{"ns", "db-creds"}
	secret := mustObject(t, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db-creds\n  namespace: ns\ndata:\n  password: c2VjcmV0\nstringData:\n  user: admin\n")
	_, err := Render(context.Background(), Inputs{XR: mustObject(t, xrYAML), Composition: c, Functions: map[string]Function{"fn-s": fn}, Credentials: []Object{secret}})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{"password": []byte("secret"), "user": []byte("admin")}
	if d := cmp.Diff(want, seen.GetCredentials()["db"].GetCredentialData().GetData()); d != "" {
		t.Errorf("credentials (-want +got):\n%s", d)
	}
	// Crossplane gets the Secret from its cluster, where --required-resources
	// puts it too.
	seen = nil
	_, err = Render(context.Background(), Inputs{XR: mustObject(t, xrYAML), Composition: c, Functions: map[string]Function{"fn-s": fn}, Required: []Object{secret}})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, seen.GetCredentials()["db"].GetCredentialData().GetData()); d != "" {
		t.Errorf("credentials from a required resource (-want +got):\n%s", d)
	}
	// A credentials Secret without an apiVersion is a v1 Secret, as it was
	// before credentials were looked up among the cluster's objects.
	seen = nil
	_, err = Render(context.Background(), Inputs{XR: mustObject(t, xrYAML), Composition: c, Functions: map[string]Function{"fn-s": fn},
		Credentials: []Object{mustObject(t, "kind: Secret\nmetadata:\n  name: db-creds\n  namespace: ns\ndata:\n  password: c2VjcmV0\nstringData:\n  user: admin\n")}})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, seen.GetCredentials()["db"].GetCredentialData().GetData()); d != "" {
		t.Errorf("credentials from a Secret without an apiVersion (-want +got):\n%s", d)
	}
	_, err = Render(context.Background(), Inputs{XR: mustObject(t, xrYAML), Composition: c, Functions: map[string]Function{"fn-s": fn}})
	if err == nil || !strings.Contains(err.Error(), "no Secret ns/db-creds") {
		t.Errorf("a missing Secret: err = %v", err)
	}
}

func TestCheck(t *testing.T) {
	comp := composition("s")
	comp.Labels = map[string]string{"provider": "aws"}
	cases := []struct {
		name, xr string
		fns      []string
		want     string
	}{
		{"ok", xrYAML, []string{"fn-s"}, ""},
		{"wrong_kind", "apiVersion: example.org/v1\nkind: XDB\nmetadata: {name: x}\n", []string{"fn-s"}, "is for kind XApp"},
		{"wrong_version", "apiVersion: example.org/v2\nkind: XApp\nmetadata: {name: x}\n", []string{"fn-s"}, "is for apiVersion example.org/v1"},
		{"no_name", "apiVersion: example.org/v1\nkind: XApp\n", []string{"fn-s"}, "needs apiVersion, kind and metadata.name"},
		{"selector_label_missing", "apiVersion: example.org/v1\nkind: XApp\nmetadata: {name: x}\nspec:\n  crossplane:\n    compositionSelector:\n      matchLabels: {region: eu}\n", []string{"fn-s"}, "lacks the label region"},
		// As crossplane render: a legacy XR's spec.compositionSelector
		// is not checked.
		{"legacy_selector_not_checked", "apiVersion: example.org/v1\nkind: XApp\nmetadata: {name: x}\nspec:\n  compositionSelector:\n    matchLabels: {region: eu}\n", []string{"fn-s"}, ""},
		{"selector_label_differs", "apiVersion: example.org/v1\nkind: XApp\nmetadata: {name: x}\nspec:\n  crossplane:\n    compositionSelector:\n      matchLabels: {provider: gcp}\n", []string{"fn-s"}, `has the label provider="aws"`},
		{"undeclared_function", xrYAML, []string{"other"}, `uses the Function "fn-s", which the functions file does not declare`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Check(mustObject(t, c.xr), comp, c.fns)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want %q", err, c.want)
			}
		})
	}
}

func TestFirstNAndMore(t *testing.T) {
	if got := firstNAndMore(3, []string{"d", "b", "a", "c", "e"}); got != "a, b, c, and 2 more" {
		t.Errorf("got %q", got)
	}
	if got := firstNAndMore(3, []string{"c", "b", "a"}); got != "a, b, and c" {
		t.Errorf("got %q", got)
	}
	if got := firstNAndMore(3, []string{"b", "a"}); got != "a, b" {
		t.Errorf("got %q", got)
	}
}

func TestTagIgnoresMetaAndFollowsContent(t *testing.T) {
	a := &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "x"}, Desired: &fnv1.State{}}
	b := &fnv1.RunFunctionRequest{Desired: &fnv1.State{}}
	if tag(a) != tag(b) {
		t.Error("the tag must not depend on meta")
	}
	b.Input, _ = structpb.NewStruct(map[string]any{"k": 1})
	if tag(a) == tag(b) {
		t.Error("different requests need different tags")
	}
	if d := cmp.Diff(&fnv1.RequestMeta{Tag: "x"}, a.GetMeta(), protocmp.Transform()); d != "" {
		t.Errorf("tag changed the request: %s", d)
	}
}

func ptr[T any](v T) *T { return &v }

func TestXRUIDAndChildName(t *testing.T) {
	// The values crossplane render (engine v2.3.4) prints for these.
	xr := mustObject(t, "apiVersion: example.org/v1\nkind: XApp\nmetadata:\n  name: demo\n  namespace: team-a\n")
	if got := XRUID(xr); got != "9d6ec4b5-e8fe-5891-ac50-e2481aa33cd2" {
		t.Errorf("XRUID: %s", got)
	}
	if got := ChildName("demo-", "9d6ec4b5-e8fe-5891-ac50-e2481aa33cd2", "config"); got != "demo-17c23d646520" {
		t.Errorf("ChildName: %s", got)
	}
	long := strings.Repeat("a", 60) + "-"
	if got := ChildName(long, "u", "r"); len(got) != 63 || !strings.HasPrefix(got, strings.Repeat("a", 50)+"-") {
		t.Errorf("a long generateName is cut to fit 63 characters: %s (%d)", got, len(got))
	}
	if got := gvkString("v1", "ConfigMap"); got != "/v1, Kind=ConfigMap" {
		t.Errorf("core group: %s", got)
	}
}

func TestMergeXR(t *testing.T) {
	given := mustObject(t, "apiVersion: example.org/v1\nkind: XApp\nmetadata:\n  name: demo\n  labels: {a: b}\nspec:\n  list: [1, 2]\n  keep: yes\nstatus:\n  old: 1\n")
	rendered := mustObject(t, "apiVersion: example.org/v1\nkind: XApp\nmetadata:\n  name: demo\nspec:\n  list: [3]\n  crossplane: {resourceRefs: []}\nstatus:\n  new: 2\n")
	want := mustObject(t, "apiVersion: example.org/v1\nkind: XApp\nmetadata:\n  name: demo\n  labels: {a: b}\nspec:\n  list: [3]\n  keep: yes\n  crossplane: {resourceRefs: []}\nstatus:\n  old: 1\n  new: 2\n  conditions: null\n")
	if d := cmp.Diff(want, MergeXR(given, rendered)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestXRDDefaults(t *testing.T) {
	xrd, err := ParseXRD(mustObject(t, `apiVersion: apiextensions.crossplane.io/v1
kind: CompositeResourceDefinition
metadata: {name: xapps.example.org}
spec:
  group: example.org
  names: {kind: XApp}
  defaultCompositionUpdatePolicy: Manual
  versions:
  - name: v1
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: string, default: small}
              tags: {type: object, default: {team: none}}
              disks:
                type: array
                items: {type: object, properties: {gb: {type: integer, default: 10}}}
              opts:
                type: object
                additionalProperties: {type: object, properties: {on: {type: boolean, default: true}}}
`))
	if err != nil {
		t.Fatal(err)
	}
	if xrd.Schema != SchemaLegacy {
		t.Errorf("a v1 XRD without scope is legacy cluster-scoped")
	}
	xr := mustObject(t, "apiVersion: example.org/v1\nkind: XApp\nmetadata: {name: demo}\nspec:\n  disks: [{gb: 1}, {}]\n  opts: {x: {}}\n")
	if err := xrd.Check(xr); err != nil {
		t.Fatal(err)
	}
	if err := xrd.ApplyDefaults(xr); err != nil {
		t.Fatal(err)
	}
	want := mustObject(t, "apiVersion: example.org/v1\nkind: XApp\nmetadata: {name: demo}\nspec:\n  size: small\n  tags: {team: none}\n  disks: [{gb: 1}, {gb: 10}]\n  opts: {x: {on: true}}\n  compositionUpdatePolicy: Manual\n")
	if d := cmp.Diff(want, xr); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	other := mustObject(t, "apiVersion: example.org/v2\nkind: XApp\nmetadata: {name: demo}\n")
	if err := xrd.ApplyDefaults(other); err == nil || !strings.Contains(err.Error(), "not a version") {
		t.Errorf("an unknown version: %v", err)
	}
}

// TestValidName: a composed resource's name must be an RFC 1123
// subdomain, as Crossplane requires; RBAC's kinds may hold colons too.
func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		apiVersion, kind, name string
		want                   bool
	}{
		{"v1", "ConfigMap", "app-config.v1", true},
		{"v1", "ConfigMap", "Bad_Name", false},
		{"v1", "ConfigMap", "media-obsB", false},
		{"v1", "ConfigMap", "", false},
		{"v1", "ConfigMap", "system:app", false},
		{"rbac.authorization.k8s.io/v1", "ClusterRole", "system:app", true},
		{"rbac.authorization.k8s.io/v1", "ClusterRole", "System:App", false},
		{"example.org/v1", "ClusterRole", "system:app", false},
	} {
		o := Object{"apiVersion": tc.apiVersion, "kind": tc.kind, "metadata": map[string]any{"name": tc.name}}
		if got := validName(o); got != tc.want {
			t.Errorf("%s %s %q: valid %v, want %v", tc.apiVersion, tc.kind, tc.name, got, tc.want)
		}
	}
}

// A selector without a namespace lists every namespace; Crossplane's
// fetcher sorts what matches by "namespace/name"
// (xfn.ExistingRequiredResourcesFetcher), so functions, and render's
// output, see that order, not one by name.
func TestFetchSortsByNamespaceThenName(t *testing.T) {
	var from []Object
	for _, nn := range []string{"z/a", "/c", "b/a", "a/d", "/b", "a-x/a"} {
		ns, name, _ := strings.Cut(nn, "/")
		o := mustObject(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: "+name+"\n  labels: {app: x}\n")
		if ns != "" {
			o.setMeta("namespace", ns)
		}
		from = append(from, o)
	}
	sel := &fnv1.ResourceSelector{ApiVersion: "v1", Kind: "ConfigMap",
		Match: &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: map[string]string{"app": "x"}}}}
	var got []string
	for _, r := range fetch(sel, from).GetItems() {
		o := Object(r.GetResource().AsMap())
		got = append(got, o.Namespace()+"/"+o.Name())
	}
	// "a-x/" before "a/": the key is compared as one string, '-' < '/'.
	want := []string{"/b", "/c", "a-x/a", "a/d", "b/a", "z/a"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("order (-want +got):\n%s", d)
	}
}

// In a cluster, and in crossplane render's in-memory one, a step may ask
// for the XR itself, its composed resources and the credentials Secrets:
// they exist there as much as --required-resources do.
func TestRequiredResourcesIncludeTheXRObservedAndCredentials(t *testing.T) {
	var last *fnv1.RunFunctionRequest
	fn := scripted(func(req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
		last = req
		return &fnv1.RunFunctionResponse{Desired: req.GetDesired(), Requirements: &fnv1.Requirements{Resources: map[string]*fnv1.ResourceSelector{
			"xr":     {ApiVersion: "example.org/v1", Kind: "XApp", Namespace: ptr("team-a"), Match: &fnv1.ResourceSelector_MatchName{MatchName: "demo"}},
			"mine":   {ApiVersion: "v1", Kind: "ConfigMap", Match: &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: map[string]string{"crossplane.io/composite": "demo"}}}},
			"secret": {ApiVersion: "v1", Kind: "Secret", Namespace: ptr("ns"), Match: &fnv1.ResourceSelector_MatchName{MatchName: "db-creds"}},
		}}}
	})
	observed := []Document{{Object: mustObject(t, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  namespace: team-a\n  labels: {crossplane.io/composite: demo}\n  annotations: {crossplane.io/composition-resource-name: cm}\n")}}
	secret := mustObject(t, "metadata:\n  name: db-creds\n  namespace: ns\ndata:\n  password: c2VjcmV0\n")
	_, err := Render(context.Background(), Inputs{XR: mustObject(t, xrYAML), Composition: composition("s"),
		Functions: map[string]Function{"fn-s": fn}, Observed: observed, Credentials: []Object{secret}})
	if err != nil {
		t.Fatal(err)
	}
	rr := last.GetRequiredResources()
	for _, name := range []string{"xr", "mine", "secret"} {
		if n := len(rr[name].GetItems()); n != 1 {
			t.Errorf("required resource %q: %d items, want 1", name, n)
		}
	}
	// The XR as the functions observe it.
	if items := rr["xr"].GetItems(); len(items) == 1 {
		if d := cmp.Diff(last.GetObserved().GetComposite().GetResource(), items[0].GetResource(), protocmp.Transform()); d != "" {
			t.Errorf("the XR (-observed +required):\n%s", d)
		}
	}
}

// TestRenderObservedConnectionDetails: a composed resource's connection
// details are what its connection Secret holds, in its own namespace when it
// has one, as Crossplane reads them; a v2 XR has none, whatever its spec says.
func TestRenderObservedConnectionDetails(t *testing.T) {
	var seen *fnv1.RunFunctionRequest
	fn := scripted(func(req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
		seen = req
		return &fnv1.RunFunctionResponse{Desired: req.GetDesired()}
	})
	xr := mustObject(t, xrYAML)
	xr["spec"].(map[string]any)["writeConnectionSecretToRef"] = map[string]any{"name": "xr-conn"}
	observed := []Document{
		{Object: mustObject(t, "apiVersion: s3.example.org/v1\nkind: Bucket\nmetadata:\n  name: b\n  namespace: team-a\n  annotations: {crossplane.io/composition-resource-name: bucket}\nspec:\n  writeConnectionSecretToRef: {name: b-conn, namespace: ignored}\n")},
		{Object: mustObject(t, "apiVersion: s3.example.org/v1\nkind: Bucket\nmetadata:\n  name: c\n  namespace: team-a\n  annotations: {crossplane.io/composition-resource-name: other}\nspec:\n  writeConnectionSecretToRef: {name: missing}\n")},
	}
	required := []Object{
		mustObject(t, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: b-conn\n  namespace: team-a\ndata:\n  endpoint: aHR0cHM6Ly9i\n"),
		mustObject(t, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: xr-conn\n  namespace: team-a\ndata:\n  user: YQ==\n"),
	}
	_, err := Render(context.Background(), Inputs{XR: xr, Composition: composition("s"), Functions: map[string]Function{"fn-s": fn}, Observed: observed, Required: required})
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(map[string][]byte{"endpoint": []byte("https://b")}, seen.GetObserved().GetResources()["bucket"].GetConnectionDetails()); d != "" {
		t.Errorf("the bucket's connection details (-want +got):\n%s", d)
	}
	if got := seen.GetObserved().GetResources()["other"].GetConnectionDetails(); got != nil {
		t.Errorf("a resource whose Secret is not there has connection details %v", got)
	}
	if got := seen.GetObserved().GetComposite().GetConnectionDetails(); got != nil {
		t.Errorf("a v2 XR has connection details %v", got)
	}
}

// TestRenderXRStatusUnchanged: when the reconcile leaves the XR's status as
// it was, crossplane render prints the XR as the configurator wrote it
// before composing, whole; a condition time written otherwise than
// Crossplane writes it is a change, and the XR is printed as usual.
func TestRenderXRStatusUnchanged(t *testing.T) {
	fn := scripted(func(req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
		return &fnv1.RunFunctionResponse{Desired: req.GetDesired()}
	})
	for _, tc := range []struct {
		time  string
		whole bool
	}{
		{"2024-01-01T00:00:00Z", true},
		{"2024-01-01T02:00:00+02:00", false},
		{"2024-01-01T00:00:00.5Z", false},
	} {
		xr := mustObject(t, xrYAML+"status:\n  conditions:\n"+
			"  - {type: Responsive, status: \"True\", reason: WatchCircuitClosed, lastTransitionTime: \""+tc.time+"\"}\n"+
			"  - {type: Synced, status: \"True\", reason: ReconcileSuccess, lastTransitionTime: \""+tc.time+"\"}\n"+
			"  - {type: Ready, status: \"True\", reason: Available, lastTransitionTime: \""+tc.time+"\"}\n")
		out, err := Render(context.Background(), Inputs{XR: xr, Composition: composition("s"), Functions: map[string]Function{"fn-s": fn}})
		if err != nil {
			t.Fatal(err)
		}
		whole := out.XR.metaString("uid") == "u-1" && out.XR.Labels()[LabelComposite] == "demo" && lookup(out.XR, "spec", "size") != nil
		if whole != tc.whole {
			t.Errorf("conditions at %s: printed whole %v, want %v:\n%v", tc.time, whole, tc.whole, out.XR)
		}
	}
}
