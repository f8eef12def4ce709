package pipeline

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ocifn/ocifn/internal/k8sname"
)

// maxRequirementsIterations caps how often one step is called again to give
// it the resources it asked for (Crossplane's own limit).
const maxRequirementsIterations = 5

// conditionTime is the lastTransitionTime of every condition render writes:
// a real time would make every output differ (crossplane render does the
// same).
const conditionTime = "2024-01-01T00:00:00Z"

// A Function runs one RunFunction call: an adaptor.Function running an image
// in containers, or a client of a function that is already running.
type Function interface {
	Run(ctx context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error)
}

// Inputs is everything a render needs.
type Inputs struct {
	// XR is the composite resource.
	XR Object
	// Composition is the Composition of mode Pipeline to run.
	Composition *Composition
	// Functions are the runnable functions by Function name.
	Functions map[string]Function
	// Schema is where the XR keeps Crossplane's fields.
	Schema Schema
	// Observed are the composed resources that exist already, each named by
	// its crossplane.io/composition-resource-name annotation.
	Observed []Document
	// Required are resources the functions may ask for (extra or required
	// resources), matched by apiVersion, kind and name or labels.
	Required []Object
	// Credentials are Secrets that steps name in their credentials.
	Credentials []Object
	// Context is the pipeline's context before the first step.
	Context map[string]any
	// BeforeCall, when set, is called before every call of a step (several
	// per step when a function asks for required resources).
	BeforeCall func(step, function string, iteration int)
}

// Outputs is what a render produced.
type Outputs struct {
	// XR is the composite resource: its identity and what the pipeline
	// desires of it (status, conditions).
	XR Object
	// Composed are the desired composed resources, sorted by name, with the
	// metadata Crossplane adds.
	Composed []Object
	// Results are the non-fatal results of every step, as Result objects.
	Results []Object
	// Context is the pipeline's context after the last step, as a Context
	// object.
	Context Object
}

// FatalError is a Fatal result returned by a pipeline step.
type FatalError struct {
	Step    string
	Message string
	// Results are the results of the steps before, and of this step.
	Results []Object
}

func (e *FatalError) Error() string {
	return fmt.Sprintf("pipeline step %q returned a fatal result: %s", e.Step, e.Message)
}

// Check reports mistakes in the inputs before anything runs: the XR and
// the Composition do not go together, or a step names a Function that is
// not declared.
func Check(xr Object, comp *Composition, functions []string) error {
	if xr.APIVersion() == "" || xr.Kind() == "" || xr.Name() == "" {
		return fmt.Errorf("the composite resource needs apiVersion, kind and metadata.name")
	}
	ref := comp.CompositeTypeRef
	if ref.Kind != xr.Kind() {
		return fmt.Errorf("Composition %q is for kind %s (compositeTypeRef.kind), the XR is a %s", comp.Name, ref.Kind, xr.Kind())
	}
	if ref.APIVersion != xr.APIVersion() {
		return fmt.Errorf("Composition %q is for apiVersion %s (compositeTypeRef.apiVersion), the XR is %s", comp.Name, ref.APIVersion, xr.APIVersion())
	}
	// Only spec.crossplane's selector is checked, a legacy XR's
	// spec.compositionSelector is not: crossplane render reads the XR with
	// the modern schema, whatever its XRD.
	sel := []string{"spec", "crossplane", "compositionSelector", "matchLabels"}
	labels, _ := lookup(xr, sel...).(map[string]any)
	for _, k := range sortedKeys(labels) {
		want, _ := labels[k].(string)
		got, ok := comp.Labels[k]
		switch {
		case !ok:
			return fmt.Errorf("Composition %q lacks the label %s, which the XR's %s asks for", comp.Name, k, strings.Join(sel, "."))
		case got != want:
			return fmt.Errorf("Composition %q has the label %s=%q; the XR's %s asks for %q", comp.Name, k, got, strings.Join(sel, "."), want)
		}
	}
	known := map[string]bool{}
	for _, f := range functions {
		known[f] = true
	}
	for _, s := range comp.Steps {
		if !known[s.FunctionRef.Name] {
			return fmt.Errorf("pipeline step %q uses the Function %q, which the functions file does not declare", s.Step, s.FunctionRef.Name)
		}
	}
	return nil
}

// Render runs the Composition's pipeline for the XR, step by step, each
// step seeing the desired state and context the previous one returned, and
// returns what Crossplane's reconciler would write: the XR (its identity,
// resource references and status) and the composed resources it applies,
// with the metadata Crossplane adds. A Fatal result stops the pipeline with
// a *FatalError.
func Render(ctx context.Context, in Inputs) (Outputs, error) {
	xr, stored, err := reconciledXR(in)
	if err != nil {
		return Outputs{}, err
	}
	early, out, done := beforeComposing(xr)
	if done {
		return out, nil
	}
	xr = observedXR(in, xr)
	if configures(in) {
		stored = xr
	}
	xrStruct, err := xr.Struct()
	if err != nil {
		return Outputs{}, fmt.Errorf("the composite resource: %w", err)
	}
	observedByName := map[string]Object{}
	var observedDocs []Document
	for _, d := range in.Observed {
		// Crossplane observes the composed resources the XR references
		// by name; it skips a reference without one (an observed resource
		// without metadata.name), which stays in the cluster.
		if d.Object.Name() == "" {
			continue
		}
		observedByName[ResourceName(d.Object)] = d.Object
		observedDocs = append(observedDocs, d)
	}
	observedResources, err := ComposedResources(observedDocs, true)
	if err != nil {
		return Outputs{}, fmt.Errorf("observed resources: %w", err)
	}
	// What a step may ask for is what the cluster holds: the XR and its
	// composed resources too, not only --required-resources.
	var cluster []Object
	for _, d := range in.Observed {
		cluster = append(cluster, d.Object)
	}
	stepIn := in
	stepIn.Required = clusterObjects(append([]Object{stored}, cluster...), in.Required, in.Credentials)
	// Crossplane observes connection details in the Secrets the XR (a
	// legacy one: v2 XRs have none) and its composed resources write them
	// to, as its cluster holds them.
	var xrConn map[string][]byte
	if in.Schema == SchemaLegacy {
		if xrConn, err = connectionDetails(xr, stepIn.Required); err != nil {
			return Outputs{}, fmt.Errorf("the composite resource: %w", err)
		}
	}
	for name, r := range observedResources {
		if r.ConnectionDetails, err = connectionDetails(observedByName[name], stepIn.Required); err != nil {
			return Outputs{}, fmt.Errorf("observed resource %q: %w", name, err)
		}
	}
	observed := &fnv1.State{Composite: &fnv1.Resource{Resource: xrStruct, ConnectionDetails: xrConn}, Resources: observedResources}
	desired := &fnv1.State{}
	fctx, err := structpb.NewStruct(in.Context)
	if err != nil {
		return Outputs{}, fmt.Errorf("the context: %w", err)
	}

	var (
		events       = early
		fnConditions []Object
		// claimTypes are the types of the conditions a function set for
		// the claim too (TARGET_COMPOSITE_AND_CLAIM), in order.
		claimTypes []string
		results    []Object
	)
	// The reconciler records that it selected the Composition, unless the
	// XR already references it.
	if ref, _ := lookup(in.XR, in.Schema.path("compositionRef")...).(map[string]any); len(ref) != 1 || ref["name"] != in.Composition.Name {
		events = append(events, event{reason: reasonSelectComposition, message: "Successfully selected composition: " + in.Composition.Name})
	}
	for _, s := range in.Composition.Steps {
		fn, ok := in.Functions[s.FunctionRef.Name]
		if !ok {
			return Outputs{}, fmt.Errorf("pipeline step %q uses the Function %q, which the functions file does not declare", s.Step, s.FunctionRef.Name)
		}
		req := &fnv1.RunFunctionRequest{Observed: observed, Desired: desired, Context: fctx}
		if s.Input != nil {
			if req.Input, err = s.Input.Struct(); err != nil {
				return Outputs{}, fmt.Errorf("pipeline step %q: the input: %w", s.Step, err)
			}
		}
		if req.Credentials, err = credentials(s, stepIn.Required); err != nil {
			return Outputs{}, fmt.Errorf("pipeline step %q: %w", s.Step, err)
		}
		rsp, err := runStep(ctx, fn, req, stepIn, s)
		if err != nil {
			return Outputs{}, fmt.Errorf("cannot run pipeline step %q: %w", s.Step, err)
		}
		desired = rsp.GetDesired()
		fctx = rsp.GetContext()
		for _, c := range rsp.GetConditions() {
			fnConditions = append(fnConditions, condition(c))
			if c.GetTarget() == fnv1.Target_TARGET_COMPOSITE_AND_CLAIM && !isSystemCondition(c.GetType()) {
				claimTypes = append(claimTypes, c.GetType())
			}
		}
		for _, r := range rsp.GetResults() {
			reason := r.GetReason()
			if reason == "" {
				reason = reasonComposeResources
			}
			e := event{reason: reason, message: fmt.Sprintf("Pipeline step %q: %s", s.Step, r.GetMessage())}
			switch r.GetSeverity() {
			case fnv1.Severity_SEVERITY_FATAL:
				return Outputs{}, &FatalError{Step: s.Step, Message: r.GetMessage(), Results: results}
			case fnv1.Severity_SEVERITY_WARNING:
				e.warning = true
			case fnv1.Severity_SEVERITY_NORMAL:
			default:
				e = event{warning: true, reason: reason, message: fmt.Sprintf("Pipeline step %q returned a result of unknown severity (assuming warning): %s", s.Step, r.GetMessage())}
			}
			events = append(events, e)
			results = append(results, e.object())
		}
	}

	out = Outputs{}
	var unready []string
	uid := xr.metaString("uid")
	for _, name := range sortedKeys(desired.GetResources()) {
		r := desired.GetResources()[name]
		if r.GetReady() != fnv1.Ready_READY_TRUE {
			unready = append(unready, name)
		}
		cd := Object(r.GetResource().AsMap())
		if md, ok := cd["metadata"]; ok {
			if _, isObject := md.(map[string]any); !isObject {
				// Crossplane cannot set a name (nor anything else) in
				// metadata that is not an object, and refuses the empty one.
				return Outputs{}, fmt.Errorf("cannot apply composed resource %q because it has an invalid name \"\". Must be a valid RFC 1123 subdomain name. (Its metadata is %s, not an object.)", name, jsonString(md))
			}
		}
		if o, ok := observedByName[name]; ok {
			// The resource exists: Crossplane keeps its identity.
			for _, k := range []string{"namespace", "name", "generateName"} {
				cd.setMeta(k, o.metaString(k))
			}
		}
		if ns := xr.Namespace(); ns != "" && cd.Namespace() != "" && cd.Namespace() != ns {
			events = append(events, event{warning: true, reason: reasonNamespaceOverridden,
				message: fmt.Sprintf("cannot create composed resource %q in namespace %q, using XR namespace %q instead", name, cd.Namespace(), ns)})
		}
		if err := setComposedMetadata(cd, xr, name); err != nil {
			return Outputs{}, fmt.Errorf("composed resource %q: %w", name, err)
		}
		if cd.Name() == "" && cd.metaString("generateName") != "" {
			cd.setMeta("name", ChildName(cd.metaString("generateName"), uid, name))
		}
		if !validName(cd) {
			// Crossplane refuses it, as the API server would.
			return Outputs{}, fmt.Errorf("cannot apply composed resource %q because it has an invalid name %q. Must be a valid RFC 1123 subdomain name.", name, cd.Name())
		}
		if err := fixConditionTimes(cd); err != nil {
			return Outputs{}, fmt.Errorf("composed resource %q: %w", name, err)
		}
		// Crossplane prints a composed resource as a typed object, whose
		// apiVersion and kind are there even when empty.
		for _, k := range []string{"apiVersion", "kind"} {
			if _, ok := cd[k]; !ok {
				cd[k] = ""
			}
		}
		out.Composed = append(out.Composed, cd)
	}

	out.XR = renderedXR(in, xr, desired, out.Composed, fnConditions, unready)
	if _, isObject := out.XR["status"].(map[string]any); isObject && in.Schema == SchemaLegacy && len(claimTypes) > 0 {
		setClaimConditionTypes(out.XR, claimTypes)
	}
	// The reconciler writes the XR's status back only when the reconcile
	// changed it (conditions that differ only in time are kept as they
	// were). When it did not, what crossplane render prints is the XR as
	// a configurator last wrote it, whole, if one did.
	if configures(in) && conditionTimesAsWritten(in.XR) && sameJSON(out.XR["status"], in.XR["status"]) {
		out.XR = xr
	}
	// A status the pipeline desired as null fails here, as it fails
	// crossplane render.
	if err := fixConditionTimes(out.XR); err != nil {
		return Outputs{}, fmt.Errorf("the status the pipeline desired of the composite resource: %w", err)
	}
	for _, name := range unready {
		events = append(events, event{reason: reasonComposeResources, message: fmt.Sprintf("Composed resource %q is not yet ready", name)})
	}
	for _, e := range events {
		out.Results = append(out.Results, e.object())
	}
	if fctx != nil {
		out.Context = Object{"apiVersion": "render.crossplane.io/v1beta1", "kind": "Context", "fields": fctx.AsMap()}
	}
	return out, nil
}

// reconciledXR is the XR as Crossplane's reconciler holds it before it
// looks at the Composition: a uid, a resourceVersion, references to the
// observed composed resources and a Responsive condition. stored is the XR
// as crossplane render's cluster holds it then: the same without the
// condition, which the reconciler marks only in memory.
func reconciledXR(in Inputs) (xr, stored Object, err error) {
	xr = in.XR.deepCopy()
	if xr.metaString("uid") == "" {
		xr.setMeta("uid", XRUID(xr))
	}
	for _, d := range in.Observed {
		ref := metav1OwnerController(d.Object)
		if ref != nil && ref["uid"] != xr.metaString("uid") {
			return nil, nil, fmt.Errorf("%s: observed resource %s has a controller reference but is not controlled by the XR", d.Source, d.Object.Name())
		}
		if xr.Namespace() != "" && d.Object.Namespace() != xr.Namespace() {
			return nil, nil, fmt.Errorf("%s: observed resource %s is not in the XR's namespace %s", d.Source, d.Object.Name(), xr.Namespace())
		}
	}
	xr.setMeta("resourceVersion", "999")
	if len(in.Observed) > 0 {
		refs := make([]any, len(in.Observed))
		for i, d := range in.Observed {
			refs[i] = objectRef(d.Object, xr.Namespace() == "")
		}
		setPath(xr, refs, in.Schema.path("resourceRefs")...)
	}
	stored = xr.deepCopy()
	markConditions(xr, newCondition(conditionResponsive, "True", "WatchCircuitClosed", ""))
	return xr, stored, nil
}

// markConditions sets conditions on an XR or Operation as Crossplane's
// reconcilers mark them: through a conditions manager that records the
// object's metadata.generation as their observedGeneration. The conditions
// the XR reconciler marks after the pipeline have none in crossplane
// render's output (by then the XR was written back without its
// generation), so they are set directly.
func markConditions(o Object, cs ...Object) {
	if g, _ := o.metadata()["generation"].(int64); g != 0 {
		for _, c := range cs {
			c["observedGeneration"] = g
		}
	}
	setConditions(o, cs...)
}

// beforeComposing does what Crossplane's reconciler does with the XR
// before it composes, in its order. A paused XR (the crossplane.io/paused
// annotation is "true") or one being deleted (it has a
// metadata.deletionTimestamp) is not composed: no function runs, and the
// reconciler writes the XR back whole with a condition that says why; done
// is true and out is what it wrote. A reconcile request (the
// crossplane.io/reconcile-requested-at annotation) the XR's
// status.lastHandledReconcileAt does not show yet is recorded there, with
// an event.
func beforeComposing(xr Object) (events []event, out Outputs, done bool) {
	if xr.Annotations()[annotationPaused] == "true" {
		markConditions(xr, newCondition(conditionSynced, "False", "ReconcilePaused", "Reconciliation (including deletion) is paused via the pause annotation"))
		events = append(events, event{reason: reasonPaused, message: "Reconciliation is paused via the pause annotation"})
		return nil, wholeXR(xr, events), true
	}
	if token := xr.Annotations()[annotationReconcileRequestedAt]; token != "" {
		if handled, _ := lookup(xr, "status", "lastHandledReconcileAt").(string); handled != token {
			events = append(events, event{reason: reasonReconcileRequestHandled, message: "Handling reconcile request"})
			setPath(xr, token, "status", "lastHandledReconcileAt")
		}
	}
	if xr.metadata()["deletionTimestamp"] != nil {
		// Its finalizer is a no-op in crossplane render: the XR is left
		// as it is, composed resources and all.
		markConditions(xr, newCondition(conditionReady, "False", "Deleting", ""))
		markConditions(xr, newCondition(conditionSynced, "True", "ReconcileSuccess", ""))
		return nil, wholeXR(xr, events), true
	}
	return events, Outputs{}, false
}

// wholeXR is what render prints of an XR the reconciler wrote back whole.
func wholeXR(xr Object, events []event) Outputs {
	// markConditions made its status an object: this cannot fail.
	_ = fixConditionTimes(xr)
	out := Outputs{XR: xr}
	for _, e := range events {
		out.Results = append(out.Results, e.object())
	}
	return out
}

// configures reports whether Crossplane's configurators write the XR back
// to the cluster before it composes, as observedXR has it: to add the
// crossplane.io/composite label, or a legacy XR's connection Secret
// reference. Otherwise the cluster keeps the XR as it was given.
func configures(in Inputs) bool {
	if in.XR.Labels()[LabelComposite] == "" {
		return true
	}
	return in.Schema == SchemaLegacy && in.Composition.WriteConnectionSecretsToNamespace != "" && lookup(in.XR, "spec", "writeConnectionSecretToRef") == nil
}

// observedXR is the XR as the functions observe it: the reconciled XR with
// the crossplane.io/composite label, the selected Composition and, for a
// legacy XR, where its connection Secret goes.
func observedXR(in Inputs, xr Object) Object {
	if xr.Labels()[LabelComposite] == "" {
		xr.addToMetaMap("labels", map[string]string{LabelComposite: xr.Name()})
	}
	setPath(xr, map[string]any{"name": in.Composition.Name}, in.Schema.path("compositionRef")...)
	// A legacy XR's connection Secret is named after its uid, in the
	// Composition's namespace for them, unless the XR names one.
	if ns := in.Composition.WriteConnectionSecretsToNamespace; in.Schema == SchemaLegacy && ns != "" && lookup(xr, "spec", "writeConnectionSecretToRef") == nil {
		setPath(xr, map[string]any{"name": xr.metaString("uid"), "namespace": ns}, "spec", "writeConnectionSecretToRef")
	}
	return xr
}

// renderedXR is the XR as Crossplane writes it at the end of a reconcile:
// its identity, references to the composed resources, and the status the
// pipeline desired with Crossplane's conditions added.
func renderedXR(in Inputs, observed Object, desired *fnv1.State, composed []Object, fnConditions []Object, unready []string) Object {
	xr := Object{"apiVersion": in.XR.APIVersion(), "kind": in.XR.Kind()}
	xr.setMeta("name", in.XR.Name())
	xr.setMeta("namespace", in.XR.Namespace())
	refs := make([]any, len(composed))
	for i, cd := range composed {
		ref := objectRef(cd, observed.Namespace() == "")
		// Crossplane's reference (meta.ReferenceTo) keeps the composed
		// resource's uid, which a function that passes an observed
		// resource on leaves in it.
		if uid := cd.metaString("uid"); uid != "" {
			ref["uid"] = uid
		}
		refs[i] = ref
	}
	sort.SliceStable(refs, func(i, j int) bool { return refKey(refs[i]) < refKey(refs[j]) })
	setPath(xr, refs, in.Schema.path("resourceRefs")...)

	// Only the desired status (and a top-level conditions field) of the
	// desired XR reach it: Crossplane patches the XR's status subresource.
	d := Object(desired.GetComposite().GetResource().AsMap())
	if c, ok := d["conditions"]; ok {
		xr["conditions"] = c
	}
	status := Object{}
	if st, ok := d["status"]; ok {
		if _, isObject := st.(map[string]any); !isObject {
			// Crossplane cannot set conditions in a status that is not an
			// object (null, a string, a list): it writes it as it is.
			xr["status"] = st
			return xr
		}
		status["status"] = st
	}
	before, _, _ := conditions(observed)
	setConditions(status, before...)
	for _, c := range fnConditions {
		if !isSystemCondition(fmt.Sprint(c["type"])) {
			setConditions(status, c)
		}
	}
	ready := newCondition(conditionReady, "True", "Available", "")
	if len(unready) > 0 {
		ready = newCondition(conditionReady, "False", "Creating", "Unready resources: "+firstNAndMore(3, unready))
	}
	switch desired.GetComposite().GetReady() {
	case fnv1.Ready_READY_TRUE:
		ready = newCondition(conditionReady, "True", "Available", "")
	case fnv1.Ready_READY_FALSE:
		ready = newCondition(conditionReady, "False", "Creating", "")
	}
	setConditions(status, newCondition(conditionSynced, "True", "ReconcileSuccess", ""), ready)
	xr["status"] = status["status"]
	return xr
}

// jsonString is v as JSON, for messages.
func jsonString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// sameJSON reports whether a and b are the same JSON value: numbers read
// from a file (int64) and from a function (float64) compare by value.
func sameJSON(a, b any) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// setClaimConditionTypes records, on a legacy XR, which of its conditions
// its claim shows too (status.claimConditionTypes), as Crossplane's
// reconciler does for the conditions a function targets at the claim:
// each type once, in the order set. The XR's earlier list is not carried
// over; crossplane render does not carry it either.
func setClaimConditionTypes(xr Object, types []string) {
	var list []any
	seen := map[string]bool{}
	for _, t := range types {
		if !seen[t] {
			seen[t] = true
			list = append(list, t)
		}
	}
	setPath(xr, list, "status", "claimConditionTypes")
}

// objectRef is a corev1.ObjectReference to o; the namespace only when
// withNamespace (a namespaced XR's references have none).
func objectRef(o Object, withNamespace bool) map[string]any {
	ref := map[string]any{"apiVersion": o.APIVersion(), "kind": o.Kind(), "name": o.Name()}
	if withNamespace && o.Namespace() != "" {
		ref["namespace"] = o.Namespace()
	}
	for k, v := range ref {
		if v == "" {
			delete(ref, k)
		}
	}
	return ref
}

func refKey(r any) string {
	m, _ := r.(map[string]any)
	s := func(k string) string { v, _ := m[k].(string); return v }
	return s("apiVersion") + s("kind") + s("name") + s("namespace")
}

// metav1OwnerController returns the owner reference that is o's
// controller, or nil.
func metav1OwnerController(o Object) map[string]any {
	refs, _ := o.metadata()["ownerReferences"].([]any)
	for _, r := range refs {
		ref, _ := r.(map[string]any)
		if c, _ := ref["controller"].(bool); c {
			return ref
		}
	}
	return nil
}

// setPath sets a field, creating the objects on its path.
func setPath(o Object, v any, path ...string) {
	cur := map[string]any(o)
	for _, p := range path[:len(path)-1] {
		next, ok := cur[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[p] = next
		}
		cur = next
	}
	cur[path[len(path)-1]] = v
}

// capabilities are what render tells functions it supports: all of
// Crossplane's, as crossplane render declares them. Required schemas are
// among them: a schema a step asks for is answered (as not found, as
// crossplane render answers without --required-schemas).
var capabilities = []fnv1.Capability{
	fnv1.Capability_CAPABILITY_CAPABILITIES,
	fnv1.Capability_CAPABILITY_REQUIRED_RESOURCES,
	fnv1.Capability_CAPABILITY_CREDENTIALS,
	fnv1.Capability_CAPABILITY_CONDITIONS,
	fnv1.Capability_CAPABILITY_REQUIRED_SCHEMAS,
}

// runStep calls a step's function, again and again while it asks for
// required resources it has not been given yet (at most
// maxRequirementsIterations times), as Crossplane does.
func runStep(ctx context.Context, fn Function, req *fnv1.RunFunctionRequest, in Inputs, s Step) (*fnv1.RunFunctionResponse, error) {
	var asked *fnv1.Requirements
	// Resources the step requires up front; each later call gets them too.
	bootstrap := map[string]*fnv1.Resources{}
	bootstrapSchemas := map[string]*fnv1.Schema{}
	if s.Requirements != nil {
		for _, r := range s.Requirements.RequiredSchemas {
			sc, err := requiredSchema(&fnv1.SchemaSelector{ApiVersion: r.APIVersion, Kind: r.Kind})
			if err != nil {
				return nil, fmt.Errorf("required schema %q: %w", r.RequirementName, err)
			}
			bootstrapSchemas[r.RequirementName] = sc
		}
		req.RequiredSchemas = maps.Clone(bootstrapSchemas)
		for _, r := range s.Requirements.RequiredResources {
			sel := &fnv1.ResourceSelector{ApiVersion: r.APIVersion, Kind: r.Kind, Namespace: r.Namespace}
			if r.Name != nil {
				sel.Match = &fnv1.ResourceSelector_MatchName{MatchName: *r.Name}
			} else {
				sel.Match = &fnv1.ResourceSelector_MatchLabels{MatchLabels: &fnv1.MatchLabels{Labels: r.MatchLabels}}
			}
			bootstrap[r.RequirementName] = fetch(sel, in.Required)
		}
		req.RequiredResources = maps.Clone(bootstrap)
	}
	// Crossplane tags the request once, before the first call: the calls
	// that give the function the resources it asked for keep that tag.
	req.Meta = &fnv1.RequestMeta{Tag: tag(req), Capabilities: capabilities}
	for i := 0; i <= maxRequirementsIterations; i++ {
		if in.BeforeCall != nil {
			in.BeforeCall(s.Step, s.FunctionRef.Name, i)
		}
		rsp, err := fn.Run(ctx, req)
		if err != nil {
			return nil, err
		}
		for _, r := range rsp.GetResults() {
			if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
				return rsp, nil
			}
		}
		if proto.Equal(rsp.GetRequirements(), asked) {
			return rsp, nil
		}
		asked = rsp.GetRequirements()
		req.ExtraResources = fetchAll(asked.GetExtraResources(), in.Required)
		req.RequiredResources = maps.Clone(bootstrap)
		for name, rs := range fetchAll(asked.GetResources(), in.Required) {
			req.RequiredResources[name] = rs
		}
		req.RequiredSchemas = maps.Clone(bootstrapSchemas)
		for name, sel := range asked.GetSchemas() {
			sc, err := requiredSchema(sel)
			if err != nil {
				return nil, fmt.Errorf("required schema %q: %w", name, err)
			}
			req.RequiredSchemas[name] = sc
		}
		req.Context = rsp.GetContext()
	}
	return nil, fmt.Errorf("the function kept asking for different required resources; gave up after %d calls", maxRequirementsIterations+1)
}

// requiredSchema answers a schema a step asks for as crossplane render does
// without --required-schemas (which ocifn render does not have): not found,
// an empty schema; an apiVersion that is not GROUP/VERSION fails the step.
func requiredSchema(sel *fnv1.SchemaSelector) (*fnv1.Schema, error) {
	if strings.Count(sel.GetApiVersion(), "/") > 1 {
		return nil, fmt.Errorf("cannot parse apiVersion %q", sel.GetApiVersion())
	}
	return &fnv1.Schema{}, nil
}

// tag identifies a request by its content, as Crossplane's tags do.
func tag(req *fnv1.RunFunctionRequest) string {
	c := proto.Clone(req).(*fnv1.RunFunctionRequest)
	c.Meta = nil
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// clusterObjects are the objects a step's required resources are found
// among, as crossplane render's in-memory cluster holds them: own (the XR
// as the cluster holds it and its observed composed resources, or the
// Operation), the required resources, then the credentials
// Secrets (a Secret without a kind or an apiVersion is a v1 Secret). An
// object given again under the same apiVersion, kind, namespace and name
// replaces the earlier one, as in that cluster.
func clusterObjects(own, required, secrets []Object) []Object {
	var out []Object
	at := map[string]int{}
	add := func(o Object) {
		k := o.APIVersion() + "\x00" + o.Kind() + "\x00" + o.Namespace() + "\x00" + o.Name()
		if i, ok := at[k]; ok {
			out[i] = o
			return
		}
		at[k] = len(out)
		out = append(out, o)
	}
	for _, o := range append(append([]Object(nil), own...), required...) {
		add(o)
	}
	for _, s := range secrets {
		// The file holds Secrets alone: one that leaves out its
		// apiVersion is still the Secret a step's credentials name.
		if s.Kind() == "" || s.Kind() == "Secret" && s.APIVersion() == "" {
			s = s.deepCopy()
			s["apiVersion"], s["kind"] = "v1", "Secret"
		}
		add(s)
	}
	return out
}

// fetchAll answers resource selectors from the supplied resources. A
// selector that matches nothing gets an empty list.
func fetchAll(sels map[string]*fnv1.ResourceSelector, from []Object) map[string]*fnv1.Resources {
	if len(sels) == 0 {
		return nil
	}
	out := make(map[string]*fnv1.Resources, len(sels))
	for name, sel := range sels {
		out[name] = fetch(sel, from)
	}
	return out
}

func fetch(sel *fnv1.ResourceSelector, from []Object) *fnv1.Resources {
	// In Crossplane's order (xfn.ExistingRequiredResourcesFetcher): by
	// "namespace/name", compared as one string, so that a selector across
	// namespaces gives the function what it would get from Crossplane.
	key := func(o Object) string { return o.Namespace() + "/" + o.Name() }
	sorted := append([]Object(nil), from...)
	sort.SliceStable(sorted, func(i, j int) bool { return key(sorted[i]) < key(sorted[j]) })
	out := &fnv1.Resources{}
	for _, o := range sorted {
		if o.APIVersion() != sel.GetApiVersion() || o.Kind() != sel.GetKind() {
			continue
		}
		// Crossplane lists in the selector's namespace, and in every
		// namespace when it has none or an empty one (client.InNamespace("")).
		if sel.GetNamespace() != "" && sel.GetNamespace() != o.Namespace() {
			continue
		}
		switch m := sel.GetMatch().(type) {
		case *fnv1.ResourceSelector_MatchName:
			// Crossplane gets the resource by namespace and name: no
			// namespace means a cluster-scoped one.
			if m.MatchName != o.Name() || sel.GetNamespace() != o.Namespace() {
				continue
			}
		case *fnv1.ResourceSelector_MatchLabels:
			if !hasLabels(o.Labels(), m.MatchLabels.GetLabels()) {
				continue
			}
		default:
			// No match (neither a name nor labels): Crossplane's fetcher
			// lists every resource of the kind.
		}
		s, err := o.Struct()
		if err != nil {
			continue
		}
		out.Items = append(out.Items, &fnv1.Resource{Resource: s})
	}
	return out
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// credentials gives a step the data of the Secrets its credentials name,
// found among what the cluster holds (see clusterObjects), as Crossplane
// gets them: from --function-credentials or --required-resources alike.
func credentials(s Step, cluster []Object) (map[string]*fnv1.Credentials, error) {
	if len(s.Credentials) == 0 {
		return nil, nil
	}
	out := map[string]*fnv1.Credentials{}
	for _, c := range s.Credentials {
		if c.Source != "Secret" || c.SecretRef == nil {
			continue
		}
		data, ok, err := secretData(cluster, c.SecretRef.Namespace, c.SecretRef.Name)
		if err != nil {
			return nil, fmt.Errorf("credentials %q: %w", c.Name, err)
		}
		if !ok {
			return nil, fmt.Errorf("credentials %q: no Secret %s/%s in the function credentials or the required resources", c.Name, c.SecretRef.Namespace, c.SecretRef.Name)
		}
		out[c.Name] = &fnv1.Credentials{Source: &fnv1.Credentials_CredentialData{CredentialData: &fnv1.CredentialData{Data: data}}}
	}
	return out, nil
}

// connectionDetails are the data of the Secret o's
// spec.writeConnectionSecretToRef names, in o's namespace when it has one
// (else the reference's), when the cluster holds that Secret; nil when it
// does not or o names none.
func connectionDetails(o Object, cluster []Object) (map[string][]byte, error) {
	ref, ok := lookup(o, "spec", "writeConnectionSecretToRef").(map[string]any)
	if !ok {
		return nil, nil
	}
	name, okName := ref["name"].(string)
	refNS, okNS := ref["namespace"].(string)
	if (ref["name"] != nil && !okName) || (ref["namespace"] != nil && !okNS) {
		// Crossplane cannot read such a reference, so it reads no Secret.
		return nil, nil
	}
	ns := o.Namespace()
	if ns == "" {
		ns = refNS
	}
	data, _, err := secretData(cluster, ns, name)
	if err != nil {
		return nil, fmt.Errorf("its connection Secret (spec.writeConnectionSecretToRef): %w", err)
	}
	return data, nil
}

// secretData is the data of the v1 Secret ns/name among the cluster's
// objects (ok is false when there is none), with its stringData merged in:
// the API server stores stringData as data, so in a cluster it is there.
func secretData(cluster []Object, ns, name string) (data map[string][]byte, ok bool, err error) {
	var sec Object
	for _, o := range cluster {
		if o.APIVersion() == "v1" && o.Kind() == "Secret" && o.Name() == name && o.Namespace() == ns {
			sec = o
		}
	}
	if sec == nil {
		return nil, false, nil
	}
	data = map[string][]byte{}
	if d, ok := sec["data"].(map[string]any); ok {
		for k, v := range d {
			s, _ := v.(string)
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, false, fmt.Errorf("Secret %s/%s: data.%s is not base64", ns, name, k)
			}
			data[k] = b
		}
	}
	if d, ok := sec["stringData"].(map[string]any); ok {
		for k, v := range d {
			s, _ := v.(string)
			data[k] = []byte(s)
		}
	}
	return data, true, nil
}

// setComposedMetadata adds what Crossplane adds to every composed resource:
// a generateName unless it has a name, the XR's namespace, the resource name
// annotation, the composite (and claim) labels and the XR as controller.
func setComposedMetadata(cd, xr Object, name string) error {
	prefix := xr.Labels()[LabelComposite]
	if prefix == "" {
		prefix = xr.Name()
	}
	if cd.Name() == "" && cd.metaString("generateName") == "" {
		cd.setMeta("generateName", prefix+"-")
	}
	if xr.Namespace() != "" {
		cd.setMeta("namespace", xr.Namespace())
	}
	cd.addToMetaMap("annotations", map[string]string{AnnotationCompositionResourceName: name})
	cd.addToMetaMap("labels", map[string]string{LabelComposite: prefix})
	xl := xr.Labels()
	if xl[LabelClaimName] != "" && xl[LabelClaimNamespace] != "" {
		cd.addToMetaMap("labels", map[string]string{LabelClaimName: xl[LabelClaimName], LabelClaimNamespace: xl[LabelClaimNamespace]})
	}

	uid := xr.metaString("uid")
	owner := map[string]any{
		"apiVersion": xr.APIVersion(), "kind": xr.Kind(), "name": xr.Name(), "uid": uid,
		"controller": true, "blockOwnerDeletion": true,
	}
	if c := metav1OwnerController(cd); c != nil && c["uid"] != uid {
		return fmt.Errorf("it is already controlled by %v %v (uid %v)", c["kind"], c["name"], c["uid"])
	}
	md := cd.ensureMetadata()
	refs, _ := md["ownerReferences"].([]any)
	for i, r := range refs {
		if ref, _ := r.(map[string]any); ref["uid"] == uid {
			refs[i] = owner
			return nil
		}
	}
	md["ownerReferences"] = append(refs, owner)
	return nil
}

// condition converts a function's condition to a Kubernetes condition.
func condition(c *fnv1.Condition) Object {
	status := "Unknown"
	switch c.GetStatus() {
	case fnv1.Status_STATUS_CONDITION_TRUE:
		status = "True"
	case fnv1.Status_STATUS_CONDITION_FALSE:
		status = "False"
	}
	o := Object{"type": c.GetType(), "status": status, "reason": c.GetReason(), "lastTransitionTime": conditionTime}
	// As Crossplane's condition type: an empty message is left out.
	if c.GetMessage() != "" {
		o["message"] = c.GetMessage()
	}
	return o
}

// firstNAndMore lists names as Crossplane does in messages, sorted: "a, b,
// and c" or "a, b, c, and 2 more".
func firstNAndMore(n int, names []string) string {
	s := append([]string(nil), names...)
	sort.Strings(s)
	switch {
	case len(s) > n:
		return fmt.Sprintf("%s, and %d more", strings.Join(s[:n], ", "), len(s)-n)
	case len(s) == n:
		return fmt.Sprintf("%s, and %s", strings.Join(s[:n-1], ", "), s[n-1])
	}
	return strings.Join(s, ", ")
}

// lookup follows a path of object fields.
func lookup(o Object, path ...string) any {
	var cur any = map[string]any(o)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

// rbacKinds are the kinds whose names may also hold colons
// (system:controller:...), as Kubernetes' RBAC allows.
var rbacKinds = []string{"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}

// validName reports whether a composed resource's name is one Crossplane
// applies: an RFC 1123 subdomain (lower case letters, digits, '-' and '.',
// at most 253 characters), with colons too for RBAC's kinds.
func validName(o Object) bool {
	n := o.Name()
	if group, _, _ := strings.Cut(o.APIVersion(), "/"); group == "rbac.authorization.k8s.io" && slices.Contains(rbacKinds, o.Kind()) {
		n = strings.ReplaceAll(n, ":", "")
	}
	return k8sname.Why(n) == ""
}
