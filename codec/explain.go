package codec

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ocifn/ocifn/internal/unknownfield"
)

// explainResponse says, in words a function author understands, why out is
// not a RunFunctionResponse: what was expected and where, as a JSON path
// ($.desired.resources.bucket). It returns "" when it finds nothing more
// precise than the protojson error the caller already has.
//
// protojson stops at the first problem and names it without a path ("unknown
// field "apiVersion""), which leaves the author guessing which of many
// objects is wrong. This walks the output against the message descriptor
// instead, in a stable order, and recognises the usual mistakes: printing a
// State or the request instead of a response, forgetting the "resource"
// wrapper of a composed resource, snake_case or misspelt names, enum values
// without their prefix, lists where maps are expected.
func explainResponse(out []byte) string {
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return explainSyntax(out, err)
	}
	end := dec.InputOffset()
	switch _, err := dec.Token(); {
	case errors.Is(err, io.EOF):
	case err == nil:
		return "the function printed more than one JSON value; it must print exactly one RunFunctionResponse object (a jq program that yields several results prints one value per result)"
	default:
		// Not a second value: a line a script echoed after its answer,
		// say, which it should print on stderr.
		at := end + int64(len(out[end:])-len(bytes.TrimLeft(out[end:], " \t\r\n")))
		line, col := position(out, at+1) // as a SyntaxError's offset, just past the byte
		return fmt.Sprintf("after the JSON value the output goes on with what is not JSON, %s at line %d, column %d; the function must print one RunFunctionResponse object and nothing else on stdout (messages for people go to stderr)", QuoteHead(out[at:min(at+40, int64(len(out)))]), line, col)
	}
	if at, esc := loneSurrogate(out); at >= 0 {
		line, col := position(out, int64(at)+1)
		return fmt.Sprintf("the escape %s at line %d, column %d is half of a UTF-16 surrogate pair without its other half, which is no character: the strings of a RunFunctionResponse must be valid Unicode (JavaScript's JSON.stringify prints such an escape for a string cut in the middle of an emoji, Python's json.dumps for text read with surrogateescape)", esc, line, col)
	}
	top, ok := v.(map[string]any)
	if !ok {
		return fmt.Sprintf("the output is %s; a RunFunctionResponse is a JSON object such as {\"desired\": {...}, \"results\": [...]}", describe(v))
	}
	if _, ok := top["observed"]; ok {
		return `unknown field "observed" at $.observed: the output looks like the RunFunctionRequest (it has "observed"), not a response; print a RunFunctionResponse, for example {"desired": .desired, "results": [...]} in jq`
	}
	if _, hasDesired := top["desired"]; !hasDesired {
		var stateKeys []string
		for _, k := range []string{"composite", "resources"} {
			if _, ok := top[k]; ok {
				stateKeys = append(stateKeys, k)
			}
		}
		if len(stateKeys) > 0 {
			return fmt.Sprintf(`unknown field %q at $.%s: the output looks like a State (it has %s at the top level); a RunFunctionResponse has them under "desired": {"desired": {"composite": ..., "resources": ...}, "results": [...]}`,
				stateKeys[0], stateKeys[0], strings.Join(quoteAll(stateKeys), " and "))
		}
	}
	return walkMessage(top, (&fnv1.RunFunctionResponse{}).ProtoReflect().Descriptor(), "$")
}

// ExplainMessage says where the JSON j fails to be the message md, as a
// JSON path ($.meta.ttl), with what was expected there; "" when it finds
// nothing more precise than protojson's own error. For input that people
// write by hand, such as a request file: protojson's positions are those
// of the JSON, not of the YAML it may have been written in.
func ExplainMessage(j []byte, md protoreflect.MessageDescriptor) string {
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.UseNumber()
	var top map[string]any
	if err := dec.Decode(&top); err != nil || top == nil {
		return ""
	}
	return walkMessage(top, md, "$")
}

// loneSurrogate finds, in valid JSON, the first \u escape of half a UTF-16
// surrogate pair that is not followed or preceded by its other half, and
// returns its offset and the escape, or -1. encoding/json reads such an
// escape as U+FFFD; protojson refuses it with an error that names the
// bytes after it ("invalid escape code"), or, near the end of the output,
// "unexpected EOF", as if the output had been cut short.
func loneSurrogate(b []byte) (int, string) {
	hex := func(i int) rune {
		if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
			return -1
		}
		v, err := strconv.ParseUint(string(b[i+2:i+6]), 16, 16)
		if err != nil {
			return -1
		}
		return rune(v)
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		r := hex(i)
		switch {
		case r < 0:
			// Outside strings valid JSON has no backslash; inside, this
			// escapes the next byte, a backslash perhaps.
			i++
			continue
		case !utf16.IsSurrogate(r):
		case r < 0xdc00 && hex(i+6) >= 0xdc00 && hex(i+6) <= 0xdfff:
			i += 6 // the pair's second half
		default:
			return i, string(b[i : i+6])
		}
		i += 5
	}
	return -1, ""
}

// explainSyntax locates a JSON syntax error in the output.
func explainSyntax(out []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := position(out, se.Offset)
		if strings.HasSuffix(se.Error(), "exceeded max depth") {
			// Valid JSON, perhaps, but deeper than any decoder reads.
			return fmt.Sprintf("the output nests more than 10000 levels deep, which JSON decoders do not read (protobuf's read JSON objects about 3,300 deep), at line %d, column %d", line, col)
		}
		return fmt.Sprintf("the output is not valid JSON: %v at line %d, column %d", se, line, col)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "the output is not valid JSON: it ends before the JSON value is complete"
	}
	return ""
}

func position(b []byte, off int64) (line, col int) {
	if off > int64(len(b)) {
		off = int64(len(b))
	}
	before := b[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - bytes.LastIndexByte(before, '\n') - 1
	return line, col
}

// walkMessage checks a JSON object against a message descriptor and returns
// the first problem found, in sorted key order.
func walkMessage(obj map[string]any, md protoreflect.MessageDescriptor, path string) string {
	for _, k := range sortedKeys(obj) {
		p := path + "." + k
		fd := fieldByName(md, k)
		if fd == nil {
			return unknownField(obj, md, k, p)
		}
		if msg := walkField(obj[k], fd, p); msg != "" {
			return msg
		}
	}
	return ""
}

// walkField checks the value of one field.
func walkField(v any, fd protoreflect.FieldDescriptor, path string) string {
	if v == nil {
		// protojson takes null as "not set" for every field.
		return ""
	}
	switch {
	case fd.IsMap():
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s is %s; want an object %s", path, describe(v), mapHint(fd))
		}
		for _, k := range sortedKeys(obj) {
			if msg := walkSingular(obj[k], fd.MapValue(), path+"."+k); msg != "" {
				return msg
			}
		}
		return ""
	case fd.IsList():
		arr, ok := v.([]any)
		if !ok {
			return fmt.Sprintf("%s is %s; want an array", path, describe(v))
		}
		for i, e := range arr {
			if msg := walkSingular(e, fd, fmt.Sprintf("%s[%d]", path, i)); msg != "" {
				return msg
			}
		}
		return ""
	}
	return walkSingular(v, fd, path)
}

// walkSingular checks one value of a field's type (a list element, a map
// value, or a singular field).
func walkSingular(v any, fd protoreflect.FieldDescriptor, path string) string {
	if v == nil {
		return ""
	}
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		md := fd.Message()
		switch md.FullName() {
		case "google.protobuf.Struct":
			if _, ok := v.(map[string]any); !ok {
				return fmt.Sprintf("%s is %s; want a JSON object", path, describe(v))
			}
			return ""
		case "google.protobuf.Value", "google.protobuf.ListValue":
			return ""
		case "google.protobuf.Duration":
			if s, ok := v.(string); !ok || !strings.HasSuffix(s, "s") {
				return fmt.Sprintf("%s is %s; want a duration as a string of seconds such as \"60s\"", path, describe(v))
			}
			return ""
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s is %s; want an object (%s)", path, describe(v), md.Name())
		}
		return walkMessage(obj, md, path)
	case protoreflect.EnumKind:
		return checkEnum(v, fd.Enum(), path)
	case protoreflect.StringKind:
		if _, ok := v.(string); !ok {
			return fmt.Sprintf("%s is %s; want a string", path, describe(v))
		}
	case protoreflect.BytesKind:
		s, ok := v.(string)
		if !ok {
			return fmt.Sprintf("%s is %s; want a base64 string", path, describe(v))
		}
		if _, err := base64.StdEncoding.DecodeString(s); err != nil {
			if _, err := base64.URLEncoding.DecodeString(s); err != nil {
				return fmt.Sprintf("%s is not base64: bytes fields (such as connection details) are base64-encoded in JSON (jq: @base64)", path)
			}
		}
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			return fmt.Sprintf("%s is %s; want true or false", path, describe(v))
		}
	default: // numbers
		switch n := v.(type) {
		case json.Number:
		case string:
			if _, err := strconv.ParseFloat(n, 64); err != nil {
				return fmt.Sprintf("%s is %s; want a number", path, describe(v))
			}
		default:
			return fmt.Sprintf("%s is %s; want a number", path, describe(v))
		}
	}
	return ""
}

func checkEnum(v any, ed protoreflect.EnumDescriptor, path string) string {
	vals := ed.Values()
	names := make([]string, 0, vals.Len())
	for i := 0; i < vals.Len(); i++ {
		names = append(names, string(vals.Get(i).Name()))
	}
	switch x := v.(type) {
	case string:
		if vals.ByName(protoreflect.Name(x)) != nil {
			return ""
		}
		msg := fmt.Sprintf("%s is %q, which is not a %s; want one of %s", path, x, ed.Name(), strings.Join(names, ", "))
		if s := unknownfield.Closest(x, names); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		return msg
	case json.Number:
		if i, err := x.Int64(); err == nil && i >= math.MinInt32 && i <= math.MaxInt32 {
			return ""
		}
	}
	// The names, so that an author who wrote ready: true (or YAML's True,
	// yes, on) learns what to write instead without the protos at hand.
	msg := fmt.Sprintf("%s is %s; want the name of a %s value as a string, one of %s", path, describe(v), ed.Name(), strings.Join(names, ", "))
	if b, ok := v.(bool); ok {
		suffix := map[bool]string{true: "_TRUE", false: "_FALSE"}[b]
		for _, n := range names {
			if strings.HasSuffix(n, suffix) {
				msg += fmt.Sprintf("; did you mean %q?", n)
				break
			}
		}
	}
	return msg
}

// unknownField explains a key the message does not have.
func unknownField(obj map[string]any, md protoreflect.MessageDescriptor, key, path string) string {
	msg := fmt.Sprintf("unknown field %q at %s", key, path)
	// A composed resource written without its {"resource": ...} wrapper:
	// its Kubernetes fields land where Resource's fields are expected.
	if md.FullName() == (&fnv1.Resource{}).ProtoReflect().Descriptor().FullName() {
		if _, ok := obj["resource"]; !ok {
			if _, ok := obj["apiVersion"]; ok {
				return msg + `: this looks like a Kubernetes object without its wrapper; a resource in a State is {"resource": {"apiVersion": ..., "kind": ...}, "ready": "READY_TRUE"}`
			}
			if _, ok := obj["kind"]; ok {
				return msg + `: this looks like a Kubernetes object without its wrapper; a resource in a State is {"resource": {"apiVersion": ..., "kind": ...}}`
			}
		}
	}
	names := make([]string, 0, md.Fields().Len())
	for i := 0; i < md.Fields().Len(); i++ {
		names = append(names, md.Fields().Get(i).JSONName())
	}
	if s := unknownfield.Closest(key, names); s != "" {
		return msg + fmt.Sprintf("; did you mean %q?", s)
	}
	return msg + fmt.Sprintf("; %s has the fields %s", md.Name(), strings.Join(quoteAll(names), ", "))
}

// fieldByName finds a field by its JSON name or its proto name, as protojson
// accepts both.
func fieldByName(md protoreflect.MessageDescriptor, name string) protoreflect.FieldDescriptor {
	fs := md.Fields()
	if fd := fs.ByJSONName(name); fd != nil {
		return fd
	}
	return fs.ByName(protoreflect.Name(name))
}

func mapHint(fd protoreflect.FieldDescriptor) string {
	if fd.MapValue().Kind() == protoreflect.MessageKind && fd.MapValue().Message().Name() == "Resource" {
		return `keyed by composition resource name, such as {"bucket": {"resource": {...}}}`
	}
	return "of key/value pairs"
}

// describe names the JSON type of v for a message.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		if len(x) > 40 {
			x = x[:40] + "…"
		}
		return fmt.Sprintf("the string %q", x)
	case json.Number:
		return "the number " + x.String()
	case bool:
		return "the boolean " + strconv.FormatBool(x)
	}
	return fmt.Sprintf("%T", v)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strconv.Quote(s)
	}
	return out
}
