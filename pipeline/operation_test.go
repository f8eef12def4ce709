package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/structpb"
)

const opYAML = `apiVersion: ops.crossplane.io/v1alpha1
kind: Operation
metadata:
  name: rotate
spec:
  mode: Pipeline
  pipeline:
  - step: one
    functionRef: {name: fn}
  - step: two
    functionRef: {name: fn}
`

func TestRenderOperation(t *testing.T) {
	op, err := ParseOperation(mustObject(t, opYAML))
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	fn := scripted(func(req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
		calls++
		if req.GetObserved() != nil {
			t.Errorf("an Operation has no observed state: %v", req.GetObserved())
		}
		d := copyState(t, req.GetDesired())
		// Each step applies a resource; the second one twice under two
		// names, which Crossplane references once.
		name := map[int]string{1: "b", 2: "a"}[calls]
		d.Resources[name] = mustResource(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-"+name+", namespace: ops}\n")
		if calls == 2 {
			d.Resources["again"] = mustResource(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-a, namespace: ops}\n")
		}
		out, _ := structpb.NewStruct(map[string]any{"call": float64(calls)})
		return &fnv1.RunFunctionResponse{Desired: d, Output: out, Results: []*fnv1.Result{{Severity: fnv1.Severity_SEVERITY_WARNING, Message: "careful", Reason: ptr("Ignored")}}}
	})
	out, err := RenderOperation(context.Background(), OperationInputs{Operation: op, Functions: map[string]Function{"fn": fn}})
	if err != nil {
		t.Fatal(err)
	}
	want := mustObject(t, opYAML)
	want.setMeta("resourceVersion", "999")
	want["status"] = map[string]any(mustObject(t, `
  conditions:
  - {type: Succeeded, status: "True", reason: PipelineSuccess, lastTransitionTime: "2024-01-01T00:00:00Z"}
  - {type: ValidPipeline, status: "True", reason: ValidPipeline, lastTransitionTime: "2024-01-01T00:00:00Z"}
  - {type: Synced, status: "True", reason: ReconcileSuccess, lastTransitionTime: "2024-01-01T00:00:00Z"}
  pipeline:
  - {step: one, output: {call: 1}}
  - {step: two, output: {call: 2}}
  appliedResourceRefs:
  - {apiVersion: v1, kind: ConfigMap, namespace: ops, name: cm-a}
  - {apiVersion: v1, kind: ConfigMap, namespace: ops, name: cm-b}
`))
	if d := cmp.Diff(want, out.Operation); d != "" {
		t.Errorf("Operation (-want +got):\n%s", d)
	}
	if len(out.Applied) != 3 || out.Applied[0].Name() != "cm-a" {
		t.Errorf("applied, by resource name: %v", out.Applied)
	}
	wantResult := Object{"apiVersion": "render.crossplane.io/v1beta1", "kind": "Result", "severity": "Warning", "reason": "RunPipelineStep", "message": `Pipeline step "one": careful`}
	if len(out.Results) != 2 || cmp.Diff(wantResult, out.Results[0]) != "" {
		t.Errorf("results: %v", out.Results)
	}
}

func TestRenderOperationStopsAtAFatalResult(t *testing.T) {
	op, err := ParseOperation(mustObject(t, opYAML))
	if err != nil {
		t.Fatal(err)
	}
	fn := scripted(func(*fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
		return &fnv1.RunFunctionResponse{Results: []*fnv1.Result{{Severity: fnv1.Severity_SEVERITY_FATAL, Message: "no"}}}
	})
	_, err = RenderOperation(context.Background(), OperationInputs{Operation: op, Functions: map[string]Function{"fn": fn}})
	var fe *FatalError
	if !errors.As(err, &fe) || fe.Step != "one" {
		t.Fatalf("want a FatalError of step one: %v", err)
	}
}

func TestParseOperation(t *testing.T) {
	for _, tc := range []struct{ yaml, err string }{
		{"apiVersion: example.org/v1\nkind: XApp\nmetadata: {name: a}\n", "is not an Operation"},
		{"apiVersion: ops.crossplane.io/v1alpha1\nkind: Operation\nmetadata: {name: a}\nspec: {}\n", "no spec.pipeline"},
		{"apiVersion: ops.crossplane.io/v1alpha1\nkind: Operation\nmetadata: {name: a}\nspec:\n  pipeline: [{step: s}]\n", "no functionRef.name"},
		{"apiVersion: ops.crossplane.io/v1alpha1\nkind: Operation\nspec:\n  pipeline: [{step: s, functionRef: {name: f}}]\n", "needs metadata.name"},
		// The API server refuses a key the spec does not have; crossplane
		// operation render reads retrylimit as retryLimit.
		{"apiVersion: ops.crossplane.io/v1alpha1\nkind: Operation\nmetadata: {name: a}\nspec:\n  retrylimit: 2\n  pipeline: [{step: s, functionRef: {name: f}}]\n", `Operation "a": unknown field "retrylimit" at spec; did you mean "retryLimit"?`},
		{"apiVersion: ops.crossplane.io/v1alpha1\nkind: Operation\nmetadata: {name: a}\nspec:\n  pipeline: [{step: s, functionRef: {name: f}, requirements: {requiredResources: [{requirementName: r, apiVersion: v1, kind: Secret, nmae: x}]}}]\n", `unknown field "nmae" at spec.pipeline[0].requirements.requiredResources[0]; did you mean "name"?`},
		// Not integers: the API server and crossplane operation render
		// refuse them, where a default would be taken for them.
		{"apiVersion: ops.crossplane.io/v1alpha1\nkind: Operation\nmetadata: {name: a}\nspec:\n  retryLimit: \"2\"\n  pipeline: [{step: s, functionRef: {name: f}}]\n", `Operation "a": spec.retryLimit must be an integer, not a string`},
		{"apiVersion: ops.crossplane.io/v1alpha1\nkind: Operation\nmetadata: {name: a}\nspec:\n  pipeline: [{step: s, functionRef: {name: f}}]\nstatus: {failures: 1.5}\n", `Operation "a": status.failures must be an integer, not the number 1.5`},
	} {
		_, err := ParseOperation(mustObject(t, tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: got %v, want %q", tc.yaml, err, tc.err)
		}
	}
}

func TestTemplateOperation(t *testing.T) {
	cron := mustObject(t, `apiVersion: ops.crossplane.io/v1alpha1
kind: CronOperation
metadata: {name: nightly, labels: {parent: "yes"}, generation: 3}
spec:
  schedule: "0 2 * * *"
  operationTemplate:
    metadata: {name: ignored, labels: {job: report}}
    spec:
      mode: Pipeline
      pipeline:
      - step: one
        functionRef: {name: fn}
status: {lastScheduleTime: "2024-01-01T00:00:00Z"}
`)
	got, err := TemplateOperation(cron)
	if err != nil {
		t.Fatal(err)
	}
	// The template's metadata and spec, named after the CronOperation, as
	// crossplane operation render makes it.
	want := mustObject(t, `apiVersion: ops.crossplane.io/v1alpha1
kind: Operation
metadata: {name: nightly, labels: {job: report}}
spec:
  mode: Pipeline
  pipeline:
  - step: one
    functionRef: {name: fn}
`)
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Operation (-want +got):\n%s", d)
	}
	for _, tc := range []struct{ yaml, err string }{
		{"apiVersion: ops.crossplane.io/v1alpha1\nkind: WatchOperation\nmetadata: {name: w}\nspec: {watch: {apiVersion: v1, kind: ConfigMap}}\n", "WatchOperation/w has no spec.operationTemplate"},
		{"apiVersion: ops.crossplane.io/v1alpha1\nkind: CronOperation\nspec: {operationTemplate: {spec: {}}}\n", "the CronOperation needs metadata.name"},
		{"apiVersion: ops.crossplane.io/v1alpha1\nkind: Operation\nmetadata: {name: a}\n", "is not a CronOperation or WatchOperation"},
		// A misspelt key is named, not taken for a template left out.
		{"apiVersion: ops.crossplane.io/v1alpha1\nkind: CronOperation\nmetadata: {name: nightly}\nspec: {schedule: \"0 2 * * *\", operationtemplate: {spec: {}}}\n", `CronOperation/nightly: unknown field "operationtemplate" at spec; did you mean "operationTemplate"?`},
		{"apiVersion: ops.crossplane.io/v1alpha1\nkind: WatchOperation\nmetadata: {name: w}\nspec: {watch: {apiVersion: v1, kind: ConfigMap}, operationTemplate: {specs: {pipeline: []}}}\n", `WatchOperation/w: unknown field "specs" at spec.operationTemplate; did you mean "spec"?`},
		{"apiVersion: ops.crossplane.io/v1alpha1\nkind: WatchOperation\nmetadata: {name: w}\nspec: {watch: {apiVersion: v1, kind: ConfigMap, namespce: apps}, operationTemplate: {spec: {}}}\n", `WatchOperation/w: unknown field "namespce" at spec.watch; did you mean "namespace"?`},
	} {
		_, err := TemplateOperation(mustObject(t, tc.yaml))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: got %v, want %q", tc.yaml, err, tc.err)
		}
	}
}

func TestWatchedOperation(t *testing.T) {
	op, err := ParseOperation(mustObject(t, `apiVersion: ops.crossplane.io/v1alpha1
kind: Operation
metadata: {name: on-change}
spec:
  pipeline:
  - step: one
    functionRef: {name: fn}
    requirements:
      requiredResources:
      - {requirementName: own, apiVersion: v1, kind: Secret, name: s, namespace: ops}
  - step: two
    functionRef: {name: fn}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, watched string
		want          RequiredResource
	}{
		{"namespaced", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: apps}\n",
			RequiredResource{RequirementName: RequirementWatchedResource, APIVersion: "v1", Kind: "ConfigMap", Name: ptr("app"), Namespace: ptr("apps")}},
		{"cluster_scoped", "apiVersion: example.org/v1\nkind: Cluster\nmetadata: {name: prod}\n",
			RequiredResource{RequirementName: RequirementWatchedResource, APIVersion: "example.org/v1", Kind: "Cluster", Name: ptr("prod")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := WatchedOperation(op, mustObject(t, tc.watched))
			if err != nil {
				t.Fatal(err)
			}
			// Each step requires it, after what it requires itself; the
			// printed Operation says so too.
			if n := len(got.Steps[0].Requirements.RequiredResources); n != 2 || got.Steps[0].Requirements.RequiredResources[0].RequirementName != "own" {
				t.Errorf("step one requires %+v", got.Steps[0].Requirements.RequiredResources)
			}
			for _, s := range got.Steps {
				rrs := s.Requirements.RequiredResources
				if d := cmp.Diff(tc.want, rrs[len(rrs)-1]); d != "" {
					t.Errorf("step %s (-want +got):\n%s", s.Step, d)
				}
			}
			printed, _ := lookup(got.Object, "spec", "pipeline").([]any)
			if len(printed) != 2 || lookup(Object(printed[1].(map[string]any)), "requirements", "requiredResources") == nil {
				t.Errorf("the printed spec lacks the requirement: %v", printed)
			}
			// The Operation given is left as it was.
			if op.Steps[1].Requirements != nil || len(op.Steps[0].Requirements.RequiredResources) != 1 {
				t.Errorf("the Operation given was changed: %+v", op.Steps)
			}
		})
	}
}
