package codec

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	"github.com/ocifn/ocifn/internal/unknownfield"
)

// FunctionIO is the I/O mode of container functions written for Crossplane
// 1.11 to 1.13 (xfn, alpha): a FunctionIO YAML document on stdin and on
// stdout. Readiness checks and derived connection details, which 1.13's
// Crossplane evaluated itself, are evaluated here against the observed
// state, so that an image from then runs unchanged behind RunFunction.
type FunctionIO struct{}

// Name is "functionio".
func (FunctionIO) Name() string { return "functionio" }

// The FunctionIO document, field for field as Crossplane 1.13 marshalled it.
// apiVersion and kind were not sent; a function that prints them back is
// answered all the same.
type functionIO struct {
	APIVersion string         `json:"apiVersion,omitempty"`
	Kind       string         `json:"kind,omitempty"`
	Config     map[string]any `json:"config,omitempty"`
	Observed   fioObserved    `json:"observed"`
	Desired    *fioDesired    `json:"desired"`
	Results    []fioResult    `json:"results,omitempty"`
}

type fioObserved struct {
	Composite fioComposite          `json:"composite"`
	Resources []fioObservedResource `json:"resources,omitempty"`
}

type fioDesired struct {
	Composite fioComposite         `json:"composite"`
	Resources []fioDesiredResource `json:"resources,omitempty"`
}

type fioComposite struct {
	Resource          map[string]any        `json:"resource"`
	ConnectionDetails []fioConnectionDetail `json:"connectionDetails"`
}

type fioObservedResource struct {
	Name              string                `json:"name"`
	Resource          map[string]any        `json:"resource"`
	ConnectionDetails []fioConnectionDetail `json:"connectionDetails"`
}

type fioDesiredResource struct {
	Name     string         `json:"name"`
	Resource map[string]any `json:"resource"`
	// ConnectionDetails are the XR's connection details to derive from
	// this resource, not the resource's own.
	ConnectionDetails []derivedConnectionDetail `json:"connectionDetails,omitempty"`
	ReadinessChecks   []readinessCheck          `json:"readinessChecks,omitempty"`
}

type fioConnectionDetail struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type fioResult struct {
	Severity string `json:"severity"`
	Message  string `json:"message"`
}

// fioSeverities maps FunctionIO severities to RunFunction's.
var fioSeverities = map[string]fnv1.Severity{
	"Fatal":   fnv1.Severity_SEVERITY_FATAL,
	"Warning": fnv1.Severity_SEVERITY_WARNING,
	"Normal":  fnv1.Severity_SEVERITY_NORMAL,
}

// Encode renders the request as a FunctionIO document. What FunctionIO has
// no place for (context, credentials, required resources, capabilities)
// does not reach the function; the context is carried over to the
// response by Decode.
func (FunctionIO) Encode(req *fnv1.RunFunctionRequest) ([]byte, error) {
	fio := functionIO{Config: structMap(req.GetInput()), Desired: &fioDesired{}}
	fio.Observed.Composite = fioCompositeOf(req.GetObserved().GetComposite())
	fio.Desired.Composite = fioCompositeOf(req.GetDesired().GetComposite())
	for _, name := range keysOf(req.GetObserved().GetResources()) {
		r := req.GetObserved().GetResources()[name]
		fio.Observed.Resources = append(fio.Observed.Resources, fioObservedResource{
			Name:              name,
			Resource:          structMap(r.GetResource()),
			ConnectionDetails: fioConnectionDetailsOf(r.GetConnectionDetails()),
		})
	}
	for _, name := range keysOf(req.GetDesired().GetResources()) {
		r := req.GetDesired().GetResources()[name]
		fio.Desired.Resources = append(fio.Desired.Resources, fioDesiredResource{
			Name:     name,
			Resource: structMap(r.GetResource()),
		})
	}
	b, err := marshalYAML(fio)
	if err != nil {
		return nil, fmt.Errorf("cannot encode the request as a FunctionIO document: %w", err)
	}
	return b, nil
}

// Decode maps the FunctionIO document the function printed back to a
// response: the desired resources list becomes the desired map, with
// readiness and the XR's connection details evaluated against the observed
// state as Crossplane 1.13 did.
func (f FunctionIO) Decode(req *fnv1.RunFunctionRequest, stdout []byte) (*fnv1.RunFunctionResponse, error) {
	rsp, err := f.decode(req, stdout)
	return rsp, bounded(err)
}

func (FunctionIO) decode(req *fnv1.RunFunctionRequest, stdout []byte) (*fnv1.RunFunctionResponse, error) {
	if err := checkText(stdout, "in the functionio I/O mode it must print a FunctionIO YAML document"); err != nil {
		return nil, err
	}
	doc, err := oneDocument(stdout)
	if err != nil {
		return nil, fmt.Errorf("the function's output is not one FunctionIO document: %w%s", err, hint("functionio", stdout))
	}
	var fio functionIO
	if err := yaml.UnmarshalStrict(doc, &fio); err != nil {
		// The answer is refused, but the results that can be read on
		// their own are not lost behind the part that cannot.
		rs, unreadable := resultsOf[fioResult](doc)
		readable, _ := (&functionIO{Results: rs}).results()
		what := "results"
		if unreadable || len(readable) < len(rs) {
			what = "other results"
		}
		return nil, withResults(invalidFunctionIO(err, doc, stdout), what, readable)
	}
	if (fio.APIVersion != "" && fio.APIVersion != "apiextensions.crossplane.io/v1alpha1") || (fio.Kind != "" && fio.Kind != "FunctionIO") {
		return nil, fmt.Errorf("the function's output is %s %s, not a FunctionIO document (apiextensions.crossplane.io/v1alpha1)%s", clip(fio.APIVersion, keyBytes), clip(fio.Kind, keyBytes), hint("functionio", stdout))
	}
	if d := fio.Desired; (d == nil || (d.Composite.Resource == nil && d.Resources == nil)) && fio.Observed.Composite.Resource == nil {
		return nil, fmt.Errorf("the function's output has neither desired nor observed state, so it is not a FunctionIO document; output began with %s%s", QuoteHead(stdout), hint("functionio", stdout))
	}

	rsp := &fnv1.RunFunctionResponse{
		Meta:    &fnv1.ResponseMeta{Tag: req.GetMeta().GetTag()},
		Desired: &fnv1.State{Resources: map[string]*fnv1.Resource{}},
		Context: req.GetContext(),
	}
	rs, bad := fio.results()
	if fio.Desired == nil {
		// No desired state at all, unlike desired.resources left out,
		// which deletes them all: the response has none either, so the
		// contract every mode shares keeps the request's, with a
		// warning, rather than every composed resource deleted without
		// a word (1.13 refused such output).
		rsp.Desired = nil
	} else if err := fio.desired(req, rsp.Desired); err != nil {
		// The answer is refused, but what the function reported, often
		// why it printed what it did, is not lost behind the resource.
		return nil, withResults(err, "results", rs)
	}
	if bad != nil {
		return nil, withResults(bad, "other results", rs)
	}
	rsp.Results = rs
	return rsp, nil
}

// invalidFunctionIO says why doc, the document of stdout, cannot be read
// as a FunctionIO document, err the decoder's reason. Another mode's
// answer is told so; in this mode's, a key it does not have is named with
// its path.
func invalidFunctionIO(err error, doc, stdout []byte) error {
	h := hint("functionio", doc)
	if f, ok := unknownfield.Find(doc, reflect.TypeFor[functionIO]()); ok && h == "" {
		return fmt.Errorf("the function's output is not a valid FunctionIO document: %s", f)
	}
	if err := nonFiniteError("FunctionIO document", doc); err != nil && h == "" {
		return err
	}
	return fmt.Errorf("the function's output is not a valid FunctionIO document: %v; output began with %s%s", err, QuoteHead(stdout), h)
}

// desired sets the desired state from the document's, evaluating each
// resource's readiness checks and derived connection details against the
// observed state in req.
func (fio *functionIO) desired(req *fnv1.RunFunctionRequest, desired *fnv1.State) error {
	// The XR: a function that leaves it out keeps the request's, a copy,
	// for the connection details below may change it. Its readiness, which
	// FunctionIO does not carry, is what an earlier step decided.
	before := req.GetDesired().GetComposite()
	if r := fio.Desired.Composite.Resource; r != nil {
		dropServerSet(r)
		s, err := structpb.NewStruct(r)
		if err != nil {
			return fmt.Errorf("desired.composite.resource: %w", err)
		}
		desired.Composite = &fnv1.Resource{Resource: s, Ready: before.GetReady()}
	} else if before != nil {
		desired.Composite = proto.Clone(before).(*fnv1.Resource)
	}

	derived := map[string][]byte{}
	for i, d := range fio.Desired.Resources {
		at := fmt.Sprintf("desired.resources[%d]", i)
		if d.Name == "" {
			return fmt.Errorf("%s has no name", at)
		}
		at = fmt.Sprintf("%s (%s)", at, clip(d.Name, keyBytes))
		if _, dup := desired.Resources[d.Name]; dup {
			return fmt.Errorf("%s: the name is used twice; names must be unique", at)
		}
		var s *structpb.Struct
		var err error
		if d.Resource != nil {
			dropServerSet(d.Resource)
			if s, err = structpb.NewStruct(d.Resource); err != nil {
				return fmt.Errorf("%s.resource: %w", at, err)
			}
		} else if b, ok := req.GetDesired().GetResources()[d.Name]; !ok || b.GetResource() != nil {
			// Only one an earlier step desired without a body, and the
			// document carried as resource: null, is passed on so.
			return fmt.Errorf("%s has no resource", at)
		}
		var body map[string]any
		var details map[string][]byte
		if o := req.GetObserved().GetResources()[d.Name]; o != nil {
			if body, err = k8sMap(o.GetResource()); err != nil {
				return fmt.Errorf("observed resource %s: %w", d.Name, err)
			}
			details = o.GetConnectionDetails()
		}
		ready, err := fioReady(req.GetDesired().GetResources()[d.Name], body, d.ReadinessChecks)
		if err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
		ds, err := deriveConnectionDetails(body, details, d.ConnectionDetails)
		if err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
		maps.Copy(derived, ds)
		desired.Resources[d.Name] = &fnv1.Resource{Resource: s, Ready: ready}
	}
	// The XR's own connection details, as the function passed them on or
	// set them (or the request's, when it left the XR out), then the
	// derived ones over them: 1.13's Crossplane derived them after it took
	// the XR's from the document, so a value passed on from before (1.13
	// started desired.composite with the XR's whole secret) never hides a
	// fresh one.
	conn := map[string][]byte{}
	sent := before.GetConnectionDetails()
	if fio.Desired.Composite.Resource == nil && fio.Desired.Composite.ConnectionDetails == nil {
		maps.Copy(conn, sent)
	}
	for i, cd := range fio.Desired.Composite.ConnectionDetails {
		if cd.Name == "" {
			return fmt.Errorf("desired.composite.connectionDetails[%d] has no name", i)
		}
		conn[cd.Name] = detailValue(cd.Value, sent[cd.Name])
	}
	maps.Copy(conn, derived)
	if len(conn) > 0 {
		if desired.Composite == nil {
			desired.Composite = &fnv1.Resource{}
		}
		desired.Composite.ConnectionDetails = conn
	}
	return nil
}

// serverSet are the metadata fields the API server sets on an object.
var serverSet = []string{"resourceVersion", "uid", "generation", "creationTimestamp", "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"}

// dropServerSet removes the fields the API server sets from a desired
// object's metadata. 1.13 filled desired with the objects it had read, and
// merge-patched them back, so its functions pass those fields on, or copy
// an observed object, with them. Crossplane v2 server-side applies what a
// step desires, and the API server refuses an apply that carries
// managedFields (400) or a resourceVersion that is no longer the object's
// (409, as soon as anything changed it since it was read): the XR, or
// that resource, would fail to compose at every reconcile.
func dropServerSet(obj map[string]any) {
	md, ok := obj["metadata"].(map[string]any)
	if !ok {
		return
	}
	for _, k := range serverSet {
		delete(md, k)
	}
}

// results are the document's results as Crossplane's; an unknown severity
// is an error, the others are kept.
func (fio *functionIO) results() ([]*fnv1.Result, error) {
	var rs []*fnv1.Result
	var bad error
	for i, r := range fio.Results {
		sev, ok := fioSeverities[r.Severity]
		if !ok {
			if bad == nil {
				bad = fmt.Errorf("results[%d]: unknown severity %q (want Fatal, Warning or Normal)", i, clip(r.Severity, keyBytes))
			}
			continue
		}
		rs = append(rs, &fnv1.Result{Severity: sev, Message: r.Message})
	}
	return rs, bad
}

// detailValue is the bytes of a connection detail the function printed.
// A YAML string cannot hold bytes that are not UTF-8, so the request's
// document carried each of them as U+FFFD: a value printed back as it was
// sent gets its bytes back, rather than the replacement characters.
func detailValue(printed string, sent []byte) []byte {
	if len(sent) > 0 && !utf8.Valid(sent) && printed == asYAMLString(sent) {
		return sent
	}
	return []byte(printed)
}

// asYAMLString is b as the request's document carries it: every byte that
// is not part of valid UTF-8 replaced by U+FFFD, as encoding/json does
// (sigs.k8s.io/yaml encodes through it).
func asYAMLString(b []byte) string {
	var sb strings.Builder
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			sb.WriteRune(utf8.RuneError)
		} else {
			sb.Write(b[:n])
		}
		b = b[n:]
	}
	return sb.String()
}

// fioReady is the readiness of a desired composed resource. With checks, or
// with none and no earlier step having decided, they are run against the
// observed resource; one that does not exist yet is not ready. With no
// checks, what an earlier step of the pipeline decided is kept.
func fioReady(before *fnv1.Resource, observed map[string]any, checks []readinessCheck) (fnv1.Ready, error) {
	for i, c := range checks {
		if err := c.validate(); err != nil {
			return fnv1.Ready_READY_UNSPECIFIED, fmt.Errorf("readinessChecks[%d]: %w", i, err)
		}
	}
	if len(checks) == 0 && before.GetReady() != fnv1.Ready_READY_UNSPECIFIED {
		return before.GetReady(), nil
	}
	if observed == nil {
		return fnv1.Ready_READY_FALSE, nil
	}
	ok, err := resourceReady(observed, checks)
	if err != nil {
		return fnv1.Ready_READY_UNSPECIFIED, err
	}
	if ok {
		return fnv1.Ready_READY_TRUE, nil
	}
	return fnv1.Ready_READY_FALSE, nil
}

func fioCompositeOf(r *fnv1.Resource) fioComposite {
	return fioComposite{
		Resource:          structMap(r.GetResource()),
		ConnectionDetails: fioConnectionDetailsOf(r.GetConnectionDetails()),
	}
}

// fioConnectionDetailsOf lists connection details sorted by name; never nil,
// so the document says `connectionDetails: []` rather than null.
func fioConnectionDetailsOf(m map[string][]byte) []fioConnectionDetail {
	out := make([]fioConnectionDetail, 0, len(m))
	for _, k := range keysOf(m) {
		out = append(out, fioConnectionDetail{Name: k, Value: string(m[k])})
	}
	return out
}

// structMap is a Struct as a plain map; nil for nil.
func structMap(s *structpb.Struct) map[string]any {
	if s == nil {
		return nil
	}
	return s.AsMap()
}

// k8sMap is a Struct as Kubernetes reads an object: whole numbers are
// int64, as Crossplane's field paths (MatchInteger) expect.
func k8sMap(s *structpb.Struct) (map[string]any, error) {
	if s == nil {
		return map[string]any{}, nil
	}
	b, err := protojson.Marshal(s)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := utiljson.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// hint is the end of a decode error when the output looks like another
// mode's: which --io the function was likely written for.
func hint(mode string, out []byte) string {
	if h := Mismatch(mode, out); h != "" {
		return "; " + h
	}
	return ""
}

// keysOf is a map's keys, sorted: documents list things in a stable order.
func keysOf[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
