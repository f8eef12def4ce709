package adaptor

import (
	"context"
	"strconv"
	"sync"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ocifn/ocifn/hook"
)

// unknownField is a field number the compiled protocol does not know, and
// where in the request it was.
type unknownField struct {
	// message is the path of the message that carried it, such as
	// RunFunctionRequest.meta or RunFunctionRequest.observed.resources[*].
	message string
	number  protowire.Number
}

// maxUnknownKinds bounds the unknown fields told apart, in warnings and in
// metric series. A newer Crossplane adds a handful; a request can carry
// millions of made-up field numbers, each of which would otherwise cost a
// log line, a map entry and a series for the life of the process.
const maxUnknownKinds = 64

// otherField is the metric label of the unknown fields beyond
// maxUnknownKinds.
const otherField = "other"

// unknownSeen remembers the unknown fields already warned about, so that
// a newer Crossplane sending a new field on every call is one warning per
// process, not one per call.
type unknownSeen struct {
	mu   sync.Mutex
	m    map[unknownField]struct{}
	full bool
}

// see reports whether u is seen for the first time, and whether it is told
// apart at all: past maxUnknownKinds, new fields are not (first reports
// the first such field then).
func (s *unknownSeen) see(u unknownField) (first, tracked bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[u]; ok {
		return false, true
	}
	if len(s.m) >= maxUnknownKinds {
		first, s.full = !s.full, true
		return first, false
	}
	if s.m == nil {
		s.m = map[unknownField]struct{}{}
	}
	s.m[u] = struct{}{}
	return true, true
}

// wireCount is what the gRPC handler that counted a request's wire bytes
// (inflight.bounded, with protocount) learned of its unknown fields, for
// the call that runs it: the walk of the decoded request that looks for
// them costs a call about 20 µs of CPU at a low rate, caches cold, and a
// request counted with none has none to find.
type wireCount struct {
	counted bool
	unknown int64
}

type wireCountKey struct{}

// withWireCount returns ctx with a wireCount for the handler to fill in.
func withWireCount(ctx context.Context) (context.Context, *wireCount) {
	w := &wireCount{}
	return context.WithValue(ctx, wireCountKey{}, w), w
}

// noUnknownFields reports whether the request of the call in ctx was
// counted on the wire and held no field that the protocol does not know.
func noUnknownFields(ctx context.Context) bool {
	w, ok := ctx.Value(wireCountKey{}).(*wireCount)
	return ok && w.counted && w.unknown == 0
}

// checkUnknown counts, and warns once about, the fields of req that ocifn's
// compiled protocol does not know: a newer Crossplane sent them, and no I/O
// mode can pass them to the function, since it only sees what the compiled
// messages hold. The call is still served.
func (f *Function) checkUnknown(req *fnv1.RunFunctionRequest) {
	walkUnknown(req.ProtoReflect(), "RunFunctionRequest", func(u unknownField) {
		first, tracked := f.unknown.see(u)
		message, field := u.message, strconv.Itoa(int(u.number))
		if !tracked {
			message, field = otherField, otherField
		}
		if f.metrics != nil {
			f.metrics.UnknownFields.WithLabelValues(message, field).Inc()
		}
		switch {
		case first && tracked:
			f.log.Warn("the request carries a field this ocifn does not know; it cannot reach the function. Upgrading ocifn to a version built with a newer Crossplane function protocol passes it on",
				"message", u.message, "field", int(u.number), "tag", hook.LogTag(req.GetMeta().GetTag()))
		case first:
			f.log.Warn("requests carry more kinds of unknown fields than ocifn tells apart; the rest are counted with message and field \"other\" and not logged",
				"kinds", maxUnknownKinds, "message", u.message, "field", int(u.number), "tag", hook.LogTag(req.GetMeta().GetTag()))
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
