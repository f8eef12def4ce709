package openwhisk

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ocifn/ocifn/admit"
	"github.com/ocifn/ocifn/front"
	"github.com/ocifn/ocifn/hook"
)

func TestParseWebResponse(t *testing.T) {
	for _, tc := range []struct {
		name, result string
		status       int
		header       http.Header // nil: not a web response
		body         string
	}{
		{"plain_result", `{"a":1}`, 0, nil, ""},
		{"array", `[{"statusCode":404}]`, 0, nil, ""},
		{"body_text", `{"body":"<p>hi</p>"}`, 200, http.Header{"Content-Type": {"text/html; charset=UTF-8"}}, "<p>hi</p>"},
		{"status_and_text", `{"statusCode":404,"headers":{"Content-Type":"text/plain"},"body":"gone"}`, 404, http.Header{"Content-Type": {"text/plain"}}, "gone"},
		{"status_string", `{"statusCode":"404","body":"gone"}`, 404, http.Header{"Content-Type": {"text/html; charset=UTF-8"}}, "gone"},
		{"status_whole_float", `{"statusCode":201.0,"body":"x"}`, 201, http.Header{"Content-Type": {"text/html; charset=UTF-8"}}, "x"},
		{"headers_only", `{"headers":{"X-A":"1"}}`, 204, http.Header{"X-A": {"1"}}, ""},
		{"status_only", `{"statusCode":302,"headers":{"Location":"/x"}}`, 302, http.Header{"Location": {"/x"}}, ""},
		{"empty_body_drops_content_type", `{"headers":{"Content-Type":"text/plain"},"body":""}`, 204, http.Header{}, ""},
		{"null_body", `{"statusCode":200,"body":null}`, 200, http.Header{}, ""},
		{"header_values", `{"headers":{"Set-Cookie":["a=1","b=2"],"X-N":3,"X-B":true,"Content-Length":"99"},"body":"x"}`, 200,
			http.Header{"Set-Cookie": {"a=1", "b=2"}, "X-N": {"3"}, "X-B": {"true"}, "Content-Type": {"text/html; charset=UTF-8"}}, "x"},
		{"binary_base64", `{"statusCode":200,"headers":{"Content-Type":"image/png"},"body":"aGVsbG8="}`, 200, http.Header{"Content-Type": {"image/png"}}, "hello"},
		{"octet_stream", `{"headers":{"content-type":"application/octet-stream"},"body":"AAEC"}`, 200, http.Header{"Content-Type": {"application/octet-stream"}}, "\x00\x01\x02"},
		{"json_object_body", `{"statusCode":201,"body":{"b":[1, 2]},"other":1}`, 201, http.Header{"Content-Type": {"application/json"}}, `{"b":[1,2]}`},
		{"json_type_base64", `{"headers":{"Content-Type":"application/json"},"body":"eyJhIjoxfQ=="}`, 200, http.Header{"Content-Type": {"application/json"}}, `{"a":1}`},
		{"json_type_text", `{"headers":{"Content-Type":"application/json"},"body":"{\"a\":1}"}`, 200, http.Header{"Content-Type": {"application/json"}}, `{"a":1}`},
		{"charset_is_text", `{"headers":{"Content-Type":"application/x-thing; charset=utf-8"},"body":"plain"}`, 200, http.Header{"Content-Type": {"application/x-thing; charset=utf-8"}}, "plain"},
		{"application_error", `{"error":{"statusCode":400,"body":"no name given"}}`, 400, http.Header{"Content-Type": {"text/html; charset=UTF-8"}}, "no name given"},
		{"application_error_wins", `{"statusCode":200,"error":{"statusCode":404}}`, 404, http.Header{}, ""},
		{"error_not_a_response", `{"error":"no name given"}`, 0, nil, ""},
		{"error_not_a_response_top_level_is", `{"error":{"message":"m"},"statusCode":500}`, 500, http.Header{}, ""},
		{"xml_is_text", `{"headers":{"Content-Type":"application/atom+xml"},"body":"<feed/>"}`, 200, http.Header{"Content-Type": {"application/atom+xml"}}, "<feed/>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseWebResponse([]byte(tc.result))
			if err != nil {
				t.Fatal(err)
			}
			if tc.header == nil {
				if r != nil {
					t.Fatalf("read as a web response: %+v", r)
				}
				return
			}
			if r == nil {
				t.Fatal("not read as a web response")
			}
			if r.Status != tc.status || !reflect.DeepEqual(r.Header, tc.header) || string(r.Body) != tc.body {
				t.Errorf("got %d %v %q, want %d %v %q", r.Status, r.Header, r.Body, tc.status, tc.header, tc.body)
			}
		})
	}
}

func TestParseWebResponseInvalid(t *testing.T) {
	for _, tc := range []struct{ result, field string }{
		{`{"statusCode":999}`, "statusCode 999"},
		{`{"statusCode":-1}`, "statusCode -1"},
		{`{"statusCode":100}`, "statusCode 100"},
		{`{"statusCode":404.5}`, "statusCode 404.5"},
		{`{"statusCode":"not found"}`, `statusCode "not found"`},
		{`{"statusCode":true}`, "statusCode is a boolean"},
		{`{"statusCode":null,"body":"x"}`, "statusCode is null"},
		{`{"statusCode":204,"body":"x"}`, "statusCode 204 allows no body"},
		{`{"headers":"X-A: 1"}`, "headers is a string"},
		{`{"headers":{"X-A":{"b":1}}}`, "headers.X-A is an object"},
		{`{"headers":{"X-A":null}}`, "headers.X-A is null"},
		{`{"headers":{"X A":"1"}}`, `"X A"`},
		{`{"headers":{"X-A":"1\r\nX-B: 2"}}`, "headers.X-A holds the control character"},
		{`{"headers":{"Content-Type":"image/png"},"body":"not base64!"}`, `binary type "image/png"`},
		{`{"headers":{"Content-Type":"text/plain"},"body":{"a":1}}`, `body is an object but headers.Content-Type is "text/plain"`},
		{`{"headers":{"Content-Type":"/"},"body":"x"}`, `headers.Content-Type "/"`},
		{`{"error":{"statusCode":99}}`, "Response is not valid 'message/http': error.statusCode 99 is not"},
		{`{"error":{"headers":{"X-A":null}}}`, "error.headers.X-A is null"},
	} {
		_, err := ParseWebResponse([]byte(tc.result))
		if err == nil || !strings.HasPrefix(err.Error(), msgInvalidWeb) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: got %v, want an error naming %s", tc.result, err, tc.field)
		}
	}
}

// TestWebErrorLogQuotesNothing: the answer to a web action's result that
// cannot be sent quotes the value at fault; what the log says of it
// (Unquoted) names the field and what is wrong alone, as the Crossplane
// front's log never quotes a function's output: a statusCode string, a
// header or a Content-Type may hold a token.
func TestWebErrorLogQuotesNothing(t *testing.T) {
	for _, tc := range []struct{ result, answered, logged string }{
		{`{"statusCode":"tok-secret"}`, `statusCode "tok-secret"`, "statusCode is a string that is not a whole number"},
		{`{"statusCode":4041}`, "statusCode 4041", "statusCode is not an HTTP status code from 200 to 599"},
		{`{"statusCode":404.1}`, "statusCode 404.1", "statusCode is a number that is not a whole number"},
		{`{"headers":{"X tok-secret":"1"}}`, `"X tok-secret"`, "headers holds a name that is not a header name"},
		{`{"headers":{"X-tok-secret":null}}`, "headers.X-tok-secret is null", "a value in headers is null"},
		{`{"headers":{"X-tok-secret":{"a":1}}}`, "headers.X-tok-secret is an object", "a value in headers is an object"},
		{`{"headers":{"X-tok-secret":[{"a":1}]}}`, "headers.X-tok-secret is an object", "a value in headers is an object"},
		{`{"headers":{"X-tok-secret":"a\r\nX: 1"}}`, "headers.X-tok-secret holds", `a value in headers holds the control character '\r'`},
		{`{"headers":{"Content-Type":"/tok-secret"},"body":"x"}`, `headers.Content-Type "/tok-secret"`, "headers.Content-Type is not a media type"},
		{`{"headers":{"Content-Type":null}}`, "headers.Content-Type is null", "headers.Content-Type is null"},
		{`{"headers":{"Content-Type":"text/tok-secret"},"body":{"a":1}}`, `"text/tok-secret"`, "body is an object but headers.Content-Type is not a JSON type"},
		{`{"headers":{"Content-Type":"image/tok-secret"},"body":"not base64!"}`, `"image/tok-secret"`, "body is not base64, as a body of a binary type (headers.Content-Type) must be"},
		{`{"error":{"statusCode":"tok-secret"}}`, `error.statusCode "tok-secret"`, "error.statusCode is a string that is not a whole number"},
	} {
		_, err := ParseWebResponse([]byte(tc.result))
		var bad *WebError
		if !errors.As(err, &bad) {
			t.Errorf("%s: got %v, want a *WebError", tc.result, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.answered) {
			t.Errorf("%s: answered %q, want it to quote %s", tc.result, err, tc.answered)
		}
		if got := bad.Unquoted(); !strings.HasPrefix(got, msgInvalidWeb+tc.logged) || strings.Contains(got, "tok-secret") || strings.Contains(got, "404") {
			t.Errorf("%s: logged %q, want %q and no value of the action's", tc.result, got, msgInvalidWeb+tc.logged)
		}
	}
}

// TestWebAnswer: POST / answers a web action's result as the HTTP
// response it describes, and one it cannot send as it is with 502 naming
// the field, never something else than the action asked for.
func TestWebAnswer(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	seen := &outcomes{}
	p := New(&front.Config{Runner: echoRunner{}, Hooks: hook.NewChain(log, seen), Gate: admit.New(1, 0, nil), Log: log,
		Timeout: time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 20}, "", io.Discard, io.Discard)
	post := func(result string) *httptest.ResponseRecorder {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"activation": map[string]any{}, "value": json.RawMessage(result)})
		w := httptest.NewRecorder()
		p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(string(body))))
		return w
	}
	for _, result := range []string{`{"statusCode":999}`, `{"statusCode":-1}`, `{"statusCode":"teapot"}`} {
		w := post(result)
		if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), "statusCode") {
			t.Errorf("%s: %d %s, want 502 naming statusCode", result, w.Code, w.Body.String())
		}
	}
	if w := post(`{"statusCode":"404","body":"gone"}`); w.Code != http.StatusNotFound || w.Body.String() != "gone" {
		t.Errorf("statusCode as a string: %d %q, want 404 gone, as OpenWhisk parses it", w.Code, w.Body.String())
	}
	w := post(`{"headers":{"X-A":"1"}}`)
	if w.Code != http.StatusNoContent || w.Body.Len() != 0 || w.Header().Get("X-A") != "1" || w.Header().Get("Content-Type") != "" {
		t.Errorf("headers only: %d %q %v, want 204, no body, X-A and no Content-Type", w.Code, w.Body.String(), w.Header())
	}
	w = post(`{"statusCode":200,"headers":{"Content-Type":"image/png"},"body":"aGVsbG8="}`)
	if w.Code != http.StatusOK || w.Body.String() != "hello" || w.Header().Get("Content-Type") != "image/png" {
		t.Errorf("binary body: %d %q %v, want 200 with the decoded bytes", w.Code, w.Body.String(), w.Header())
	}
	w = post(`{"a":1,"nested":{"headers":1}}`)
	if w.Code != http.StatusOK || w.Body.String() != `{"a":1,"nested":{"headers":1}}` || w.Header().Get("Content-Type") != "application/json" {
		t.Errorf("plain result: %d %q %v, want it as JSON", w.Code, w.Body.String(), w.Header())
	}
	want := []hook.Outcome{hook.Fatal, hook.Fatal, hook.Fatal, hook.OK, hook.OK, hook.OK, hook.OK}
	if !reflect.DeepEqual(seen.seen, want) {
		t.Errorf("the hooks saw %v, want %v", seen.seen, want)
	}
}

// TestNestedHeaderArrays: a web action's header value of arrays nested
// thousands deep, flattened as OpenWhisk does, is read in memory of the
// order of its size. Reading each level again from its bytes copied what
// was inside it at every level: memory of the square of its depth, 50 MB
// for these 10 KB.
func TestNestedHeaderArrays(t *testing.T) {
	const depth = 5000
	result := `{"headers": {"X-A": ` + strings.Repeat("[", depth) + `"v", 1` + strings.Repeat("]", depth) + `}}`
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r, err := ParseWebResponse([]byte(result))
	runtime.ReadMemStats(&after)
	if err != nil || r == nil || !reflect.DeepEqual(r.Header["X-A"], []string{"v", "1"}) {
		t.Fatalf("got %v, %v; want the header X-A with the values v and 1", r, err)
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > 200*uint64(len(result)) {
		t.Errorf("reading an answer of %d bytes allocated %d, more than 200 times its size", len(result), allocated)
	}
}
