package openwhisk

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ocifn/ocifn/admit"
	"github.com/ocifn/ocifn/bundle"
	"github.com/ocifn/ocifn/front"
	"github.com/ocifn/ocifn/front/fronttest"
	"github.com/ocifn/ocifn/hook"
)

// echoRunner answers the activation's value, its last argument.
type echoRunner struct{}

func (echoRunner) Call(_ context.Context, c bundle.Call) (bundle.Exit, error) {
	_, err := io.WriteString(c.Stdout, c.Args[len(c.Args)-1]+"\n")
	return bundle.Exit{}, err
}

func (echoRunner) Args() []string { return []string{"/fn"} }

// outcomes records the outcome and the tag of every call the hooks saw.
type outcomes struct {
	mu   sync.Mutex
	seen []hook.Outcome
	tags []string
}

func (o *outcomes) Before(ctx context.Context, _ *hook.Call) (context.Context, error) {
	return ctx, nil
}

func (o *outcomes) After(_ context.Context, c *hook.Call) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen = append(o.seen, c.Outcome)
	o.tags = append(o.tags, c.Tag)
	return nil
}

// TestActivationsNotRun: an activation refused by the gate is refused
// before its body is read; that one, one too large and one that is not
// JSON are each answered with the sentinels after them, as OpenWhisk's
// invoker waits for, and counted through the hooks.
func TestActivationsNotRun(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	gate := admit.New(1, 0, nil)
	seen := &outcomes{}
	var stdout, stderr bytes.Buffer
	p := New(&front.Config{Runner: echoRunner{}, Hooks: hook.NewChain(log, seen), Gate: gate, Log: log,
		Timeout: time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 10}, "", &stdout, &stderr)
	framed := func(what string, want int) {
		t.Helper()
		if n := strings.Count(stdout.String(), Sentinel+"\n"); n != want {
			t.Errorf("%s: %d sentinels on stdout, want %d", what, n, want)
		}
		if n := strings.Count(stderr.String(), Sentinel+"\n"); n != want {
			t.Errorf("%s: %d sentinels on stderr, want %d", what, n, want)
		}
	}

	leave, err := gate.Enter(context.Background()) // the only slot
	if err != nil {
		t.Fatal(err)
	}
	body := &fronttest.CountingReader{Max: 64 << 20}
	w := httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/run", body))
	if w.Code != http.StatusServiceUnavailable || body.N != 0 || w.Header().Get("Retry-After") == "" {
		t.Errorf("with the gate full: status %d, Retry-After %q, after reading %d bytes of the body; want 503 with Retry-After and none read", w.Code, w.Header().Get("Retry-After"), body.N)
	}
	framed("with the gate full", 1)
	leave()

	w = httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/run", &fronttest.CountingReader{Max: 2 << 10}))
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "--max-request-bytes") {
		t.Errorf("too large: %d %s, want 413 naming --max-request-bytes", w.Code, w.Body.String())
	}
	framed("too large", 2)

	w = httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/run", strings.NewReader(`{"value":`)))
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "not a JSON object") {
		t.Errorf("not JSON: %d %s, want 400 saying so", w.Code, w.Body.String())
	}
	framed("not JSON", 3)

	w = httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/run", strings.NewReader(`{"value":{"a":1}}`)))
	if w.Code != http.StatusOK || w.Body.String() != `{"a":1}` {
		t.Errorf("admitted: %d %s, want 200 with the value", w.Code, w.Body.String())
	}
	framed("admitted", 4)

	want := []hook.Outcome{hook.Rejected, hook.Error, hook.Error, hook.OK}
	if !slices.Equal(seen.seen, want) {
		t.Errorf("the hooks saw %v, want %v", seen.seen, want)
	}
	if leave, err := gate.Enter(context.Background()); err != nil {
		t.Errorf("a slot was not let go: %v", err)
	} else {
		leave()
	}
}

// TestInitFieldsOutsideValue: an /init whose body has the init's fields
// at its top level, as POST /'s init has them, is refused with 400 saying
// where they belong, and installs nothing: a later /init with them in
// "value" is taken.
func TestInitFieldsOutsideValue(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	p := New(&front.Config{Runner: echoRunner{}, Hooks: hook.NewChain(log), Gate: admit.New(1, 0, nil), Log: log,
		Timeout: time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 10, WorkDir: t.TempDir()}, "", io.Discard, io.Discard)
	w := httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/init", strings.NewReader(`{"code": "#!/bin/sh\necho {}", "main": "main"}`)))
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `in \"value\"`) {
		t.Fatalf("/init with its fields at the top level: %d %s, want 400 naming value", w.Code, w.Body.String())
	}
	w = httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/init", strings.NewReader(`{"value": {"code": "#!/bin/sh\necho {}", "main": "main"}}`)))
	if w.Code != http.StatusOK {
		t.Errorf("/init with its fields in value, after the refusal: %d %s, want 200", w.Code, w.Body.String())
	}
}

// countingRunner counts the containers it was asked to run.
type countingRunner struct {
	echoRunner
	mu sync.Mutex
	n  int
}

func (c *countingRunner) Call(ctx context.Context, bc bundle.Call) (bundle.Exit, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.echoRunner.Call(ctx, bc)
}

// TestActivationEnvironmentRefused: an activation whose context would be
// an environment execve refuses (E2BIG) or none can hold is answered with
// an error naming the key, 413 or 400, without running a container that
// could only fail and be blamed on the action.
func TestActivationEnvironmentRefused(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	runner := &countingRunner{}
	var stdout, stderr bytes.Buffer
	p := New(&front.Config{Runner: runner, Hooks: hook.NewChain(log), Gate: admit.New(1, 0, nil), Log: log,
		Timeout: time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 8 << 20}, "", &stdout, &stderr)
	p.execLimit = 2 << 20 // an 8 MiB stack rlimit, whatever the test's
	manyKeys := map[string]any{"value": map[string]any{}}
	for i := range 3000 {
		manyKeys[fmt.Sprintf("k%d", i)] = strings.Repeat("v", 1000)
	}
	many, _ := json.Marshal(manyKeys)
	for _, tc := range []struct {
		name, body string
		status     int
		words      []string
	}{
		{"one_key_of_200KB", `{"value":{},"blob":"` + strings.Repeat("x", 200<<10) + `"}`, http.StatusRequestEntityTooLarge, []string{`\"blob\"`, "__OW_BLOB", "131071", "MAX_ARG_STRLEN"}},
		{"3000_keys", string(many), http.StatusRequestEntityTooLarge, []string{"3000 variables", "2097152", "__OW_K"}},
		{"key_with_equals", `{"value":{},"a=b":"x"}`, http.StatusBadRequest, []string{`\"a=b\"`}},
		{"empty_key", `{"value":{},"":"x"}`, http.StatusBadRequest, []string{`\"\"`}},
		{"nul_in_value", `{"value":{},"namespace":"a\u0000b"}`, http.StatusBadRequest, []string{`\"namespace\"`, "NUL"}},
		{"same_variable", `{"value":{},"namespace":"a","NAMESPACE":"b"}`, http.StatusBadRequest, []string{"__OW_NAMESPACE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := runner.n
			w := httptest.NewRecorder()
			p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/run", strings.NewReader(tc.body)))
			if w.Code != tc.status || strings.Contains(w.Body.String(), msgNotDict) {
				t.Errorf("%d %.300s, want %d", w.Code, w.Body.String(), tc.status)
			}
			for _, word := range tc.words {
				if !strings.Contains(w.Body.String(), word) {
					t.Errorf("the answer %.300s does not say %s", w.Body.String(), word)
				}
			}
			if runner.n != before {
				t.Error("a container was run")
			}
		})
	}
	if n := strings.Count(stdout.String(), Sentinel+"\n"); n != 6 {
		t.Errorf("%d sentinels on stdout, want one per refused activation", n)
	}
}

// oomRunner is an action the kernel's OOM killer killed after it printed
// a result.
type oomRunner struct{}

func (oomRunner) Call(_ context.Context, c bundle.Call) (bundle.Exit, error) {
	_, err := io.WriteString(c.Stdout, "{\"partial\": true}\n")
	return bundle.Exit{Code: 137, OOMKilled: "the container's cgroup hit memory.max (64 MiB)"}, err
}

func (oomRunner) Args() []string { return []string{"/fn"} }

// oomExit0Runner is an action that exits 0 with no result after the
// kernel's OOM killer killed the command whose output it prints.
type oomExit0Runner struct{}

func (oomExit0Runner) Call(_ context.Context, c bundle.Call) (bundle.Exit, error) {
	_, err := io.WriteString(c.Stdout, "\n")
	return bundle.Exit{OOMKilled: "the container's cgroup hit memory.max (64 MiB)"}, err
}

func (oomExit0Runner) Args() []string { return []string{"/fn"} }

// TestOutOfMemoryIsSaid: an action killed for memory is answered as
// OpenWhisk answers it, whatever it printed before, and so is one that
// exits 0 with no result once a process of its was killed.
func TestOutOfMemoryIsSaid(t *testing.T) {
	for name, runner := range map[string]front.Runner{"killed": oomRunner{}, "exit_0_without_a_result": oomExit0Runner{}} {
		t.Run(name, func(t *testing.T) {
			log := slog.New(slog.DiscardHandler)
			p := New(&front.Config{Runner: runner, Hooks: hook.NewChain(log), Gate: admit.New(1, 0, nil), Log: log,
				Timeout: time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 10, WorkDir: t.TempDir()}, "", io.Discard, io.Discard)
			w := httptest.NewRecorder()
			p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/run", strings.NewReader(`{"value": {}}`)))
			if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), "The action exhausted its memory and was aborted. (the container's cgroup hit memory.max") {
				t.Errorf("got %d %s, want 502 in OpenWhisk's words", w.Code, w.Body.String())
			}
		})
	}
}

// TestInitSlowBodyIsRefused: an /init whose body stalls is answered 400
// within --timeout, as an activation's is: it would otherwise hold its
// request, and a shutdown, which waits for every request being served, to
// the end of its grace period.
func TestInitSlowBodyIsRefused(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	p := New(&front.Config{Runner: echoRunner{}, Hooks: hook.NewChain(log), Gate: admit.New(1, 0, nil), Log: log,
		Timeout: 300 * time.Millisecond, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 10, WorkDir: t.TempDir()}, "", io.Discard, io.Discard)
	srv := httptest.NewServer(p)
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// One byte of the hundred announced, then nothing.
	if _, err := io.WriteString(conn, "POST /init HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	rsp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to an /init whose body stalled: %v", err)
	}
	msg, _ := io.ReadAll(rsp.Body)
	if rsp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), "did not arrive within the call's timeout of 300ms") {
		t.Errorf("a stalled /init body: status %d %q, want 400 naming the timeout", rsp.StatusCode, msg)
	}
}

// TestSingleEntrypointInitRefused: POST / with an init and an activation
// whose init is refused, or fails, answers the init's error, and the
// activation, which did not run, is followed by the sentinels once and
// counted, as every answer to POST / with an activation is.
func TestSingleEntrypointInitRefused(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	seen := &outcomes{}
	var stdout, stderr bytes.Buffer
	p := New(&front.Config{Runner: echoRunner{}, Hooks: hook.NewChain(log, seen), Gate: admit.New(1, 0, nil), Log: log,
		Timeout: time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 10, WorkDir: t.TempDir()}, "", &stdout, &stderr)
	for _, body := range []string{
		`{"init": {"env": {"A=B": "x"}}, "activation": {}, "value": {"a": 1}}`,
		`{"init": {"value": {"code": "#!/bin/sh\necho {}"}}, "activation": {}, "value": {"a": 1}}`,
	} {
		w := httptest.NewRecorder()
		p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)))
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"error"`) {
			t.Errorf("%s: %d %s, want 400 with the init's error", body, w.Code, w.Body.String())
		}
	}
	// A zip without exec: the init fails, and says why in the logs.
	var zipped bytes.Buffer
	zw := zip.NewWriter(&zipped)
	if w, err := zw.Create("other"); err != nil {
		t.Fatal(err)
	} else if _, err := io.WriteString(w, "x"); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"init": map[string]any{"code": base64.StdEncoding.EncodeToString(zipped.Bytes()), "binary": true},
		"activation": map[string]any{}, "value": map[string]any{}})
	w := httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body)))
	if w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), msgInitFailed) {
		t.Errorf("an init whose zip holds no exec: %d %s, want 502 %q", w.Code, w.Body.String(), msgInitFailed)
	}
	if !strings.Contains(stderr.String(), "no file named exec") {
		t.Errorf("the failed init's reason is not on stderr:\n%s", stderr.String())
	}
	for name, s := range map[string]string{"stdout": stdout.String(), "stderr": stderr.String()} {
		if n := strings.Count(s, Sentinel+"\n"); n != 3 {
			t.Errorf("%d sentinels on %s, want one after each activation that did not run, 3", n, name)
		}
	}
	if want := []hook.Outcome{hook.Error, hook.Error, hook.Error}; !slices.Equal(seen.seen, want) {
		t.Errorf("the hooks saw %v, want %v", seen.seen, want)
	}
}

// TestRefusedActivationsAreTagged: an activation refused once its context
// was read (a value that is not an object, a key no environment holds, an
// init of POST / refused before it) is counted and logged under its
// activation id, as one that ran is.
func TestRefusedActivationsAreTagged(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	seen := &outcomes{}
	var stdout, stderr bytes.Buffer
	p := New(&front.Config{Runner: echoRunner{}, Hooks: hook.NewChain(log, seen), Gate: admit.New(1, 0, nil), Log: log,
		Timeout: time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 20}, "", &stdout, &stderr)
	for _, body := range []string{`{"activation_id":"act-1","value":"x"}`, `{"activation_id":"act-2","value":{},"a=b":"x"}`} {
		w := httptest.NewRecorder()
		p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/run", strings.NewReader(body)))
		if w.Code == http.StatusOK {
			t.Errorf("%s: ran", body)
		}
	}
	// POST /'s activation, refused with its init's error.
	body := `{"init":{"env":{"A=B":"x"}},"activation":{"activation_id":"act-3"},"value":{}}`
	w := httptest.NewRecorder()
	p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)))
	if w.Code == http.StatusOK {
		t.Errorf("%s: ran", body)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if strings.Join(seen.tags, ",") != "act-1,act-2,act-3" {
		t.Errorf("the refused activations' tags: %q, want their activation ids", seen.tags)
	}
}

// TestInitAnswerSaysWhatItIs: a successful init answers "OK", as the Docker
// skeleton does, labelled as the text it is rather than as JSON, which it
// is not; a failed one answers a JSON error.
func TestInitAnswerSaysWhatItIs(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	newProxy := func() *Proxy {
		return New(&front.Config{Runner: echoRunner{}, Hooks: hook.NewChain(log), Gate: admit.New(1, 0, nil), Log: log,
			Timeout: time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 20, WorkDir: t.TempDir()}, "", io.Discard, io.Discard)
	}
	for path, body := range map[string]string{"/init": `{"value": {"code": "#!/bin/sh\necho {}"}}`, "/": `{"init": {"code": "#!/bin/sh\necho {}"}}`} {
		p := newProxy()
		w := httptest.NewRecorder()
		p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		if ct := w.Header().Get("Content-Type"); w.Code != http.StatusOK || w.Body.String() != "OK" || !strings.HasPrefix(ct, "text/plain") {
			t.Errorf("POST %s: %d %q %q, want 200 OK as text/plain", path, w.Code, ct, w.Body.String())
		}
		w = httptest.NewRecorder()
		p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		if ct := w.Header().Get("Content-Type"); w.Code != http.StatusForbidden || ct != "application/json" || !json.Valid(w.Body.Bytes()) {
			t.Errorf("POST %s again: %d %q %q, want 403 with a JSON error", path, w.Code, ct, w.Body.String())
		}
		_ = p.Close()
	}
}

// logsRunner leaves logs on stdout and a last line of stderr with no
// newline, then answers.
type logsRunner struct{}

func (logsRunner) Call(_ context.Context, c bundle.Call) (bundle.Exit, error) {
	_, _ = io.WriteString(c.Stderr, "a line\nthe last one, unended")
	_, err := io.WriteString(c.Stdout, "a log line\n{}\n")
	return bundle.Exit{}, err
}

func (logsRunner) Args() []string { return []string{"/fn"} }

// pausingWriter is one of ocifn's streams that lets other goroutines run
// after each write, as a write to a pipe that blocks would.
type pausingWriter struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *pausingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	n, err := w.buf.Write(p)
	w.mu.Unlock()
	time.Sleep(100 * time.Microsecond)
	return n, err
}

// TestSentinelsOnTheirOwnLines: activations whose stderr ends without a
// newline, and activations the server refuses before the front sees them
// (EndRefused), at once: every sentinel is a line of its own on both
// streams, one per activation, and no log is glued to another line. An
// activation's logs and what ends them are written as one block that no
// refusal's sentinel can split: a sentinel written between the action's
// unended last line and its newline joined it, and the invoker, which
// looks for the sentinel's line, missed it.
func TestSentinelsOnTheirOwnLines(t *testing.T) {
	const activations, refusals = 40, 200
	log := slog.New(slog.DiscardHandler)
	stdout, stderr := &pausingWriter{}, &pausingWriter{}
	p := New(&front.Config{Runner: logsRunner{}, Hooks: hook.NewChain(log), Gate: admit.New(activations, 0, nil), Log: log,
		Timeout: 5 * time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 1 << 10}, "", stdout, stderr)
	end := EndRefused(stdout, stderr)
	var wg sync.WaitGroup
	for range activations {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := httptest.NewRecorder()
			p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/run", strings.NewReader(`{"value": {}}`)))
			if w.Code != http.StatusOK {
				t.Errorf("an activation: %d %s", w.Code, w.Body)
			}
		}()
	}
	for range refusals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			end(httptest.NewRequest(http.MethodPost, "/run", nil))
		}()
	}
	wg.Wait()
	for _, s := range []struct {
		name string
		w    *pausingWriter
		line string
	}{{"stdout", stdout, "a log line"}, {"stderr", stderr, "the last one, unended"}} {
		sentinels, logs := 0, 0
		for _, l := range strings.Split(s.w.buf.String(), "\n") {
			switch {
			case l == Sentinel:
				sentinels++
			case strings.Contains(l, Sentinel):
				t.Errorf("%s: a sentinel not on its own line: %q", s.name, l)
			case l == s.line:
				logs++
			case strings.Contains(l, s.line):
				t.Errorf("%s: a log line joined to another: %q", s.name, l)
			}
		}
		if sentinels != activations+refusals || logs != activations {
			t.Errorf("%s: %d sentinel lines and %d log lines, want %d and %d", s.name, sentinels, logs, activations+refusals, activations)
		}
	}
}
