package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
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
	for _, sel := range [][]string{{"spec", "compositionSelector", "matchLabels"}, {"spec", "crossplane", "compositionSelector", "matchLabels"}} {
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
// returns the desired XR and composed resources the way Crossplane would
// apply them. A Fatal result stops the pipeline with a *FatalError.
func Render(ctx context.Context, in Inputs) (Outputs, error) {
	xrStruct, err := in.XR.Struct()
	if err != nil {
		return Outputs{}, fmt.Errorf("the composite resource: %w", err)
	}
	observedByName := map[string]Object{}
	for _, d := range in.Observed {
		observedByName[ResourceName(d.Object)] = d.Object
	}
	observedResources, err := ComposedResources(in.Observed, true)
	if err != nil {
		return Outputs{}, fmt.Errorf("observed resources: %w", err)
	}
	observed := &fnv1.State{Composite: &fnv1.Resource{Resource: xrStruct}, Resources: observedResources}
	desired := &fnv1.State{}
	fctx, err := structpb.NewStruct(in.Context)
	if err != nil {
		return Outputs{}, fmt.Errorf("the context: %w", err)
	}

	var (
		results    []Object
		conditions []Object
	)
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
		if req.Credentials, err = credentials(s, in.Credentials); err != nil {
			return Outputs{}, fmt.Errorf("pipeline step %q: %w", s.Step, err)
		}
		rsp, err := runStep(ctx, fn, req, in, s)
		if err != nil {
			return Outputs{}, fmt.Errorf("cannot run pipeline step %q: %w", s.Step, err)
		}
		for _, r := range rsp.GetResults() {
			res := Object{
				"apiVersion": "render.crossplane.io/v1beta1",
				"kind":       "Result",
				"step":       s.Step,
				"severity":   r.GetSeverity().String(),
				"message":    r.GetMessage(),
			}
			if r.Reason != nil {
				res["reason"] = r.GetReason()
			}
			results = append(results, res)
			if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
				return Outputs{}, &FatalError{Step: s.Step, Message: r.GetMessage(), Results: results}
			}
		}
		for _, c := range rsp.GetConditions() {
			conditions = append(conditions, condition(c))
		}
		desired = rsp.GetDesired()
		if desired == nil {
			desired = &fnv1.State{}
		}
		fctx = rsp.GetContext()
	}

	out := Outputs{Results: results}
	var unready []string
	for _, name := range sortedKeys(desired.GetResources()) {
		r := desired.GetResources()[name]
		if r.GetReady() != fnv1.Ready_READY_TRUE {
			unready = append(unready, name)
		}
		cd := Object(r.GetResource().AsMap())
		if o, ok := observedByName[name]; ok {
			// The resource exists: Crossplane keeps its identity.
			for _, k := range []string{"namespace", "name", "generateName"} {
				cd.setMeta(k, o.metaString(k))
			}
		}
		if err := setComposedMetadata(cd, in.XR, name); err != nil {
			return Outputs{}, fmt.Errorf("composed resource %q: %w", name, err)
		}
		out.Composed = append(out.Composed, cd)
	}

	xr := Object(desired.GetComposite().GetResource().AsMap())
	// The pipeline returns only what it wants of the XR; its identity comes
	// from the input.
	xr["apiVersion"], xr["kind"] = in.XR.APIVersion(), in.XR.Kind()
	xr.setMeta("name", in.XR.Name())
	xr.setMeta("namespace", in.XR.Namespace())
	ready := Object{"type": "Ready", "status": "True", "reason": "Available", "lastTransitionTime": conditionTime}
	switch {
	case desired.GetComposite().GetReady() == fnv1.Ready_READY_FALSE:
		ready = Object{"type": "Ready", "status": "False", "reason": "Creating", "lastTransitionTime": conditionTime}
	case desired.GetComposite().GetReady() == fnv1.Ready_READY_UNSPECIFIED && len(unready) > 0:
		ready = Object{"type": "Ready", "status": "False", "reason": "Creating", "lastTransitionTime": conditionTime,
			"message": "Unready resources: " + firstNAndMore(3, unready)}
	}
	setCondition(xr, ready)
	for _, c := range conditions {
		switch c["type"] {
		case "Ready", "Synced", "Healthy":
			// Crossplane owns these; functions cannot set them.
			continue
		}
		setCondition(xr, c)
	}
	out.XR = xr
	if fctx != nil {
		out.Context = Object{"apiVersion": "render.crossplane.io/v1beta1", "kind": "Context", "fields": fctx.AsMap()}
	}
	return out, nil
}

// runStep calls a step's function, again and again while it asks for
// required resources it has not been given yet (at most
// maxRequirementsIterations times), as Crossplane does.
func runStep(ctx context.Context, fn Function, req *fnv1.RunFunctionRequest, in Inputs, s Step) (*fnv1.RunFunctionResponse, error) {
	var asked *fnv1.Requirements
	for i := 0; i <= maxRequirementsIterations; i++ {
		req.Meta = &fnv1.RequestMeta{Tag: tag(req)}
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
		req.RequiredResources = fetchAll(asked.GetResources(), in.Required)
		req.Context = rsp.GetContext()
	}
	return nil, fmt.Errorf("the function kept asking for different required resources; gave up after %d calls", maxRequirementsIterations+1)
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
	sorted := append([]Object(nil), from...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name() < sorted[j].Name() })
	out := &fnv1.Resources{}
	for _, o := range sorted {
		if o.APIVersion() != sel.GetApiVersion() || o.Kind() != sel.GetKind() {
			continue
		}
		if sel.Namespace != nil && sel.GetNamespace() != o.Namespace() {
			continue
		}
		switch m := sel.GetMatch().(type) {
		case *fnv1.ResourceSelector_MatchName:
			if m.MatchName != o.Name() {
				continue
			}
		case *fnv1.ResourceSelector_MatchLabels:
			if !hasLabels(o.Labels(), m.MatchLabels.GetLabels()) {
				continue
			}
		default:
			continue
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

// credentials gives a step the data of the Secrets its credentials name.
func credentials(s Step, secrets []Object) (map[string]*fnv1.Credentials, error) {
	if len(s.Credentials) == 0 {
		return nil, nil
	}
	out := map[string]*fnv1.Credentials{}
	for _, c := range s.Credentials {
		if c.Source != "Secret" || c.SecretRef == nil {
			continue
		}
		sec := findSecret(secrets, c.SecretRef.Namespace, c.SecretRef.Name)
		if sec == nil {
			return nil, fmt.Errorf("credentials %q: no Secret %s/%s in the function credentials file", c.Name, c.SecretRef.Namespace, c.SecretRef.Name)
		}
		data := map[string][]byte{}
		if d, ok := sec["data"].(map[string]any); ok {
			for k, v := range d {
				s, _ := v.(string)
				b, err := base64.StdEncoding.DecodeString(s)
				if err != nil {
					return nil, fmt.Errorf("credentials %q: Secret %s/%s: data.%s is not base64", c.Name, c.SecretRef.Namespace, c.SecretRef.Name, k)
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
		out[c.Name] = &fnv1.Credentials{Source: &fnv1.Credentials_CredentialData{CredentialData: &fnv1.CredentialData{Data: data}}}
	}
	return out, nil
}

func findSecret(secrets []Object, ns, name string) Object {
	for _, s := range secrets {
		if s.Kind() == "Secret" && s.Name() == name && s.Namespace() == ns {
			return s
		}
	}
	return nil
}

// setComposedMetadata adds what Crossplane adds to every composed resource:
// a generated name unless it has one, the XR's namespace, the resource name
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
	} else if ref, ok := lookup(xr, "spec", "claimRef").(map[string]any); ok {
		n, _ := ref["name"].(string)
		ns, _ := ref["namespace"].(string)
		cd.addToMetaMap("labels", map[string]string{LabelClaimName: n, LabelClaimNamespace: ns})
	}

	uid := xr.metaString("uid")
	owner := map[string]any{
		"apiVersion": xr.APIVersion(), "kind": xr.Kind(), "name": xr.Name(), "uid": uid,
		"controller": true, "blockOwnerDeletion": true,
	}
	md := cd.ensureMetadata()
	refs, _ := md["ownerReferences"].([]any)
	for i, r := range refs {
		ref, _ := r.(map[string]any)
		if c, _ := ref["controller"].(bool); !c {
			continue
		}
		if ref["uid"] != uid {
			return fmt.Errorf("it is already controlled by %v %v (uid %v)", ref["kind"], ref["name"], ref["uid"])
		}
		refs[i] = owner
		return nil
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
	if c.Message != nil {
		o["message"] = c.GetMessage()
	}
	return o
}

// setCondition sets a condition in status.conditions, replacing one of the
// same type.
func setCondition(o, c Object) {
	st, _ := o["status"].(map[string]any)
	if st == nil {
		st = map[string]any{}
		o["status"] = st
	}
	conds, _ := st["conditions"].([]any)
	for i, e := range conds {
		if m, ok := e.(map[string]any); ok && m["type"] == c["type"] {
			conds[i] = map[string]any(c)
			return
		}
	}
	st["conditions"] = append(conds, map[string]any(c))
}

// firstNAndMore lists names as Crossplane does in messages: "a, b, c, and 2
// more".
func firstNAndMore(n int, names []string) string {
	s := append([]string(nil), names...)
	sort.Strings(s)
	if len(s) > n {
		return fmt.Sprintf("%s, and %d more", strings.Join(s[:n], ", "), len(s)-n)
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
