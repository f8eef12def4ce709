package codec

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// unknownYAMLField finds where a YAML document that a strict decoding into a
// value of type t refused holds a key t has no field for: the path of the
// object that holds it ("desired.resources[0].readinessChecks[0]", "" at
// the top), the key, and a suggestion among the keys t has there ("" if
// none is close). The decoder's own error names the key alone. ok is false
// when no such key is found.
func unknownYAMLField(doc []byte, t reflect.Type) (path, key, suggestion string, ok bool) {
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
				return path, k, closest(k, slices.Sorted(maps.Keys(fields))), true
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

// unknownFieldMessage says where an unknown key is, and what was likely
// meant, as the json mode says it.
func unknownFieldMessage(path, key, suggestion string) string {
	if path == "" {
		path = "the top level"
	}
	msg := fmt.Sprintf("unknown field %q at %s", key, path)
	if suggestion != "" {
		msg += fmt.Sprintf("; did you mean %q?", suggestion)
	}
	return msg
}
