package openwhisk

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// msgInvalidWeb starts the answer to a web-action result that is not a
// valid HTTP response, in the words of OpenWhisk's controller
// (Messages.invalidMedia(`message/http`)); what follows names the field.
const msgInvalidWeb = "Response is not valid 'message/http': "

// webKeys are the top-level keys that make an action's result an HTTP
// response: OpenWhisk's controller treats a web action's result
// differently "if its result includes one or more of" them
// (docs/webactions.md, Handling HTTP requests with actions).
var webKeys = []string{"statusCode", "headers", "body"}

// WebResponse is an action's result read as an HTTP response.
type WebResponse struct {
	Status int
	Header http.Header
	Body   []byte
}

// ParseWebResponse reads result as a web action's HTTP response, as
// OpenWhisk's controller does for the .http extension (WebActions.scala,
// resultAsHttp):
//
//   - statusCode: a whole number, or a string of one, from 200 to 599;
//     by default 200, or 204 when there is no body;
//   - headers: an object of names to strings, numbers, booleans or arrays
//     of them (an array is the header given once per element);
//   - body: a string is sent as it is for a text Content-Type (text/html
//     by default) and base64-decoded for a binary one (image/png,
//     application/octet-stream...); a JSON value other than a string is
//     sent as JSON and needs a JSON Content-Type; null, "" or no body send
//     no body and no Content-Type.
//
// It returns nil, nil when result is not an object holding statusCode,
// headers or body, at its top level or in its error: that result is
// answered as JSON, as it is. A field
// OpenWhisk would refuse is an error naming it (the controller answers 400
// "Response is not valid 'message/http'."), and so is a field Go's HTTP
// server would silently drop or change: a header name that is not a
// token, a value with a control character, a body with a 204 or 304.
func ParseWebResponse(result []byte) (*WebResponse, error) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(result, &obj) != nil || obj == nil {
		return nil, nil
	}
	// An application error ({"error": ...}) is answered with its error
	// projected, as the controller does: {"error": {"statusCode": 400}}
	// is a 400 (docs/webactions.md, Error Handling).
	var projected map[string]json.RawMessage
	if json.Unmarshal(obj["error"], &projected) == nil && isWeb(projected) {
		r, err := webResponse(projected)
		var bad *WebError
		if errors.As(err, &bad) {
			// The field at fault is the error's, not the result's own.
			bad.Fault, bad.Quoted = "error."+bad.Fault, "error."+bad.Quoted
		}
		return r, err
	}
	if !isWeb(obj) {
		return nil, nil
	}
	return webResponse(obj)
}

// webResponse reads obj, which holds statusCode, headers or body, as an
// HTTP response (see ParseWebResponse).
func webResponse(obj map[string]json.RawMessage) (*WebResponse, error) {
	r := &WebResponse{Header: http.Header{}}
	status, hasStatus, err := webStatus(obj)
	if err != nil {
		return nil, err
	}
	if err := webHeaders(r.Header, obj); err != nil {
		return nil, err
	}
	body, err := webBody(r.Header, obj)
	if err != nil {
		return nil, err
	}
	r.Body = body
	switch {
	case hasStatus:
		r.Status = status
	case len(body) == 0:
		r.Status = http.StatusNoContent
	default:
		r.Status = http.StatusOK
	}
	if len(body) > 0 && !bodyAllowed(r.Status) {
		// 204 or 304: no value but those two, which say what is wrong.
		return nil, invalidWeb(fmt.Sprintf("statusCode %d allows no body, and body is not empty", r.Status))
	}
	return r, nil
}

// isWeb reports whether obj holds one of the keys of an HTTP response.
func isWeb(obj map[string]json.RawMessage) bool {
	return slices.ContainsFunc(webKeys, func(k string) bool {
		_, ok := obj[k]
		return ok
	})
}

// WebError is a web action's result that is not an HTTP response to
// send (see ParseWebResponse). The caller is answered Error, which quotes
// the value at fault; the log says Unquoted, the field and what is wrong
// with it alone, as the Crossplane front's never quotes a function's
// output: a header's value, a Content-Type or a statusCode string may
// hold a token.
type WebError struct {
	// Fault says which field is wrong and how (its JSON kind), without
	// a value the action printed.
	Fault string
	// Quoted is Fault with the value at fault.
	Quoted string
}

func (e *WebError) Error() string { return msgInvalidWeb + e.Quoted }

// Unquoted is the error without the value at fault, as a log says it.
func (e *WebError) Unquoted() string { return msgInvalidWeb + e.Fault }

// invalidWeb is the error of a field whose fault quotes nothing the
// action printed.
func invalidWeb(fault string) *WebError { return &WebError{Fault: fault, Quoted: fault} }

// invalidWebValue is the error of a field whose value, quoted, is the
// answer's and not the log's.
func invalidWebValue(fault, quoted string) *WebError {
	return &WebError{Fault: fault, Quoted: quoted}
}

// bodyAllowed reports whether a response with status may carry a body
// (RFC 9110: not 204 No Content nor 304 Not Modified).
func bodyAllowed(status int) bool {
	return status != http.StatusNoContent && status != http.StatusNotModified
}

// jsonKind names the type of a JSON value for an error message.
func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "empty"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// webStatus reads statusCode: a JSON number that is a whole number, or a
// string of one (OpenWhisk parses it), from 200 to 599. 1xx are not final
// answers; others are not HTTP's.
func webStatus(obj map[string]json.RawMessage) (int, bool, error) {
	raw, ok := obj["statusCode"]
	if !ok {
		return 0, false, nil
	}
	raw = bytes.TrimSpace(raw)
	var code int
	switch jsonKind(raw) {
	case "a number":
		f, err := strconv.ParseFloat(string(raw), 64)
		if err != nil || f != math.Trunc(f) || f < math.MinInt32 || f > math.MaxInt32 {
			return 0, true, invalidWebValue("statusCode is a number that is not a whole number", fmt.Sprintf("statusCode %s is not a whole number", raw))
		}
		code = int(f)
	case "a string":
		var s string
		_ = json.Unmarshal(raw, &s)
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, true, invalidWebValue("statusCode is a string that is not a whole number", fmt.Sprintf("statusCode %s is a string that is not a whole number", raw))
		}
		code = n
	default:
		return 0, true, invalidWeb(fmt.Sprintf("statusCode is %s, not a number", jsonKind(raw)))
	}
	if code < 200 || code > 599 {
		return 0, true, invalidWebValue("statusCode is not an HTTP status code from 200 to 599", fmt.Sprintf("statusCode %d is not an HTTP status code from 200 to 599", code))
	}
	return code, true, nil
}

// webHeaders adds the result's headers to h, in the order of their names.
// Content-Length and Transfer-Encoding are left out: the server frames the
// body it sends, as OpenWhisk's controller does.
func webHeaders(h http.Header, obj map[string]json.RawMessage) error {
	raw, ok := obj["headers"]
	if !ok {
		return nil
	}
	var hs map[string]json.RawMessage
	if jsonKind(raw) != "an object" || json.Unmarshal(raw, &hs) != nil {
		return invalidWeb(fmt.Sprintf("headers is %s, not an object of header names and values", jsonKind(raw)))
	}
	names := make([]string, 0, len(hs))
	for k := range hs {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		// A token (RFC 9110, 5.1): Go's server silently drops any other.
		if !httpguts.ValidHeaderFieldName(k) {
			return invalidWebValue("headers holds a name that is not a header name (the answer quotes it)", fmt.Sprintf("headers holds %q, which is not a header name", k))
		}
		values, err := headerValues(k, hs[k])
		if err != nil {
			return err
		}
		switch http.CanonicalHeaderKey(k) {
		case "Content-Length", "Transfer-Encoding":
			continue
		}
		for _, v := range values {
			h.Add(k, v)
		}
	}
	return nil
}

// headerFault is the error of header k's value, of which what says what
// is wrong. The log leaves out the header's name, which the action
// printed too (the answer names it), but for Content-Type's, which holds
// nothing of the action's.
func headerFault(k, what string) *WebError {
	if http.CanonicalHeaderKey(k) == "Content-Type" {
		return invalidWeb("headers.Content-Type " + what)
	}
	return invalidWebValue("a value in headers "+what+" (the answer names the header)", "headers."+k+" "+what)
}

// headerValues reads the value of header k: a string, number or boolean,
// or an array of them (nested arrays flattened, as OpenWhisk does). It is
// decoded once and walked: decoding each nested array again from its
// bytes copied what was inside it at every level, memory and time of the
// square of its depth (an answer of 20 KB, arrays 10,000 deep, held some
// 100 MB at once).
func headerValues(k string, raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	switch kind := jsonKind(raw); kind {
	case "a string":
		var v string
		_ = json.Unmarshal(raw, &v)
		return appendHeaderValues(nil, k, v)
	case "a number", "a boolean":
		return appendHeaderValues(nil, k, string(raw))
	case "an array":
	default:
		return nil, headerFault(k, fmt.Sprintf("is %s; a header's value is a string, a number, a boolean or an array of them", kind))
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	// Numbers as they are written, as OpenWhisk sends them.
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, invalidWebValue("a value in headers is not valid JSON (the answer names the header)", fmt.Sprintf("headers.%s: %v", k, err))
	}
	return appendHeaderValues(nil, k, v)
}

// appendHeaderValues appends to out the values of header k that v, a
// decoded JSON value, holds.
func appendHeaderValues(out []string, k string, v any) ([]string, error) {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case json.Number:
		s = v.String()
	case bool:
		s = strconv.FormatBool(v)
	case []any:
		for _, item := range v {
			var err error
			if out, err = appendHeaderValues(out, k, item); err != nil {
				return nil, err
			}
		}
		return out, nil
	case nil:
		return nil, headerFault(k, "is null; a header's value is a string, a number, a boolean or an array of them")
	default:
		return nil, headerFault(k, "is an object; a header's value is a string, a number, a boolean or an array of them")
	}
	for _, c := range []byte(s) {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return nil, headerFault(k, fmt.Sprintf("holds the control character %q, which no header value may hold", c))
		}
	}
	return append(out, s), nil
}

// webBody reads the result's body, as OpenWhisk's controller does, and sets
// or removes the Content-Type in h to match it.
func webBody(h http.Header, obj map[string]json.RawMessage) ([]byte, error) {
	raw := bytes.TrimSpace(obj["body"])
	kind := jsonKind(raw)
	var s string
	if kind == "a string" {
		_ = json.Unmarshal(raw, &s)
	}
	if kind == "empty" || kind == "null" || (kind == "a string" && s == "") {
		// No body: a Content-Type would describe nothing.
		h.Del("Content-Type")
		return nil, nil
	}
	ct := h.Get("Content-Type")
	var mt string
	if ct != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(ct); err != nil {
			return nil, invalidWebValue("headers.Content-Type is not a media type", fmt.Sprintf("headers.Content-Type %q is not a media type: %v", ct, err))
		}
	}
	if kind != "a string" {
		// A JSON value is sent as JSON (OpenWhisk pretty-prints it when
		// the type is not application/json; the JSON is the same).
		if mt == "" {
			h.Set("Content-Type", "application/json")
		} else if !jsonFamily(mt) {
			return nil, invalidWebValue(fmt.Sprintf("body is %s but headers.Content-Type is not a JSON type; a body that is not a string is sent as JSON and needs a JSON Content-Type", kind),
				fmt.Sprintf("body is %s but headers.Content-Type is %q; a body that is not a string is sent as JSON and needs a JSON Content-Type", kind, ct))
		}
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return nil, invalidWebValue("body is not valid JSON", fmt.Sprintf("body: %v", err))
		}
		return b.Bytes(), nil
	}
	switch {
	case mt == "":
		h.Set("Content-Type", "text/html; charset=UTF-8")
		return []byte(s), nil
	case jsonFamily(mt):
		// OpenWhisk still decodes base64 given for a JSON type, which
		// older actions return; a string that is JSON is sent as it is.
		if !json.Valid([]byte(s)) {
			if b, err := base64.StdEncoding.DecodeString(s); err == nil {
				return b, nil
			}
		}
		return []byte(s), nil
	case textType(ct, mt):
		return []byte(s), nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		// base64's error names the byte at fault by its offset alone.
		return nil, invalidWebValue(fmt.Sprintf("body is not base64, as a body of a binary type (headers.Content-Type) must be: %v", err),
			fmt.Sprintf("body is not base64, as a body of the binary type %q (headers.Content-Type) must be: %v", mt, err))
	}
	return b, nil
}

// jsonFamily reports whether mt is application/json or a +json type.
func jsonFamily(mt string) bool {
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

// textType reports whether a string body of media type mt (ct with its
// parameters) is text, sent as it is, rather than base64 of binary data:
// text/*, XML, JavaScript, form data, message/*, or any type but images,
// audio and video given with a charset.
func textType(ct, mt string) bool {
	main, _, _ := strings.Cut(mt, "/")
	switch {
	case main == "text", main == "message",
		mt == "application/xml", strings.HasSuffix(mt, "+xml") && main != "image",
		mt == "application/javascript", mt == "application/ecmascript",
		mt == "application/x-www-form-urlencoded":
		return true
	case main == "image", main == "audio", main == "video":
		return false
	}
	_, params, _ := mime.ParseMediaType(ct)
	_, charset := params["charset"]
	return charset
}
