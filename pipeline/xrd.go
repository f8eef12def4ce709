package pipeline

import (
	"encoding/json"
	"fmt"
	"strings"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// XRD is what render needs of a CompositeResourceDefinition: the OpenAPI
// schema of each version, for defaults, and its scope, for where the XR
// keeps Crossplane's fields.
type XRD struct {
	Name string
	// Schema is where the XR keeps Crossplane's fields.
	Schema Schema
	group  string
	kind   string
	// schemas are the openAPIV3Schema of each version, by version name.
	schemas map[string]map[string]any
	// updatePolicy is spec.defaultCompositionUpdatePolicy.
	updatePolicy string
}

// ParseXRD reads a CompositeResourceDefinition of
// apiextensions.crossplane.io/v1 or v2.
func ParseXRD(o Object) (*XRD, error) {
	if o.Kind() != "CompositeResourceDefinition" {
		return nil, fmt.Errorf("%s is not a CompositeResourceDefinition", o.Describe())
	}
	var d struct {
		Spec struct {
			Group string `json:"group"`
			Names struct {
				Kind string `json:"kind"`
			} `json:"names"`
			Scope                          *string `json:"scope"`
			DefaultCompositionUpdatePolicy string  `json:"defaultCompositionUpdatePolicy"`
			Versions                       []struct {
				Name   string `json:"name"`
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := remarshal(o, &d); err != nil {
		return nil, fmt.Errorf("CompositeResourceDefinition %q: %w", o.Name(), err)
	}
	x := &XRD{Name: o.Name(), group: d.Spec.Group, kind: d.Spec.Names.Kind, schemas: map[string]map[string]any{}, updatePolicy: d.Spec.DefaultCompositionUpdatePolicy}
	// An apiextensions.crossplane.io/v1 XRD without a scope is a legacy
	// cluster-scoped one; v2 XRDs default to Namespaced.
	switch o.APIVersion() {
	case "apiextensions.crossplane.io/v1":
		if d.Spec.Scope == nil || *d.Spec.Scope == "LegacyCluster" {
			x.Schema = SchemaLegacy
		}
	case "apiextensions.crossplane.io/v2":
		if d.Spec.Scope != nil && *d.Spec.Scope == "LegacyCluster" {
			x.Schema = SchemaLegacy
		}
	default:
		return nil, fmt.Errorf("CompositeResourceDefinition %q has apiVersion %q; want apiextensions.crossplane.io/v1 or v2", o.Name(), o.APIVersion())
	}
	for _, v := range d.Spec.Versions {
		x.schemas[v.Name] = v.Schema.OpenAPIV3Schema
	}
	return x, nil
}

// Check reports whether the XRD defines the XR's kind.
func (x *XRD) Check(xr Object) error {
	group, _, _ := strings.Cut(xr.APIVersion(), "/")
	if !strings.Contains(xr.APIVersion(), "/") {
		group = ""
	}
	if group != x.group || xr.Kind() != x.kind {
		return fmt.Errorf("CompositeResourceDefinition %q defines %s in group %s, the XR is a %s of %s", x.Name, x.kind, x.group, xr.Kind(), xr.APIVersion())
	}
	return nil
}

// ApplyDefaults fills in what the XR leaves out with the defaults of the
// XRD's OpenAPI schema for the XR's version, as the API server would on
// create (Kubernetes' structural defaulting), and Crossplane's
// compositionUpdatePolicy when the XRD sets a default one.
func (x *XRD) ApplyDefaults(xr Object) error {
	_, version, _ := strings.Cut(xr.APIVersion(), "/")
	s, ok := x.schemas[version]
	if !ok {
		return fmt.Errorf("the XR's apiVersion %s is not a version of CompositeResourceDefinition %q", xr.APIVersion(), x.Name)
	}
	// The XRD API lets a version leave its schema out, but Crossplane
	// cannot derive a CRD from it, and crossplane render refuses it too.
	if s == nil {
		return fmt.Errorf("CompositeResourceDefinition %q: version %s has no schema (spec.versions[].schema.openAPIV3Schema): Crossplane cannot derive its CRD", x.Name, version)
	}
	applyDefaults(map[string]any(xr), x.crdSchema(s))
	return nil
}

// crdSchema is what of a version's schema the CRD Crossplane derives from
// the XRD keeps (xcrd.ForCompositeResource), and so what the API server
// defaults an XR with: the properties of spec and status, with
// Crossplane's own fields in place of any of the same names (of which
// only compositionUpdatePolicy has a default, the XRD's
// defaultCompositionUpdatePolicy). The root, metadata, spec and status
// themselves have no default there, and other top-level properties are
// not kept.
func (x *XRD) crdSchema(s map[string]any) map[string]any {
	properties := func(name string) map[string]any {
		props, _ := s["properties"].(map[string]any)
		o, _ := props[name].(map[string]any)
		p, _ := deepCopyJSON(o["properties"]).(map[string]any)
		if p == nil {
			p = map[string]any{}
		}
		return p
	}
	spec, status := properties("spec"), properties("status")
	policy := map[string]any{"type": "string"}
	if x.updatePolicy != "" {
		policy["default"] = x.updatePolicy
	}
	if x.Schema == SchemaLegacy {
		for _, k := range []string{"compositionRef", "compositionSelector", "compositionRevisionRef", "compositionRevisionSelector", "resourceRefs", "claimRef", "writeConnectionSecretToRef"} {
			delete(spec, k)
		}
		spec["compositionUpdatePolicy"] = policy
		for _, k := range []string{"conditions", "connectionDetails", "claimConditionTypes"} {
			delete(status, k)
		}
	} else {
		spec["crossplane"] = map[string]any{"type": "object", "properties": map[string]any{"compositionUpdatePolicy": policy}}
		delete(status, "conditions")
	}
	object := func(props map[string]any) map[string]any {
		return map[string]any{"type": "object", "properties": props}
	}
	return object(map[string]any{"spec": object(spec), "status": object(status)})
}

// applyDefaults is Kubernetes' structural defaulting: a missing (or null,
// where not nullable) property with a default gets a copy of it, then every
// property, additional property and array item is defaulted in turn.
func applyDefaults(v any, s map[string]any) {
	if s == nil {
		return
	}
	switch v := v.(type) {
	case map[string]any:
		props, _ := s["properties"].(map[string]any)
		for k, p := range props {
			ps, _ := p.(map[string]any)
			// A default of null is none: the CRD's default is a pointer
			// that JSON's null leaves nil.
			def := ps["default"]
			if def == nil {
				continue
			}
			cur, found := v[k]
			if nullable, _ := ps["nullable"].(bool); !found || (cur == nil && !nullable) {
				v[k] = deepCopyJSON(def)
			}
		}
		for k, e := range v {
			if p, ok := props[k].(map[string]any); ok {
				applyDefaults(e, p)
			} else if ap, ok := s["additionalProperties"].(map[string]any); ok {
				applyDefaults(e, ap)
			}
		}
	case []any:
		items, _ := s["items"].(map[string]any)
		for _, e := range v {
			applyDefaults(e, items)
		}
	}
}

// deepCopyJSON copies a value made of JSON types (as Objects hold: whole
// numbers stay int64, see ParseObject).
func deepCopyJSON(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("cannot copy a JSON value: %v", err))
	}
	var c any
	if err := utiljson.Unmarshal(b, &c); err != nil {
		panic(fmt.Sprintf("cannot copy a JSON value: %v", err))
	}
	return c
}
