package adaptor

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
)

// wireDepthLimit is how deep protobuf's decoders let a message nest, gRPC's
// clients (Crossplane's among them) and the v1beta1 conversion included:
// each message is a level, and each map entry one more. The JSON and YAML
// decoders accept deeper: a JSON object nested in a Struct is 2 levels to
// protojson, 3 on the wire (Struct, map entry, Value), so a function's
// answer nested 3,400 deep was decoded, sent, and refused by its caller
// with a bare INTERNAL status, while ocifn counted it ok.
const wireDepthLimit = protowire.DefaultRecursionLimit

// tooDeep says why rsp cannot be sent, when it nests deeper than
// protobuf's decoders accept, or "" when it can.
func tooDeep(rsp proto.Message) string {
	var field protoreflect.Name
	m := rsp.ProtoReflect()
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fieldDepth(fd, v, 1) > wireDepthLimit {
			field = fd.Name()
		}
		return field == ""
	})
	if field == "" {
		return ""
	}
	return fmt.Sprintf("the function's response nests more than %d levels deep in protobuf under %q, deeper than protobuf's decoders (Crossplane's gRPC client among them) read; each level of a JSON object within a resource, the context or the output takes 3, of a list 2", wireDepthLimit, field)
}

// messageDepth is how many levels m and what it holds take on the wire,
// the depth levels above it included; past wireDepthLimit it stops
// counting.
func messageDepth(m protoreflect.Message, depth int) int {
	depth++
	if depth > wireDepthLimit {
		return depth
	}
	// Struct, Value and ListValue are the only types that nest without
	// bound, and the bulk of a response: read as Go values, not through
	// reflection.
	switch x := m.Interface().(type) {
	case *structpb.Struct:
		return structDepth(x, depth)
	case *structpb.Value:
		return valueDepth(x, depth)
	case *structpb.ListValue:
		return listDepth(x, depth)
	}
	most := depth
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		most = max(most, fieldDepth(fd, v, depth))
		return most <= wireDepthLimit
	})
	return most
}

// fieldDepth is how deep the value v of field fd goes, in a message at
// depth.
func fieldDepth(fd protoreflect.FieldDescriptor, v protoreflect.Value, depth int) int {
	switch {
	case fd.IsMap():
		most := depth + 1 // an entry
		if fd.MapValue().Message() == nil {
			return most
		}
		v.Map().Range(func(_ protoreflect.MapKey, e protoreflect.Value) bool {
			most = max(most, messageDepth(e.Message(), depth+1))
			return most <= wireDepthLimit
		})
		return most
	case fd.IsList() && fd.Message() != nil:
		most := depth
		l := v.List()
		for i := 0; i < l.Len() && most <= wireDepthLimit; i++ {
			most = max(most, messageDepth(l.Get(i).Message(), depth))
		}
		return most
	case fd.Message() != nil:
		return messageDepth(v.Message(), depth)
	}
	return depth
}

// structDepth is messageDepth of s, at depth (s's own level counted).
func structDepth(s *structpb.Struct, depth int) int {
	most := depth
	for _, v := range s.GetFields() {
		// The map entry, then the Value.
		most = max(most, valueDepth(v, depth+2))
		if most > wireDepthLimit {
			break
		}
	}
	return most
}

// valueDepth is messageDepth of v, at depth (v's own level counted).
func valueDepth(v *structpb.Value, depth int) int {
	if depth > wireDepthLimit {
		return depth
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StructValue:
		return structDepth(k.StructValue, depth+1)
	case *structpb.Value_ListValue:
		return listDepth(k.ListValue, depth+1)
	}
	return depth
}

// listDepth is messageDepth of l, at depth (l's own level counted).
func listDepth(l *structpb.ListValue, depth int) int {
	most := depth
	for _, v := range l.GetValues() {
		most = max(most, valueDepth(v, depth+1))
		if most > wireDepthLimit {
			break
		}
	}
	return most
}
