// Package pipeline holds what an author needs to run functions locally, the
// way Crossplane would run them: Kubernetes objects read from YAML,
// RunFunctionRequests built from them, and a Composition's function pipeline
// run step by step (like `crossplane render`).
package pipeline

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"google.golang.org/protobuf/types/known/structpb"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	kyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Annotations and labels Crossplane puts on composed resources.
const (
	// AnnotationCompositionResourceName names a composed resource in the
	// desired and observed state (the key of State.resources).
	AnnotationCompositionResourceName = "crossplane.io/composition-resource-name"
	// LabelComposite names the composite resource a resource belongs to.
	LabelComposite = "crossplane.io/composite"
	// LabelClaimName and LabelClaimNamespace name the claim of the composite.
	LabelClaimName      = "crossplane.io/claim-name"
	LabelClaimNamespace = "crossplane.io/claim-namespace"
)

// Object is a Kubernetes object as read from YAML or JSON.
type Object map[string]any

// A Document is an Object and where it was read from, for messages.
type Document struct {
	Object Object
	// Source is "file.yaml, document 3", for messages.
	Source string
	// File is the file it was read from.
	File string
	// yaml is the document as given, for what must read it again typed.
	yaml []byte
}

// APIVersion returns the object's apiVersion.
func (o Object) APIVersion() string { s, _ := o["apiVersion"].(string); return s }

// Kind returns the object's kind.
func (o Object) Kind() string { s, _ := o["kind"].(string); return s }

// Name returns metadata.name.
func (o Object) Name() string { return o.metaString("name") }

// Namespace returns metadata.namespace.
func (o Object) Namespace() string { return o.metaString("namespace") }

// Annotations returns metadata.annotations (nil when there are none).
func (o Object) Annotations() map[string]string { return o.metaMap("annotations") }

// Labels returns metadata.labels (nil when there are none).
func (o Object) Labels() map[string]string { return o.metaMap("labels") }

func (o Object) metadata() map[string]any {
	m, _ := o["metadata"].(map[string]any)
	return m
}

// ensureMetadata returns metadata, created if missing.
func (o Object) ensureMetadata() map[string]any {
	m := o.metadata()
	if m == nil {
		m = map[string]any{}
		o["metadata"] = m
	}
	return m
}

func (o Object) metaString(k string) string {
	s, _ := o.metadata()[k].(string)
	return s
}

func (o Object) metaMap(k string) map[string]string {
	m, _ := o.metadata()[k].(map[string]any)
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// setMeta sets metadata.k, or removes it when v is "".
func (o Object) setMeta(k, v string) {
	if v == "" {
		delete(o.metadata(), k)
		return
	}
	o.ensureMetadata()[k] = v
}

// addToMetaMap merges kv into metadata.<field> (labels or annotations).
func (o Object) addToMetaMap(field string, kv map[string]string) {
	md := o.ensureMetadata()
	m, _ := md[field].(map[string]any)
	if m == nil {
		m = map[string]any{}
		md[field] = m
	}
	for k, v := range kv {
		m[k] = v
	}
}

// Describe names the object for messages: "Kind/name".
func (o Object) Describe() string {
	k, n := o.Kind(), o.Name()
	switch {
	case k == "" && n == "":
		return "an object without kind and name"
	case n == "":
		return k + " without a name"
	}
	return k + "/" + n
}

// Struct converts the object to a protobuf Struct.
func (o Object) Struct() (*structpb.Struct, error) {
	return structpb.NewStruct(o)
}

// deepCopy copies the object through JSON, which is what it came from.
func (o Object) deepCopy() Object {
	c, _ := deepCopyJSON(map[string]any(o)).(map[string]any)
	return c
}

// ReadDocuments reads every object in a YAML (or JSON) file, a stream of
// documents separated by "---", or in every .yaml and .yml file of a
// directory (not its subdirectories), in name order. Empty documents are
// skipped.
func ReadDocuments(path string) ([]Document, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return readFile(path)
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	// The files crossplane render reads of a directory, so that both read
	// the same objects: other files (.json, .YAML) are left alone, and a
	// directory without any is refused rather than read as nothing.
	var names []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".yaml", ".yml":
			if !e.IsDir() {
				names = append(names, e.Name())
			}
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s: no YAML file (.yaml or .yml) in the directory", path)
	}
	sort.Strings(names)
	var docs []Document
	for _, n := range names {
		d, err := readFile(filepath.Join(path, n))
		if err != nil {
			return nil, err
		}
		docs = append(docs, d...)
	}
	return docs, nil
}

func readFile(path string) ([]Document, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseDocuments(data, path)
}

// ParseDocuments parses a YAML or JSON stream; source names it in messages.
func ParseDocuments(data []byte, source string) ([]Document, error) {
	r := kyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs []Document
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: cannot split the YAML stream: %w", source, err)
		}
		where := fmt.Sprintf("%s, document %d", source, i)
		obj, err := ParseObject(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if obj == nil {
			continue
		}
		docs = append(docs, Document{Object: obj, Source: where, File: source, yaml: doc})
	}
}

// ParseObject parses one YAML or JSON document; it returns nil for an empty
// one. Whole numbers are int64, as Kubernetes' unstructured objects keep
// them, so that a large one prints as it was given.
func ParseObject(doc []byte) (Object, error) {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if bytes.Equal(bytes.TrimSpace(j), []byte("null")) {
		return nil, nil
	}
	var obj Object
	if err := utiljson.Unmarshal(j, &obj); err != nil {
		return nil, fmt.Errorf("not an object: want a mapping such as \"apiVersion: ...\", got %s", bytes.TrimSpace(firstBytes(j, 60)))
	}
	return obj, nil
}

func firstBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// ReadObject reads a file that must hold exactly one object.
func ReadObject(path string) (Object, error) {
	d, err := readOne(path)
	if err != nil {
		return nil, err
	}
	return d.Object, nil
}

// readOne reads a file that must hold exactly one object.
func readOne(path string) (Document, error) {
	docs, err := ReadDocuments(path)
	if err != nil {
		return Document{}, err
	}
	switch len(docs) {
	case 0:
		return Document{}, fmt.Errorf("%s holds no object", path)
	case 1:
		return docs[0], nil
	}
	return Document{}, fmt.Errorf("%s holds %d objects; want one", path, len(docs))
}

// ResourceName returns the name of a composed resource in a State: its
// crossplane.io/composition-resource-name annotation.
func ResourceName(o Object) string { return o.Annotations()[AnnotationCompositionResourceName] }

// ToYAML renders v (an Object, or anything JSON can encode) as YAML with
// sorted keys.
func ToYAML(v any) ([]byte, error) {
	return yaml.Marshal(v)
}

// WriteStream writes objects as a YAML stream, each document starting with
// "---".
func WriteStream(w io.Writer, objs []Object) error {
	for _, o := range objs {
		b, err := ToYAML(o)
		if err != nil {
			return fmt.Errorf("cannot render %s as YAML: %w", o.Describe(), err)
		}
		if _, err := fmt.Fprintf(w, "---\n%s", b); err != nil {
			return err
		}
	}
	return nil
}

// RequireKinds refuses an object without a kind, as the crossplane CLI
// refuses one in a file it reads as resources ("Object 'Kind' is missing"):
// no requirement would select it, a watched resource would be required as
// kind "", and an observed one would be composed as no kind at all.
func RequireKinds(docs []Document) error {
	for _, d := range docs {
		if d.Object.Kind() != "" {
			continue
		}
		if n := d.Object.Name(); n != "" {
			return fmt.Errorf("%s: the resource %q has no kind (a string, such as ConfigMap)", d.Source, n)
		}
		return fmt.Errorf("%s: the resource has no kind (a string, such as ConfigMap)", d.Source)
	}
	return nil
}
