package cgi

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ocifn/ocifn/front"
)

func TestEnv(t *testing.T) {
	r := Request{
		Method: "POST", Path: "/a/b", RawQuery: "x=1&y=2", Protocol: "HTTP/1.1",
		Header: http.Header{
			"Content-Type":    {"application/json"},
			"Content-Length":  {"7"},
			"X-Custom-Thing":  {"one", "two"},
			"Proxy":           {"http://evil"},
			"Event-Id":        {"ev1"},
			"Event-Namespace": {"ns"},
			"Bad Name":        {"x"},
			"X-Forwarded-For": {"10.0.0.9"},
			"X_Forwarded_For": {"spoofed"},
			"X_Only":          {"underscore"},
		},
		ContentLength: 7, RemoteAddr: "10.0.0.1:5555", Host: "fn.example:8080",
		Now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	env := map[string]string{}
	for _, kv := range Env(r) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	want := map[string]string{
		"GATEWAY_INTERFACE": "CGI/1.1", "REQUEST_METHOD": "POST", "PATH_INFO": "/a/b", "QUERY_STRING": "x=1&y=2",
		"CONTENT_TYPE": "application/json", "CONTENT_LENGTH": "7", "SERVER_PROTOCOL": "HTTP/1.1",
		"SERVER_NAME": "fn.example", "SERVER_PORT": "8080", "REMOTE_ADDR": "10.0.0.1", "HTTP_HOST": "fn.example:8080",
		"HTTP_X_CUSTOM_THING": "one, two", "HTTP_X_FORWARDED_FOR": "10.0.0.9", "EVENT_ID": "ev1", "EVENT_NAMESPACE": "ns",
		"EVENT_TIME": "2026-01-02T03:04:05Z", "EVENT_TYPE": "application/json",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	for _, k := range []string{"HTTP_PROXY", "HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH", "HTTP_BAD NAME", "HTTP_X_ONLY"} {
		if _, ok := env[k]; ok {
			t.Errorf("%s is set", k)
		}
	}

	bare := map[string]string{}
	for _, kv := range Env(Request{Method: "GET", Path: "/", Header: http.Header{}, Now: r.Now}) {
		k, v, _ := strings.Cut(kv, "=")
		bare[k] = v
	}
	if len(bare["EVENT_ID"]) != 32 || bare["EVENT_NAMESPACE"] != eventNamespace || bare["EVENT_TIME"] == "" {
		t.Errorf("generated event variables: %v", bare)
	}
	if _, ok := bare["CONTENT_LENGTH"]; ok {
		t.Error("CONTENT_LENGTH set without a body")
	}

	// HTTP/1.0 needs no Host: the server is named by the address the
	// request came to, as RFC 3875 asks for SERVER_NAME and SERVER_PORT.
	hostless := map[string]string{}
	for _, kv := range Env(Request{Method: "GET", Path: "/", Protocol: "HTTP/1.0", Header: http.Header{}, LocalAddr: "10.0.0.2:8080", Now: r.Now}) {
		k, v, _ := strings.Cut(kv, "=")
		hostless[k] = v
	}
	if hostless["SERVER_NAME"] != "10.0.0.2" || hostless["SERVER_PORT"] != "8080" {
		t.Errorf("without a Host: SERVER_NAME %q, SERVER_PORT %q; want the server's address, 10.0.0.2 and 8080", hostless["SERVER_NAME"], hostless["SERVER_PORT"])
	}
	if _, ok := hostless["HTTP_HOST"]; ok {
		t.Error("HTTP_HOST set without a Host")
	}
}

// TestEnvServerNameOfIPv6: an IPv6 address in SERVER_NAME is in brackets,
// as RFC 3875 (section 4.1.14) writes it and a URL needs it, whether it
// comes from Host, with a port or without, or from the address the
// request came to: "http://$SERVER_NAME:$SERVER_PORT/" must be a URL.
func TestEnvServerNameOfIPv6(t *testing.T) {
	for _, c := range []struct{ host, local, name, port string }{
		{"[::1]:8080", "", "[::1]", "8080"},
		{"[fd00::2]", "", "[fd00::2]", "80"},
		{"", "[fd00::3]:9090", "[fd00::3]", "9090"},
		{"fn.example:8080", "", "fn.example", "8080"},
		{"", "10.0.0.2:8080", "10.0.0.2", "8080"},
	} {
		got := map[string]string{}
		for _, kv := range Env(Request{Method: "GET", Path: "/", Protocol: "HTTP/1.1", Header: http.Header{}, Host: c.host, LocalAddr: c.local}) {
			k, v, _ := strings.Cut(kv, "=")
			got[k] = v
		}
		if got["SERVER_NAME"] != c.name || got["SERVER_PORT"] != c.port {
			t.Errorf("Host %q, to %q: SERVER_NAME %q, SERVER_PORT %q; want %q and %q", c.host, c.local, got["SERVER_NAME"], got["SERVER_PORT"], c.name, c.port)
		}
	}
}

func TestParseOutput(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		status    int
		header    map[string]string
		body      string
		err       bool
	}{
		{"no_header_block", "hello\nworld\n", 200, nil, "hello\nworld\n", false},
		{"empty", "", 200, nil, "", false},
		{"json_body", `{"a": 1}`, 200, nil, `{"a": 1}`, false},
		{"content_type_only", "Content-Type: text/plain\n\nhi", 200, map[string]string{"Content-Type": "text/plain"}, "hi", false},
		{"status_and_headers", "Status: 404 Not Found\nContent-Type: application/json\nX-A: b\n\n{}", 404, map[string]string{"Content-Type": "application/json", "X-A": "b"}, "{}", false},
		{"crlf", "Status: 201\r\nX-A: b\r\n\r\nbody\r\n", 201, map[string]string{"X-A": "b"}, "body\r\n", false},
		{"location_redirects", "Location: https://example.org/\n\n", 302, map[string]string{"Location": "https://example.org/"}, "", false},
		{"body_may_hold_blank_lines", "X-A: 1\nContent-Type: text/plain\n\na\n\nb", 200, map[string]string{"X-A": "1", "Content-Type": "text/plain"}, "a\n\nb", false},
		{"cgi_field_in_any_case", "content-type: text/plain\n\nhi", 200, map[string]string{"Content-Type": "text/plain"}, "hi", false},
		{"no_end_of_headers", "Content-Type: text/plain\nhello", 0, nil, "", true},
		{"bad_status", "Status: abc\n\n", 0, nil, "", true},
		{"status_out_of_range", "Status: 99\n\n", 0, nil, "", true},
		{"bad_status_after_other_headers_is_body", "X-A: 1\nStatus: abc\n\n", 200, nil, "X-A: 1\nStatus: abc\n\n", false},
		{"location_after_other_headers", "X-A: 1\nLocation: /next\n\n", 302, map[string]string{"X-A": "1", "Location": "/next"}, "", false},
		{"yaml_with_a_status_key", "apiVersion: v1\nkind: Pod\nstatus:\n  phase: Running\n\nrest", 200, nil, "apiVersion: v1\nkind: Pod\nstatus:\n  phase: Running\n\nrest", false},
		{"yaml_with_a_location_key", "kind: X\nspec:\n  x: 1\nlocation: westeurope\n\nrest", 200, nil, "kind: X\nspec:\n  x: 1\nlocation: westeurope\n\nrest", false},
		{"yaml_with_a_content_type_key", "kind: X\ncontent-type: yaml\n\nrest", 200, nil, "kind: X\ncontent-type: yaml\n\nrest", false},
		{"flat_yaml_with_a_blank_line", "name: backup\nlocation: /var/backups\n\nretention: 7\n", 200, nil, "name: backup\nlocation: /var/backups\n\nretention: 7\n", false},
		{"flat_yaml_with_a_status", "name: x\nstatus: 200\n\nitems: []", 200, nil, "name: x\nstatus: 200\n\nitems: []", false},
		{"relative_location_after_other_headers", "X-Powered-By: PHP/8.2\r\nLocation: login.php\r\n\r\n", 302, map[string]string{"Location": "login.php", "X-Powered-By": "PHP/8.2"}, "", false},
		{"content_type_with_a_bad_parameter", "X-A: 1\nContent-Type: text/html; charset\n\n<p>", 200, map[string]string{"Content-Type": "text/html; charset"}, "<p>", false},
		{"line_without_colon", "Status: 200\nnot a header\n\nbody", 0, nil, "", true},
		// net/http would send a 1xx ahead of a 200, and drop a header
		// whose name is not one.
		{"informational_status", "Status: 100 Continue\n\nbody", 0, nil, "", true},
		{"informational_status_in_lower_case_is_body", "status: 101\n\nbody", 200, nil, "status: 101\n\nbody", false},
		{"header_name_with_a_space", "Content-Type: text/plain\nX-Bad Header: y\n\nbody", 0, nil, "", true},
		{"header_name_with_a_space_in_lower_case_is_body", "content-type: text/plain\nx-bad header: y\n\nbody", 200, nil, "content-type: text/plain\nx-bad header: y\n\nbody", false},
		// RFC 3875 6.2: a header block holds a CGI field. Output that only
		// looks like headers is a body.
		{"yaml_body", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n", 200, nil, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n", false},
		{"yaml_body_with_blank_line", "apiVersion: v1\nkind: List\n\nitems: []\n", 200, nil, "apiVersion: v1\nkind: List\n\nitems: []\n", false},
		{"text_body_with_colon", "note: hello\nnot a header\n\nend", 200, nil, "note: hello\nnot a header\n\nend", false},
		{"other_headers_only", "X-A: 1\n\nbody", 200, nil, "X-A: 1\n\nbody", false},
		// A CGI field in lower case on the first line may be YAML's key:
		// a header block only if it ends, parses and its values are a CGI
		// program's.
		{"yaml_starting_with_a_status", "status: ok\nitems: []\n", 200, nil, "status: ok\nitems: []\n", false},
		{"yaml_starting_with_a_status_and_a_blank_line", "status: ok\n\nitems: []\n", 200, nil, "status: ok\n\nitems: []\n", false},
		{"yaml_starting_with_a_location", "location: westeurope\nname: x\n", 200, nil, "location: westeurope\nname: x\n", false},
		{"yaml_starting_with_a_content_type", "content-type: yaml\nkind: X\n\nrest", 200, nil, "content-type: yaml\nkind: X\n\nrest", false},
		{"yaml_starting_with_a_nested_status", "status:\n  phase: Running\n", 200, nil, "status:\n  phase: Running\n", false},
		{"lower_case_status", "status: 404\n\nnot found", 404, map[string]string{}, "not found", false},
		{"bad_status_in_lower_case_is_body", "status: abc\n\n", 200, nil, "status: abc\n\n", false},
		{"yaml_starting_with_a_location_and_a_blank_line", "location: westeurope\n\nname: x\n", 200, nil, "location: westeurope\n\nname: x\n", false},
		{"yaml_starting_with_an_empty_status", "status:\n\nitems: []\n", 200, nil, "status:\n\nitems: []\n", false},
		{"lower_case_block_that_does_not_parse", "status: 404\nfoo bar\n\nx", 200, nil, "status: 404\nfoo bar\n\nx", false},
		{"lower_case_local_redirect", "location: /next\n\n", 302, map[string]string{"Location": "/next"}, "", false},
		{"lower_case_client_redirect", "location: https://example.org/x\n\n", 302, map[string]string{"Location": "https://example.org/x"}, "", false},
		{"capitalized_in_mixed_case_without_end", "Content-type: yaml\nkind: X\n", 0, nil, "", true},
		{"empty_status", "Status:\n\n", 0, nil, "", true},
		{"empty_status_after_other_headers_is_body", "X-A: 1\nStatus:\n\nbody", 200, nil, "X-A: 1\nStatus:\n\nbody", false},
		{"empty_content_type_is_not_sent", "Content-Type:\n\nbody", 200, map[string]string{}, "body", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rsp, err := ParseOutput([]byte(tc.out))
			if tc.err {
				if !errors.Is(err, ErrHeaderBlock) {
					t.Fatalf("got %v, want a header block error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if rsp.Status != tc.status || string(rsp.Body) != tc.body {
				t.Errorf("got %d %q, want %d %q", rsp.Status, rsp.Body, tc.status, tc.body)
			}
			for k, v := range tc.header {
				if rsp.Header.Get(k) != v {
					t.Errorf("header %s = %q, want %q", k, rsp.Header.Get(k), v)
				}
			}
			if tc.header == nil && len(rsp.Header) != 0 {
				t.Errorf("headers %v, want none", rsp.Header)
			}
			for name, vs := range rsp.Header {
				if name == "Status" || len(vs) == 0 || vs[0] == "" {
					t.Errorf("header %s %q sent", name, vs)
				}
			}
		})
	}
}

// TestParseOutputNamesTheLineAtFault: a malformed header block's error
// names the line at fault and what is wrong with it without the output,
// which a log may say, and quotes the output for the caller.
func TestParseOutputNamesTheLineAtFault(t *testing.T) {
	for _, tc := range []struct{ name, out, fault, quote string }{
		{"no_colon", "Status: 200\r\nSet-Cookie session=secret\r\n\r\nbody", "line 2 has no colon", `"Set-Cookie session=secret"`},
		{"name_with_a_space", "Content-Type: text/plain\nX-A: 1\nSet Cookie secret: x\n\nbody", "line 3's name, before its colon, is not a header name", `"Set Cookie secret"`},
		{"control_character_on_a_continued_line", "Content-Type: text/plain\nX-A: 1\n continued\n more\x7fsecret\n\nbody", "line 4's value holds a control character", `" more\x7fsecret"`},
		{"status", "Location: /x\nX-A: 1\nstatus: secret\n\n", "line 3: Status is not a final HTTP status (3 digits, 200 to 599)", `"secret"`},
		{"no_end", "Content-Type: text/plain\nsecret", "no empty line ends the headers in the first 31 bytes", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseOutput([]byte(tc.out))
			var bad *HeaderBlockError
			if !errors.As(err, &bad) || !errors.Is(err, ErrHeaderBlock) {
				t.Fatalf("got %v, want a *HeaderBlockError", err)
			}
			if want := "malformed CGI header block: " + tc.fault; bad.Unquoted() != want {
				t.Errorf("Unquoted() = %q, want %q", bad.Unquoted(), want)
			}
			if strings.Contains(bad.Unquoted(), "secret") {
				t.Errorf("Unquoted() quotes the output: %q", bad.Unquoted())
			}
			want := "malformed CGI header block: " + tc.fault
			if tc.quote != "" {
				want += ": " + tc.quote
			}
			if err.Error() != want {
				t.Errorf("Error() = %q, want %q", err.Error(), want)
			}
		})
	}
}

// TestTooLong: a variable execve would refuse (Linux's MAX_ARG_STRLEN,
// 128 KiB with its NUL) is named with its length; one byte less passes.
func TestTooLong(t *testing.T) {
	fits := "HTTP_X=" + strings.Repeat("a", front.MaxArgBytes-len("HTTP_X="))
	if name, _ := TooLong([]string{"A=b", fits}); name != "" {
		t.Errorf("a variable of %d bytes with its NUL is too long: %s", len(fits)+1, name)
	}
	if name, n := TooLong([]string{"A=b", fits + "a"}); name != "HTTP_X" || n != front.MaxArgBytes+1 {
		t.Errorf("TooLong = %q, %d; want HTTP_X, %d", name, n, front.MaxArgBytes+1)
	}
}
