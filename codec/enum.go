package codec

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// unknownEnum names the first enum field of m (at path) that holds a
// number its enum does not define, with the values it does, or "" when
// there is none. protojson takes an enum's number as well as its name, and
// keeps a number it does not know, for forward compatibility; but
// Crossplane has nothing to do with such a value, and drops a result whose
// severity it does not know without a word.
func unknownEnum(m protoreflect.Message, path string) string {
	// Struct, Value and ListValue hold a resource's or the context's JSON:
	// their only enum is NullValue, which JSON writes as null.
	if m.Descriptor().FullName().Parent() == "google.protobuf" {
		return ""
	}
	var found string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		at := fd.JSONName()
		if path != "" {
			at = path + "." + at
		}
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() == nil && fd.MapValue().Enum() == nil {
				return true
			}
			v.Map().Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
				// The key is the function's and of any length: clipped, so
				// that the reason stays short and still says what is wrong.
				found = unknownEnumValue(fd.MapValue(), e, fmt.Sprintf("%s[%q]", at, clip(k.String(), keyBytes)))
				return found == ""
			})
		case fd.IsList():
			if fd.Message() == nil && fd.Enum() == nil {
				return true
			}
			l := v.List()
			for i := 0; i < l.Len() && found == ""; i++ {
				found = unknownEnumValue(fd, l.Get(i), fmt.Sprintf("%s[%d]", at, i))
			}
		default:
			found = unknownEnumValue(fd, v, at)
		}
		return found == ""
	})
	return found
}

// unknownEnumValue is unknownEnum for one value v of field fd (an element
// of a list or map, or the field's own value), at path.
func unknownEnumValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) string {
	if fd.Message() != nil {
		return unknownEnum(v.Message(), path)
	}
	e := fd.Enum()
	if e == nil || e.Values().ByNumber(v.Enum()) != nil {
		return ""
	}
	names := make([]string, e.Values().Len())
	for i := range names {
		names[i] = string(e.Values().Get(i).Name())
	}
	return fmt.Sprintf("%s is %d, which is no %s (%s): Crossplane would not know what to do with it", path, v.Enum(), e.Name(), strings.Join(names, ", "))
}
