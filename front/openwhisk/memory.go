package openwhisk

import (
	"encoding/json"

	"github.com/ocifn/ocifn/front"
)

// perValue bounds what one JSON value or object key takes, beyond its
// bytes, when encoding/json decodes it into a map or slice of
// json.RawMessage or strings: its entry, its own allocation rounded up to
// a size class, and the tables a map outgrew on the way. Fitted to
// measurements (TestParseMemoryBounds).
const perValue = 160

// perCopy bounds what a copy takes beyond its bytes, and what a step
// allocates whatever its input: a large allocation is rounded up to
// whole pages, and encoding/json's scanner and buffers come from pools
// that may be empty.
const perCopy = 64 << 10

// perLevel bounds what one level of nesting takes: in encoding/json's
// scanner, which keeps a stack of them, grown by doubling, and, in a
// web action's nested header arrays, decoded.
const perLevel = 160

// count scans raw, a JSON value, in one pass without allocating. It
// returns at most how many values and object keys encoding/json decodes
// one by one when raw is read into a map of raw values (its members: one,
// and one more for each ',' and ':' of the outer object), or, with web,
// when ParseWebResponse reads it (those, its error's members, and every
// value under its or its error's headers); and how many arrays and
// objects raw opens, at most its depth. A key written with escapes is
// taken for headers and error both, whatever it spells. With all, every
// value is counted, at any depth.
func count(raw []byte, web, all bool) (values, opens int64) {
	values = 1
	depth := 0
	// headersAt and errorAt are the depth at which the values of headers
	// and error's members are, while inside them; 0 otherwise.
	headersAt, errorAt := 0, 0
	var last []byte // the last string, a key when ':' follows it
	lastEscaped := false
	isHeaders, isError := false, false // what the key of the next value names
	inString, escaped := false, false
	start := 0
	counted := func() int64 {
		if all || depth <= 1 || (web && (depth == errorAt || (headersAt > 0 && depth >= headersAt))) {
			return 1
		}
		return 0
	}
	for i, c := range raw {
		switch {
		case escaped:
			escaped = false
		case inString:
			switch c {
			case '\\':
				escaped, lastEscaped = true, true
			case '"':
				inString, last = false, raw[start:i]
			}
		case c == '"':
			inString, start, lastEscaped = true, i+1, false
		case c == ':':
			values += counted()
			isHeaders = lastEscaped || string(last) == "headers"
			isError = lastEscaped || string(last) == "error"
		case c == ',':
			values += counted()
			isHeaders, isError = false, false
		case c == '{' || c == '[':
			opens++
			switch {
			case depth == 1 && isHeaders, depth == errorAt && isHeaders:
				headersAt = depth + 1
			case depth == 1 && isError:
				errorAt = depth + 1
			}
			depth++
			isHeaders, isError = false, false
		case c == '}' || c == ']':
			depth--
			if depth < headersAt {
				headersAt = 0
			}
			if depth < errorAt {
				errorAt = 0
			}
		}
	}
	return values, opens
}

// mapCost bounds what decoding raw into a map[string]json.RawMessage
// takes (parseMessage, an activation's context): a copy of every key and
// value, and their entries.
func mapCost(raw []byte) int64 {
	values, opens := count(raw, false, false)
	return perCopy + int64(len(raw)) + perValue*values + perLevel*opens
}

// initCost bounds what an init of body takes beside its bytes: the
// body's map (mapCost), its value decoded (code, env), the value
// compacted to compare it with the action's (initSum), and a binary
// action's zip decoded from base64, and read file by file (zipState).
func initCost(body []byte) int64 {
	values, opens := count(body, false, true)
	return zipState + 5*int64(len(body)) + 2*perValue*values + perLevel*opens
}

// zipState bounds what reading one file of a zip takes (its
// decompressor, the buffer it is copied through): a binary action's
// files are read one at a time, each let go before the next.
const zipState = 1 << 20

// runCost bounds what an activation makes of value and its context before
// it runs: value compacted, and as an argument when it fits one; each key
// of the context as an environment variable (its value compacted, copied
// and joined to its name; the name upper-cased), and their lists.
func runCost(value []byte, context map[string]json.RawMessage) int64 {
	_, opens := count(value, false, false)
	n := perCopy + int64(len(value)) + perLevel*opens
	if len(value) <= front.MaxArgBytes {
		n += int64(len(value))
	}
	for k, v := range context {
		if k != "value" {
			n += 3*int64(len(k)+len(v)) + 3*perValue
		}
	}
	return n
}

// webCost bounds what ParseWebResponse takes to read result: the
// result's map and its error's, the headers' map and values, and the body
// unquoted, compacted or decoded from base64, and copied.
func webCost(result []byte) int64 {
	values, opens := count(result, true, false)
	return perCopy + 6*int64(len(result)) + 2*perValue*values + perLevel*opens
}

// Copies is what an activation makes of a body of n bytes at least, and
// some more: its map of the body's values (mapCost) and its value
// compacted (runCost), each at least a copy of it, and their entries.
// Charged with the body, before it is read (front.Config.Copies), so that
// a body of usual shape has no more to wait for before it runs.
func Copies(n int64) int64 { return 2*n + 4*perCopy }
