package adaptor

import (
	"strconv"
	"sync"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// unknownField is a field number the compiled protocol does not know, and
// where in the request it was.
type unknownField struct {
	// message is the path of the message that carried it, such as
	// RunFunctionRequest.meta or RunFunctionRequest.observed.resources[*].
	message string
	number  protowire.Number
}

// unknownSeen remembers the unknown fields already warned about, so that
// a newer Crossplane sending a new field on every call is one warning per
// process, not one per call.
type unknownSeen struct{ m sync.Map }

// firstTime reports whether u is seen for the first time.
func (s *unknownSeen) firstTime(u unknownField) bool {
	_, loaded := s.m.LoadOrStore(u, struct{}{})
	return !loaded
}

// checkUnknown counts, and warns once about, the fields of req that ocifn's
// compiled protocol does not know: a newer Crossplane sent them, and no I/O
// mode can pass them to the function, since it only sees what the compiled
// messages hold. The call is still served.
func (f *Function) checkUnknown(req *fnv1.RunFunctionRequest) {
	walkUnknown(req.ProtoReflect(), "RunFunctionRequest", func(u unknownField) {
		if f.metrics != nil {
			f.metrics.unknownFields.WithLabelValues(u.message, strconv.Itoa(int(u.number))).Inc()
		}
		if f.unknown.firstTime(u) {
			f.log.Warn("the request carries a field this ocifn does not know; it cannot reach the function. Upgrading ocifn to a version built with a newer Crossplane function protocol passes it on",
				"message", u.message, "field", int(u.number), "tag", req.GetMeta().GetTag())
		}
	})
}

// walkUnknown calls visit for every unknown field of m and of the messages
// in it. The well-known types (google.protobuf.Struct, Value, Duration) are
// not walked: they do not change, and a composed resource's Struct can be
// most of a large request.
func walkUnknown(m protoreflect.Message, path string, visit func(unknownField)) {
	for b := m.GetUnknown(); len(b) > 0; {
		num, _, n := protowire.ConsumeField(b)
		if n < 0 {
			// Unparseable unknown bytes: still one unknown field.
			visit(unknownField{message: path, number: num})
			break
		}
		visit(unknownField{message: path, number: num})
		b = b[n:]
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		md := fd.Message()
		if fd.IsMap() {
			md = fd.MapValue().Message()
		}
		if md == nil || md.ParentFile().Package() == "google.protobuf" {
			return true
		}
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, e protoreflect.Value) bool {
				walkUnknown(e.Message(), p+"[*]", visit)
				return true
			})
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				walkUnknown(v.List().Get(i).Message(), p+"[*]", visit)
			}
		default:
			walkUnknown(v.Message(), p, visit)
		}
		return true
	})
}
