package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/yaml"

	"github.com/ocifn/ocifn/internal/unknownfield"
)

// Annotations ocifn sets on the items it sends a KRM function, and removes
// from what comes back.
const (
	// AnnotationResourceName holds a composed resource's name in the
	// Composition (the key of desired.resources), so that an item maps back.
	AnnotationResourceName = "ocifn.io/composition-resource-name"
	// AnnotationComposite marks the item that is the composite resource
	// (XR), with the value "true".
	AnnotationComposite = "ocifn.io/composite"
)

// annotationLocalConfig marks, with the value "true", an item that kpt and
// kustomize never apply to a cluster: input for later functions, a
// Kptfile, a function's own configuration. Such an item is not composed.
const annotationLocalConfig = "config.kubernetes.io/local-config"

// readerAnnotations are what KRM readers (kyaml's kio) add to the items they
// read and may print back: bookkeeping of the function, not of the
// resource. They are removed from returned items that were not sent with
// them.
var readerAnnotations = regexp.MustCompile(`^(internal\.config\.kubernetes\.io/.*|config\.kubernetes\.io/(index|path|id)|config\.k8s\.io/id|kustomize\.config\.k8s\.io/id)$`)

// KRM is the I/O mode of KRM functions (the kpt/kustomize configuration
// function specification): a ResourceList on stdin and on stdout. Its
// items are the desired composed resources, each annotated with its name
// in the Composition, and the XR, annotated as such; its functionConfig is
// the step's input.
type KRM struct{}

// Name is "krm".
func (KRM) Name() string { return "krm" }

// FailureDecoder is a Codec whose functions can answer even when they exit
// non-zero: a KRM function exits 1 when one of its results is an error and
// still prints its ResourceList. The adaptor asks it before answering a
// failed call with the exit code alone, and adds a Fatal result for the
// exit when the answer has none.
type FailureDecoder interface {
	// DecodeFailure is Decode for a function that exited non-zero. An
	// error means the output holds no answer.
	DecodeFailure(req *fnv1.RunFunctionRequest, stdout []byte) (*fnv1.RunFunctionResponse, error)
}

// resourceList is a KRM ResourceList.
type resourceList struct {
	APIVersion     string           `json:"apiVersion"`
	Kind           string           `json:"kind"`
	Items          []map[string]any `json:"items"`
	FunctionConfig map[string]any   `json:"functionConfig,omitempty"`
	Results        krmResults       `json:"results,omitempty"`
}

// krmResults are a ResourceList's results: a list, or in the spec's older
// versions an object {name, items: [...]}, as kyaml's fn/framework printed
// them before v0.13 (its framework.Result), or {name, results: [...]}.
type krmResults []krmResult

// UnmarshalJSON takes every form, strictly.
func (r *krmResults) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	var list []krmResult
	if len(b) > 0 && b[0] == '{' {
		var wrapped struct {
			Name    string      `json:"name"`
			Items   []krmResult `json:"items"`
			Results []krmResult `json:"results"`
		}
		if err := strictJSON(b, &wrapped); err != nil {
			return err
		}
		list = append(wrapped.Items, wrapped.Results...)
	} else if err := strictJSON(b, &list); err != nil {
		return err
	}
	*r = list
	return nil
}

func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// krmResult is one result, as kyaml's framework.Result prints it.
type krmResult struct {
	Message     string            `json:"message"`
	Severity    string            `json:"severity,omitempty"`
	ResourceRef *krmResourceRef   `json:"resourceRef,omitempty"`
	Field       *krmField         `json:"field,omitempty"`
	File        *krmFile          `json:"file,omitempty"`
	Tags        map[string]string `json:"tags,omitempty"`
}

type krmResourceRef struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Name       string `json:"name,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
}

type krmField struct {
	Path          string `json:"path,omitempty"`
	CurrentValue  any    `json:"currentValue,omitempty"`
	ProposedValue any    `json:"proposedValue,omitempty"`
	// SuggestedValue is what kyaml's framework before v0.13 printed for
	// the proposed value.
	SuggestedValue any `json:"suggestedValue,omitempty"`
}

type krmFile struct {
	Path  string `json:"path,omitempty"`
	Index int    `json:"index,omitempty"`
}

// krmSeverities maps KRM severities to RunFunction's. The specification
// sets no default and kyaml does not count a result without one as an
// error, so it becomes a Warning: seen, but not failing the pipeline.
var krmSeverities = map[string]fnv1.Severity{
	"error":   fnv1.Severity_SEVERITY_FATAL,
	"warning": fnv1.Severity_SEVERITY_WARNING,
	"info":    fnv1.Severity_SEVERITY_NORMAL,
	"":        fnv1.Severity_SEVERITY_WARNING,
}

// krmAPIVersions are the ResourceList versions the specification has had.
var krmAPIVersions = map[string]bool{
	"config.kubernetes.io/v1":       true,
	"config.kubernetes.io/v1beta1":  true,
	"config.kubernetes.io/v1alpha1": true,
}

// Encode renders the request as a ResourceList: the XR first, then the
// desired composed resources sorted by name.
func (KRM) Encode(req *fnv1.RunFunctionRequest) ([]byte, error) {
	rl := resourceList{
		APIVersion:     "config.kubernetes.io/v1",
		Kind:           "ResourceList",
		Items:          []map[string]any{},
		FunctionConfig: structMap(req.GetInput()),
	}
	xr, err := krmComposite(req)
	if err != nil {
		return nil, err
	}
	if xr != nil {
		rl.Items = append(rl.Items, xr)
	}
	desired := req.GetDesired().GetResources()
	for _, name := range keysOf(desired) {
		item := structMap(desired[name].GetResource())
		if item == nil {
			item = map[string]any{}
		}
		if err := setAnnotation(item, AnnotationResourceName, name); err != nil {
			return nil, fmt.Errorf("desired resource %q: %w", name, err)
		}
		rl.Items = append(rl.Items, item)
	}
	b, err := marshalYAML(rl)
	if err != nil {
		return nil, fmt.Errorf("cannot encode the request as a ResourceList: %w", err)
	}
	return b, nil
}

// krmComposite is the XR as the function sees it: the observed XR with
// what earlier steps desired of it laid over, annotated as the composite;
// nil when the call has no XR (an Operation). Its status is only what
// earlier steps desired: Crossplane applies the desired status under one
// field owner, so a field left out of it is removed from the XR. Sent the
// observed status, a function that sets a status field on every run would
// see it unchanged from the second run on, and the field would be dropped
// from the desired XR, removed, then set again, one reconcile in two.
func krmComposite(req *fnv1.RunFunctionRequest) (map[string]any, error) {
	observed := structMap(req.GetObserved().GetComposite().GetResource())
	desired := structMap(req.GetDesired().GetComposite().GetResource())
	if observed == nil && desired == nil {
		return nil, nil
	}
	delete(observed, "status")
	xr := overlay(observed, desired)
	if err := setAnnotation(xr, AnnotationComposite, "true"); err != nil {
		return nil, fmt.Errorf("the composite resource: %w", err)
	}
	return xr, nil
}

// Decode maps the ResourceList the function printed back to a response.
func (k KRM) Decode(req *fnv1.RunFunctionRequest, stdout []byte) (*fnv1.RunFunctionResponse, error) {
	rl, err := parseResourceList(stdout)
	if err != nil {
		return nil, bounded(err)
	}
	rsp, err := k.response(req, rl)
	return rsp, bounded(err)
}

// DecodeFailure answers for a KRM function that exited non-zero with the
// ResourceList it printed, if any: its error results say why.
func (k KRM) DecodeFailure(req *fnv1.RunFunctionRequest, stdout []byte) (*fnv1.RunFunctionResponse, error) {
	return k.Decode(req, stdout)
}

func parseResourceList(stdout []byte) (*resourceList, error) {
	if err := checkText(stdout, "in the krm I/O mode it must print a ResourceList"); err != nil {
		return nil, err
	}
	doc, err := oneDocument(stdout)
	if err != nil {
		return nil, fmt.Errorf("the function's output is not one ResourceList: %w%s", err, hint("krm", stdout))
	}
	// Read as YAML 1.2, as kyaml reads it: a plain on or no is a string.
	doc = quoteYAML11Bools(doc)
	var rl resourceList
	if err := yaml.UnmarshalStrict(doc, &rl); err != nil {
		// The answer is refused, but the results that can be read on
		// their own are not lost behind the part that cannot.
		rs, unreadable := resultsOf[krmResult](doc)
		readable, _ := crossplaneResults(&resourceList{Results: rs}, nil)
		what := "results"
		if unreadable || len(readable) < len(rs) {
			what = "other results"
		}
		return nil, withResults(invalidResourceList(err, doc, stdout), what, readable)
	}
	if rl.Kind != "ResourceList" || !krmAPIVersions[rl.APIVersion] {
		return nil, fmt.Errorf("the function's output is %q %q, not a ResourceList (apiVersion config.kubernetes.io/v1, kind ResourceList)%s", clip(rl.APIVersion, keyBytes), clip(rl.Kind, keyBytes), hint("krm", stdout))
	}
	return &rl, nil
}

// invalidResourceList says why doc, the document of stdout, cannot be
// read as a ResourceList, err the decoder's reason. Another mode's answer
// is told so; in this mode's, a key it does not have is named with its
// path.
func invalidResourceList(err error, doc, stdout []byte) error {
	h := hint("krm", doc)
	if f, ok := unknownfield.Find(doc, reflect.TypeFor[resourceList]()); ok && h == "" {
		return fmt.Errorf("the function's output is not a valid ResourceList: %s", f)
	}
	if err := nonFiniteError("ResourceList", doc); err != nil && h == "" {
		return err
	}
	return fmt.Errorf("the function's output is not a valid ResourceList: %v; output began with %s%s", err, QuoteHead(stdout), h)
}

// response maps a ResourceList to the answer to req: the items become the
// desired state; an item that is not returned is no longer desired.
func (KRM) response(req *fnv1.RunFunctionRequest, rl *resourceList) (*fnv1.RunFunctionResponse, error) {
	rsp := &fnv1.RunFunctionResponse{
		Meta:    &fnv1.ResponseMeta{Tag: req.GetMeta().GetTag()},
		Desired: &fnv1.State{Composite: req.GetDesired().GetComposite(), Resources: map[string]*fnv1.Resource{}},
		Context: req.GetContext(),
	}
	names := make([]string, len(rl.Items)) // each item's name in the Composition
	if err := krmItems(req, rl, rsp, names); err != nil {
		// The answer is refused, but what the function reported, often
		// why it printed what it did, is not lost behind the item.
		rs, _ := crossplaneResults(rl, names)
		return nil, withResults(err, "results", rs)
	}
	rs, bad := crossplaneResults(rl, names)
	rsp.Results = append(rsp.Results, rs...)
	if bad != nil {
		return nil, withResults(bad, "other results", rs)
	}
	return rsp, nil
}

// krmItems sets rsp's desired state from rl's items, and names[i] to the
// Composition's name of item i.
func krmItems(req *fnv1.RunFunctionRequest, rl *resourceList, rsp *fnv1.RunFunctionResponse, names []string) error {
	before := req.GetDesired().GetResources()
	if rl.Items == nil {
		// No items at all (a validator that prints its results alone),
		// unlike items: [], which deletes them: the desired state is kept
		// rather than every composed resource deleted without a word.
		if len(before) > 0 {
			rsp.Desired.Resources = before
			rsp.Results = append(rsp.Results, &fnv1.Result{
				Severity: fnv1.Severity_SEVERITY_WARNING,
				Message:  "the function's ResourceList has no items; the request's desired resources were kept unchanged (print items: [] to delete them all)",
			})
		}
	}

	// Named items first, so that a derived name never takes the name of a
	// resource the function returned.
	var unnamed []int
	sentXR, err := krmComposite(req)
	if err != nil {
		return err
	}
	xrSeen := false
	for i, item := range rl.Items {
		if item == nil {
			return fmt.Errorf("items[%d] is empty", i)
		}
		ann := annotations(item)
		_, named := ann[AnnotationResourceName]
		// A function that replaced the XR's annotations dropped ocifn's:
		// the item with the XR's identity is still the XR, not a new
		// composed resource of the XR's kind and name.
		if ann[AnnotationComposite] == "true" || !named && sameObject(item, sentXR) {
			if xrSeen && ann[AnnotationComposite] == "true" {
				return fmt.Errorf("items[%d]: a second item is annotated %s", i, AnnotationComposite)
			}
			if xrSeen {
				return fmt.Errorf("items[%d]: a second item is the composite resource (its apiVersion, kind and name)", i)
			}
			xrSeen = true
			xr, removed, err := krmDesiredComposite(req, sentXR, item)
			if err != nil {
				return fmt.Errorf("items[%d] (the composite resource): %w", i, err)
			}
			rsp.Desired.Composite = xr
			if len(removed) > 0 {
				rsp.Results = append(rsp.Results, &fnv1.Result{
					Severity: fnv1.Severity_SEVERITY_WARNING,
					Message:  fmt.Sprintf("the KRM function removed %s from the composite resource; a function cannot delete the XR's fields, so they were kept", strings.Join(removed, ", ")),
				})
			}
			continue
		}
		name := ann[AnnotationResourceName]
		if !named {
			unnamed = append(unnamed, i)
			continue
		}
		if name == "" {
			return fmt.Errorf("items[%d]: annotation %s is empty", i, AnnotationResourceName)
		}
		if _, dup := rsp.Desired.Resources[name]; dup {
			return fmt.Errorf("items[%d]: a second item is annotated %s: %s", i, AnnotationResourceName, clip(name, keyBytes))
		}
		if err := composeAs(rsp, names, i, item, name, before[name]); err != nil {
			return err
		}
	}
	// An item that lost its annotation (the function replaced its
	// annotations) and has the identity of a desired resource the
	// function did not return under its name is that resource: a new name
	// would delete it and compose it again. Matched before names are
	// derived, so that none takes its name.
	derive := unnamed[:0:0]
	for _, i := range unnamed {
		item := rl.Items[i]
		name := sentName(item, before, rsp.Desired.Resources)
		if name == "" {
			derive = append(derive, i)
			continue
		}
		if err := composeAs(rsp, names, i, item, name, before[name]); err != nil {
			return err
		}
	}
	for _, i := range derive {
		item := rl.Items[i]
		if localConfig(item, nil) {
			rsp.Results = append(rsp.Results, notComposed(i, item, "", false))
			continue
		}
		kind, _ := item["kind"].(string)
		meta, _ := item["metadata"].(map[string]any)
		objName, _ := meta["name"].(string)
		if kind == "" || objName == "" {
			return fmt.Errorf("items[%d] has no %s annotation and no kind and metadata.name to derive a name from", i, AnnotationResourceName)
		}
		name := uniqueName(derivedName(kind, objName), rsp.Desired.Resources)
		r, err := krmResource(item, nil, nil)
		if err != nil {
			return fmt.Errorf("items[%d] (%s %s): %w", i, clip(kind, keyBytes), clip(objName, keyBytes), err)
		}
		rsp.Desired.Resources[name] = r
		names[i] = name
	}

	return nil
}

// composeAs makes item i the desired resource name of rsp, and names[i]
// name, from the request's desired resource of that name, before (nil: a
// new one); an item marked as local configuration is a result instead.
func composeAs(rsp *fnv1.RunFunctionResponse, names []string, i int, item map[string]any, name string, before *fnv1.Resource) error {
	if localConfig(item, before) {
		rsp.Results = append(rsp.Results, notComposed(i, item, name, before != nil))
		return nil
	}
	r, err := krmResource(item, before, sentAnnotations(before))
	if err != nil {
		return fmt.Errorf("items[%d] (%s): %w", i, clip(name, keyBytes), err)
	}
	rsp.Desired.Resources[name] = r
	names[i] = name
	return nil
}

// localConfig says whether the function marked item as local
// configuration, which kpt and kustomize never apply: a composed resource
// is applied, so such an item is not composed. A desired resource that
// came to the function marked so, by an earlier step, is passed on as it
// was: this step did not ask for it to go.
func localConfig(item map[string]any, before *fnv1.Resource) bool {
	return annotations(item)[annotationLocalConfig] == "true" &&
		annotations(structMap(before.GetResource()))[annotationLocalConfig] != "true"
}

// notComposed says that item i, named name in the Composition ("" for a
// new item), is local configuration and not composed: a Warning when it
// was a desired resource, which is now deleted, a Normal result otherwise.
func notComposed(i int, item map[string]any, name string, wasDesired bool) *fnv1.Result {
	kind, _ := item["kind"].(string)
	meta, _ := item["metadata"].(map[string]any)
	objName, _ := meta["name"].(string)
	what := strings.TrimSpace(clip(kind, keyBytes) + " " + clip(objName, keyBytes))
	if what == "" {
		what = "an item"
	}
	msg := fmt.Sprintf("items[%d] (%s) is annotated %s: \"true\", which kpt and kustomize never apply, so it is not composed", i, what, annotationLocalConfig)
	if !wasDesired {
		return &fnv1.Result{Severity: fnv1.Severity_SEVERITY_NORMAL, Message: msg}
	}
	return &fnv1.Result{
		Severity: fnv1.Severity_SEVERITY_WARNING,
		Message:  msg + fmt.Sprintf("; the composed resource %q is no longer desired, so Crossplane deletes it", clip(name, keyBytes)),
	}
}

// sentName is the name of the one desired resource of the request that
// is item by its apiVersion, kind, name and namespace and is not yet in
// returned; "" when none or more than one is.
func sentName(item map[string]any, sent, returned map[string]*fnv1.Resource) string {
	found := ""
	for name, r := range sent {
		if _, ok := returned[name]; ok || !sameObject(item, structMap(r.GetResource())) {
			continue
		}
		if found != "" {
			return ""
		}
		found = name
	}
	return found
}

// sameObject says whether a and b have the same apiVersion, kind, name
// and namespace, a name among them.
func sameObject(a, b map[string]any) bool {
	if a == nil || b == nil {
		return false
	}
	id := func(o map[string]any) [4]string {
		meta, _ := o["metadata"].(map[string]any)
		var s [4]string
		for i, v := range []any{o["apiVersion"], o["kind"], meta["name"], meta["namespace"]} {
			s[i], _ = v.(string)
		}
		return s
	}
	ida := id(a)
	return ida[2] != "" && ida == id(b)
}

// crossplaneResults are rl's results as Crossplane's, each message saying
// where it points; an unknown severity is an error, the others are kept.
func crossplaneResults(rl *resourceList, names []string) ([]*fnv1.Result, error) {
	var rs []*fnv1.Result
	var bad error
	for i, res := range rl.Results {
		sev, ok := krmSeverities[res.Severity]
		if !ok {
			if bad == nil {
				bad = fmt.Errorf("results[%d]: unknown severity %q (want error, warning or info)", i, clip(res.Severity, keyBytes))
			}
			continue
		}
		rs = append(rs, &fnv1.Result{Severity: sev, Message: krmMessage(res, rl.Items, names)})
	}
	return rs, bad
}

// krmResource is a returned composed item as a desired resource: ocifn's
// annotations and the KRM reader's bookkeeping removed, readiness and
// connection details kept from the request.
func krmResource(item map[string]any, before *fnv1.Resource, keep map[string]bool) (*fnv1.Resource, error) {
	stripAnnotations(item, keep)
	restoreEmpty(item, structMap(before.GetResource()))
	s, err := structpb.NewStruct(item)
	if err != nil {
		return nil, err
	}
	return &fnv1.Resource{Resource: s, Ready: before.GetReady(), ConnectionDetails: before.GetConnectionDetails()}, nil
}

// sentAnnotations are the annotations a desired resource already had: a
// reader annotation among them is the resource's own and stays.
func sentAnnotations(r *fnv1.Resource) map[string]bool {
	keep := map[string]bool{}
	for k := range annotations(structMap(r.GetResource())) {
		keep[k] = true
	}
	return keep
}

// krmDesiredComposite turns the returned XR item into the desired
// composite: what the function changed, laid over what earlier steps
// desired. Only changes travel, so that the step does not claim every
// field of the observed XR; the sent status was already desired, so the
// status the function returns is desired whole. removed lists the fields
// it deleted.
func krmDesiredComposite(req *fnv1.RunFunctionRequest, sent, got map[string]any) (*fnv1.Resource, []string, error) {
	keep := map[string]bool{}
	for k := range annotations(sent) {
		keep[k] = true
	}
	delete(keep, AnnotationComposite)
	stripAnnotations(got, keep)
	sent = overlay(sent, nil)
	stripAnnotations(sent, keep)
	changed := changes(sent, got)
	removed := removals(sent, got, "")
	before := req.GetDesired().GetComposite()
	if len(changed) == 0 {
		return before, removed, nil
	}
	for _, k := range []string{"apiVersion", "kind"} {
		if v, ok := got[k]; ok {
			changed[k] = v
		}
	}
	s, err := structpb.NewStruct(overlay(structMap(before.GetResource()), changed))
	if err != nil {
		return nil, nil, err
	}
	return &fnv1.Resource{Resource: s, ConnectionDetails: before.GetConnectionDetails(), Ready: before.GetReady()}, removed, nil
}

// changes is what got sets that sent did not, or set otherwise; objects are
// compared field by field.
func changes(sent, got map[string]any) map[string]any {
	out := map[string]any{}
	for k, g := range got {
		s, ok := sent[k]
		if ok && reflect.DeepEqual(s, g) {
			continue
		}
		sm, sok := s.(map[string]any)
		gm, gok := g.(map[string]any)
		if ok && sok && gok {
			if c := changes(sm, gm); len(c) > 0 {
				out[k] = c
			}
			continue
		}
		out[k] = g
	}
	return out
}

// removals lists the field paths sent had and got lacks.
func removals(sent, got map[string]any, prefix string) []string {
	var out []string
	for _, k := range keysOf(sent) {
		g, ok := got[k]
		if !ok {
			out = append(out, prefix+k)
			continue
		}
		sm, sok := sent[k].(map[string]any)
		gm, gok := g.(map[string]any)
		if sok && gok {
			out = append(out, removals(sm, gm, prefix+k+".")...)
		}
	}
	return out
}

// overlay is a deep copy of base with top's fields laid over it, objects
// merged field by field.
func overlay(base, top map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range base {
		out[k] = deepCopy(v)
	}
	for k, v := range top {
		bm, bok := out[k].(map[string]any)
		tm, tok := v.(map[string]any)
		if bok && tok {
			out[k] = overlay(bm, tm)
			continue
		}
		out[k] = deepCopy(v)
	}
	return out
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		return overlay(t, nil)
	case []any:
		c := make([]any, len(t))
		for i := range t {
			c[i] = deepCopy(t[i])
		}
		return c
	default:
		return v
	}
}

// derivedName is a Composition resource name for a new item: its kind and
// name, lower case, with anything but letters, digits, '-' and '.' as '-'.
func derivedName(kind, name string) string {
	clean := func(s string) string {
		return strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '.':
				return r
			default:
				return '-'
			}
		}, strings.ToLower(s))
	}
	return clean(kind) + "-" + clean(name)
}

// uniqueName is name, or name-2, name-3... when taken: the same items in
// the same order always get the same names.
func uniqueName(name string, taken map[string]*fnv1.Resource) string {
	if _, ok := taken[name]; !ok {
		return name
	}
	for n := 2; ; n++ {
		c := fmt.Sprintf("%s-%d", name, n)
		if _, ok := taken[c]; !ok {
			return c
		}
	}
}

// krmMessage is a result's message with where it points: the resource
// (and its name in the Composition), the field and the file.
func krmMessage(r krmResult, items []map[string]any, names []string) string {
	var where []string
	if ref := r.ResourceRef; ref != nil {
		id := ref.Name
		if ref.Namespace != "" {
			id = ref.Namespace + "/" + ref.Name
		}
		s := strings.TrimSpace(fmt.Sprintf("resource %s %s %s", ref.APIVersion, ref.Kind, id))
		if n := itemName(ref, items, names); n != "" {
			s += fmt.Sprintf(" (composition resource %q)", n)
		}
		where = append(where, s)
	}
	// A field or a file without a path still says what it holds: nothing
	// the function printed is dropped.
	if f := r.Field; f != nil && (f.Path != "" || f.CurrentValue != nil || f.ProposedValue != nil || f.SuggestedValue != nil) {
		s := strings.TrimSpace("field " + f.Path)
		if f.CurrentValue != nil {
			s += fmt.Sprintf(", current value %s", jsonValue(f.CurrentValue))
		}
		if f.ProposedValue != nil {
			s += fmt.Sprintf(", proposed value %s", jsonValue(f.ProposedValue))
		}
		if f.SuggestedValue != nil {
			s += fmt.Sprintf(", suggested value %s", jsonValue(f.SuggestedValue))
		}
		where = append(where, s)
	}
	if f := r.File; f != nil && (f.Path != "" || f.Index != 0) {
		where = append(where, strings.Join(strings.Fields(fmt.Sprintf("file %s index %d", f.Path, f.Index)), " "))
	}
	if len(r.Tags) > 0 {
		tags := make([]string, 0, len(r.Tags))
		for _, k := range keysOf(r.Tags) {
			tags = append(tags, k+"="+r.Tags[k])
		}
		where = append(where, "tags "+strings.Join(tags, ","))
	}
	if len(where) == 0 {
		return r.Message
	}
	return r.Message + " (" + strings.Join(where, "; ") + ")"
}

// itemName is the Composition resource name of the returned item a result
// refers to, if any.
func itemName(ref *krmResourceRef, items []map[string]any, names []string) string {
	for i, item := range items {
		meta, _ := item["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		ns, _ := meta["namespace"].(string)
		if names[i] != "" && item["kind"] == ref.Kind && name == ref.Name && ns == ref.Namespace &&
			(ref.APIVersion == "" || item["apiVersion"] == ref.APIVersion) {
			return names[i]
		}
	}
	return ""
}

func jsonValue(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// annotations are an object's metadata.annotations that are strings.
func annotations(obj map[string]any) map[string]string {
	meta, _ := obj["metadata"].(map[string]any)
	raw, _ := meta["annotations"].(map[string]any)
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// setAnnotation sets an annotation, refusing to replace a metadata or
// annotations field that is not an object.
func setAnnotation(obj map[string]any, key, value string) error {
	if v, ok := obj["metadata"]; ok && v != nil {
		if _, isMap := v.(map[string]any); !isMap {
			return fmt.Errorf("metadata is not an object")
		}
	}
	meta, _ := obj["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		obj["metadata"] = meta
	}
	if v, ok := meta["annotations"]; ok && v != nil {
		if _, isMap := v.(map[string]any); !isMap {
			return fmt.Errorf("metadata.annotations is not an object")
		}
	}
	ann, _ := meta["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		meta["annotations"] = ann
	}
	ann[key] = value
	return nil
}

// stripAnnotations removes ocifn's annotations and the KRM reader's (unless
// keep says the resource had them), then an annotations or metadata object
// left empty.
func stripAnnotations(obj map[string]any, keep map[string]bool) {
	meta, _ := obj["metadata"].(map[string]any)
	ann, _ := meta["annotations"].(map[string]any)
	if ann == nil {
		return
	}
	for k := range ann {
		if k == AnnotationResourceName || k == AnnotationComposite || readerAnnotations.MatchString(k) && !keep[k] {
			delete(ann, k)
		}
	}
	if len(ann) == 0 {
		delete(meta, "annotations")
	}
	if len(meta) == 0 {
		delete(obj, "metadata")
	}
}

// restoreEmpty puts back an empty metadata or annotations object the
// resource had before ocifn annotated it, so that a resource the function
// did not touch comes back as it was.
func restoreEmpty(item, orig map[string]any) {
	om, ok := orig["metadata"].(map[string]any)
	if !ok {
		return
	}
	meta, _ := item["metadata"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
		item["metadata"] = meta
	}
	if oa, ok := om["annotations"].(map[string]any); ok && len(oa) == 0 {
		if _, has := meta["annotations"]; !has {
			meta["annotations"] = map[string]any{}
		}
	}
}
