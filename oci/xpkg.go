package oci

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"github.com/Masterminds/semver/v3"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	kyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/ocifn/ocifn/internal/k8sname"
	"github.com/ocifn/ocifn/internal/unknownfield"
)

// Crossplane package (xpkg) conventions, from the xpkg specification and
// what `crossplane xpkg build` and `push` do.
const (
	// PackageFile is the one file of a package's metadata layer, at its root.
	PackageFile = "package.yaml"
	// AnnotationKey marks layers in a package manifest; the layer whose
	// value is PackageAnnotation holds PackageFile.
	AnnotationKey = "io.crossplane.xpkg"
	// PackageAnnotation is the AnnotationKey value of the metadata layer.
	PackageAnnotation = "base"

	// MetaGroup is the API group of package metadata objects.
	MetaGroup = "meta.pkg.crossplane.io"
	// FunctionKind is the kind of a Function's package metadata.
	FunctionKind = "Function"
	// CRDAPIVersion and CRDKind identify the CustomResourceDefinitions a
	// Function package may carry (schemas for the Function's input).
	CRDAPIVersion = "apiextensions.k8s.io/v1"
	CRDKind       = "CustomResourceDefinition"
)

// Function capabilities (spec.capabilities of a meta.pkg.crossplane.io
// Function): Crossplane v2 runs a Function in a Composition's pipeline only
// if it declares "composition" (or declares nothing, as older packages do),
// and in an Operation only if it declares "operation".
const (
	CapabilityComposition = "composition"
	CapabilityOperation   = "operation"
)

// DefaultCapabilities are what `ocifn build` declares for a package it
// generates the metadata of: an ocifn function can serve both.
var DefaultCapabilities = []string{CapabilityComposition, CapabilityOperation}

// KnownCapability says whether Crossplane reads c as one of
// DefaultCapabilities: it compares them ignoring case and every character
// but letters and digits (pkgmetav1.CapabilitiesContainFuzzyMatch), so
// "Composition" declares composition.
func KnownCapability(c string) bool {
	norm := func(s string) string {
		return strings.ToLower(strings.Map(func(r rune) rune {
			if r < 0x80 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
				return r
			}
			return -1
		}, s))
	}
	return slices.ContainsFunc(DefaultCapabilities, func(k string) bool { return norm(k) == norm(c) })
}

// FunctionAPIVersions are the apiVersions of Function metadata that
// Crossplane reads.
var FunctionAPIVersions = []string{MetaGroup + "/v1", MetaGroup + "/v1beta1"}

// LayerLabel is the image config label through which a package tarball
// carries the annotation of the layer with that digest: the docker-save
// format has no place for layer annotations, so `crossplane xpkg build`
// stores them as "io.crossplane.xpkg:sha256:<digest>" labels and
// `crossplane xpkg push` turns them into manifest annotations.
func LayerLabel(digest string) string { return AnnotationKey + ":" + digest }

// PackageMeta is a validated package.yaml of a Function package.
type PackageMeta struct {
	// Function is the package's Function object.
	Function FunctionMeta `json:"function"`
	// CRDs are the names of the CustomResourceDefinitions in the stream.
	CRDs []string `json:"crds,omitempty"`
	// Raw is package.yaml as it goes into the package: the documents of
	// the stream, the Function first, as crossplane xpkg build orders them.
	Raw []byte `json:"-"`
	// Warnings name what in the stream Crossplane would ignore or not
	// know; it is packaged as it is.
	Warnings []string `json:"-"`
}

// FunctionMeta is what a Function object says about the package.
type FunctionMeta struct {
	APIVersion  string            `json:"apiVersion"`
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// Crossplane is the version constraint on Crossplane (spec.crossplane.version).
	Crossplane string `json:"crossplane,omitempty"`
	// DependsOn lists the packages this one needs (spec.dependsOn).
	DependsOn []Dependency `json:"dependsOn,omitempty"`
	// Image overrides the image Crossplane runs (spec.image), if set.
	Image string `json:"image,omitempty"`
	// Capabilities are what the Function declares it can be used for
	// (spec.capabilities), such as composition and operation.
	Capabilities []string `json:"capabilities,omitempty"`
}

// Dependency is one entry of a Function's spec.dependsOn.
type Dependency struct {
	Provider      string `json:"provider,omitempty"`
	Configuration string `json:"configuration,omitempty"`
	Function      string `json:"function,omitempty"`
	// APIVersion, Kind and Package are the newer, generic way to name one.
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Package    string `json:"package,omitempty"`
	Version    string `json:"version"`
}

// String is the dependency as "package version".
func (d Dependency) String() string {
	p := d.Package
	for _, s := range []string{d.Provider, d.Configuration, d.Function} {
		if p == "" {
			p = s
		}
	}
	if d.Kind != "" {
		p = d.Kind + " " + p
	}
	return strings.TrimSpace(p + " " + d.Version)
}

// object is the part of every document that decides what it is.
type object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name        string            `json:"name"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
}

type functionSpec struct {
	Spec functionSpecFields `json:"spec"`
}

// functionSpecFields are the fields of a Function's spec, all that
// Crossplane reads (meta.pkg.crossplane.io FunctionSpec with MetaSpec).
type functionSpecFields struct {
	Crossplane *struct {
		Version string `json:"version"`
	} `json:"crossplane"`
	DependsOn    []Dependency `json:"dependsOn"`
	Image        *string      `json:"image"`
	Capabilities []string     `json:"capabilities"`
}

// functionDocument is a Function document as Crossplane reads it, the
// metadata as Kubernetes' ObjectMeta, to name a key it would ignore.
type functionDocument struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name                       any `json:"name"`
		GenerateName               any `json:"generateName"`
		Namespace                  any `json:"namespace"`
		SelfLink                   any `json:"selfLink"`
		UID                        any `json:"uid"`
		ResourceVersion            any `json:"resourceVersion"`
		Generation                 any `json:"generation"`
		CreationTimestamp          any `json:"creationTimestamp"`
		DeletionTimestamp          any `json:"deletionTimestamp"`
		DeletionGracePeriodSeconds any `json:"deletionGracePeriodSeconds"`
		Labels                     any `json:"labels"`
		Annotations                any `json:"annotations"`
		OwnerReferences            any `json:"ownerReferences"`
		Finalizers                 any `json:"finalizers"`
		ManagedFields              any `json:"managedFields"`
	} `json:"metadata"`
	Spec functionSpecFields `json:"spec"`
}

// functionWarnings are what a Function document holds that Crossplane
// would ignore or not know, though it installs the package: a key that is
// no field (a misspelt dependsOn loses the dependencies), and a capability
// it does not know (a misspelt one bars the use it meant).
func functionWarnings(doc []byte, capabilities []string) []string {
	var ws []string
	meant := func(s string) string {
		if s == "" {
			return ""
		}
		return fmt.Sprintf("; did you mean %q?", s)
	}
	for _, f := range unknownfield.All(doc, reflect.TypeFor[functionDocument]()) {
		ws = append(ws, fmt.Sprintf("unknown field %q at %s, which Crossplane ignores%s", f.Key, f.Where(), meant(f.Suggestion)))
	}
	for i, c := range capabilities {
		if !KnownCapability(c) {
			ws = append(ws, fmt.Sprintf("spec.capabilities[%d] %q is not a capability Crossplane knows (%s), and a Function declares only what Crossplane may use it for, so a misspelt one bars it%s",
				i, c, strings.Join(DefaultCapabilities, ", "), meant(unknownfield.Closest(c, DefaultCapabilities))))
		}
	}
	return ws
}

// ValidName reports why name cannot name a Function ("" if it can).
func ValidName(name string) string { return k8sname.Why(name) }

// ParsePackageMeta validates a package.yaml stream: exactly one Function
// (meta.pkg.crossplane.io/v1 or v1beta1) and any number of
// CustomResourceDefinitions, nothing else. Errors name the offending
// document by its index (from 1) and, when it has them, kind and name.
func ParsePackageMeta(data []byte) (*PackageMeta, error) {
	r := kyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var (
		pm       PackageMeta
		docs     [][]byte
		fnDoc    int
		idx      int
		crdNames = map[string]int{}
	)
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("cannot split the YAML stream after document %d: %w", idx, err)
		}
		idx++
		doc = stripSeparators(doc)
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var o object
		if err := yaml.Unmarshal(doc, &o); err != nil {
			return nil, fmt.Errorf("document %d is not a valid YAML object: %w", idx, err)
		}
		what := describe(idx, o)
		switch {
		case o.Kind == "" || o.APIVersion == "":
			return nil, fmt.Errorf("%s has no apiVersion or kind", what)
		case o.Kind == FunctionKind && strings.HasPrefix(o.APIVersion, MetaGroup+"/"):
			if !slices.Contains(FunctionAPIVersions, o.APIVersion) {
				return nil, fmt.Errorf("%s: apiVersion %s is not supported; use %s", what, o.APIVersion, strings.Join(FunctionAPIVersions, " or "))
			}
			if fnDoc != 0 {
				return nil, fmt.Errorf("%s: a package holds exactly one Function, and document %d is one already", what, fnDoc)
			}
			if why := ValidName(o.Metadata.Name); why != "" {
				return nil, fmt.Errorf("%s: metadata.name %q: %s", what, o.Metadata.Name, why)
			}
			var fs functionSpec
			if err := yaml.Unmarshal(doc, &fs); err != nil {
				return nil, fmt.Errorf("%s: cannot read spec: %w", what, err)
			}
			for i, d := range fs.Spec.DependsOn {
				if d.Provider == "" && d.Configuration == "" && d.Function == "" && d.Package == "" {
					return nil, fmt.Errorf("%s: spec.dependsOn[%d] names no package (provider, configuration, function or package)", what, i)
				}
				// Crossplane refuses a package whose constraints do not
				// parse; refuse it here, before it is pushed. A digest
				// pins the dependency instead, which Crossplane's
				// resolver takes before it parses a constraint.
				if _, err := v1.NewHash(d.Version); err == nil {
					continue
				}
				if _, err := semver.NewConstraint(d.Version); err != nil {
					return nil, fmt.Errorf("%s: spec.dependsOn[%d].version %q is neither a semantic version constraint nor a digest (sha256:<64 hex digits>): %v", what, i, d.Version, err)
				}
			}
			if fs.Spec.Crossplane != nil {
				if _, err := semver.NewConstraint(fs.Spec.Crossplane.Version); err != nil {
					return nil, fmt.Errorf("%s: spec.crossplane.version %q is not a semantic version constraint: %v", what, fs.Spec.Crossplane.Version, err)
				}
			}
			fnDoc = idx
			pm.Function = FunctionMeta{
				APIVersion:  o.APIVersion,
				Name:        o.Metadata.Name,
				Labels:      o.Metadata.Labels,
				Annotations: o.Metadata.Annotations,
				DependsOn:   fs.Spec.DependsOn,
				// Crossplane takes any string here; other
				// consumers may define their own.
				Capabilities: fs.Spec.Capabilities,
			}
			if fs.Spec.Crossplane != nil {
				pm.Function.Crossplane = fs.Spec.Crossplane.Version
			}
			if fs.Spec.Image != nil {
				pm.Function.Image = *fs.Spec.Image
			}
			for _, w := range functionWarnings(doc, fs.Spec.Capabilities) {
				pm.Warnings = append(pm.Warnings, what+": "+w)
			}
		case o.Kind == CRDKind && o.APIVersion == CRDAPIVersion:
			if o.Metadata.Name == "" {
				return nil, fmt.Errorf("%s has no metadata.name", what)
			}
			if prev, ok := crdNames[o.Metadata.Name]; ok {
				return nil, fmt.Errorf("%s: document %d defines the same CustomResourceDefinition", what, prev)
			}
			crdNames[o.Metadata.Name] = idx
			pm.CRDs = append(pm.CRDs, o.Metadata.Name)
		default:
			return nil, fmt.Errorf("%s cannot be in a Function package: package.yaml holds one %s (%s) and any number of %s (%s), nothing else",
				what, FunctionKind, strings.Join(FunctionAPIVersions, " or "), CRDKind, CRDAPIVersion)
		}
		if fnDoc == idx {
			// The Function goes first, as crossplane xpkg build puts it:
			// the crossplane CLI takes the first document for it.
			docs = slices.Insert(docs, 0, bytes.TrimSpace(doc))
		} else {
			docs = append(docs, bytes.TrimSpace(doc))
		}
	}
	if fnDoc == 0 {
		return nil, fmt.Errorf("no %s object (apiVersion %s) in the package metadata (%d documents)", FunctionKind, strings.Join(FunctionAPIVersions, " or "), len(docs))
	}
	// Each document opens with a separator and a last one closes the
	// stream, as crossplane xpkg build writes it: the crossplane CLI
	// (resource validate, xpkg get-crds) reads the metadata layer's raw tar
	// as a YAML stream and drops its last document as the tar's padding.
	var buf bytes.Buffer
	for _, d := range docs {
		buf.WriteString("---\n")
		buf.Write(d)
		buf.WriteString("\n")
	}
	buf.WriteString("---\n")
	pm.Raw = buf.Bytes()
	return &pm, nil
}

// describe names a document for an error message.
func describe(idx int, o object) string {
	s := fmt.Sprintf("document %d", idx)
	if o.Kind != "" {
		s += " (" + o.Kind
		if o.Metadata.Name != "" {
			s += " " + o.Metadata.Name
		}
		if o.APIVersion != "" {
			s += ", " + o.APIVersion
		}
		s += ")"
	}
	return s
}

// stripSeparators drops the "---" lines the YAML reader leaves at the start
// of a document.
func stripSeparators(doc []byte) []byte {
	for {
		t := bytes.TrimLeft(doc, " \t\r\n")
		if !bytes.HasPrefix(t, []byte("---")) {
			return doc
		}
		rest := t[3:]
		if i := bytes.IndexByte(rest, '\n'); i >= 0 && len(bytes.TrimSpace(rest[:i])) == 0 {
			doc = rest[i+1:]
		} else if len(bytes.TrimSpace(rest)) == 0 {
			return nil
		} else {
			return doc
		}
	}
}

// stripComments drops comment-only lines, so a document of comments counts
// as empty.
func stripComments(doc []byte) []byte {
	var out []byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l...)
			out = append(out, '\n')
		}
	}
	return out
}

// GenerateFunctionMeta returns a minimal valid package.yaml for a Function
// named name that declares capabilities (none when empty).
func GenerateFunctionMeta(name string, capabilities []string) ([]byte, error) {
	if why := ValidName(name); why != "" {
		return nil, fmt.Errorf("function name %q: %s", name, why)
	}
	var spec strings.Builder
	if len(capabilities) > 0 {
		spec.WriteString("spec:\n  capabilities:\n")
		for _, c := range capabilities {
			if !capabilityName.MatchString(c) {
				return nil, fmt.Errorf("capability %q: want a name such as %s or %s (letters, digits, '-', '.', '_')", c, CapabilityComposition, CapabilityOperation)
			}
			fmt.Fprintf(&spec, "  - %s\n", c)
		}
	}
	return []byte(fmt.Sprintf(`apiVersion: %s/v1
kind: %s
metadata:
  name: %s
  annotations:
    meta.crossplane.io/description: A Composition Function served by ocifn from an OCI image.
%s`, MetaGroup, FunctionKind, name, spec.String())), nil
}

// capabilityName is what GenerateFunctionMeta writes as a capability
// without quoting.
var capabilityName = regexp.MustCompile(`^[A-Za-z0-9][-A-Za-z0-9._]*$`)
