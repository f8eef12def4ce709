// Package fieldpath reads values out of a decoded JSON object by Crossplane
// field path: "spec.containers[0].name", "data[.config.yml]",
// "metadata.annotations['crossplane.io/external-name']". It has the syntax
// and the results of crossplane-runtime's pkg/fieldpath (v2) for reading:
// Parse, GetValue, GetString, GetInteger, GetValueInto and IsNotFound, and
// nothing else.
//
// It exists for memory. crossplane-runtime's fieldpath imports that module's
// errors package, which imports controller-runtime (reconcile, then client),
// which imports client-go's kubernetes/scheme, whose init registers every
// Kubernetes API type: about 15 MB of resident memory in every ocifn
// process, the two that `ocifn serve` runs included, for a few lookups in
// readiness checks and connection details. A differential test and a fuzz
// target (fieldpath_test.go) hold this package to crossplane-runtime's
// results; they may import it, tests do not enter the binary.
package fieldpath

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// A Segment is one step of a path: a field of an object or, when IsIndex,
// an element of an array.
type Segment struct {
	Field   string
	Index   uint32
	IsIndex bool

	// end is where the segment ends in the path it was parsed from, so
	// that an error can name the part of the path the user wrote that it
	// is about.
	end int
}

// A SyntaxError is a path that does not parse.
type SyntaxError struct {
	Path   string
	Offset int // of the offending byte
	Msg    string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("invalid field path %q: %s at position %d", e.Path, e.Msg, e.Offset)
}

// notFoundError is a lookup that reached a field or an element that is not
// there: unlike a wrong type, one that may appear later, so callers such as
// readiness checks treat it as "not yet" rather than as an error.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }

// IsNotFound says whether err (or an error it wraps) is a lookup of a field
// that is not there, an index past the end of an array, or a field of null.
func IsNotFound(err error) bool {
	var nf *notFoundError
	return errors.As(err, &nf)
}

// Parse splits a path into its segments. Periods separate field names;
// brackets hold an array index when their content is a decimal integer that
// fits in 32 bits, and a field name (periods allowed) otherwise. Single and
// double quotes around a field name are dropped. The empty path has no
// segments.
func Parse(path string) ([]Segment, error) {
	var segs []Segment
	fail := func(at int, msg string) ([]Segment, error) {
		return nil, &SyntaxError{Path: path, Offset: at, Msg: msg}
	}
	for i := 0; i < len(path); {
		switch path[i] {
		case '.':
			// A period only ever separates: never first or last, and
			// not followed by another period or a bracket.
			switch {
			case i == 0 || i == len(path)-1:
				return fail(i, "unexpected '.'")
			case path[i+1] == '.':
				return fail(i+1, "unexpected '.'")
			case path[i+1] == '[':
				return fail(i+1, "unexpected '['")
			}
			i++
		case '[':
			n := strings.IndexByte(path[i+1:], ']')
			switch {
			case n < 0:
				return fail(i, "unterminated '['")
			case n == 0:
				return fail(i+1, "unexpected ']'")
			}
			inner := path[i+1 : i+1+n]
			if j := strings.IndexByte(inner, '['); j >= 0 {
				return fail(i+1+j, "unexpected '['")
			}
			i += n + 2
			if idx, err := strconv.ParseUint(inner, 10, 32); err == nil {
				segs = append(segs, Segment{Index: uint32(idx), IsIndex: true, end: i})
			} else {
				segs = append(segs, field(inner, i))
			}
		case ']':
			return fail(i, "unexpected ']'")
		default:
			// A field name runs to the next separator. One may follow a
			// closing bracket without a period ("a[0]b" is a, 0, b), as
			// in crossplane-runtime.
			n := strings.IndexAny(path[i:], ".[]")
			if n < 0 {
				n = len(path) - i
			}
			i += n
			segs = append(segs, field(path[i-n:i], i))
		}
	}
	return segs, nil
}

// field is a field name segment. Every leading and trailing quote goes,
// paired or not: crossplane-runtime trims them so.
func field(name string, end int) Segment {
	return Segment{Field: strings.Trim(name, `'"`), end: end}
}

// An Object is a JSON object as encoding/json or
// k8s.io/apimachinery/pkg/util/json decode it (the latter's whole numbers
// are int64, which GetInteger needs), to read values from by path.
type Object map[string]any

// GetValue is the value at path. A path that does not parse is a
// *SyntaxError; the empty path is nil, not the object, as in
// crossplane-runtime.
func (o Object) GetValue(path string) (any, error) {
	segs, err := Parse(path)
	if err != nil {
		return nil, err
	}
	if len(segs) == 0 {
		return nil, nil
	}
	// The object's own type, not any's: a nil Object is an empty object,
	// whose fields are not found, not null.
	var v any = map[string]any(o)
	for i, s := range segs {
		// at names the part of the path that led to v.
		at := "the top level"
		if i > 0 {
			at = path[:segs[i-1].end]
		}
		if s.IsIndex {
			a, ok := v.([]any)
			if !ok {
				// Even null: an index of null is a wrong type, unlike a
				// field of null.
				return nil, fmt.Errorf("%s: %s is %s, not an array", path, at, describe(v))
			}
			if uint64(s.Index) >= uint64(len(a)) {
				return nil, &notFoundError{fmt.Sprintf("%s: no such element (%s has %d)", path[:s.end], at, len(a))}
			}
			v = a[s.Index]
			continue
		}
		switch m := v.(type) {
		case map[string]any:
			f, ok := m[s.Field]
			if !ok {
				return nil, &notFoundError{fmt.Sprintf("%s: no such field", path[:s.end])}
			}
			v = f
		case nil:
			// A field of null is not there yet, as a field of an object
			// that lacks it.
			return nil, &notFoundError{fmt.Sprintf("%s: %s is null", path, at)}
		default:
			return nil, fmt.Errorf("%s: %s is %s, not an object", path, at, describe(v))
		}
	}
	return v, nil
}

// GetString is the string at path; any other value is an error.
func (o Object) GetString(path string) (string, error) {
	v, err := o.GetValue(path)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: %s, not a string", path, describe(v))
	}
	return s, nil
}

// GetInteger is the int64 at path. As in crossplane-runtime, only an int64
// will do: a float64, even a whole one (encoding/json's numbers, or
// utiljson's that do not fit in an int64), is an error.
func (o Object) GetInteger(path string) (int64, error) {
	v, err := o.GetValue(path)
	if err != nil {
		return 0, err
	}
	n, ok := v.(int64)
	if !ok {
		return 0, fmt.Errorf("%s: %s, not an integer", path, describe(v))
	}
	return n, nil
}

// GetValueInto decodes the value at path into out, through JSON and
// Kubernetes' decoder as crossplane-runtime does: field names match case
// sensitively, and whole numbers decoded into an any are int64.
func (o Object) GetValueInto(path string, out any) error {
	v, err := o.GetValue(path)
	if err != nil {
		return err
	}
	b, err := utiljson.Marshal(v)
	if err != nil {
		return fmt.Errorf("%s: cannot encode the value as JSON: %w", path, err)
	}
	if err := utiljson.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s: cannot decode the value: %w", path, err)
	}
	return nil
}

// describe names a value's JSON type for an error message.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a bool"
	case int64:
		return "the integer " + strconv.FormatInt(v, 10)
	case float64:
		return "the number " + strconv.FormatFloat(v, 'g', -1, 64)
	}
	return fmt.Sprintf("a %T", v)
}
