package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func startCGI(t *testing.T, args []string, env ...string) *httpFront {
	t.Helper()
	return startFront(t, "http", append([]string{"--tarball", image("cgi.tar")}, args...), env...)
}

// TestHTTPFunction: a CGI program in an image answers HTTP requests with
// Kubeless' runtime promises.
func TestHTTPFunction(t *testing.T) {
	f := startCGI(t, []string{"--timeout", "2s", "--max-request-bytes", "4096"})

	t.Run("cgi_environment_and_body", func(t *testing.T) {
		code, h, body := f.do(t, http.MethodPost, "/env?x=1&y=two", []byte(`{"hello": "world"}`), http.Header{
			"Content-Type": {"application/json"}, "X-Custom": {"custom value"}, "Event-Id": {"ev-42"}, "Event-Namespace": {"ns.example"},
		})
		if code != http.StatusOK || h.Get("X-Request-Method") != "POST" || h.Get("Content-Type") != "text/plain" {
			t.Fatalf("%d %v %s", code, h, body)
		}
		mustContain(t, "the CGI environment", string(body),
			"REQUEST_METHOD=POST\n", "PATH_INFO=/env\n", "QUERY_STRING=x=1&y=two\n", "CONTENT_TYPE=application/json\n",
			"CONTENT_LENGTH=18\n", "SERVER_PROTOCOL=HTTP/1.1\n", "GATEWAY_INTERFACE=CGI/1.1\n", "HTTP_X_CUSTOM=custom value\n",
			"EVENT_ID=ev-42\n", "EVENT_NAMESPACE=ns.example\n", "EVENT_TYPE=application/json\n", "EVENT_TIME=",
			"HTTP_HOST="+strings.TrimPrefix(f.url, "http://")+"\n", "---\n{\"hello\": \"world\"}")
	})
	t.Run("generated_event_id", func(t *testing.T) {
		_, _, body := f.do(t, http.MethodGet, "/env", nil, nil)
		mustContain(t, "the CGI environment", string(body), "REQUEST_METHOD=GET\n", "EVENT_ID=", "EVENT_NAMESPACE=http.ocifn.io\n")
		if strings.Contains(string(body), "CONTENT_LENGTH=") {
			t.Errorf("CONTENT_LENGTH set without a body:\n%s", body)
		}
	})
	t.Run("status_header", func(t *testing.T) {
		code, h, body := f.do(t, http.MethodGet, "/status", nil, nil)
		if code != 418 || h.Get("Content-Type") != "application/json" || string(body) != `{"tea": true}` {
			t.Errorf("%d %v %q", code, h, body)
		}
	})
	t.Run("no_header_block_is_all_body", func(t *testing.T) {
		if code, body := f.get(t, "/plain"); code != http.StatusOK || body != "no header block, just a body\n" {
			t.Errorf("%d %q", code, body)
		}
	})
	t.Run("body_that_looks_like_headers_is_all_body", func(t *testing.T) {
		want := "apiVersion: v1\nkind: ConfigMap\n\ndata: {}\n"
		if code, h, body := f.do(t, http.MethodGet, "/yaml", nil, nil); code != http.StatusOK || string(body) != want || h.Get("Kind") != "" {
			t.Errorf("%d %v %q, want 200 and the whole output as the body", code, h, body)
		}
	})
	t.Run("yaml_starting_with_a_status_key_is_all_body", func(t *testing.T) {
		want := "status: ok\nitems: []\n"
		if code, body := f.get(t, "/status-yaml"); code != http.StatusOK || body != want {
			t.Errorf("%d %q, want 200 and the whole output as the body", code, body)
		}
	})
	t.Run("non_zero_exit_gives_500_with_stderr_tail", func(t *testing.T) {
		code, body := f.get(t, "/fail")
		if code != http.StatusInternalServerError {
			t.Errorf("status %d, want 500", code)
		}
		mustContain(t, "the answer", body, "exited with code 3", "oops: the thing broke")
	})
	// The answer holds the end of stderr; the call's log line does not,
	// as the Crossplane front's does not: stderr is logged line by line,
	// within its bounds (1,024 lines), and the tail repeated it, or
	// logged lines past those bounds.
	t.Run("non_zero_exit_logs_no_stderr_in_the_reason", func(t *testing.T) {
		for _, tc := range []struct{ path, tag, reason, tail string }{
			{"/fail", "fail-reason", `reason="the function exited with code 3"`, "oops: the thing broke"},
			{"/fail-long", "fail-long-reason", `reason="the function exited with code 4"`, "stderr line 1100"},
		} {
			code, _, body := f.do(t, http.MethodGet, tc.path, nil, http.Header{"Event-Id": {tc.tag}})
			if code != http.StatusInternalServerError {
				t.Errorf("%s: status %d, want 500", tc.path, code)
			}
			mustContain(t, "the answer", string(body), "the end of its stderr", tc.tail)
			line := logLine(t, f.stderr, "the call's log line", "msg=call tag="+tc.tag+" ")
			mustContain(t, "the call's log line", line, "outcome=fatal")
			if !strings.HasSuffix(line, tc.reason) {
				t.Errorf("the call's log line does not end with %s: %s", tc.reason, line)
			}
		}
		log := f.stderr.String()
		mustContain(t, "the log", log, `tag=fail-reason line="oops: the thing broke"`, `tag=fail-long-reason line="stderr line 1024"`)
		if strings.Contains(log, "stderr line 1025") {
			t.Errorf("the log holds a line of stderr past the 1,024 a call logs")
		}
	})
	// The call is tagged with the caller's Event-Id, which a header may
	// make 1 MB long, and every line of the function's stderr carries
	// the tag: the log carries its first bytes alone, and the function
	// still gets it whole.
	t.Run("long_event_id_is_cut_in_the_log", func(t *testing.T) {
		id := strings.Repeat("e", 100<<10)
		before := len(f.stderr.String())
		code, _, body := f.do(t, http.MethodGet, "/fail-long", nil, http.Header{"Event-Id": {id}})
		if code != http.StatusInternalServerError {
			t.Fatalf("status %d, want 500: %.300s", code, body)
		}
		cut := strings.Repeat("e", 256) + "…(102400 bytes)"
		var log string
		eventually(t, 10*time.Second, "the call's log line", func() bool {
			log = f.stderr.String()[before:]
			return strings.Contains(log, "path=/fail-long status=500")
		})
		if len(log) > 1<<20 {
			t.Errorf("the call, 1,024 lines of stderr of at most 16 bytes each, logged %d bytes", len(log))
		}
		mustContain(t, "the log", log, `msg=call tag="`+cut+`" `, `tag="`+cut+`" line="stderr line 1024"`)
		code, _, body = f.do(t, http.MethodGet, "/env", nil, http.Header{"Event-Id": {id}})
		if code != http.StatusOK || !strings.Contains(string(body), "EVENT_ID="+id+"\n") {
			t.Errorf("/env: %d, want the whole Event-Id in EVENT_ID", code)
		}
	})
	// The method and the path are the caller's too, of up to 1 MB in a
	// request line: cut in the call's line as its tag is, a path refused
	// for its length included.
	t.Run("long_path_and_method_are_cut_in_the_log", func(t *testing.T) {
		before := len(f.stderr.String())
		path := "/" + strings.Repeat("p", 200<<10)
		if code, _, body := f.do(t, http.MethodGet, path, nil, nil); code != http.StatusRequestURITooLong {
			t.Fatalf("status %d, want 414: %.300s", code, body)
		}
		method := strings.Repeat("M", 100<<10)
		if code, _, body := f.do(t, method, "/plain", nil, nil); code != http.StatusOK {
			t.Fatalf("status %d, want 200: %.300s", code, body)
		}
		// Waited for by what they hold: a call's line comes after its
		// answer, so the /env call's of the subtest before may come
		// after before, with a status=200 of its own.
		want := []string{`path="` + path[:256] + `…(204801 bytes)" status=414`, `method="` + method[:256] + `…(102400 bytes)" path=/plain status=200`}
		var log string
		eventually(t, 10*time.Second, "the calls' log lines", func() bool {
			log = f.stderr.String()[before:]
			return strings.Contains(log, want[0]) && strings.Contains(log, want[1])
		})
		mustContain(t, "the log", log, want...)
		if len(log) > 64<<10 {
			t.Errorf("two calls with a path of 200 KiB and a method of 100 KiB logged %d bytes", len(log))
		}
	})
	t.Run("timeout_gives_408", func(t *testing.T) {
		code, body := f.get(t, "/sleep?30")
		if code != http.StatusRequestTimeout {
			t.Errorf("status %d, want 408", code)
		}
		mustContain(t, "the answer", body, "longer than the limit of 2s")
	})
	t.Run("malformed_header_block", func(t *testing.T) {
		code, body := f.get(t, "/bad")
		if code != http.StatusBadGateway {
			t.Errorf("status %d, want 502", code)
		}
		mustContain(t, "the answer", body, "malformed CGI header block")
	})
	// The answer says what is wrong with the header block, quoting it;
	// the log names the line and what is wrong with it, as the
	// Crossplane front's log never quotes a function's output, which
	// may hold secrets.
	t.Run("malformed_header_block_is_not_quoted_in_the_log", func(t *testing.T) {
		for _, tc := range []struct{ name, out, line string }{
			{"line_without_colon", "Status: 200\nSet-Cookie session=abc123\n\nhi", "line 2 has no colon"},
			{"name_with_a_space", "Content-Type: text/plain\nSet Cookie abc123: x\n\nhi", "line 2's name, before its colon, is not a header name"},
			{"control_character_in_a_value", "Content-Type: text/plain\nX-Token: abc123\x01\n\nhi", "line 2's value holds a control character"},
			{"bad_status", "Content-Type: text/plain\nStatus: abc123\n\nhi", "line 2: Status is not a final HTTP status"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				tag := "malformed-" + tc.name
				code, _, body := f.do(t, http.MethodPost, "/output", []byte(tc.out), http.Header{"Event-Id": {tag}})
				if code != http.StatusBadGateway {
					t.Fatalf("status %d, want 502: %s", code, body)
				}
				mustContain(t, "the answer", string(body), "malformed CGI header block", tc.line, "abc123")
				line := logLine(t, f.stderr, "the call's log line", "tag="+tag+" ")
				mustContain(t, "the call's log line", line, "outcome=fatal", "malformed CGI header block", tc.line)
				if strings.Contains(line, "abc123") {
					t.Errorf("the call's log line quotes the function's output: %s", line)
				}
			})
		}
	})
	// Linux's execve takes an environment variable of at most 128 KiB:
	// a longer header or query is the request's fault, answered as such,
	// not a failure of the function's container.
	t.Run("header_too_long_for_the_environment_gives_431", func(t *testing.T) {
		code, _, body := f.do(t, http.MethodGet, "/env", nil, http.Header{"X-Big": {strings.Repeat("a", 200<<10)}})
		if code != http.StatusRequestHeaderFieldsTooLarge || !strings.Contains(string(body), "HTTP_X_BIG would be") {
			t.Errorf("%d %.300s, want 431 naming HTTP_X_BIG", code, body)
		}
		code, _, body = f.do(t, http.MethodGet, "/env", nil, http.Header{"X-Big": {strings.Repeat("a", 100<<10)}})
		if code != http.StatusOK || !strings.Contains(string(body), "HTTP_X_BIG=aaaa") {
			t.Errorf("a 100 KiB header: %d %.300s, want it in the function's environment", code, body)
		}
	})
	// Each header field is a variable of the program's environment, and
	// crun takes longer than --timeout to start a program with 90,000
	// of them (one request's 1 MB of headers); ocifn's crun crashed with
	// 14,000.
	t.Run("too_many_header_fields_give_431", func(t *testing.T) {
		many := http.Header{}
		for i := range 20000 {
			many.Set(fmt.Sprintf("X-F%d", i), "a")
		}
		code, _, body := f.do(t, http.MethodGet, "/env", nil, many)
		if code != http.StatusRequestHeaderFieldsTooLarge || !strings.Contains(string(body), "HTTP_* variables of the program's environment (one per name), more than the 1000") {
			t.Errorf("20,000 header fields: %d %.300s, want 431 saying how many", code, body)
		}
	})
	t.Run("query_too_long_for_the_environment_gives_414", func(t *testing.T) {
		code, _, body := f.do(t, http.MethodGet, "/env?"+strings.Repeat("q", 140<<10), nil, nil)
		if code != http.StatusRequestURITooLong || !strings.Contains(string(body), "QUERY_STRING would be") {
			t.Errorf("%d %.300s, want 414 naming QUERY_STRING", code, body)
		}
	})
	// The program's environment would cut PATH_INFO at the NUL: /env%00x
	// would run as /env.
	t.Run("nul_in_the_path_gives_400", func(t *testing.T) {
		code, _, body := f.do(t, http.MethodGet, "/env%00x", nil, nil)
		if code != http.StatusBadRequest || !strings.Contains(string(body), "PATH_INFO holds a NUL byte") {
			t.Errorf("%d %.300s, want 400 naming PATH_INFO", code, body)
		}
	})
	t.Run("body_over_max_request_bytes_gives_413", func(t *testing.T) {
		code, _, body := f.do(t, http.MethodPost, "/env", bytes.Repeat([]byte("x"), 5000), nil)
		if code != http.StatusRequestEntityTooLarge {
			t.Errorf("status %d, want 413", code)
		}
		mustContain(t, "the answer", string(body), "--max-request-bytes")
	})
	t.Run("parallel_requests_in_fresh_containers", func(t *testing.T) {
		var wg sync.WaitGroup
		bodies := make([]string, 4)
		codes := make([]int, 4)
		start := time.Now()
		for i := range bodies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes[i], bodies[i] = f.get(t, "/sleep?1")
			}()
		}
		wg.Wait()
		for i := range bodies {
			if codes[i] != http.StatusOK || bodies[i] != "slept 1\n" {
				t.Errorf("request %d: %d %q", i, codes[i], bodies[i])
			}
		}
		// Four one-second calls one after the other take four seconds.
		if d := time.Since(start); d > 3500*time.Millisecond {
			t.Errorf("4 parallel 1s calls took %s: they did not overlap", d)
		}
		for range 2 {
			if _, body := f.get(t, "/fresh"); body != "seen=no\n" {
				t.Errorf("/fresh: %q: a call saw another's /tmp", body)
			}
		}
	})
	t.Run("server_stays_up_and_reports", func(t *testing.T) {
		if code, _ := f.get(t, "/healthz"); code != http.StatusOK {
			t.Errorf("/healthz: %d", code)
		}
		eventually(t, 5*time.Second, "one log line per request", func() bool {
			return strings.Contains(f.stderr.String(), "method=GET path=/status status=418")
		})
		mustContain(t, "log", f.stderr.String(), `msg="function stderr" tag=`, `line="oops: the thing broke"`)
		for _, l := range strings.Split(f.stderr.String(), "\n") {
			if strings.Contains(l, "path=/status") && (!strings.HasPrefix(l, "time=") || !strings.Contains(l, "duration=")) {
				t.Errorf("the request's log line lacks its date or duration: %s", l)
			}
		}
		code, metrics := f.get(t, "/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		mustContain(t, "/metrics", metrics, `function_calls_total{method="GET"}`, `function_calls_total{method="POST"}`,
			`function_failures_total{method="GET"}`, `function_duration_seconds_bucket{method="GET",le=`, `function_duration_seconds_count{method="GET"}`)
	})
}

// TestHTTPFunctionMakesItsCacheDir: a --cache-dir that is not there yet is
// made searchable by the containers' ids before anything goes into it, as
// for the gRPC front; the results of asynchronous invocations, kept in it,
// once made it with their own private mode, and the server then refused
// the directory it had made.
func TestHTTPFunctionMakesItsCacheDir(t *testing.T) {
	// The flags of the gRPC front that an HTTP front cannot honour are
	// said to be ignored, not silently dropped.
	f := startCGI(t, []string{"--cache-dir", filepath.Join(cacheDir(t), "new"), "--warm", "3", "--tls-server-certs-dir", "/nonexistent",
		"--cache-ttl", "1m", "--max-recv-msg-size", "1Mi"})
	if code, body := f.get(t, "/plain"); code != http.StatusOK || body != "no header block, just a body\n" {
		t.Errorf("status %d, body %q", code, body)
	}
	mustContain(t, "the server log", f.stderr.String(), "--warm does not apply to the HTTP fronts", "applies to the gRPC front only",
		"flags of the gRPC front are ignored", "--cache-ttl --max-recv-msg-size")
}

// nonReader is a connection to the front at url, which the test never
// reads from, with a small receive window: an answer of a few hundred KB
// stalls on it.
func nonReader(t *testing.T, url string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestHTTPAnswerNotTakenLetsItsSlotGo: a caller that stops reading a
// large answer holds its call's slot no longer than the call's timeout, as
// one whose body stalls does: the next call runs, and the stalled one is
// logged as an error saying why.
func TestHTTPAnswerNotTakenLetsItsSlotGo(t *testing.T) {
	f := startCGI(t, []string{"--timeout", "2s", "--max-concurrency", "1"})
	// The answer, /env's echo of the body, is far more than the
	// connection holds unread.
	conn := nonReader(t, f.url)
	body := bytes.Repeat([]byte("x"), 16<<20)
	if _, err := fmt.Fprintf(conn, "POST /env HTTP/1.1\r\nHost: fn\r\nContent-Length: %d\r\n\r\n", len(body)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(body); err != nil {
		t.Fatal(err)
	}
	f.awaitMetric(t, "ocifn_calls_in_flight 1")
	next := f.getLater(t, "/plain")
	select {
	case a := <-next:
		if a.code != http.StatusOK {
			t.Errorf("the next call: %d %q, want 200", a.code, a.body)
		}
	case <-time.After(patient(15 * time.Second)):
		t.Fatalf("the next call did not run within 15s of a caller that does not read its answer:\n%s", f.stderr)
	}
	// Its line comes as its slot is let go, with the next call's.
	eventually(t, 5*time.Second, "the stalled call's log line", func() bool {
		return strings.Contains(f.stderr.String(), "the caller did not take the function's answer")
	})
	mustContain(t, "the server log", f.stderr.String(), "outcome=error", "path=/env status=200",
		"the caller did not take the function's answer (16777", "within the call's timeout of 2s")
}

// TestHTTPServerNameWithoutHost: a request of HTTP/1.0, which may name no
// host, still gives the program SERVER_NAME and SERVER_PORT, as RFC 3875
// asks: the address it came to. So does an asynchronous one.
func TestHTTPServerNameWithoutHost(t *testing.T) {
	img := configuredImage(t, "cgi.tar", func(c *v1.Config) {
		c.Entrypoint = []string{"/bin/sh", "-c", `printf 'Content-Type: text/plain\n\n[%s] [%s]' "$SERVER_NAME" "$SERVER_PORT"`}
		c.Cmd = nil
	})
	f := startFront(t, "http", []string{"--tarball", img})
	addr := strings.TrimPrefix(f.url, "http://")
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("[%s] [%s]", host, port)
	ask := func(head string) string {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if _, err := fmt.Fprintf(conn, "GET /fn HTTP/1.0\r\n%s\r\n", head); err != nil {
			t.Fatal(err)
		}
		rsp, err := io.ReadAll(conn)
		if err != nil {
			t.Fatal(err)
		}
		return string(rsp)
	}
	if rsp := ask(""); !strings.HasSuffix(rsp, "\r\n\r\n"+want) {
		t.Errorf("HTTP/1.0 without a Host: %q, want the body %q", rsp, want)
	}
	accepted := ask("Prefer: respond-async\r\n")
	_, loc, ok := strings.Cut(accepted, "Location: ")
	loc, _, _ = strings.Cut(loc, "\r\n")
	if !ok || !strings.HasPrefix(accepted, "HTTP/1.0 202") {
		t.Fatalf("asynchronous, HTTP/1.0 without a Host: %q, want 202 with a Location", accepted)
	}
	if code, body := f.asyncResult(t, loc); code != http.StatusOK || body != want {
		t.Errorf("asynchronous, HTTP/1.0 without a Host: %d %q, want 200 and %q", code, body, want)
	}
}

// TestHTTPFuncTimeout: Kubeless' FUNC_TIMEOUT sets the timeout when
// --timeout is not given.
func TestHTTPFuncTimeout(t *testing.T) {
	f := startCGI(t, nil, "FUNC_TIMEOUT=1")
	code, body := f.get(t, "/sleep?30")
	if code != http.StatusRequestTimeout {
		t.Errorf("status %d, want 408", code)
	}
	mustContain(t, "the answer", body, "longer than the limit of 1s")
}

// TestHTTPTraceparent: a W3C traceparent header joins the caller's trace.
func TestHTTPTraceparent(t *testing.T) {
	col, env := startCollector(t)
	f := startCGI(t, nil, env...)
	// The serving line says so, as the gRPC front's does.
	mustContain(t, "log", f.stderr.String(), "tracing=true")
	if code, _, body := f.do(t, http.MethodGet, "/plain", nil, http.Header{"Traceparent": {callerTraceparent}}); code != http.StatusOK {
		t.Fatalf("%d %s", code, body)
	}
	callSpans(t, col, 3, "GET", "container.start", "container.run")
}

// asyncStart starts an asynchronous invocation and returns its Location.
func (f *httpFront) asyncStart(t *testing.T, method, path string) string {
	t.Helper()
	code, h, body := f.do(t, method, path, nil, http.Header{"Prefer": {"respond-async"}})
	loc := h.Get("Location")
	if code != http.StatusAccepted || !strings.HasPrefix(loc, "/invocations/") || len(loc) < len("/invocations/")+32 {
		t.Fatalf("%s %s with Prefer: respond-async: %d Location %q %s", method, path, code, loc, body)
	}
	return loc
}

// asyncResult polls an invocation until it is no longer 202.
func (f *httpFront) asyncResult(t *testing.T, loc string) (int, string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := f.get(t, loc)
		if code != http.StatusAccepted || time.Now().After(deadline) {
			return code, body
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestAsyncInvocations: Prefer: respond-async answers 202 with a Location
// whose GET answers 202 while the call runs, then its stored response; the
// results survive a restart, expire, and are bounded in size.
func TestAsyncInvocations(t *testing.T) {
	dir := cacheDir(t)
	f := startCGI(t, []string{"--cache-dir", dir, "--result-ttl", "1h"})

	loc := f.asyncStart(t, http.MethodGet, "/sleep?1")
	if code, _ := f.get(t, loc); code != http.StatusAccepted {
		t.Errorf("GET %s while the call runs: %d, want 202", loc, code)
	}
	if code, body := f.asyncResult(t, loc); code != http.StatusOK || body != "slept 1\n" {
		t.Errorf("result: %d %q", code, body)
	}
	// The call's line names the invocation by the start of its id, the
	// one its caller has: enough to find it, not to fetch its result.
	id := strings.TrimPrefix(loc, "/invocations/")
	line := regexp.MustCompile(`msg=call .*outcome=ok async=true invocation=` + id[:16] + `… method=GET path=/sleep status=200 `)
	eventually(t, 5*time.Second, "the invocation's call logged with its id", func() bool { return line.MatchString(f.stderr.String()) })
	if strings.Contains(f.stderr.String(), id) {
		t.Errorf("the server log holds the invocation's whole id, which fetches its result:\n%s", f.stderr)
	}
	failed := f.asyncStart(t, http.MethodGet, "/status")
	if code, body := f.asyncResult(t, failed); code != 418 || body != `{"tea": true}` {
		t.Errorf("a stored status: %d %q", code, body)
	}
	for _, p := range []string{"/invocations/" + strings.Repeat("0", 64), "/invocations/nope", loc + "x"} {
		code, body := f.get(t, p)
		if code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, code)
		}
		// A replica polled for another's id answers so, and says why.
		mustContain(t, "the 404", body, "--result-ttl", "--results-max-bytes", "found only on the server that accepted it", "share")
	}

	// A call running when the server dies is reported failed after the
	// restart; finished results are still there.
	cut := f.asyncStart(t, http.MethodGet, "/sleep?3")
	_ = f.cmd.Process.Kill()
	<-f.exited
	g := startCGI(t, []string{"--cache-dir", dir, "--result-ttl", "1h"})
	if code, body := g.asyncResult(t, loc); code != http.StatusOK || body != "slept 1\n" {
		t.Errorf("after a restart: %d %q", code, body)
	}
	code, body := g.asyncResult(t, cut)
	if code != http.StatusInternalServerError {
		t.Errorf("a call cut off by a restart: %d %q, want 500", code, body)
	}
	mustContain(t, "the cut-off call's result", body, "the ocifn server running it stopped")
}

// TestAsyncInvocationTimedFromArrival: an asynchronous invocation's call
// is timed (its log line's duration, its span's start) from when its
// request arrived, its body's arrival included, as a synchronous call is,
// not from when its call began in the background.
func TestAsyncInvocationTimedFromArrival(t *testing.T) {
	f := startCGI(t, nil)
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write([]byte("a"))
		time.Sleep(time.Second)
		_, _ = pw.Write([]byte("b"))
		_ = pw.Close()
	}()
	req, err := http.NewRequest(http.MethodPost, f.url+"/plain", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Prefer", "respond-async")
	rsp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rsp.Body.Close()
	loc := rsp.Header.Get("Location")
	if rsp.StatusCode != http.StatusAccepted || loc == "" {
		t.Fatalf("an asynchronous invocation: %d Location %q", rsp.StatusCode, loc)
	}
	if code, body := f.asyncResult(t, loc); code != http.StatusOK {
		t.Fatalf("result: %d %q", code, body)
	}
	line := regexp.MustCompile(`msg=call .*invocation=` + strings.TrimPrefix(loc, "/invocations/")[:16] + `… .* duration=(\S+)`)
	var m []string
	eventually(t, 5*time.Second, "the invocation's call logged", func() bool { m = line.FindStringSubmatch(f.stderr.String()); return m != nil })
	d, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	if d < time.Second {
		t.Errorf("the call's duration is %s; its body took a second to arrive, and the call is timed from the request's arrival", d)
	}
}

// TestAsyncInvocationLimits: results expire after --result-ttl, and the
// oldest go first beyond --results-max-bytes.
func TestAsyncInvocationLimits(t *testing.T) {
	// A result of /plain takes about 140 bytes stored: two fit, not three.
	f := startCGI(t, []string{"--result-ttl", "2s", "--results-max-bytes", "350"})
	var locs []string
	for range 3 {
		loc := f.asyncStart(t, http.MethodGet, "/plain")
		if code, _ := f.asyncResult(t, loc); code != http.StatusOK {
			t.Fatalf("%s: %d", loc, code)
		}
		locs = append(locs, loc)
	}
	if code, _ := f.get(t, locs[0]); code != http.StatusNotFound {
		t.Errorf("the oldest result is still there past --results-max-bytes: %d", code)
	}
	if code, _ := f.get(t, locs[2]); code != http.StatusOK {
		t.Errorf("the newest result is gone: %d", code)
	}
	time.Sleep(2 * time.Second)
	if code, _ := f.get(t, locs[2]); code != http.StatusNotFound {
		t.Errorf("a result past --result-ttl: %d, want 404", code)
	}
}

// TestAsyncRefusalCarriesAnEventID: an asynchronous invocation refused
// before its call (its body over --max-request-bytes) is logged with an
// event id as its tag, made as for every CGI call, or the caller's
// Event-Id, not with an empty tag that no line can be found by.
func TestAsyncRefusalCarriesAnEventID(t *testing.T) {
	f := startCGI(t, []string{"--max-request-bytes", "16"})
	big := bytes.Repeat([]byte("x"), 64)
	if code, _, _ := f.do(t, http.MethodPost, "/plain", big, http.Header{"Prefer": {"respond-async"}}); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("an invocation over --max-request-bytes: %d, want 413", code)
	}
	if code, _, _ := f.do(t, http.MethodPost, "/plain", big, http.Header{"Prefer": {"respond-async"}, "Event-Id": {"ev-7"}}); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("an invocation over --max-request-bytes: %d, want 413", code)
	}
	made := regexp.MustCompile(`msg=call tag=[0-9a-f]{32} front=http outcome=error method=POST path=/plain status=413 async=true `)
	given := regexp.MustCompile(`msg=call tag=ev-7 front=http outcome=error method=POST path=/plain status=413 async=true `)
	eventually(t, 5*time.Second, "the refused invocations logged with event ids", func() bool {
		return made.MatchString(f.stderr.String()) && given.MatchString(f.stderr.String())
	})
}

// TestAsyncResultOnAFullDisk: an invocation whose result the cache disk
// has no room for reads as failed, saying why, rather than as running for
// ever; the next one, with room, is stored. One that cannot even be
// started is answered 500, and counted and logged as a call.
func TestAsyncResultOnAFullDisk(t *testing.T) {
	// The unpacked image takes about 2 MiB of the 16.
	mount, cache := smallDisk(t, 16<<20)
	f := startCGI(t, []string{"--cache-dir", cache})
	code, h, body := f.do(t, http.MethodPost, "/env", bytes.Repeat([]byte("x"), 15<<20), http.Header{"Prefer": {"respond-async"}})
	loc := h.Get("Location")
	if code != http.StatusAccepted || loc == "" {
		t.Fatalf("%d %v %.300s", code, h, body)
	}
	code, result := f.asyncResult(t, loc)
	if code != http.StatusInternalServerError {
		t.Fatalf("a result the disk has no room for: %d %.300q, want 500", code, result)
	}
	mustContain(t, "the result", result, "finished with status 200", "could not be stored", "no space left on device")
	small := f.asyncStart(t, http.MethodGet, "/plain")
	if code, body := f.asyncResult(t, small); code != http.StatusOK || body != "no header block, just a body\n" {
		t.Errorf("a result with room: %d %q", code, body)
	}

	// Whether all of it fits or not, the disk is full after.
	_ = os.WriteFile(filepath.Join(mount, "filler"), make([]byte, freeBytes(t, mount)), 0o644)
	code, _, body = f.do(t, http.MethodGet, "/plain", nil, http.Header{"Prefer": {"respond-async"}})
	if code != http.StatusInternalServerError {
		t.Fatalf("an invocation the disk has no room to start: %d %q, want 500", code, body)
	}
	mustContain(t, "the answer", string(body), "cannot store the invocation", "no space left on device")
	f.awaitMetric(t, `ocifn_calls_total{outcome="error"} 1`)
	mustContain(t, "log", f.stderr.String(), "outcome=error method=GET path=/plain status=500 async=true")
}

// TestHTTPPackage: an image built with ocifn build --api http works as a
// Kubeless custom runtime or a Knative Service: run as its platform runs
// it, with Kubeless' FUNC_TIMEOUT, it serves the function on 8080.
func TestHTTPPackage(t *testing.T) {
	f := startFrontPod(t, "http", "cgi.tar", "FUNC_TIMEOUT=2", "FUNC_PORT=8080", "FUNC_HANDLER=cgi", "MOD_NAME=cgi", "PORT=8080")
	code, _, body := f.do(t, http.MethodPost, "/env?a=b", []byte("payload"), http.Header{"Event-Id": {"k1"}})
	if code != http.StatusOK {
		t.Fatalf("/env: %d %s", code, body)
	}
	mustContain(t, "the CGI environment", string(body), "QUERY_STRING=a=b\n", "EVENT_ID=k1\n", "---\npayload")
	if code, body := f.get(t, "/status"); code != 418 || body != `{"tea": true}` {
		t.Errorf("/status: %d %q", code, body)
	}
	if code, body := f.get(t, "/fail"); code != http.StatusInternalServerError || !strings.Contains(body, "oops: the thing broke") {
		t.Errorf("/fail: %d %q", code, body)
	}
	if code, body := f.get(t, "/sleep?30"); code != http.StatusRequestTimeout || !strings.Contains(body, "limit of 2s") {
		t.Errorf("past FUNC_TIMEOUT: %d %q", code, body)
	}
	loc := f.asyncStart(t, http.MethodGet, "/plain")
	if code, body := f.asyncResult(t, loc); code != http.StatusOK || body != "no header block, just a body\n" {
		t.Errorf("asynchronous invocation: %d %q", code, body)
	}
	if code, metrics := f.get(t, "/metrics"); code != http.StatusOK || !strings.Contains(metrics, `function_calls_total{method="GET"}`) {
		t.Errorf("/metrics: %d", code)
	}
}

// answer is an HTTP call's status and body.
type answer struct {
	code int
	body string
}

// getLater makes a GET of path in the background; its answer comes on the
// channel.
func (f *httpFront) getLater(t *testing.T, path string) chan answer {
	done := make(chan answer, 1)
	go func() {
		code, body := f.get(t, path)
		done <- answer{code, body}
	}()
	return done
}

// awaitMetric waits until the server's metrics hold line.
func (f *httpFront) awaitMetric(t *testing.T, line string) {
	t.Helper()
	eventually(t, 5*time.Second, line, func() bool {
		_, metrics := f.get(t, "/metrics")
		return strings.Contains(metrics, line)
	})
}

// TestHTTPCallPastTheGracePeriod: a call still running when the grace
// period ends is stopped, its container killed, and still answered: 503,
// saying why, rather than a closed connection.
func TestHTTPCallPastTheGracePeriod(t *testing.T) {
	f := startCGI(t, []string{"--grace-period", "1s", "--timeout", "60s"})
	done := f.getLater(t, "/sleep?30")
	f.awaitMetric(t, "ocifn_calls_in_flight 1")
	_ = f.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case a := <-done:
		if a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "grace period") {
			t.Errorf("the call cut off by the grace period's end: %d %q; want 503 saying so", a.code, a.body)
		}
	case <-time.After(patient(15 * time.Second)):
		t.Fatal("the call running past the grace period got no answer")
	}
	awaitExit(t, f.exited, "ocifn serve", f.stderr)
}

// TestHTTPGracefulShutdown: on SIGTERM, /healthz fails, a running call
// finishes and is answered, a call waiting in the queue and new calls get
// 503 at once, and the server exits 0.
func TestHTTPGracefulShutdown(t *testing.T) {
	f := startCGI(t, []string{"--grace-period", "20s", "--max-concurrency", "1"})
	// Long enough for the checks below while it runs.
	secs := int(patient(3 * time.Second).Seconds())
	done := f.getLater(t, fmt.Sprintf("/sleep?%d", secs))
	f.awaitMetric(t, "ocifn_calls_in_flight 1")
	// A second call waits in the queue for the only slot.
	queued := f.getLater(t, "/plain")
	f.awaitMetric(t, "ocifn_calls_queued 1")
	_ = f.cmd.Process.Signal(syscall.SIGTERM)
	eventually(t, 5*time.Second, "draining", func() bool { return strings.Contains(f.stderr.String(), "shutting down") })
	// The queued call is refused at once, not when the running call ends.
	select {
	case a := <-queued:
		if a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "shutting down") || !strings.Contains(a.body, "did not run") {
			t.Errorf("the call queued at SIGTERM: %d %q; want 503, shutting down, did not run", a.code, a.body)
		}
	case a := <-done:
		t.Errorf("the call running at SIGTERM ended (%d %q) before the queued call was refused", a.code, a.body)
		done <- a
	case <-time.After(patient(time.Second)):
		t.Errorf("the call queued at SIGTERM still waits %s after shutdown began", patient(time.Second))
	}
	// While the call runs, the server still answers, but takes nothing new.
	if code, _ := f.get(t, "/healthz"); code != http.StatusServiceUnavailable {
		t.Errorf("/healthz while draining: %d, want 503", code)
	}
	if code, body := f.get(t, "/plain"); code != http.StatusServiceUnavailable {
		t.Errorf("a new call while draining: %d %q, want 503", code, body)
	}
	code, h, _ := f.do(t, http.MethodPost, "/plain", nil, http.Header{"Prefer": {"respond-async"}})
	if code != http.StatusServiceUnavailable {
		t.Errorf("an asynchronous call while draining: %d %v, want 503", code, h)
	}
	a := <-done
	if a.code != http.StatusOK || a.body != fmt.Sprintf("slept %d\n", secs) {
		t.Errorf("the call running at SIGTERM: %d %q", a.code, a.body)
	}
	awaitExit(t, f.exited, "ocifn serve", f.stderr)
	if !f.cmd.ProcessState.Success() {
		t.Errorf("exit: %v\n%s", f.cmd.ProcessState, f.stderr)
	}
}
