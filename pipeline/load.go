package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
)

// Annotations of a Function object that say how render runs it.
const (
	// AnnotationRuntime is crossplane render's runtime annotation;
	// "Development" means: call a function that is already running.
	AnnotationRuntime = "render.crossplane.io/runtime"
	// AnnotationDevelopmentTarget is the gRPC target (plaintext) of a running
	// function, as crossplane render uses it.
	AnnotationDevelopmentTarget = "render.crossplane.io/runtime-development-target"
	// AnnotationDockerImage is crossplane render's image to run in place
	// of spec.package with its Docker runtime.
	AnnotationDockerImage = "render.crossplane.io/runtime-docker-image"
	// AnnotationTarball is a local image tarball (docker save, OCI archive)
	// or Function package (xpkg) to run instead of spec.package. A relative
	// path is relative to the file that declares the Function.
	AnnotationTarball = "render.ocifn.dev/tarball"
	// AnnotationImage selects an image in a tarball that holds several.
	AnnotationImage = "render.ocifn.dev/image"

	// defaultDevelopmentTarget is where crossplane render looks for a
	// Development function without a target annotation.
	defaultDevelopmentTarget = "localhost:9443"
)

// Composition is what render needs of a Composition.
type Composition struct {
	Name             string
	Labels           map[string]string
	CompositeTypeRef TypeRef
	Steps            []Step
	// WriteConnectionSecretsToNamespace is where a legacy XR's connection
	// Secret goes, unless the XR names one.
	WriteConnectionSecretsToNamespace string
}

// TypeRef is the type of composite resource a Composition is for.
type TypeRef struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// Step is one step of a Composition's function pipeline.
type Step struct {
	Step        string `json:"step"`
	FunctionRef struct {
		Name string `json:"name"`
	} `json:"functionRef"`
	Input       Object            `json:"input,omitempty"`
	Credentials []StepCredentials `json:"credentials,omitempty"`
	// Requirements are resources (and schemas) the step gets on its first
	// call, without asking for them.
	Requirements *struct {
		RequiredResources []RequiredResource `json:"requiredResources"`
		RequiredSchemas   []RequiredSchema   `json:"requiredSchemas"`
	} `json:"requirements,omitempty"`
}

// RequiredSchema names the OpenAPI schema of a kind that a step gets up
// front.
type RequiredSchema struct {
	RequirementName string `json:"requirementName"`
	APIVersion      string `json:"apiVersion"`
	Kind            string `json:"kind"`
}

// RequiredResource selects resources a step gets up front: by name or by
// labels, in a namespace or not.
type RequiredResource struct {
	RequirementName string            `json:"requirementName"`
	APIVersion      string            `json:"apiVersion"`
	Kind            string            `json:"kind"`
	Name            *string           `json:"name,omitempty"`
	MatchLabels     map[string]string `json:"matchLabels,omitempty"`
	Namespace       *string           `json:"namespace,omitempty"`
}

// StepCredentials names a Secret whose data a step receives as credentials.
type StepCredentials struct {
	Name      string `json:"name"`
	Source    string `json:"source"`
	SecretRef *struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"secretRef,omitempty"`
}

// ParseComposition reads a Composition of mode Pipeline.
func ParseComposition(o Object) (*Composition, error) {
	if o.Kind() != "Composition" || !strings.HasPrefix(o.APIVersion(), "apiextensions.crossplane.io/") {
		return nil, fmt.Errorf("%s (apiVersion %q) is not a Composition (apiextensions.crossplane.io/v1)", o.Describe(), o.APIVersion())
	}
	var c struct {
		Spec struct {
			CompositeTypeRef                  TypeRef `json:"compositeTypeRef"`
			Mode                              string  `json:"mode"`
			WriteConnectionSecretsToNamespace string  `json:"writeConnectionSecretsToNamespace"`
			Pipeline                          []Step  `json:"pipeline"`
			Resources                         []any   `json:"resources"`
		} `json:"spec"`
	}
	if err := remarshal(o, &c); err != nil {
		return nil, fmt.Errorf("Composition %q: %w", o.Name(), err)
	}
	switch {
	case c.Spec.Mode == "Resources" || (c.Spec.Mode == "" && len(c.Spec.Resources) > 0):
		return nil, fmt.Errorf("render only runs function pipelines: Composition %q must use spec.mode: Pipeline", o.Name())
	case c.Spec.Mode != "" && c.Spec.Mode != "Pipeline":
		return nil, fmt.Errorf("Composition %q: unknown spec.mode %q; want Pipeline", o.Name(), c.Spec.Mode)
	case len(c.Spec.Pipeline) == 0:
		return nil, fmt.Errorf("Composition %q has no spec.pipeline steps", o.Name())
	}
	seen := map[string]bool{}
	for i, s := range c.Spec.Pipeline {
		if s.Step == "" {
			return nil, fmt.Errorf("Composition %q: pipeline step %d has no name (step:)", o.Name(), i+1)
		}
		if seen[s.Step] {
			return nil, fmt.Errorf("Composition %q: two pipeline steps are named %q", o.Name(), s.Step)
		}
		seen[s.Step] = true
		if s.FunctionRef.Name == "" {
			return nil, fmt.Errorf("Composition %q: pipeline step %q has no functionRef.name", o.Name(), s.Step)
		}
	}
	return &Composition{Name: o.Name(), Labels: o.Labels(), CompositeTypeRef: c.Spec.CompositeTypeRef, Steps: c.Spec.Pipeline,
		WriteConnectionSecretsToNamespace: c.Spec.WriteConnectionSecretsToNamespace}, nil
}

// FunctionObject is a pkg.crossplane.io Function as render reads it.
type FunctionObject struct {
	Name        string
	Package     string
	Annotations map[string]string
	// Dir is the directory of the file that declares the Function; relative
	// paths in it are relative to Dir.
	Dir string
}

// ParseFunctions reads Function objects.
func ParseFunctions(docs []Document) ([]FunctionObject, error) {
	var fns []FunctionObject
	seen := map[string]string{}
	for _, d := range docs {
		o := d.Object
		if o.Kind() != "Function" || !strings.HasPrefix(o.APIVersion(), "pkg.crossplane.io/") {
			return nil, fmt.Errorf("%s: %s (apiVersion %q) is not a Function (pkg.crossplane.io/v1)", d.Source, o.Describe(), o.APIVersion())
		}
		if o.Name() == "" {
			return nil, fmt.Errorf("%s: a Function without metadata.name", d.Source)
		}
		if prev, ok := seen[o.Name()]; ok {
			return nil, fmt.Errorf("%s and %s both declare the Function %q", prev, d.Source, o.Name())
		}
		seen[o.Name()] = d.Source
		var spec struct {
			Spec struct {
				Package string `json:"package"`
			} `json:"spec"`
		}
		if err := remarshal(o, &spec); err != nil {
			return nil, fmt.Errorf("%s: %w", d.Source, err)
		}
		fns = append(fns, FunctionObject{Name: o.Name(), Package: spec.Spec.Package, Annotations: o.Annotations(), Dir: filepath.Dir(d.File)})
	}
	return fns, nil
}

// RuntimeKind says how render runs a Function.
type RuntimeKind string

// Runtime kinds.
const (
	// RuntimeTarball runs a local image tarball or package in containers.
	RuntimeTarball RuntimeKind = "tarball"
	// RuntimeRegistry pulls the package from a registry, then runs it like
	// a tarball.
	RuntimeRegistry RuntimeKind = "registry"
	// RuntimeTarget calls a function that is already running, over
	// plaintext gRPC.
	RuntimeTarget RuntimeKind = "target"
)

// Runtime is how and from where render runs one Function.
type Runtime struct {
	Kind RuntimeKind
	// Location is the tarball path, the registry reference, or the gRPC
	// target.
	Location string
	// Image selects an image in a tarball of several.
	Image string
}

// Runtime decides how to run the Function: a development target when one
// is annotated (unless the runtime is "Docker") or the runtime is
// "Development"; else the tarball of the render.ocifn.dev/tarball
// annotation; else the image of crossplane render's
// render.crossplane.io/runtime-docker-image, or else spec.package, as a
// file when it is a path (starts with "/", "./" or "../"), as a registry
// reference otherwise. Another runtime is refused, as crossplane render
// refuses it.
func (f FunctionObject) Runtime() (Runtime, error) {
	a := f.Annotations
	target := a[AnnotationDevelopmentTarget]
	switch rt := a[AnnotationRuntime]; rt {
	case "Development":
		if target == "" {
			target = defaultDevelopmentTarget
		}
		return Runtime{Kind: RuntimeTarget, Location: target}, nil
	case "":
		// The target alone says what is meant (see the README).
		if target != "" {
			return Runtime{Kind: RuntimeTarget, Location: target}, nil
		}
	case "Docker":
		// The image itself, which ocifn runs in its own containers.
	default:
		return Runtime{}, fmt.Errorf("Function %q: unsupported %s %q: want Development, or Docker (the image, run by ocifn)", f.Name, AnnotationRuntime, rt)
	}
	if p := a[AnnotationTarball]; p != "" {
		return Runtime{Kind: RuntimeTarball, Location: f.resolve(p), Image: a[AnnotationImage]}, nil
	}
	p := f.Package
	if img := a[AnnotationDockerImage]; img != "" {
		p = img
	}
	switch {
	case p == "":
		return Runtime{}, fmt.Errorf("Function %q has no spec.package and no %s or %s annotation", f.Name, AnnotationTarball, AnnotationDockerImage)
	case IsPath(p):
		return Runtime{Kind: RuntimeTarball, Location: f.resolve(p), Image: a[AnnotationImage]}, nil
	}
	return Runtime{Kind: RuntimeRegistry, Location: p, Image: a[AnnotationImage]}, nil
}

// IsPath reports whether an image argument names a file rather than a
// registry reference.
func IsPath(s string) bool {
	return strings.HasPrefix(s, "/") || strings.HasPrefix(s, "./") || strings.HasPrefix(s, "../") || s == "." || s == ".."
}

func (f FunctionObject) resolve(p string) string {
	if filepath.IsAbs(p) || f.Dir == "" {
		return p
	}
	return filepath.Join(f.Dir, p)
}

// remarshal decodes an Object into a typed struct through JSON.
func remarshal(o Object, into any) error {
	b, err := json.Marshal(o)
	if err != nil {
		return err
	}
	return typeError(json.Unmarshal(b, into))
}

// typeError says a field's value is of the wrong type by the field's path
// and the two types, in the words of the YAML the author wrote, rather
// than encoding/json's, which name ocifn's Go types ("cannot unmarshal
// string into Go struct field operationSpec.spec.retryLimit of type
// int64"). Other errors are returned as they are.
func typeError(err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" || te.Type == nil {
		return err
	}
	var want string
	switch te.Type.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "an integer"
	case reflect.Float32, reflect.Float64:
		want = "a number"
	case reflect.String:
		want = "a string"
	case reflect.Bool:
		want = "true or false"
	case reflect.Slice, reflect.Array:
		want = "a list"
	default:
		want = "an object"
	}
	got := map[string]string{"string": "a string", "bool": "a boolean", "array": "a list", "object": "an object"}[te.Value]
	if got == "" {
		got = "the " + te.Value // "number 2.5"
	}
	return fmt.Errorf("%s must be %s, not %s", te.Field, want, got)
}
