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

// Field is a key a document holds that its type has no field for.
type Field struct {
	// Path is the object that holds it
	// ("desired.resources[0].readinessChecks[0]"; "" at the top).
	Path string
	Key  string
	// Suggestion is the key of the type's there that was likely meant
	// ("" if none is close).
	Suggestion string
}

// Where is the object that holds the key, for a message.
func (f Field) Where() string {
	if f.Path == "" {
		return "the top level"
	}
	return f.Path
}

// String says where the key is, and what was likely meant.
func (f Field) String() string {
	msg := fmt.Sprintf("unknown field %q at %s", f.Key, f.Where())
	if f.Suggestion != "" {
		msg += fmt.Sprintf("; did you mean %q?", f.Suggestion)
	}
	return msg
}

// Find is the first key (by path, keys sorted) of the YAML document doc
// that type t has no field for, as json tags name them, for a strict
// decoder's error, which names the key alone. ok is false when there is
// none, or doc is not YAML.
func Find(doc []byte, t reflect.Type) (f Field, ok bool) {
	all := All(doc, t)
	if len(all) == 0 {
		return Field{}, false
	}
	return all[0], true
}

// All are every key of doc that t has no field for, in the order of Find.
func All(doc []byte, t reflect.Type) []Field {
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		return nil
	}
	var out []Field
	walk(v, t, "", &out)
	return out
}

// walk adds to out the keys of v, at path, that t has no field for. A
// map's keys are the document's own, and anything else has no keys.
func walk(v any, t reflect.Type, path string, out *[]Field) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		m, isMap := v.(map[string]any)
		if !isMap {
			return
		}
		fields := jsonFields(t)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if f, known := fields[k]; known {
				walk(m[k], f.Type, join(path, k), out)
			} else {
				*out = append(*out, Field{Path: path, Key: k, Suggestion: Closest(k, slices.Sorted(maps.Keys(fields)))})
			}
		}
	case reflect.Slice:
		if items, isList := v.([]any); isList {
			for i, item := range items {
				walk(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i), out)
			}
		}
	}
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

// editDistance is the edit distance of a and b that counts swapping two
// adjacent characters as one edit, as inserting, deleting or changing one
// is (the optimal string alignment distance): "nmae" is one edit from
// "name", as a typo is, not two.
func editDistance(a, b string) int {
	// rows[i%3][j] is the distance of a[:i] and b[:j].
	var rows [3][]int
	for r := range rows {
		rows[r] = make([]int, len(b)+1)
	}
	for j := range rows[0] {
		rows[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur, prev, prev2 := rows[i%3], rows[(i-1)%3], rows[(i+1)%3]
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
	}
	return rows[len(a)%3][len(b)]
}
