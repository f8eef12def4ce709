package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"sort"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/ocifn/ocifn/internal/unknownfield"
)

// defaultRetryLimit is how many failures Crossplane's Operation reconciler
// allows an Operation without a spec.retryLimit.
const defaultRetryLimit = 5

// Operation is what render needs of an ops.crossplane.io Operation.
type Operation struct {
	// Object is the Operation as given.
	Object Object
	Steps  []Step
}

// opsAPIVersion is the one version of Crossplane's Operation kinds, the
// only one the crossplane CLI (v2.5.0) and Crossplane's CRDs (v2.3.4) take.
const opsAPIVersion = "ops.crossplane.io/v1alpha1"

// IsOperation reports whether an object is an ops.crossplane.io/v1alpha1
// Operation.
func IsOperation(o Object) bool {
	return o.Kind() == "Operation" && o.APIVersion() == opsAPIVersion
}

// IsOperationTemplate reports whether an object is an ops.crossplane.io/v1alpha1
// CronOperation or WatchOperation, which make Operations from a template.
func IsOperationTemplate(o Object) bool {
	return (o.Kind() == "CronOperation" || o.Kind() == "WatchOperation") && o.APIVersion() == opsAPIVersion
}

// operationFiles are the Go types the crossplane CLI reads an Operation,
// CronOperation or WatchOperation into, as far as they tell how it reads
// what ocifn prints: the metadata and spec of the Operation and of a
// template.
var operationFiles = map[string]reflect.Type{
	"Operation": reflect.TypeFor[struct {
		Metadata objectMeta      `json:"metadata"`
		Spec     operationSpec   `json:"spec"`
		Status   operationStatus `json:"status"`
	}](),
	"CronOperation":  templateFile,
	"WatchOperation": templateFile,
}

// operationStatus is an Operation's status as Crossplane's Go type has it.
type operationStatus struct {
	Conditions []struct {
		Type               string   `json:"type"`
		Status             string   `json:"status"`
		LastTransitionTime metaTime `json:"lastTransitionTime"`
		Reason             string   `json:"reason"`
		Message            string   `json:"message"`
		ObservedGeneration int64    `json:"observedGeneration"`
	} `json:"conditions"`
	Failures int64 `json:"failures"`
	Pipeline []struct {
		Step   string         `json:"step"`
		Output map[string]any `json:"output"`
	} `json:"pipeline"`
	AppliedResourceRefs []struct {
		APIVersion string  `json:"apiVersion"`
		Kind       string  `json:"kind"`
		Namespace  *string `json:"namespace"`
		Name       string  `json:"name"`
	} `json:"appliedResourceRefs"`
}

// operationKeys are the keys of an Operation the crossplane CLI keeps
// (its Go type has fields for) outside metadata, which is ObjectMeta's,
// and spec, whose other keys render refuses (checkOperationSpec).
var operationKeys = reflect.TypeFor[struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   any             `json:"metadata"`
	Spec       any             `json:"spec"`
	Status     operationStatus `json:"status"`
}]()

var templateFile = reflect.TypeFor[struct {
	Metadata objectMeta `json:"metadata"`
	Spec     struct {
		OperationTemplate struct {
			Metadata objectMeta    `json:"metadata"`
			Spec     operationSpec `json:"spec"`
		} `json:"operationTemplate"`
	} `json:"spec"`
}]()

// ReadOperation reads a file that must hold exactly one object, as
// ReadObject does, and an Operation, CronOperation or WatchOperation in it
// as crossplane operation render reads one, into Crossplane's Go types:
// its metadata and its template's are Kubernetes' ObjectMeta, without the
// keys ObjectMeta does not have, an Operation has no other keys than its
// type's outside its spec (at the top, in its status), and a number or a YAML 1.1 boolean (y,
// off) written for a field of type string (a label, a step's name, a
// required resource's name) is a string ("true", "false").
func ReadOperation(path string) (Object, error) {
	d, err := readOne(path)
	if err != nil {
		return nil, err
	}
	t, ok := operationFiles[d.Object.Kind()]
	if !ok || d.Object.APIVersion() != opsAPIVersion {
		return d.Object, nil
	}
	o, err := parseObjectAs(d.yaml, t)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.Source, err)
	}
	if d.Object.Kind() == "Operation" {
		dropUnknownKeys(map[string]any(o), operationKeys)
	}
	if err := typeMetadata(o, "metadata"); err != nil {
		return nil, fmt.Errorf("%s: %w", d.Source, err)
	}
	if tmpl, ok := lookup(o, "spec", "operationTemplate").(map[string]any); ok {
		if err := typeMetadata(tmpl, "spec.operationTemplate.metadata"); err != nil {
			return nil, fmt.Errorf("%s: %w", d.Source, err)
		}
	}
	return o, nil
}

// typeMetadata replaces o's metadata with what ObjectMeta holds of it.
func typeMetadata(o map[string]any, where string) error {
	md, ok := o["metadata"]
	if !ok {
		return nil
	}
	b, err := json.Marshal(md)
	if err != nil {
		return err
	}
	var meta objectMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return fmt.Errorf("%s is not Kubernetes' ObjectMeta: %w", where, typeError(err))
	}
	if b, err = json.Marshal(meta); err != nil {
		return err
	}
	var typed map[string]any
	if err := utiljson.Unmarshal(b, &typed); err != nil {
		return err
	}
	o["metadata"] = typed
	return nil
}

// RequirementWatchedResource is the requirement under which Crossplane's
// WatchOperation controller gives each step of the Operations it makes the
// resource that changed.
const RequirementWatchedResource = "ops.crossplane.io/watched-resource"

// TemplateOperation returns the Operation a CronOperation or WatchOperation
// makes from its spec.operationTemplate, as crossplane operation render
// makes it: the template's metadata and spec, named after the
// CronOperation or WatchOperation (Crossplane's controllers name each
// Operation they make anew, from the time or the watched resource).
func TemplateOperation(o Object) (Object, error) {
	if !IsOperationTemplate(o) {
		return nil, fmt.Errorf("%s (apiVersion %q) is not a CronOperation or WatchOperation (ops.crossplane.io/v1alpha1)", o.Describe(), o.APIVersion())
	}
	if o.Name() == "" {
		return nil, fmt.Errorf("the %s needs metadata.name, which names its Operation", o.Kind())
	}
	// A key the spec does not have is named first: a misspelt
	// operationTemplate would otherwise be reported as none at all.
	if err := checkSpec(o, templateSpecs[o.Kind()]); err != nil {
		return nil, fmt.Errorf("%s: %w", o.Describe(), err)
	}
	tmpl, _ := lookup(o, "spec", "operationTemplate").(map[string]any)
	if tmpl == nil {
		return nil, fmt.Errorf("%s has no spec.operationTemplate", o.Describe())
	}
	t := Object(tmpl).deepCopy()
	op := Object{"apiVersion": o.APIVersion(), "kind": "Operation"}
	if md, ok := t["metadata"].(map[string]any); ok {
		op["metadata"] = md
	}
	op.setMeta("name", o.Name())
	if spec, ok := t["spec"]; ok {
		op["spec"] = spec
	}
	return op, nil
}

// WatchedOperation returns the Operation with the watched resource required
// by each of its steps, under RequirementWatchedResource, as Crossplane's
// WatchOperation controller requires it of the Operations it makes.
func WatchedOperation(op *Operation, watched Object) (*Operation, error) {
	sel := map[string]any{
		"requirementName": RequirementWatchedResource,
		"apiVersion":      watched.APIVersion(),
		"kind":            watched.Kind(),
		"name":            watched.Name(),
	}
	if ns := watched.Namespace(); ns != "" {
		sel["namespace"] = ns
	}
	o := op.Object.deepCopy()
	steps, _ := lookup(o, "spec", "pipeline").([]any)
	for _, s := range steps {
		step, _ := s.(map[string]any)
		if step == nil {
			continue
		}
		req, _ := step["requirements"].(map[string]any)
		if req == nil {
			req = map[string]any{}
			step["requirements"] = req
		}
		rrs, _ := req["requiredResources"].([]any)
		req["requiredResources"] = append(rrs, maps.Clone(sel))
	}
	return ParseOperation(o)
}

// ParseOperation reads an Operation.
func ParseOperation(o Object) (*Operation, error) {
	if !IsOperation(o) {
		return nil, fmt.Errorf("%s (apiVersion %q) is not an Operation (ops.crossplane.io/v1alpha1)", o.Describe(), o.APIVersion())
	}
	if o.Name() == "" {
		return nil, fmt.Errorf("the Operation needs metadata.name")
	}
	if err := checkOperationSpec(o); err != nil {
		return nil, fmt.Errorf("Operation %q: %w", o.Name(), err)
	}
	// Read as the fields' types, as the crossplane CLI and the API server
	// read them: a retryLimit or failures that is not an integer is
	// refused, not taken for none.
	var op struct {
		Spec   operationSpec `json:"spec"`
		Status struct {
			Failures int64 `json:"failures"`
		} `json:"status"`
	}
	if err := remarshal(o, &op); err != nil {
		return nil, fmt.Errorf("Operation %q: %w", o.Name(), err)
	}
	// Crossplane's Operation reconciler leaves alone an Operation being
	// deleted or complete (it runs one once): there is nothing to render.
	// (The crossplane CLI fails on them without saying why.)
	if o.metadata()["deletionTimestamp"] != nil {
		return nil, fmt.Errorf("Operation %q is being deleted (it has a metadata.deletionTimestamp): Crossplane does not run it", o.Name())
	}
	conds, _, _ := conditions(o)
	for _, c := range conds {
		if c["type"] == "Succeeded" && (c["status"] == "True" || c["status"] == "False") {
			return nil, fmt.Errorf("Operation %q is complete (its Succeeded condition is %s): Crossplane runs an Operation once; leave out its status to render it", o.Name(), c["status"])
		}
	}
	if len(op.Spec.Pipeline) == 0 {
		return nil, fmt.Errorf("Operation %q has no spec.pipeline steps", o.Name())
	}
	seen := map[string]bool{}
	for i, s := range op.Spec.Pipeline {
		switch {
		case s.Step == "":
			return nil, fmt.Errorf("Operation %q: pipeline step %d has no name (step:)", o.Name(), i+1)
		case seen[s.Step]:
			return nil, fmt.Errorf("Operation %q: two pipeline steps are named %q", o.Name(), s.Step)
		case s.FunctionRef.Name == "":
			return nil, fmt.Errorf("Operation %q: pipeline step %q has no functionRef.name", o.Name(), s.Step)
		}
		seen[s.Step] = true
	}
	return &Operation{Object: o, Steps: op.Spec.Pipeline}, nil
}

// operationSpec is an Operation's spec as Crossplane's CRD defines it.
type operationSpec struct {
	Mode       string `json:"mode"`
	RetryLimit int64  `json:"retryLimit"`
	Pipeline   []Step `json:"pipeline"`
}

// operationTemplate is a CronOperation's or WatchOperation's
// spec.operationTemplate; its spec is checked as an Operation's.
type operationTemplate struct {
	Metadata map[string]any `json:"metadata"`
	Spec     map[string]any `json:"spec"`
}

// templateSpecs are the specs of the kinds that make Operations, as
// Crossplane's CRDs define them.
var templateSpecs = map[string]reflect.Type{
	"CronOperation": reflect.TypeFor[struct {
		Schedule                string            `json:"schedule"`
		StartingDeadlineSeconds int64             `json:"startingDeadlineSeconds"`
		ConcurrencyPolicy       string            `json:"concurrencyPolicy"`
		SuccessfulHistoryLimit  int32             `json:"successfulHistoryLimit"`
		FailedHistoryLimit      int32             `json:"failedHistoryLimit"`
		OperationTemplate       operationTemplate `json:"operationTemplate"`
	}](),
	"WatchOperation": reflect.TypeFor[struct {
		Watch struct {
			APIVersion  string            `json:"apiVersion"`
			Kind        string            `json:"kind"`
			MatchLabels map[string]string `json:"matchLabels"`
			Namespace   string            `json:"namespace"`
		} `json:"watch"`
		ConcurrencyPolicy      string            `json:"concurrencyPolicy"`
		SuccessfulHistoryLimit int32             `json:"successfulHistoryLimit"`
		FailedHistoryLimit     int32             `json:"failedHistoryLimit"`
		OperationTemplate      operationTemplate `json:"operationTemplate"`
	}](),
}

// checkOperationSpec refuses a key the spec of an Operation does not have,
// naming it and what was likely meant. The API server refuses it (kubectl
// apply: "unknown field"); crossplane operation render drops it, or, the
// case aside, reads it as the field (retrylimit as retryLimit), where
// render would print it and run without it.
func checkOperationSpec(o Object) error {
	return checkSpec(o, reflect.TypeFor[operationSpec]())
}

// checkSpec refuses a key o's spec holds that t has no field for, naming
// it and what was likely meant.
func checkSpec(o Object, t reflect.Type) error {
	doc, err := json.Marshal(o["spec"])
	if err != nil {
		return err
	}
	fs := unknownfield.All(doc, t)
	if len(fs) == 0 {
		return nil
	}
	f := fs[0]
	where := "spec"
	if f.Path != "" {
		where += "." + f.Path
	}
	msg := fmt.Sprintf("unknown field %q at %s", f.Key, where)
	if f.Suggestion != "" {
		msg += fmt.Sprintf("; did you mean %q?", f.Suggestion)
	}
	return errors.New(msg)
}

// OperationInputs is everything an Operation render needs.
type OperationInputs struct {
	Operation *Operation
	// Functions are the runnable functions by Function name.
	Functions map[string]Function
	// Required are resources the functions may ask for.
	Required []Object
	// Credentials are Secrets that steps name in their credentials.
	Credentials []Object
	// Context is the pipeline's context before the first step.
	Context map[string]any
	// BeforeCall, when set, is called before every call of a step.
	BeforeCall func(step, function string, iteration int)
}

// OperationOutputs is what an Operation render produced.
type OperationOutputs struct {
	// Operation is the Operation with the status Crossplane writes: its
	// conditions, each step's output and the resources it applied.
	Operation Object
	// Applied are the resources the pipeline desired, which Crossplane
	// applies as they are.
	Applied []Object
	// Results are the steps' results, as Result objects.
	Results []Object
	// Context is the pipeline's context after the last step.
	Context Object
}

// RenderOperation runs an Operation's pipeline, as Crossplane's Operation
// reconciler does: no composite, each step's output recorded in
// status.pipeline, the desired resources applied as they are. A Fatal
// result stops it with a *FatalError.
func RenderOperation(ctx context.Context, in OperationInputs) (OperationOutputs, error) {
	op := in.Operation.Object.deepCopy()
	op.setMeta("resourceVersion", "999")
	// The reconciler runs an Operation no more once it failed
	// spec.retryLimit times: it marks it failed instead.
	failures, _ := lookup(op, "status", "failures").(int64)
	limit, ok := lookup(op, "spec", "retryLimit").(int64)
	if !ok {
		limit = defaultRetryLimit
	}
	if failures >= limit {
		markConditions(op, newCondition(conditionSynced, "True", "ReconcileSuccess", ""),
			newCondition("Succeeded", "False", "PipelineError", fmt.Sprintf("failure limit of %d reached", limit)))
		return OperationOutputs{Operation: typedOperation(op)}, nil
	}
	// The Operation reconciler marks every condition with the Operation's
	// metadata.generation.
	markConditions(op, newCondition("Succeeded", "Unknown", "PipelineRunning", ""))
	// The reconciler writes the Operation back marked running before it
	// checks the pipeline: a step that requires it gets it so.
	stored := op.deepCopy()
	markConditions(op, newCondition("ValidPipeline", "True", "ValidPipeline", ""))

	desired := &fnv1.State{}
	fctx, err := structpb.NewStruct(in.Context)
	if err != nil {
		return OperationOutputs{}, fmt.Errorf("the context: %w", err)
	}
	// The reconciler adds to what the Operation's status holds: the outputs
	// and applied resources of an earlier run stay.
	st, _ := op["status"].(map[string]any)
	outputs, _ := st["pipeline"].([]any)
	refs, _ := st["appliedResourceRefs"].([]any)
	var results []Object
	cin := Inputs{Required: clusterObjects([]Object{stored}, in.Required, in.Credentials), BeforeCall: in.BeforeCall}
	for _, s := range in.Operation.Steps {
		fn, ok := in.Functions[s.FunctionRef.Name]
		if !ok {
			return OperationOutputs{}, fmt.Errorf("pipeline step %q uses the Function %q, which the functions file does not declare", s.Step, s.FunctionRef.Name)
		}
		req := &fnv1.RunFunctionRequest{Desired: desired, Context: fctx}
		if s.Input != nil {
			if req.Input, err = s.Input.Struct(); err != nil {
				return OperationOutputs{}, fmt.Errorf("pipeline step %q: the input: %w", s.Step, err)
			}
		}
		if req.Credentials, err = credentials(s, cin.Required); err != nil {
			return OperationOutputs{}, fmt.Errorf("pipeline step %q: %w", s.Step, err)
		}
		rsp, err := runStep(ctx, fn, req, cin, s)
		if err != nil {
			return OperationOutputs{}, fmt.Errorf("cannot run pipeline step %q: %w", s.Step, err)
		}
		desired = rsp.GetDesired()
		fctx = rsp.GetContext()
		for _, r := range rsp.GetResults() {
			e := event{reason: "RunPipelineStep", message: fmt.Sprintf("Pipeline step %q: %s", s.Step, r.GetMessage())}
			switch r.GetSeverity() {
			case fnv1.Severity_SEVERITY_FATAL:
				return OperationOutputs{}, &FatalError{Step: s.Step, Message: r.GetMessage(), Results: results}
			case fnv1.Severity_SEVERITY_WARNING:
				e.warning = true
			case fnv1.Severity_SEVERITY_NORMAL:
			default:
				e = event{warning: true, reason: "RunPipelineStep", message: fmt.Sprintf("Pipeline step %q returned a result of unknown severity (assuming warning): %s", s.Step, r.GetMessage())}
			}
			results = append(results, e.object())
		}
		if o := rsp.GetOutput(); o != nil {
			// Crossplane keeps the output as the JSON protojson makes.
			b, err := protojson.Marshal(o)
			if err != nil {
				return OperationOutputs{}, fmt.Errorf("pipeline step %q: the output: %w", s.Step, err)
			}
			out, err := ParseObject(b)
			if err != nil {
				return OperationOutputs{}, fmt.Errorf("pipeline step %q: the output: %w", s.Step, err)
			}
			outputs = setStepOutput(outputs, s.Step, out)
		}
	}

	out := OperationOutputs{Results: results}
	for _, name := range sortedKeys(desired.GetResources()) {
		r := Object(desired.GetResources()[name].GetResource().AsMap())
		if err := fixConditionTimes(r); err != nil {
			return OperationOutputs{}, fmt.Errorf("applied resource %q: %w", name, err)
		}
		out.Applied = append(out.Applied, r)
		ref := map[string]any{"apiVersion": r.APIVersion(), "kind": r.Kind(), "name": r.Name()}
		if r.Namespace() != "" {
			ref["namespace"] = r.Namespace()
		}
		refs = addAppliedRef(refs, ref)
	}
	if len(outputs) > 0 {
		st["pipeline"] = outputs
	}
	if len(refs) > 0 {
		st["appliedResourceRefs"] = refs
	}
	markConditions(op, newCondition(conditionSynced, "True", "ReconcileSuccess", ""), newCondition("Succeeded", "True", "PipelineSuccess", ""))
	out.Operation = typedOperation(op)
	if fctx != nil {
		out.Context = Object{"apiVersion": "render.crossplane.io/v1beta1", "kind": "Context", "fields": fctx.AsMap()}
	}
	return out, nil
}

// setStepOutput records a step's output in status.pipeline, replacing an
// earlier output of the same step.
func setStepOutput(pipeline []any, step string, output Object) []any {
	for _, p := range pipeline {
		if m, _ := p.(map[string]any); m != nil && m["step"] == step {
			m["output"] = map[string]any(output)
			return pipeline
		}
	}
	return append(pipeline, map[string]any{"step": step, "output": map[string]any(output)})
}

// addAppliedRef adds a reference once, keeping the list sorted as
// Crossplane does (by apiVersion, kind, namespace and name run together).
func addAppliedRef(refs []any, ref map[string]any) []any {
	key := func(r any) string {
		m, _ := r.(map[string]any)
		ns, _ := m["namespace"].(string)
		return fmt.Sprint(m["apiVersion"], m["kind"], ns, m["name"])
	}
	for _, r := range refs {
		if key(r) == key(ref) {
			return refs
		}
	}
	refs = append(refs, ref)
	sort.SliceStable(refs, func(i, j int) bool { return key(refs[i]) < key(refs[j]) })
	return refs
}

// typedOperation is the Operation as the crossplane CLI prints it, through
// its Go type: spec.mode always present, and condition times fixed (the CLI
// means to fix them but prints the real ones; see the README).
func typedOperation(op Object) Object {
	spec, _ := op["spec"].(map[string]any)
	if spec == nil {
		spec = map[string]any{}
		op["spec"] = spec
	}
	if _, ok := spec["mode"]; !ok {
		spec["mode"] = ""
	}
	if _, ok := spec["pipeline"]; !ok {
		spec["pipeline"] = nil
	}
	_ = fixConditionTimes(op) // a status of null is printed as given
	return op
}
