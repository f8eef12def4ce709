package pipeline

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// parseObjectAs parses one YAML document as sigs.k8s.io/yaml.Unmarshal reads
// it on its way to a Go value of type t, which is how the crossplane CLI
// reads an Operation: a number or a YAML 1.1 boolean (y, no, off) bound for
// a field of type string is that field's string ("true", "511", "1.5"), as
// the typed field takes it, where ParseObject keeps a number or a boolean.
// What t has no field for is read as ParseObject reads it.
func parseObjectAs(doc []byte, t reflect.Type) (Object, error) {
	var y any
	if err := yamlv2.Unmarshal(doc, &y); err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	v, err := jsonable(y, t, true)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	if bytes.Equal(j, []byte("null")) {
		return nil, nil
	}
	var obj Object
	if err := utiljson.Unmarshal(j, &obj); err != nil {
		return nil, fmt.Errorf("not an object: want a mapping such as \"apiVersion: ...\", got %s", bytes.TrimSpace(firstBytes(j, 60)))
	}
	return obj, nil
}

var (
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// jsonable converts what go.yaml.in/yaml/v2 read to what encoding/json
// writes, with the rules of sigs.k8s.io/yaml (v1.6.0, yaml.go's
// convertToJSONableObject): keys become strings, and a scalar whose target
// is a string becomes one. t is the target, nil for none; addressable says
// whether sigs.k8s.io/yaml would look for the methods of its pointer (not
// for a map's values).
func jsonable(y any, t reflect.Type, addressable bool) (any, error) {
	t = target(t, addressable)
	switch v := y.(type) {
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			key, err := keyString(k, e)
			if err != nil {
				return nil, err
			}
			var et reflect.Type
			elemAddressable := true
			switch {
			case t != nil && t.Kind() == reflect.Struct:
				et = fieldType(t, key)
			case t != nil && t.Kind() == reflect.Map:
				et, elemAddressable = t.Elem(), false
			}
			if m[key], err = jsonable(e, et, elemAddressable); err != nil {
				return nil, err
			}
		}
		return m, nil
	case []any:
		var et reflect.Type
		if t != nil && t.Kind() == reflect.Slice {
			et = t.Elem()
		}
		a := make([]any, len(v))
		for i, e := range v {
			var err error
			if a[i], err = jsonable(e, et, true); err != nil {
				return nil, err
			}
		}
		return a, nil
	}
	if t == nil || t.Kind() != reflect.String {
		return y, nil
	}
	switch v := y.(type) {
	case int:
		return strconv.FormatInt(int64(v), 10), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 32), nil
	case uint64:
		return strconv.FormatUint(v, 10), nil
	case bool:
		return strconv.FormatBool(v), nil
	}
	return y, nil
}

// target resolves t as sigs.k8s.io/yaml's indirect does: through pointers,
// and to none at a type that decodes itself (a JSON or text unmarshaler).
func target(t reflect.Type, addressable bool) reflect.Type {
	if t == nil {
		return nil
	}
	if t.Kind() != reflect.Pointer && t.Name() != "" && addressable {
		t = reflect.PointerTo(t)
	}
	for t.Kind() == reflect.Pointer {
		if t.Implements(jsonUnmarshalerType) || t.Implements(textUnmarshalerType) {
			return nil
		}
		t = t.Elem()
	}
	return t
}

// fieldType is the type of the field of struct t that encoding/json fills
// from key, nil when t has none.
func fieldType(t reflect.Type, key string) reflect.Type {
	_, ft := field(t, key)
	return ft
}

// field is the JSON name and type of the field of struct t that
// encoding/json fills from key: the one its name or json tag names, else
// the first whose name differs in case only; a nil type when t has none.
func field(t reflect.Type, key string) (string, reflect.Type) {
	var foldName string
	var fold reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if !f.IsExported() || tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		switch {
		case name == key:
			return name, f.Type
		case fold == nil && strings.EqualFold(name, key):
			foldName, fold = name, f.Type
		}
	}
	return foldName, fold
}

// keyString is a YAML key as JSON's string key, as sigs.k8s.io/yaml makes it.
func keyString(k, v any) (string, error) {
	switch k := k.(type) {
	case string:
		return k, nil
	case int:
		return strconv.Itoa(k), nil
	case int64:
		return strconv.FormatInt(k, 10), nil
	case float64:
		switch s := strconv.FormatFloat(k, 'g', -1, 32); s {
		case "+Inf":
			return ".inf", nil
		case "-Inf":
			return "-.inf", nil
		case "NaN":
			return ".nan", nil
		default:
			return s, nil
		}
	case bool:
		return strconv.FormatBool(k), nil
	}
	return "", fmt.Errorf("unsupported map key of type: %s, key: %+#v, value: %+#v", reflect.TypeOf(k), k, v)
}

// dropUnknownKeys deletes the keys of v that struct type t has no field
// for, as decoding into t and encoding again drops them, there and in the
// structs t holds; a key that names a field in another case is moved to
// the field's name, unless that is there too, as encoding/json reads it.
func dropUnknownKeys(v any, t reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		for k, e := range m {
			name, ft := field(t, k)
			switch {
			case ft == nil:
				delete(m, k)
				continue
			case name != k:
				delete(m, k)
				if _, ok := m[name]; ok {
					continue
				}
				m[name] = e
			}
			dropUnknownKeys(e, ft)
		}
	case reflect.Slice:
		if items, ok := v.([]any); ok {
			for _, e := range items {
				dropUnknownKeys(e, t.Elem())
			}
		}
	}
}
