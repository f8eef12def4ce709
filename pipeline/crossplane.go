package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
)

// What Crossplane's reconciler does to an XR and its composed resources, as
// `crossplane render` (CLI v2.5.0, render engine v2.3.4) prints it. The
// rules here were learnt from that engine; e2e/render_oracle_test.go
// compares ocifn's output with it byte for byte.

// Condition types and reasons Crossplane sets on an XR.
const (
	conditionReady      = "Ready"
	conditionSynced     = "Synced"
	conditionResponsive = "Responsive"
)

// Event reasons of Crossplane's XR reconciler.
const (
	reasonSelectComposition       = "SelectComposition"
	reasonComposeResources        = "ComposeResources"
	reasonNamespaceOverridden     = "NamespaceOverridden"
	reasonPaused                  = "ReconciliationPaused"
	reasonReconcileRequestHandled = "ReconcileRequestHandled"
)

// Annotations of an XR that Crossplane's reconciler acts on.
const (
	// annotationPaused "true" stops the reconciler before it composes.
	annotationPaused = "crossplane.io/paused"
	// annotationReconcileRequestedAt asks for a reconcile; the reconciler
	// records the token it handled in status.lastHandledReconcileAt.
	annotationReconcileRequestedAt = "crossplane.io/reconcile-requested-at"
)

// maxNameLength is the longest name Kubernetes allows most objects, and
// childHashLength the length of the hash Crossplane appends to a composed
// resource's generateName.
const (
	maxNameLength   = 63
	childHashLength = 12
)

// A Schema is where an XR keeps Crossplane's fields: spec.crossplane for
// v2 XRs (the default), spec for legacy cluster-scoped ones (an XRD of
// apiextensions.crossplane.io/v1 without a scope, or scope LegacyCluster).
type Schema int

// Schemas.
const (
	SchemaModern Schema = iota
	SchemaLegacy
)

// path returns the path of one of Crossplane's XR fields.
func (s Schema) path(field string) []string {
	if s == SchemaLegacy {
		return []string{"spec", field}
	}
	return []string{"spec", "crossplane", field}
}

// XRUID is the uid Crossplane's render gives an XR without one: a SHA-1
// UUID of its group, version, kind, namespace and name, so that output is
// the same on every run.
func XRUID(xr Object) string {
	return uuid.NewSHA1(uuid.Nil, []byte(gvkString(xr.APIVersion(), xr.Kind())+"\x00"+xr.Namespace()+"\x00"+xr.Name())).String()
}

// gvkString formats a kind the way Kubernetes' GroupVersionKind.String does:
// "group/version, Kind=kind" ("/v1, Kind=ConfigMap" for the core group).
func gvkString(apiVersion, kind string) string {
	group, version := "", apiVersion
	if g, v, ok := strings.Cut(apiVersion, "/"); ok {
		group, version = g, v
	}
	return group + "/" + version + ", Kind=" + kind
}

// ChildName is the name Crossplane gives a composed resource that has only
// a generateName: the generateName (ending in one "-") and the first 12 hex
// digits of sha256(owner uid + composition resource name), the prefix cut
// so that the whole fits in 63 characters.
func ChildName(generateName, ownerUID, resourceName string) string {
	sum := sha256.Sum256([]byte(ownerUID + resourceName))
	suffix := hex.EncodeToString(sum[:])[:childHashLength]
	prefix := generateName
	if prefix != "" && !strings.HasSuffix(prefix, "-") {
		prefix += "-"
	}
	if len(prefix)+len(suffix) <= maxNameLength {
		return prefix + suffix
	}
	keep := maxNameLength - childHashLength
	if !strings.HasSuffix(prefix[:keep], "-") {
		return prefix[:keep-1] + "-" + suffix
	}
	return prefix[:keep] + suffix
}

// conditions reads status.conditions the way Crossplane's typed condition
// list does: each condition keeps only type, status, lastTransitionTime,
// reason, message and observedGeneration, and a field of another type than
// its own is read as empty (as encoding/json leaves it: `status: True`,
// unquoted, is a YAML boolean) rather than losing the list; exact is then
// false. ok is false when status is not an object or a condition is not
// one.
func conditions(o Object) (conds []Object, ok, exact bool) {
	st, isMap := o["status"].(map[string]any)
	if _, has := o["status"]; !has || (!isMap && o["status"] != nil) {
		return nil, false, false
	}
	list, isList := st["conditions"].([]any)
	if st["conditions"] != nil && !isList {
		return nil, false, false
	}
	exact = true
	for _, e := range list {
		m, isMap := e.(map[string]any)
		if !isMap {
			return nil, false, false
		}
		c := Object{}
		for _, k := range []string{"type", "status", "reason", "lastTransitionTime", "message"} {
			s, isString := m[k].(string)
			if m[k] != nil && !isString {
				exact = false
			}
			if s != "" || k != "message" {
				c[k] = s
			}
		}
		// int64 from a file (ParseObject), float64 from a function's
		// answer (a protobuf Struct).
		switch g := m["observedGeneration"].(type) {
		case int64, float64:
			if g != int64(0) && g != float64(0) {
				c["observedGeneration"] = g
			}
		case nil:
		default:
			exact = false
		}
		conds = append(conds, c)
	}
	return conds, true, exact
}

// setConditions sets conditions as Crossplane's SetConditions does: a
// condition replaces the one of its type (kept in place when they differ
// only in time), others are appended.
func setConditions(o Object, cs ...Object) {
	conds, _, _ := conditions(o)
	for _, c := range cs {
		found := false
		for i, e := range conds {
			if e["type"] != c["type"] {
				continue
			}
			found = true
			if !sameCondition(e, c) {
				conds[i] = c
			}
		}
		if !found {
			conds = append(conds, c)
		}
	}
	st, _ := o["status"].(map[string]any)
	if st == nil {
		st = map[string]any{}
		o["status"] = st
	}
	list := make([]any, len(conds))
	for i, c := range conds {
		list[i] = map[string]any(c)
	}
	st["conditions"] = list
}

// sameCondition is Crossplane's Condition.Equal: the same type, status,
// reason and message, and the same observedGeneration unless either leaves
// it out (a function's conditions, or Crossplane's own marked on an XR
// without metadata.generation, have none).
func sameCondition(a, b Object) bool {
	for _, k := range []string{"type", "status", "reason", "message"} {
		if fmt.Sprint(a[k]) != fmt.Sprint(b[k]) {
			return false
		}
	}
	ga, gb := a["observedGeneration"], b["observedGeneration"]
	return ga == nil || gb == nil || fmt.Sprint(ga) == fmt.Sprint(gb)
}

// fixConditionTimes gives every condition the fixed time render prints
// (as the crossplane CLI does); objects without a status, or with one that
// is not a condition list, are left alone. A status that is null fails, as
// it fails the CLI (which would set status.conditions in it).
func fixConditionTimes(o Object) error {
	// Crossplane reads the conditions strictly here: a field of the wrong
	// type leaves the status as it is.
	conds, ok, exact := conditions(o)
	if !ok || !exact {
		return nil
	}
	st, _ := o["status"].(map[string]any)
	if st == nil {
		return errStatusNull
	}
	if conds == nil {
		// The CLI writes the empty list it read back as null.
		st["conditions"] = nil
		return nil
	}
	list := make([]any, len(conds))
	for i, c := range conds {
		c["lastTransitionTime"] = conditionTime
		list[i] = map[string]any(c)
	}
	st["conditions"] = list
	return nil
}

// conditionTimesAsWritten reports whether every condition of o has its
// lastTransitionTime as Crossplane writes it (RFC 3339 in UTC, whole
// seconds). Crossplane writes all of an object's conditions again when it
// sets one, so a time written otherwise is a change of its status.
func conditionTimesAsWritten(o Object) bool {
	st, _ := o["status"].(map[string]any)
	list, _ := st["conditions"].([]any)
	for _, e := range list {
		m, _ := e.(map[string]any)
		s, _ := m["lastTransitionTime"].(string)
		t, err := time.Parse(time.RFC3339, s)
		if err != nil || t.UTC().Format(time.RFC3339) != s {
			return false
		}
	}
	return true
}

// errStatusNull is why render cannot print a resource whose status is null.
var errStatusNull = errors.New("cannot set condition timestamps: status is null, not an object")

// newCondition makes a condition with the current time, as the reconciler
// does (render replaces the time when it prints).
func newCondition(typ, status, reason, message string) Object {
	c := Object{"type": typ, "status": status, "reason": reason, "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}
	if message != "" {
		c["message"] = message
	}
	return c
}

// isSystemCondition reports the condition types only Crossplane may set.
func isSystemCondition(t string) bool {
	switch t {
	case conditionReady, conditionSynced, "Healthy", "UpToDate", conditionResponsive:
		return true
	}
	return false
}

// mergeInto merges src into dst as mergo.Merge with WithOverride does on
// JSON objects (the CLI's --include-full-xr): objects merge key by key,
// anything else in src replaces what dst has.
func mergeInto(dst, src map[string]any) {
	for k, sv := range src {
		sm, sIsMap := sv.(map[string]any)
		dm, dIsMap := dst[k].(map[string]any)
		if sIsMap && dIsMap {
			mergeInto(dm, sm)
			continue
		}
		dst[k] = sv
	}
}

// event is a Kubernetes event the reconciler records; render prints them
// as Result objects.
type event struct {
	warning bool
	reason  string
	message string
}

func (e event) object() Object {
	t := "Normal"
	if e.warning {
		t = "Warning"
	}
	return Object{"apiVersion": "render.crossplane.io/v1beta1", "kind": "Result", "severity": t, "reason": e.reason, "message": e.message}
}

// MergeXR is what --include-full-xr prints: the XR as given, with what
// render produced merged over it (objects key by key, anything else
// replaced), as the crossplane CLI merges them.
func MergeXR(given, rendered Object) Object {
	xr := given.deepCopy()
	mergeInto(xr, rendered.deepCopy())
	// rendered's status, always an object, replaces a null one.
	_ = fixConditionTimes(xr)
	return xr
}
