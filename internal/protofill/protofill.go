// Package protofill builds protobuf messages with every field set, by
// walking their descriptors, so that tests of a wire format cannot miss a
// field: one added by a future protocol upgrade is filled as well.
package protofill

import (
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// maxDepth bounds recursive types (google.protobuf.Struct holds Values that
// hold Structs): below it, a Value is a string and a Struct is empty.
const maxDepth = 8

// Filler fills messages and remembers which fields it set.
type Filler struct {
	// Variant picks, in every oneof of k members, member Variant % k, so
	// that Variants() messages together set every member of every oneof.
	Variant int
	// Set holds the full name of every field the Filler set.
	Set map[protoreflect.FullName]bool
}

// Fill sets every field of m (and of the messages in it, recursively):
// non-zero scalars, the last value of each enum, two entries in maps and
// lists, and one member of each oneof.
func (f *Filler) Fill(m protoreflect.Message) {
	if f.Set == nil {
		f.Set = map[protoreflect.FullName]bool{}
	}
	f.fill(m, 0)
}

func (f *Filler) fill(m protoreflect.Message, depth int) {
	md := m.Descriptor()
	switch md.FullName() {
	case "google.protobuf.Duration":
		// Seconds and nanos must agree in sign, nanos below 1e9.
		f.mark(md.Fields().ByName("seconds"), md.Fields().ByName("nanos"))
		m.Set(md.Fields().ByName("seconds"), protoreflect.ValueOfInt64(61))
		m.Set(md.Fields().ByName("nanos"), protoreflect.ValueOfInt32(500000000))
		return
	case "google.protobuf.Struct":
		if depth > maxDepth {
			return
		}
	case "google.protobuf.Value":
		if depth > maxDepth {
			fd := md.Fields().ByName("string_value")
			f.mark(fd)
			m.Set(fd, protoreflect.ValueOfString("leaf"))
			return
		}
	}
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			if od.Fields().Get(f.Variant%od.Fields().Len()) != fd {
				continue
			}
		}
		f.mark(fd)
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for j := 0; j < 2; j++ {
				k := f.scalar(fd.MapKey(), j).MapKey()
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					v := mp.NewValue()
					f.fill(v.Message(), depth+1)
					mp.Set(k, v)
				} else {
					mp.Set(k, f.scalar(fd.MapValue(), j))
				}
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			for j := 0; j < 2; j++ {
				if fd.Kind() == protoreflect.MessageKind {
					v := l.NewElement()
					f.fill(v.Message(), depth+1)
					l.Append(v)
				} else {
					l.Append(f.scalar(fd, j))
				}
			}
		case fd.Kind() == protoreflect.MessageKind || fd.Kind() == protoreflect.GroupKind:
			f.fill(m.Mutable(fd).Message(), depth+1)
		default:
			m.Set(fd, f.scalar(fd, 0))
		}
	}
}

func (f *Filler) mark(fds ...protoreflect.FieldDescriptor) {
	for _, fd := range fds {
		f.Set[fd.FullName()] = true
	}
}

// scalar is a non-zero value of a scalar field, different for each j.
func (f *Filler) scalar(fd protoreflect.FieldDescriptor, j int) protoreflect.Value {
	n := int64(j + 1)
	switch fd.Kind() {
	case protoreflect.BoolKind:
		// A map keyed by bool has one true key and one false key.
		return protoreflect.ValueOfBool(j == 0)
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		return protoreflect.ValueOfEnum(vals.Get(vals.Len() - 1 - j%vals.Len()).Number())
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(int32(-7 * n))
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(-1<<40 - n)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(uint32(7 * n))
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(uint64(1<<40 + n))
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(float32(n) + 0.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(float64(n) + 0.25)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("%s-%d", fd.Name(), n))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte(fmt.Sprintf("\x00\xff%s-%d", fd.Name(), n)))
	}
	panic(fmt.Sprintf("protofill: field %s has the kind %s, which is not a scalar", fd.FullName(), fd.Kind()))
}

// Variants is how many Fill variants set every member of every oneof
// reachable from md.
func Variants(md protoreflect.MessageDescriptor) int {
	n := 1
	walk(md, map[protoreflect.FullName]bool{}, func(fd protoreflect.FieldDescriptor) {
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
			n = max(n, od.Fields().Len())
		}
	})
	return n
}

// Fields lists the full name of every field reachable from md.
func Fields(md protoreflect.MessageDescriptor) map[protoreflect.FullName]bool {
	out := map[protoreflect.FullName]bool{}
	walk(md, map[protoreflect.FullName]bool{}, func(fd protoreflect.FieldDescriptor) { out[fd.FullName()] = true })
	return out
}

func walk(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool, visit func(protoreflect.FieldDescriptor)) {
	if seen[md.FullName()] {
		return
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		visit(fd)
		if fd.IsMap() {
			fd = fd.MapValue()
		}
		if fd.Message() != nil {
			walk(fd.Message(), seen, visit)
		}
	}
}

// Messages returns the Variants of a message type filled by Fill, and the
// fields reachable from it that none of them sets (none, unless Fill has a
// bug).
func Messages(newMsg func() proto.Message) (msgs []proto.Message, missing []protoreflect.FullName) {
	md := newMsg().ProtoReflect().Descriptor()
	set := map[protoreflect.FullName]bool{}
	for v := 0; v < Variants(md); v++ {
		f := &Filler{Variant: v}
		m := newMsg()
		f.Fill(m.ProtoReflect())
		for n := range f.Set {
			set[n] = true
		}
		msgs = append(msgs, m)
	}
	for n := range Fields(md) {
		if !set[n] {
			missing = append(missing, n)
		}
	}
	return msgs, missing
}
