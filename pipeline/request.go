package pipeline

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	yamlv3 "go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	kyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/ocifn/ocifn/codec"
)

// RequestFiles are the files an author assembles a RunFunctionRequest from.
// Each is optional; what a file gives replaces that part of Request.
type RequestFiles struct {
	// Request is a whole RunFunctionRequest in YAML or JSON, "-" for
	// standard input.
	Request string
	// Input is the pipeline step's input (an object).
	Input string
	// XR is the observed composite resource.
	XR string
	// DesiredXR is the desired composite resource, as earlier steps left it.
	DesiredXR string
	// Observed and Desired are YAML streams (or directories) of composed
	// resources, each named by its crossplane.io/composition-resource-name
	// annotation, or else by metadata.name.
	Observed, Desired string
	// Context holds context values by key (see ParseContext).
	Context map[string]any
}

// BuildRequest assembles a RunFunctionRequest from files; stdin is read when
// Request is "-".
func BuildRequest(f RequestFiles, stdin io.Reader) (*fnv1.RunFunctionRequest, error) {
	req := &fnv1.RunFunctionRequest{}
	if f.Request != "" {
		var (
			data []byte
			err  error
		)
		if f.Request == "-" {
			data, err = io.ReadAll(stdin)
		} else {
			data, err = os.ReadFile(f.Request)
		}
		if err != nil {
			return nil, fmt.Errorf("cannot read the request: %w", err)
		}
		if req, err = ParseRequest(data); err != nil {
			return nil, fmt.Errorf("%s: %w", sourceName(f.Request), err)
		}
	}
	if f.Input != "" {
		in, err := readStruct(f.Input, "--input")
		if err != nil {
			return nil, fmt.Errorf("cannot read the step input: %w", err)
		}
		req.Input = in
	}
	if req.Observed == nil {
		req.Observed = &fnv1.State{}
	}
	if req.Desired == nil {
		req.Desired = &fnv1.State{}
	}
	if f.XR != "" {
		s, err := readStruct(f.XR, "--xr")
		if err != nil {
			return nil, fmt.Errorf("cannot read the composite resource: %w", err)
		}
		req.Observed.Composite = &fnv1.Resource{Resource: s}
	}
	if f.DesiredXR != "" {
		s, err := readStruct(f.DesiredXR, "--desired-xr")
		if err != nil {
			return nil, fmt.Errorf("cannot read the desired composite resource: %w", err)
		}
		req.Desired.Composite = &fnv1.Resource{Resource: s}
	}
	for _, st := range []struct {
		path  string
		state *fnv1.State
		what  string
	}{{f.Observed, req.Observed, "observed"}, {f.Desired, req.Desired, "desired"}} {
		if st.path == "" {
			continue
		}
		docs, err := ReadDocuments(st.path)
		if err != nil {
			return nil, fmt.Errorf("cannot read the %s composed resources: %w", st.what, err)
		}
		for _, d := range docs {
			if err := notAMessage(d.Object, d.Source, "--"+st.what); err != nil {
				return nil, fmt.Errorf("cannot read the %s composed resources: %w", st.what, err)
			}
		}
		rs, err := ComposedResources(docs, false)
		if err != nil {
			return nil, fmt.Errorf("%s composed resources: %w", st.what, err)
		}
		st.state.Resources = rs
	}
	if len(f.Context) > 0 {
		if req.Context == nil {
			req.Context = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		}
		for _, k := range sortedKeys(f.Context) {
			v, err := structpb.NewValue(f.Context[k])
			if err != nil {
				return nil, fmt.Errorf("context key %q: %w", k, err)
			}
			req.Context.Fields[k] = v
		}
	}
	return req, nil
}

func sourceName(p string) string {
	if p == "-" {
		return "standard input"
	}
	return p
}

// ParseRequest parses a RunFunctionRequest written in YAML or in JSON
// (protojson field names: lowerCamelCase or the proto names).
func ParseRequest(data []byte) (*fnv1.RunFunctionRequest, error) {
	j, err := oneDocument(data, "RunFunctionRequest")
	if err != nil {
		return nil, err
	}
	req := &fnv1.RunFunctionRequest{}
	if err := protojson.Unmarshal(j, req); err != nil {
		if why := otherKind(j, "RunFunctionRequest"); why != "" {
			return nil, fmt.Errorf("not a RunFunctionRequest: %s", why)
		}
		if why := codec.ExplainMessage(j, req.ProtoReflect().Descriptor()); why != "" {
			return nil, fmt.Errorf("not a RunFunctionRequest: %s", why)
		}
		return nil, fmt.Errorf("not a RunFunctionRequest: %v (want fields such as meta, observed, desired, input, context)", err)
	}
	return req, nil
}

// otherKind says what the JSON document j, which is not the message want,
// looks like instead when it is another file an author has at hand: a
// Kubernetes object (the XR), or a response where the request was meant or
// the other way round; "" otherwise. Unknown field "apiVersion" alone would
// not say which flag takes the file.
func otherKind(j []byte, want string) string {
	var top map[string]any
	if json.Unmarshal(j, &top) != nil {
		return ""
	}
	api, _ := top["apiVersion"].(string)
	kind, _ := top["kind"].(string)
	if api != "" && kind != "" {
		s := fmt.Sprintf("it looks like a Kubernetes object (apiVersion %s, kind %s)", api, kind)
		if want == "RunFunctionRequest" {
			return s + "; give a composite resource with --xr FILE, a step's input with --input FILE, composed resources with --observed FILE or --desired FILE"
		}
		return s + "; the expected response is a RunFunctionResponse as ocifn test prints it"
	}
	// Keys only the other message has, and none of want's own: a request
	// with a stray "results" is a request with a mistake in it.
	own, keys := []string{"observed", "input", "extraResources", "requiredResources", "credentials"}, []string{"results", "requirements", "conditions", "output"}
	other, advice := "RunFunctionResponse", "REQUEST is what the function is sent; the response it must give goes in the file --expected names"
	if want == "RunFunctionResponse" {
		own, keys = keys, own
		other, advice = "RunFunctionRequest", "the file --expected names holds the response the function must give, as ocifn test prints it"
	}
	for _, k := range own {
		if _, ok := top[k]; ok {
			return ""
		}
	}
	for _, k := range keys {
		if _, ok := top[k]; ok {
			return fmt.Sprintf("it looks like a %s (it has %q); %s", other, k, advice)
		}
	}
	return ""
}

// oneDocument returns, as JSON, the one document of a YAML stream that
// holds a message (what names its type). A YAML decoder reads the first
// document of a stream and drops the rest without a word: a second request
// would never be sent, and an empty first one (comments before "---") would
// be reported as null.
func oneDocument(data []byte, what string) ([]byte, error) {
	if err := keyGivenTwice(data); err != nil {
		return nil, err
	}
	r := kyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		d, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("not valid YAML or JSON: %w", err)
		}
		j, err := yaml.YAMLToJSON(d)
		if err != nil {
			return nil, fmt.Errorf("not valid YAML or JSON: %w", err)
		}
		if bytes.Equal(bytes.TrimSpace(j), []byte("null")) {
			continue
		}
		docs = append(docs, j)
	}
	switch len(docs) {
	case 0:
		return nil, fmt.Errorf("holds no %s (nothing but empty documents or comments)", what)
	case 1:
		return docs[0], nil
	}
	if what != "RunFunctionRequest" {
		return nil, &severalDocuments{msg: fmt.Sprintf("holds %d YAML documents; want one %s", len(docs), what), docs: docs}
	}
	return nil, &severalDocuments{msg: fmt.Sprintf("holds %d YAML documents; want one RunFunctionRequest: one call is made, with one request", len(docs)), docs: docs}
}

// severalDocuments is oneDocument's error for a stream of more than one
// document: docs holds them, as JSON, so that what they are can be told.
type severalDocuments struct {
	msg  string
	docs [][]byte
}

func (e *severalDocuments) Error() string { return e.msg }

// keyGivenTwice names a key written twice in one mapping of the YAML
// stream data. The decoder keeps the last value without a word: a request
// with a second "observed:" further down would reach the function without
// the first, and an expected response would not compare what the first
// holds. A stream that does not parse is left to the decoder to explain.
func keyGivenTwice(data []byte) error {
	dec := yamlv3.NewDecoder(bytes.NewReader(data))
	for {
		var n yamlv3.Node
		if err := dec.Decode(&n); err != nil {
			return nil
		}
		if err := duplicateKey(&n, "$"); err != nil {
			return err
		}
	}
}

func duplicateKey(n *yamlv3.Node, path string) error {
	switch n.Kind {
	case yamlv3.DocumentNode:
		for _, c := range n.Content {
			if err := duplicateKey(c, path); err != nil {
				return err
			}
		}
	case yamlv3.SequenceNode:
		for i, c := range n.Content {
			if err := duplicateKey(c, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case yamlv3.MappingNode:
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			// "<<" merges another mapping in; several are the decoder's
			// business, not a key given twice.
			if k.Kind == yamlv3.ScalarNode && k.Value != "<<" {
				if line, ok := seen[k.Value]; ok {
					return fmt.Errorf("key %q at %s is given twice, at lines %d and %d: a YAML decoder would keep the second alone; write it once", k.Value, path, line, k.Line)
				}
				seen[k.Value] = k.Line
			}
			if err := duplicateKey(v, path+"."+k.Value); err != nil {
				return err
			}
		}
	}
	return nil
}

func readStruct(path, flag string) (*structpb.Struct, error) {
	o, err := ReadObject(path)
	if err != nil {
		return nil, err
	}
	if err := notAMessage(o, path, flag); err != nil {
		return nil, err
	}
	return o.Struct()
}

// notAMessage refuses an object given to flag (--xr, --input, ...) that is
// a RunFunctionRequest or RunFunctionResponse, a file an author has next to
// the XR: taken as it is, the whole request would be sent as the XR, and the
// function would answer something that makes no sense. An object with an
// apiVersion or a kind is a Kubernetes object, however partial, and so is
// one with none of the messages' own keys (a desired XR of status alone).
func notAMessage(o Object, source, flag string) error {
	if _, ok := o["apiVersion"]; ok {
		return nil
	}
	if _, ok := o["kind"]; ok {
		return nil
	}
	msg, key := "", ""
	for _, k := range []string{"observed", "extraResources", "extra_resources", "requiredResources", "required_resources", "credentials"} {
		if _, ok := o[k]; ok {
			msg, key = "RunFunctionRequest", k
			break
		}
	}
	if msg == "" {
		for _, k := range []string{"results", "requirements", "conditions"} {
			if _, ok := o[k]; ok {
				msg, key = "RunFunctionResponse", k
				break
			}
		}
	}
	if meta, ok := o["meta"].(map[string]any); ok && msg == "" {
		// A request's or a response's meta holds nothing but these.
		only := true
		for k := range meta {
			only = only && (k == "tag" || k == "ttl" || k == "capabilities")
		}
		if only {
			msg, key = "RunFunctionRequest or RunFunctionResponse", "meta"
		}
	}
	if msg == "" {
		return nil
	}
	s := fmt.Sprintf("%s looks like a %s (it has %q), not a Kubernetes object (it has no apiVersion or kind)", source, msg, key)
	where := "a whole request goes as REQUEST (ocifn test IMAGE REQUEST)"
	switch msg {
	case "RunFunctionResponse":
		where = "the response a function must give goes in the file --expected names"
	case "RunFunctionRequest or RunFunctionResponse":
		where += ", the response a function must give in the file --expected names"
	}
	return fmt.Errorf("%s: %s; %s FILE takes %s", s, where, flag, flagTakes[flag])
}

// flagTakes is what each flag of a piece of the request takes.
var flagTakes = map[string]string{
	"--xr":         "the composite resource alone (observed.composite.resource of a request)",
	"--desired-xr": "the desired composite resource alone (desired.composite.resource of a request)",
	"--input":      "the step's input alone (input of a request)",
	"--observed":   "composed resources (the resources under observed.resources of a request)",
	"--desired":    "composed resources (the resources under desired.resources of a request)",
}

// ComposedResources keys composed resources by their
// crossplane.io/composition-resource-name annotation. Without
// requireAnnotation, metadata.name stands in for a missing annotation.
func ComposedResources(docs []Document, requireAnnotation bool) (map[string]*fnv1.Resource, error) {
	out := make(map[string]*fnv1.Resource, len(docs))
	from := map[string]string{}
	for _, d := range docs {
		name := ResourceName(d.Object)
		if name == "" && !requireAnnotation {
			name = d.Object.Name()
		}
		if name == "" {
			return nil, fmt.Errorf("%s (%s) has no %s annotation, which names it in the pipeline's state", d.Source, d.Object.Describe(), AnnotationCompositionResourceName)
		}
		if prev, ok := from[name]; ok {
			return nil, fmt.Errorf("%s and %s are both named %q; composed resource names must be unique", prev, d.Source, name)
		}
		from[name] = d.Source
		s, err := d.Object.Struct()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.Source, err)
		}
		out[name] = &fnv1.Resource{Resource: s}
	}
	return out, nil
}

// ParseContext reads context values the way `crossplane render` takes them:
// files are KEY=FILE, values are KEY=JSON (YAML is accepted too); a key
// given as a value wins over the same key given as a file.
func ParseContext(files, values []string) (map[string]any, error) {
	out := map[string]any{}
	parse := func(flag, kv string, load func(string) ([]byte, error)) error {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("%s %q: want KEY=%s", flag, kv, map[bool]string{true: "FILE", false: "JSON"}[flag == "--context-files"])
		}
		data, err := load(v)
		if err != nil {
			return fmt.Errorf("%s %s: %w", flag, k, err)
		}
		j, err := yaml.YAMLToJSON(data)
		if err != nil {
			return fmt.Errorf("%s %s: not JSON or YAML: %w", flag, k, err)
		}
		var val any
		if err := json.Unmarshal(j, &val); err != nil {
			return fmt.Errorf("%s %s: %w", flag, k, err)
		}
		out[k] = val
		return nil
	}
	for _, kv := range files {
		if err := parse("--context-files", kv, os.ReadFile); err != nil {
			return nil, err
		}
	}
	for _, kv := range values {
		if err := parse("--context-values", kv, func(s string) ([]byte, error) { return []byte(s), nil }); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// MessageYAML renders a protobuf message (a response) as YAML with sorted
// keys, through its protojson form.
func MessageYAML(m proto.Message) ([]byte, error) {
	j, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	// Not sigs.k8s.io/yaml's JSONToYAML: it writes a key "<<" plain, which
	// YAML readers take for a merge key, and a NEL that they read as a
	// line break; what ocifn test --update records would not read back.
	return codec.MarshalYAML(json.RawMessage(j))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
