// Package cgi is the front of CGI functions (RFC 3875) with Kubeless'
// runtime promises: each HTTP request runs the image's program in a fresh
// container, the request body on stdin and the request in the CGI
// environment; what it prints, an optional CGI header block and a body, is
// the response.
package cgi

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"

	"github.com/ocifn/ocifn/front"
)

// Request is what the CGI environment is made from.
type Request struct {
	Method, Path, RawQuery, Protocol string
	Header                           http.Header
	// ContentLength is the body's length.
	ContentLength int
	// RemoteAddr and Host are the client's address and the request's
	// host (host:port).
	RemoteAddr, Host string
	// LocalAddr is the server's address the request came to (host:port),
	// SERVER_NAME and SERVER_PORT when the request names no host.
	LocalAddr string
	// Now is when the request arrived (for a generated EVENT_TIME).
	Now time.Time
	// EventID is EVENT_ID when the request sends no Event-Id; empty, a
	// new one is made.
	EventID string
}

// Kubeless' event headers and the variables they become.
var eventHeaders = []struct{ header, env string }{
	{"Event-Id", "EVENT_ID"},
	{"Event-Type", "EVENT_TYPE"},
	{"Event-Time", "EVENT_TIME"},
	{"Event-Namespace", "EVENT_NAMESPACE"},
}

// eventNamespace is EVENT_NAMESPACE when the request names none.
const eventNamespace = "http.ocifn.io"

// Env returns the CGI environment of a request (RFC 3875 section 4.1),
// with HTTP_* for each header and Kubeless' EVENT_* variables, sorted.
func Env(r Request) []string {
	env := map[string]string{
		"GATEWAY_INTERFACE": "CGI/1.1",
		"SERVER_SOFTWARE":   "ocifn",
		"SERVER_PROTOCOL":   r.Protocol,
		"REQUEST_METHOD":    r.Method,
		"SCRIPT_NAME":       "",
		"PATH_INFO":         r.Path,
		"QUERY_STRING":      r.RawQuery,
	}
	if r.Host != "" {
		// net/http takes Host out of the request's headers into its own
		// field: without this, the one header every HTTP/1.1 request
		// has would be the one a program could not read, and programs
		// build their absolute URLs from it.
		env["HTTP_HOST"] = r.Host
	}
	if host, port, err := net.SplitHostPort(r.Host); err == nil {
		env["SERVER_NAME"], env["SERVER_PORT"] = serverName(host), port
	} else if r.Host != "" {
		env["SERVER_NAME"], env["SERVER_PORT"] = r.Host, "80"
	} else if host, port, err := net.SplitHostPort(r.LocalAddr); err == nil {
		// RFC 3875 asks for both, and a request of HTTP/1.0 may name no
		// host: the address it came to is the server's.
		env["SERVER_NAME"], env["SERVER_PORT"] = serverName(host), port
	}
	if host, port, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		env["REMOTE_ADDR"], env["REMOTE_PORT"] = host, port
	}
	if r.ContentLength > 0 {
		env["CONTENT_LENGTH"] = strconv.Itoa(r.ContentLength)
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		env["CONTENT_TYPE"] = ct
	}
	for name, values := range r.Header {
		if strings.Contains(name, "_") {
			// X_Foo would map to HTTP_X_FOO as X-Foo does, and which one
			// the program saw would be chance; a client could also pass
			// one off as a header a proxy sets (X-Forwarded-For). Dropped,
			// as nginx and Apache do.
			continue
		}
		key := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		switch key {
		case "CONTENT_TYPE", "CONTENT_LENGTH":
			continue // their own variables
		case "PROXY":
			continue // httpoxy: HTTP_PROXY would steer the program's own requests
		}
		if !validName(key) {
			continue
		}
		v := strings.Join(values, ", ")
		if strings.ContainsRune(v, 0) {
			continue
		}
		env["HTTP_"+key] = v
	}
	for _, e := range eventHeaders {
		env[e.env] = r.Header.Get(e.header)
	}
	if env["EVENT_ID"] == "" {
		env["EVENT_ID"] = r.EventID
	}
	if env["EVENT_ID"] == "" {
		env["EVENT_ID"] = newID()
	}
	if env["EVENT_TIME"] == "" {
		env["EVENT_TIME"] = r.Now.UTC().Format(time.RFC3339)
	}
	if env["EVENT_TYPE"] == "" {
		env["EVENT_TYPE"] = r.Header.Get("Content-Type")
	}
	if env["EVENT_NAMESPACE"] == "" {
		env["EVENT_NAMESPACE"] = eventNamespace
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// serverName is SERVER_NAME for host, split from its port: an IPv6
// address keeps its brackets, as RFC 3875 writes it (section 4.1.14) and as
// a Host without a port gives it, so that a program that builds its URL
// from SERVER_NAME and SERVER_PORT gets http://[::1]:8080/, not
// http://::1:8080/.
func serverName(host string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]"
	}
	return host
}

// TooLong returns the first variable of env that execve would refuse as
// longer than front.MaxArgBytes, and its length, or "" if there is none.
// (The environment as a whole stays under execve's other bound, a quarter
// of the stack's rlimit, 2 MiB by default: net/http reads at most 1 MB of
// a request's line and headers.)
func TooLong(env []string) (name string, n int) {
	for _, kv := range env {
		if len(kv) > front.MaxArgBytes {
			name, _, _ = strings.Cut(kv, "=")
			return name, len(kv)
		}
	}
	return "", 0
}

// WithNUL returns the first variable of env whose value holds a NUL byte,
// or "". A program's environment is made of C strings: the function would
// see the value cut at the NUL, a path /admin%00/x as /admin, while the
// log says the request was for the whole of it. Only the path can carry
// one (decoded from %00): net/http refuses control bytes in the query
// string and in header values, and Env drops a header that holds one.
func WithNUL(env []string) string {
	for _, kv := range env {
		if name, v, _ := strings.Cut(kv, "="); strings.IndexByte(v, 0) >= 0 {
			return name
		}
	}
	return ""
}

// MaxHeaderFields is the most header fields a request may pass to the
// function, each a variable of its program's environment (Apache's
// LimitRequestFields is 100). net/http lets the 1 MB of a request's
// headers carry 90,000 of them, and what the container's runtime takes to
// start the program grows faster than the variables do: crun 1.8.1 took
// 1 s for 6,000, 5 s for 40,000 and more than 10 s, past --timeout, for
// 90,000; ocifn's build of it (hack/crun.sh) crashed with 14,000.
const MaxHeaderFields = 1000

// HeaderFields counts the variables of env made from header fields
// (HTTP_*).
func HeaderFields(env []string) int {
	n := 0
	for _, kv := range env {
		if strings.HasPrefix(kv, "HTTP_") {
			n++
		}
	}
	return n
}

// validName reports whether s is made of A-Z, 0-9 and _.
func validName(s string) bool {
	for _, c := range s {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return s != ""
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Response is a CGI program's answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// ErrHeaderBlock is an output that starts as a CGI header block but is not
// one.
var ErrHeaderBlock = errors.New("malformed CGI header block")

// HeaderBlockError is a malformed header block (ErrHeaderBlock): what is
// wrong with it and on which line, and the output at fault, quoted. The
// caller is answered both; the log says what is wrong alone (Unquoted),
// as the Crossplane front's never quotes a function's output: a header
// block holds cookies and tokens.
type HeaderBlockError struct {
	// Fault says what is wrong, and where, without quoting the output.
	Fault string
	// Quote is the output at fault, quoted, or "".
	Quote string
}

func (e *HeaderBlockError) Error() string {
	if e.Quote == "" {
		return e.Unquoted()
	}
	return e.Unquoted() + ": " + e.Quote
}

// Unquoted is the error without the output at fault, as a log says it.
func (e *HeaderBlockError) Unquoted() string { return ErrHeaderBlock.Error() + ": " + e.Fault }

// Is makes a HeaderBlockError an ErrHeaderBlock.
func (e *HeaderBlockError) Is(target error) bool { return target == ErrHeaderBlock }

// maxHeaderBlock bounds the header block.
const maxHeaderBlock = 64 << 10

// cgiFields are the header fields only a CGI response has (RFC 3875
// section 6.3); a header block must hold at least one of them (section
// 6.2).
var cgiFields = []string{"Content-Type", "Location", "Status"}

// ParseOutput turns a CGI program's stdout into the response: an optional
// header block (Status:, Content-Type:, Location:, other headers, then an
// empty line), then the body, with status 200 unless the block says
// otherwise.
//
// Output is a header block only if it holds one of the CGI fields, as RFC
// 3875 requires: a body that merely looks like headers, such as YAML
// ("apiVersion: v1"), is all body. Output whose first line is a CGI field
// written as a program writes it, with a capital letter ("Status: 404"),
// was meant as a header block, so a malformed one is an error rather than
// a body. In lower case it may as well be YAML's top-level key ("status:
// ok", "location: westeurope"), so the block must then end, parse and
// hold valid CGI values (validValues, strict), or it is body. Otherwise
// the block must be plain (see plainBlock), or it is body: YAML may have
// a status, location or content-type key further down.
func ParseOutput(out []byte) (Response, error) {
	body := Response{Status: http.StatusOK, Header: http.Header{}, Body: out}
	first, ok := firstHeaderName(out)
	if !ok {
		return body, nil
	}
	cgiFirst := isCGIField(first)
	meant := cgiFirst && first[0] >= 'A' && first[0] <= 'Z'
	end, sep := headerEnd(out)
	if end < 0 {
		if !meant {
			return body, nil
		}
		return Response{}, &HeaderBlockError{Fault: fmt.Sprintf("no empty line ends the headers in the first %d bytes", min(len(out), maxHeaderBlock))}
	}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(out[:end+sep])))
	mh, err := tp.ReadMIMEHeader()
	if err != nil {
		if !meant {
			return body, nil
		}
		return Response{}, lineFault(out[:end], err)
	}
	if !slices.ContainsFunc(cgiFields, func(f string) bool { return len(mh[f]) > 0 }) {
		return body, nil
	}
	// textproto takes a name with a space in it, which net/http would
	// then drop from the response without a word.
	for name := range mh {
		if !httpguts.ValidHeaderFieldName(name) {
			if !meant {
				return body, nil
			}
			return Response{}, lineFault(out[:end], fmt.Errorf("%q is not a header name", name))
		}
	}
	switch {
	case meant:
	case cgiFirst:
		if !validValues(mh, true) {
			return body, nil
		}
	case !plainBlock(out[:end], mh):
		return body, nil
	}
	rsp := Response{Status: http.StatusOK, Header: http.Header(mh), Body: out[end+sep:]}
	// Only a block that was meant can get here with an empty CGI field:
	// an empty Location or Content-Type says nothing and is not sent; an
	// empty Status is not a status.
	for _, f := range []string{"Location", "Content-Type"} {
		if rsp.Header.Get(f) == "" {
			rsp.Header.Del(f)
		}
	}
	if _, ok := rsp.Header["Status"]; ok {
		s := rsp.Header.Get("Status")
		_, n, ok := statusCode(s)
		if !ok {
			return Response{}, &HeaderBlockError{Fault: fmt.Sprintf("line %d: Status is not a final HTTP status (3 digits, 200 to 599)", fieldLine(out[:end], "Status")), Quote: strconv.Quote(s)}
		}
		rsp.Status = n
		rsp.Header.Del("Status")
	} else if rsp.Header.Get("Location") != "" {
		// RFC 3875 6.2.3: a client redirect.
		rsp.Status = http.StatusFound
	}
	return rsp, nil
}

// lineFault is the error of the first line of block that is not a header,
// which textproto or the header names' check refused with err: one that
// has no colon, a name that is not a token, or a value with a control
// character. Should it find none, err says what is wrong, as the output
// at fault.
func lineFault(block []byte, err error) *HeaderBlockError {
	n := 0
	for line := range bytes.Lines(block) {
		n++
		l := bytes.TrimRight(line, "\r\n")
		value := l
		if len(l) > 0 && l[0] != ' ' && l[0] != '\t' {
			name, v, ok := bytes.Cut(l, []byte(":"))
			switch {
			case !ok:
				return &HeaderBlockError{Fault: fmt.Sprintf("line %d has no colon", n), Quote: strconv.Quote(string(l))}
			case !httpguts.ValidHeaderFieldName(string(name)):
				return &HeaderBlockError{Fault: fmt.Sprintf("line %d's name, before its colon, is not a header name", n), Quote: strconv.Quote(string(name))}
			}
			value = v
		}
		if bytes.ContainsFunc(value, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }) {
			return &HeaderBlockError{Fault: fmt.Sprintf("line %d's value holds a control character", n), Quote: strconv.Quote(string(l))}
		}
	}
	return &HeaderBlockError{Fault: "a line is not a header", Quote: err.Error()}
}

// fieldLine is the line of block where the field name first is, or 0.
func fieldLine(block []byte, name string) int {
	n := 0
	for line := range bytes.Lines(block) {
		n++
		if k, _, ok := bytes.Cut(line, []byte(":")); ok && strings.EqualFold(string(k), name) {
			return n
		}
	}
	return 0
}

// plainBlock reports whether a header block whose first line is not a CGI
// field is one beyond doubt, as a program writes headers and YAML is not:
// every name starts with a capital letter (YAML's keys rarely do), no line
// continues another (as nested YAML does), and its CGI fields' values are
// valid (validValues).
func plainBlock(block []byte, h textproto.MIMEHeader) bool {
	for line := range bytes.Lines(block) {
		if len(line) > 0 && !(line[0] >= 'A' && line[0] <= 'Z') && line[0] != '\r' && line[0] != '\n' {
			return false
		}
	}
	return validValues(h, false)
}

// validValues reports whether a header block's CGI fields, those it has,
// hold what a CGI program writes there: Status a 3-digit code, Location a
// URI, and Content-Type a type/subtype; none of them empty. strict asks
// for the Location of RFC 3875 (6.2.2, 6.2.3): an absolute URI or a path
// from the root, where YAML's location keys ("westeurope") are words.
func validValues(h textproto.MIMEHeader, strict bool) bool {
	for _, f := range cgiFields {
		if vs, ok := h[f]; ok && strings.TrimSpace(vs[0]) == "" {
			return false
		}
	}
	if s := h.Get("Status"); s != "" {
		if code, _, ok := statusCode(s); !ok || len(code) != 3 {
			return false
		}
	}
	if l := h.Get("Location"); l != "" {
		u, err := url.Parse(l)
		if err != nil || strings.ContainsAny(l, " \t") {
			return false
		}
		if strict && !strings.HasPrefix(l, "/") && (u.Scheme == "" || u.Host == "" && u.Opaque == "") {
			return false
		}
	}
	if ct := h.Get("Content-Type"); ct != "" {
		mt, _, _ := strings.Cut(ct, ";")
		typ, sub, ok := strings.Cut(strings.TrimSpace(mt), "/")
		if !ok || typ == "" || sub == "" || strings.ContainsAny(mt, " \t") {
			return false
		}
	}
	return true
}

// statusCode reads a Status field's value ("404 Not Found"): its code as
// written, its number, and whether that is a final HTTP status. An
// informational one (1xx) is not: net/http would send it ahead of a 200.
func statusCode(s string) (code string, n int, ok bool) {
	code, _, _ = strings.Cut(strings.TrimSpace(s), " ")
	n, err := strconv.Atoi(code)
	return code, n, err == nil && n >= 200 && n <= 599
}

// firstHeaderName returns the name of out's first line if that line is
// "Name: value".
func firstHeaderName(out []byte) (string, bool) {
	line, _, _ := bytes.Cut(out, []byte("\n"))
	name, _, ok := bytes.Cut(line, []byte(":"))
	if !ok || len(name) == 0 {
		return "", false
	}
	for _, c := range name {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return "", false
		}
	}
	return string(name), true
}

func isCGIField(name string) bool {
	return slices.ContainsFunc(cgiFields, func(f string) bool { return strings.EqualFold(f, name) })
}

// headerEnd finds the empty line that ends the header block: the offset of
// its start and the length of the separator up to the body.
func headerEnd(out []byte) (int, int) {
	head := out[:min(len(out), maxHeaderBlock)]
	i := bytes.Index(head, []byte("\n\n"))
	j := bytes.Index(head, []byte("\r\n\r\n"))
	switch {
	case i < 0 && j < 0:
		return -1, 0
	case j >= 0 && (i < 0 || j < i):
		return j, 4
	default:
		return i, 2
	}
}
