// Package unknownfield names a key a document holds that its type has no
// field for, with where it is and what was likely meant, for errors that
// say more than a strict decoder's "unknown field".
package unknownfield

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Find finds where a YAML document that a strict decoding into a
// value of type t refused holds a key t has no field for: the path of the
// object that holds it ("desired.resources[0].readinessChecks[0]", "" at
// the top), the key, and a suggestion among the keys t has there ("" if
// none is close). The decoder's own error names the key alone. ok is false
// when no such key is found.
func Find(doc []byte, t reflect.Type) (path, key, suggestion string, ok bool) {
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		return "", "", "", false
	}
	return walkUnknown(v, t, "")
}

func walkUnknown(v any, t reflect.Type, path string) (string, string, string, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		m, isMap := v.(map[string]any)
		if !isMap {
			return "", "", "", false
		}
		fields := jsonFields(t)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			f, known := fields[k]
			if !known {
				return path, k, Closest(k, slices.Sorted(maps.Keys(fields))), true
			}
			if p, key, s, ok := walkUnknown(m[k], f.Type, join(path, k)); ok {
				return p, key, s, true
			}
		}
	case reflect.Slice:
		items, isList := v.([]any)
		if !isList {
			return "", "", "", false
		}
		for i, item := range items {
			if p, key, s, ok := walkUnknown(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); ok {
				return p, key, s, true
			}
		}
	}
	// A map's keys are the document's own.
	return "", "", "", false
}

// jsonFields maps a struct's JSON field names to its fields.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported():
			continue
		case name == "":
			name = f.Name
		}
		out[name] = f
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Message says where an unknown key is, and what was likely meant.
func Message(path, key, suggestion string) string {
	if path == "" {
		path = "the top level"
	}
	msg := fmt.Sprintf("unknown field %q at %s", key, path)
	if suggestion != "" {
		msg += fmt.Sprintf("; did you mean %q?", suggestion)
	}
	return msg
}

// Closest returns the candidate the author most likely meant by s, or "".
func Closest(s string, candidates []string) string {
	norm := func(x string) string {
		return strings.ToLower(strings.NewReplacer("_", "", "-", "").Replace(x))
	}
	ns := norm(s)
	// Same name but for case or separators (desired_State, SEVERITY-NORMAL).
	for _, c := range candidates {
		if norm(c) == ns {
			return c
		}
	}
	// A known name plus a suffix or prefix (desired_state, severity_normal
	// for SEVERITY_NORMAL, "normal" for SEVERITY_NORMAL).
	for _, c := range candidates {
		nc := norm(c)
		if len(nc) >= 4 && len(ns) >= 4 && (strings.HasPrefix(ns, nc) || strings.HasSuffix(nc, ns) || strings.HasPrefix(nc, ns)) {
			return c
		}
	}
	best, bestD := "", math.MaxInt
	for _, c := range candidates {
		if d := editDistance(ns, norm(c)); d < bestD {
			best, bestD = c, d
		}
	}
	if bestD <= max(1, len(ns)/3) {
		return best
	}
	// An abbreviation (msg for message).
	for _, c := range candidates {
		if nc := norm(c); len(ns) >= 3 && ns[0] == nc[0] && isSubsequence(ns, nc) {
			return c
		}
	}
	return ""
}

func isSubsequence(s, of string) bool {
	i := 0
	for j := 0; j < len(of) && i < len(s); j++ {
		if s[i] == of[j] {
			i++
		}
	}
	return i == len(s)
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
