package openwhisk

import (
	"archive/zip"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ocifn/ocifn/admit"
	"github.com/ocifn/ocifn/front"
	"github.com/ocifn/ocifn/hook"
)

// allocated is how many bytes f allocates: at least the most it holds at
// once, garbage included.
func allocated(f func()) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return int64(after.TotalAlloc - before.TotalAlloc)
}

// repeated is n copies of item joined by commas.
func repeated(item string, n int) string {
	return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
}

// TestParseMemoryBounds: what the OpenWhisk front charges for the copies
// it makes of an activation (its body read as JSON, its value compacted
// and its context made an environment, a web action's answer read, an
// init installed) is never below what they allocate, on bodies and
// answers of the shapes that cost most per byte: one long string, many
// small keys, nulls, nesting, headers, base64.
func TestParseMemoryBounds(t *testing.T) {
	// The race detector's build allocates what others do not, up to
	// twice as much here: under it the steps run, but what they
	// allocate is not held to the bounds, which are for the build
	// served.
	past := func(got, bound int64) bool { return !raceEnabled && got > bound }
	if raceEnabled {
		t.Log("under the race detector, what the steps allocate is not counted")
	}
	long := strings.Repeat("x", 1<<20)
	keys := func(n int, v string) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"k%d":%s`, i, v)
		}
		return b.String()
	}
	bodies := map[string]string{
		"a long string":     `{"value": {"a": "` + long + `"}, "activation_id": "x"}`,
		"a long context":    `{"value": {}, "api_key": "` + long + `"}`,
		"a context object":  `{"value": {}, "deadline": {"a": [` + repeated(`{"b": 1}`, 50000) + `]}}`,
		"many small keys":   `{` + keys(50000, "1") + `}`,
		"keys of nulls":     `{"value": {}, ` + keys(50000, "null") + `}`,
		"100,000 nulls":     `{"value": [` + repeated("null", 100000) + `]}`,
		"nested lists":      `{"value": ` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}`,
		"spaced value":      `{"value": {"a": [` + repeated(" 1 ", 200000) + `]}}`,
		"a web activation":  `{"activation": {` + keys(20000, `"v"`) + `}, "value": {}}`,
		"escaped string":    `{"value": {"a": "` + strings.Repeat(`\"`, 1<<19) + `"}, "x": "` + strings.Repeat(`\u00e9`, 50000) + `"}`,
		"an empty activity": `{}`,
	}
	for name, body := range bodies {
		b := []byte(body)
		var msg map[string]json.RawMessage
		if got, bound := allocated(func() { msg, _ = parseMessage("/run", b) }), mapCost(b); past(got, bound) {
			t.Errorf("%s: reading the body of %d bytes allocated %d, past its bound %d", name, len(b), got, bound)
		}
		if raw := msg["activation"]; raw != nil {
			var activation map[string]json.RawMessage
			if got, bound := allocated(func() { _ = json.Unmarshal(raw, &activation) }), mapCost(raw); past(got, bound) {
				t.Errorf("%s: reading its activation of %d bytes allocated %d, past its bound %d", name, len(raw), got, bound)
			}
		}
		value := bytes.TrimSpace(msg["value"])
		if len(value) == 0 {
			value = []byte("{}")
		}
		if got, bound := allocated(func() {
			var compact bytes.Buffer
			_ = json.Compact(&compact, value)
			env, _ := ActivationEnv(msg, "https://ow.example")
			bc := append(append([]string(nil), "A=b"), env...)
			_ = Args([]string{"/fn"}, compact.Bytes())
			_ = bc
		}), runCost(value, msg); past(got, bound) {
			t.Errorf("%s: making the activation's arguments and environment allocated %d, past its bound %d", name, got, bound)
		}
	}

	var zipped bytes.Buffer
	zw := zip.NewWriter(&zipped)
	f, _ := zw.Create("exec")
	_, _ = f.Write([]byte("#!/bin/sh\n" + strings.Repeat("# padding\n", 100000)))
	_ = zw.Close()
	code := base64.StdEncoding.EncodeToString(zipped.Bytes())
	inits := map[string]string{
		"text code":   `{"value": {"code": "` + strings.Repeat(`echo x\n`, 200000) + `"}}`,
		"binary code": `{"value": {"code": "` + code + `", "binary": true}}`,
		"a large env": `{"value": {"code": "x", "env": {` + keys(20000, `"v"`) + `}}}`,
	}
	for name, body := range inits {
		b := []byte(body)
		log := slog.New(slog.DiscardHandler)
		p := New(&front.Config{Runner: echoRunner{}, Hooks: hook.NewChain(log), Gate: admit.New(1, 0, nil), Log: log,
			Timeout: time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 64 << 20, WorkDir: t.TempDir()}, "", io.Discard, io.Discard)
		got := allocated(func() {
			msg, _ := parseMessage("/init", b)
			_, _ = p.init(msg["value"], false)
		})
		if bound := initCost(b); past(got, bound) {
			t.Errorf("%s: an init of %d bytes allocated %d, past its bound %d", name, len(b), got, bound)
		}
		_ = p.Close()
	}

	headers := func(n int, v string) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"X-H%d":%s`, i, v)
		}
		return b.String()
	}
	png := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1, 2, 3}, 1<<18))
	answers := map[string]string{
		"a text body":         `{"statusCode": 200, "body": "` + long + `"}`,
		"a base64 body":       `{"headers": {"Content-Type": "image/png"}, "body": "` + png + `"}`,
		"a JSON body":         `{"body": {"a": [` + repeated(`{"b": null}`, 50000) + `]}}`,
		"a JSON string body":  `{"headers": {"Content-Type": "application/json"}, "body": "` + png + `"}`,
		"many headers":        `{"headers": {` + headers(20000, `"v"`) + `}, "body": "x"}`,
		"header arrays":       `{"headers": {"X-A": [` + repeated(`"v"`, 50000) + `]}, "body": "x"}`,
		"nested header lists": `{"headers": {"X-A": ` + strings.Repeat("[", 1000) + `"v"` + strings.Repeat("]", 1000) + `}}`,
		"an error":            `{"error": {"statusCode": 400, "headers": {` + headers(10000, `1`) + `}, "body": "` + long + `"}}`,
		"not web":             `{"a": [` + repeated("null", 100000) + `]}`,
	}
	for name, answer := range answers {
		b := []byte(answer)
		if got, bound := allocated(func() { _, _ = ParseWebResponse(b) }), webCost(b); past(got, bound) {
			t.Errorf("%s: reading a web answer of %d bytes allocated %d, past its bound %d", name, len(b), got, bound)
		}
	}
}

// TestInitOfPostRootIsCharged: an init that comes in POST / (the single
// entrypoint) is charged what installing its code takes, as one of POST
// /init is: the same init, which /init refused with 413 naming
// --max-inflight-bytes, was installed through POST / charged only its
// body and an activation's copies of it, a third of what it took.
func TestInitOfPostRootIsCharged(t *testing.T) {
	const limit = 4 << 20
	log := slog.New(slog.DiscardHandler)
	budget := admit.NewBudget(limit)
	var stdout, stderr bytes.Buffer
	p := New(&front.Config{Runner: echoRunner{}, Hooks: hook.NewChain(log), Gate: admit.New(1, 0, nil), Budget: budget, Copies: Copies, Log: log,
		Timeout: time.Second, MaxOutputBytes: 1 << 20, MaxRequestBytes: 4 << 20, WorkDir: t.TempDir()}, "", &stdout, &stderr)
	defer p.Close()
	init, _ := json.Marshal(map[string]any{"code": "#!/bin/sh\n# " + strings.Repeat("x", 600<<10) + "\ncat\n", "main": "main"})
	for _, c := range []struct{ path, body string }{
		{"/init", `{"value": ` + string(init) + `}`},
		{"/", `{"init": ` + string(init) + `}`},
		{"/", `{"init": ` + string(init) + `, "activation": {"activation_id": "a1"}, "value": {}}`},
	} {
		w := httptest.NewRecorder()
		p.ServeHTTP(w, httptest.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body)))
		if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "--max-inflight-bytes 4194304") || !strings.Contains(w.Body.String(), "install its code") {
			t.Errorf("POST %s of an init of %d bytes with %d in flight: %d %s, want 413 naming --max-inflight-bytes", c.path, len(init), limit, w.Code, w.Body.String())
		}
		if used := budget.Used(); used != 0 {
			t.Errorf("POST %s: %d bytes still charged after the call", c.path, used)
		}
	}
}
