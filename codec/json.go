package codec

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

// outputHeadBytes is how much of invalid output an error quotes.
const outputHeadBytes = 256

// reasonBytes bounds why output is invalid: the explanation quotes the
// function's own keys and their paths, which can be of any length
// (the fuzzer found a 2 KiB key quoted twice).
const reasonBytes = 1024

// keyBytes bounds one string of the function's that a reason quotes: a
// key, a resource's name, an apiVersion, a severity. Each can be of any
// length; clipped, the reason still says what is wrong with it.
const keyBytes = 128

// clip cuts s to at most n bytes, on a UTF-8 boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// JSON is ocifn's own mode: the RunFunctionRequest as protojson on stdin,
// a RunFunctionResponse as JSON on stdout.
type JSON struct{}

// Name is "json".
func (JSON) Name() string { return "json" }

// Encode renders the request as the function sees it on stdin: protojson,
// with desired and observed always present and each carrying a resources
// object, so `.desired.resources[]` never meets null.
func (JSON) Encode(req *fnv1.RunFunctionRequest) ([]byte, error) {
	// Marshal the two states on their own and splice them in, instead of
	// round-tripping the whole request through a generic JSON decoder:
	// requests can be megabytes and the rest needs no change.
	desired, observed := req.GetDesired(), req.GetObserved()
	d, err := encodeState(desired)
	if err != nil {
		return nil, fmt.Errorf("cannot encode the desired state: %w", err)
	}
	o, err := encodeState(observed)
	if err != nil {
		return nil, fmt.Errorf("cannot encode the observed state: %w", err)
	}
	// The request belongs to this call; its states are detached only while
	// the rest is marshalled, so any field added to the protocol later is
	// still passed on.
	req.Desired, req.Observed = nil, nil
	rest, err := protojson.Marshal(req)
	req.Desired, req.Observed = desired, observed
	if err != nil {
		return nil, fmt.Errorf("cannot encode the request: %w", err)
	}
	var b bytes.Buffer
	b.Grow(len(rest) + len(d) + len(o) + 32)
	b.WriteString(`{"desired":`)
	b.Write(d)
	b.WriteString(`,"observed":`)
	b.Write(o)
	if body := bytes.TrimSpace(rest[1:]); !bytes.Equal(body, []byte("}")) {
		b.WriteByte(',')
		b.Write(body)
	} else {
		b.WriteByte('}')
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

// encodeState renders a State with a resources object, present even when
// empty.
func encodeState(s *fnv1.State) ([]byte, error) {
	if s == nil {
		return []byte(`{"resources":{}}`), nil
	}
	b, err := protojson.Marshal(s)
	if err != nil {
		return nil, err
	}
	if len(s.GetResources()) > 0 {
		return b, nil
	}
	body := bytes.TrimSpace(b[1:])
	if bytes.Equal(body, []byte("}")) {
		return []byte(`{"resources":{}}`), nil
	}
	return append([]byte(`{"resources":{},`), body...), nil
}

// Decode parses what the function printed. Unknown fields, and enum
// numbers no value has, are an error: a misspelt field would otherwise be
// dropped without a word, and Crossplane drops a result of a severity it
// does not know.
func (JSON) Decode(_ *fnv1.RunFunctionRequest, out []byte) (*fnv1.RunFunctionResponse, error) {
	if err := checkText(out, "it must print a RunFunctionResponse as JSON"); err != nil {
		return nil, err
	}
	out = trimBOM(out)
	rsp := &fnv1.RunFunctionResponse{}
	if err := protojson.Unmarshal(out, rsp); err != nil {
		if hint := Mismatch("json", out); hint != "" {
			return nil, fmt.Errorf("the function's output is not a valid RunFunctionResponse: %s; output began with %s", hint, QuoteHead(out))
		}
		why := explainResponse(out)
		if why == "" {
			why = err.Error()
		}
		return nil, fmt.Errorf("the function's output is not a valid RunFunctionResponse: %s; output began with %s", clip(why, reasonBytes), QuoteHead(out))
	}
	if why := unknownEnum(rsp.ProtoReflect()); why != "" {
		return nil, fmt.Errorf("the function's output is not a valid RunFunctionResponse: %s; output began with %s", why, QuoteHead(out))
	}
	return rsp, nil
}

// checkText refuses output that is empty, saying what the mode wants
// printed (want), or that is not valid UTF-8.
func checkText(out []byte, want string) error {
	if len(bytes.TrimSpace(out)) == 0 {
		return fmt.Errorf("the function printed nothing on stdout; %s", want)
	}
	if !utf8.Valid(out) {
		return fmt.Errorf("the function's output is not valid UTF-8; output began with %s", QuoteHead(out))
	}
	return nil
}

// QuoteHead quotes the start of a function's output, bounded, as valid
// UTF-8, for an error message.
func QuoteHead(b []byte) string {
	if len(b) > outputHeadBytes {
		return fmt.Sprintf("%q…", strings.ToValidUTF8(string(b[:outputHeadBytes]), "\uFFFD"))
	}
	return fmt.Sprintf("%q", strings.ToValidUTF8(string(b), "\uFFFD"))
}
