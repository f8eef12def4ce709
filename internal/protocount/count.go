// Package protocount counts what a protobuf message's wire bytes decode
// to, without decoding them: how many messages, values and string bytes a
// decoder will allocate. A server that must bound the memory of requests
// it holds learns their decoded cost from the bytes it has already read,
// before it pays it.
package protocount

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// maxDepth is the nesting proto.Unmarshal accepts by default; deeper
// input fails to decode, so it need not be counted.
const maxDepth = 10000

// Counts is what a message decodes to.
type Counts struct {
	// Wire is the size of the message on the wire.
	Wire int64
	// Messages counts the nested messages and map entries, the top one
	// included: each is an allocation of its own when decoded.
	Messages int64
	// Scalars counts numbers, booleans and enums, each element of a
	// repeated one included.
	Scalars int64
	// Strings counts string and bytes values, and StringBytes their
	// length; Bytes counts the bytes values among them, and BytesLen
	// their length.
	Strings, StringBytes, Bytes, BytesLen int64
	// Controls counts the control characters in strings, which JSON and
	// YAML encoders write as escape sequences of up to 6 bytes; Quotes the
	// double quotes and backslashes, which JSON escapes with a backslash;
	// NonASCII the bytes of other characters, which a YAML encoder escapes
	// when they are not printable.
	Controls, Quotes, NonASCII int64
	// Indent is the sum of every message's depth, the top one at 0: what
	// an indenting encoder such as YAML's writes grows with it.
	Indent int64
	// Unknown counts the fields that a decoder keeps as unknown bytes:
	// those of a number the message does not have, and those of a known
	// number with another wire type.
	Unknown int64
}

// ErrTooDeep is returned for messages nested deeper than proto.Unmarshal
// accepts.
var ErrTooDeep = errors.New("messages nested too deep")

// Count counts what b, a message of type md on the wire, decodes to. It
// reads b once and allocates nothing. Bytes that do not parse as md are an
// error, as they would be to proto.Unmarshal; fields md does not know are
// counted as the unknown bytes a decoder keeps.
func Count(b []byte, md protoreflect.MessageDescriptor) (Counts, error) {
	c := Counts{Wire: int64(len(b)), Messages: 1}
	if err := c.message(b, md, 0); err != nil {
		return Counts{}, err
	}
	return c, nil
}

func (c *Counts) message(b []byte, md protoreflect.MessageDescriptor, depth int64) error {
	if depth >= maxDepth {
		return ErrTooDeep
	}
	fields := md.Fields()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%s: %w", md.FullName(), protowire.ParseError(n))
		}
		b = b[n:]
		fd := fields.ByNumber(num)
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return fmt.Errorf("%s field %d: %w", md.FullName(), num, protowire.ParseError(m))
		}
		value := b[:m]
		b = b[m:]
		if fd == nil {
			c.StringBytes += int64(n + m) // kept as unknown bytes
			c.Unknown++
			continue
		}
		if err := c.field(fd, typ, value, depth); err != nil {
			return err
		}
	}
	return nil
}

func (c *Counts) field(fd protoreflect.FieldDescriptor, typ protowire.Type, v []byte, depth int64) error {
	kind := fd.Kind()
	packed := typ == protowire.BytesType && fd.IsList()
	switch {
	case typ != wireType(kind) && !packed:
		// A wire type the field does not have: a decoder keeps the bytes
		// among the unknown fields.
		c.StringBytes += int64(len(v))
		c.Unknown++
	case kind == protoreflect.MessageKind || kind == protoreflect.GroupKind:
		body, _ := protowire.ConsumeBytes(v)
		c.Messages++
		c.Indent += depth + 1
		return c.message(body, fd.Message(), depth+1)
	case kind == protoreflect.StringKind || kind == protoreflect.BytesKind:
		s, _ := protowire.ConsumeBytes(v)
		c.Strings++
		c.StringBytes += int64(len(s))
		if kind == protoreflect.BytesKind {
			c.Bytes++
			c.BytesLen += int64(len(s))
		}
		c.countBytes(s)
	case packed:
		body, _ := protowire.ConsumeBytes(v)
		for len(body) > 0 {
			n := protowire.ConsumeFieldValue(0, wireType(kind), body)
			if n < 0 {
				return fmt.Errorf("%s: %w", fd.FullName(), protowire.ParseError(n))
			}
			body = body[n:]
			c.Scalars++
		}
	default:
		c.Scalars++
	}
	return nil
}

// wireType is the wire type of a field of kind k, or of each element of a
// packed repeated one. Groups are taken as messages of their own length,
// as proto3 has no groups.
func wireType(k protoreflect.Kind) protowire.Type {
	switch k {
	case protoreflect.MessageKind, protoreflect.GroupKind, protoreflect.StringKind, protoreflect.BytesKind:
		return protowire.BytesType
	case protoreflect.DoubleKind, protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
		return protowire.Fixed64Type
	case protoreflect.FloatKind, protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind:
		return protowire.Fixed32Type
	}
	return protowire.VarintType
}

// countBytes counts the bytes of s an encoder may escape.
func (c *Counts) countBytes(s []byte) {
	for _, b := range s {
		switch {
		case b >= 0x80:
			c.NonASCII++
		case b < 0x20, b == 0x7f:
			c.Controls++
		case b == '"', b == '\\':
			c.Quotes++
		}
	}
}

// Decoded is at most the memory proto.Unmarshal allocates for a message of
// counts c, garbage included: a generated message and its map slot or
// slice element each, as measured for the messages of structpb (Struct,
// Value, ListValue) and of Crossplane's RunFunctionRequest, which are
// among the largest per byte on the wire (TestDecodedBoundsUnmarshal);
// each string copied, rounded up to the allocator's size classes (at most
// 1/8 more) or pages (1/4 more for the smallest that take whole pages).
func (c Counts) Decoded() int64 {
	return 160*c.Messages + 16*(c.Scalars+c.Strings) + c.StringBytes + c.StringBytes/4
}
