package codec

import (
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// unknownEnum names the first enum field of m that holds a number its enum
// does not define, with the values it does, or "" when there is none.
// protojson takes an enum's number as well as its name, and keeps a number
// it does not know, for forward compatibility; but Crossplane has nothing
// to do with such a value, and drops a result whose severity it does not
// know without a word.
func unknownEnum(m protoreflect.Message) string {
	bad := findUnknownEnum(m)
	if bad == nil {
		return ""
	}
	// The path was gathered from the value up: read it from the top.
	var path strings.Builder
	for _, step := range slices.Backward(bad.path) {
		if path.Len() > 0 && !strings.HasPrefix(step, "[") {
			path.WriteByte('.')
		}
		path.WriteString(step)
	}
	values := bad.enum.Values()
	names := make([]string, values.Len())
	for i := range names {
		names[i] = string(values.Get(i).Name())
	}
	return fmt.Sprintf("%s is %d, which is no %s (%s): Crossplane would not know what to do with it", path.String(), bad.number, bad.enum.Name(), strings.Join(names, ", "))
}

// badEnum is an enum value that no value of its enum has.
type badEnum struct {
	enum   protoreflect.EnumDescriptor
	number protoreflect.EnumNumber
	// path leads to it from the message walked, last step first: field
	// names, and [index] or ["key"] of lists' and maps' elements. It is
	// made only once a value is found, off the way of a response that
	// holds none.
	path []string
}

// findUnknownEnum walks m for the first enum value its enum does not have.
func findUnknownEnum(m protoreflect.Message) *badEnum {
	// Struct, Value and ListValue hold a resource's or the context's JSON:
	// their only enum is NullValue, which JSON writes as null.
	if m.Descriptor().FullName().Parent() == "google.protobuf" {
		return nil
	}
	var found *badEnum
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() == nil && fd.MapValue().Enum() == nil {
				return true
			}
			v.Map().Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
				if found = findUnknownEnumValue(fd.MapValue(), e); found != nil {
					// The key is the function's and of any length: clipped,
					// so that the reason stays short and still says what
					// is wrong.
					found.path = append(found.path, fmt.Sprintf("[%q]", clip(k.String(), keyBytes)))
				}
				return found == nil
			})
		case fd.IsList():
			if fd.Message() == nil && fd.Enum() == nil {
				return true
			}
			l := v.List()
			for i := 0; i < l.Len() && found == nil; i++ {
				if found = findUnknownEnumValue(fd, l.Get(i)); found != nil {
					found.path = append(found.path, fmt.Sprintf("[%d]", i))
				}
			}
		default:
			found = findUnknownEnumValue(fd, v)
		}
		if found != nil {
			found.path = append(found.path, fd.JSONName())
		}
		return found == nil
	})
	return found
}

// findUnknownEnumValue is findUnknownEnum for one value v of field fd (an
// element of a list or map, or the field's own value).
func findUnknownEnumValue(fd protoreflect.FieldDescriptor, v protoreflect.Value) *badEnum {
	if fd.Message() != nil {
		return findUnknownEnum(v.Message())
	}
	e := fd.Enum()
	if e == nil || e.Values().ByNumber(v.Enum()) != nil {
		return nil
	}
	return &badEnum{enum: e, number: v.Enum()}
}
