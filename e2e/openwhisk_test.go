package e2e

import (
	"archive/zip"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

// The action code of OpenWhisk's canonical runtime tests
// (openwhisk-runtime-docker ActionProxyContainerTests, run by
// BasicActionRunnerTests), in the bash flavour the Docker skeleton uses;
// the owskeleton image runs bash scripts with busybox sh.
const (
	owEcho = `#!/bin/bash
echo 'hello stdout'
echo 'hello stderr' 1>&2
if [[ -z $1 || $1 == '{}' ]]; then
   echo '{ "msg": "Hello from bash script!" }'
else
   echo $1 # echo the arguments back as the result
fi`
	owEnv = `#!/bin/bash
echo "{ \
\"api_host\": \"$__OW_API_HOST\", \"api_key\": \"$__OW_API_KEY\", \
\"namespace\": \"$__OW_NAMESPACE\", \"action_name\": \"$__OW_ACTION_NAME\", \"action_version\": \"$__OW_ACTION_VERSION\", \
\"activation_id\": \"$__OW_ACTIVATION_ID\", \"deadline\": \"$__OW_DEADLINE\" }"`
	owLargeInput = `#!/bin/bash
  read inputstring
  echo $inputstring`
	owNotJSON = `#!/bin/sh
echo not a json object`
	// The python unicode sample, in sh: {delimiter} -> {winter: d ☃ d}.
	owUnicode = `#!/bin/sh
d=$(echo "$1" | sed 's/.*"delimiter": *"\([^"]*\)".*/\1/')
s="$d ☃ $d"
echo "$s"
echo "{\"winter\": \"$s\"}"`
	// The init-environment sample: every variable as a JSON string.
	owInitEnv = `#!/bin/sh
q() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g'; }
echo "{\"ARRAY\": \"$(q "$ARRAY")\", \"OBJECT\": \"$(q "$OBJECT")\", \"STRING\": \"$(q "$STRING")\", \"NUMBER\": \"$(q "$NUMBER")\", \"BOOL\": \"$(q "$BOOL")\", \"NULL\": \"$(q "$NULL")\"}"`
	owStub = "This is a stub action. Replace it with custom logic."
)

const owSentinel = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX"

func startOpenWhisk(t *testing.T, env ...string) *httpFront {
	t.Helper()
	return startFront(t, "openwhisk", []string{"--tarball", image("owskeleton.tar")}, env...)
}

func initPayload(code, main string) string {
	b, _ := json.Marshal(map[string]any{"value": map[string]any{"code": code, "main": main, "binary": false}})
	return string(b)
}

func runPayload(value any, context map[string]any) string {
	m := map[string]any{"value": value}
	for k, v := range context {
		m[k] = v
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// mustInit initializes the action and fails unless it answers 200.
func (f *httpFront) mustInit(t *testing.T, body string) {
	t.Helper()
	if code, out := f.post(t, "/init", body); code != http.StatusOK {
		t.Fatalf("/init: %d %s\nlog:\n%s", code, out, f.stderr)
	}
}

// jsonEqual fails unless got is the JSON value want.
func jsonEqual(t *testing.T, what, got string, want any) {
	t.Helper()
	var g any
	if err := json.Unmarshal([]byte(got), &g); err != nil {
		t.Fatalf("%s: not JSON: %v: %q", what, err, got)
	}
	wb, _ := json.Marshal(want)
	var w any
	_ = json.Unmarshal(wb, &w)
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s: got %s, want %s", what, got, wb)
	}
}

// functionLines returns a stream without ocifn's own log lines: what the
// function and the proxy contract wrote.
func functionLines(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "time=") {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}

// checkStreams checks that each stream ends with its sentinel line and
// holds n of them, like the canonical suite's checkStreams.
func (f *httpFront) checkStreams(t *testing.T, n int) (stdout, stderr string) {
	t.Helper()
	// ocifn wrote both before it answered, but the pipes are read on
	// their own time.
	deadline := time.Now().Add(5 * time.Second)
	for {
		stdout, stderr = f.stdout.String(), f.stderr.String()
		if countOf(stdout, owSentinel) >= n && countOf(stderr, owSentinel) >= n || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for name, s := range map[string]string{"stdout": stdout, "stderr": stderr} {
		if got := countOf(s, owSentinel); got != n {
			t.Errorf("%s holds %d sentinels, want %d:\n%s", name, got, n, s)
		}
		if n > 0 && !strings.HasSuffix(s, owSentinel+"\n") {
			t.Errorf("%s does not end with the sentinel:\n%s", name, s)
		}
	}
	return functionLines(stdout), functionLines(stderr)
}

// TestOpenWhiskCanonical runs the cases of OpenWhisk's canonical runtime
// test suite against ocifn serve --api openwhisk and the owskeleton image.
func TestOpenWhiskCanonical(t *testing.T) {
	t.Run("echo_arguments_and_print_to_stdout_stderr", func(t *testing.T) {
		f := startOpenWhisk(t)
		f.mustInit(t, initPayload(owEcho, "main"))
		args := []any{
			map[string]any{"string": "hello"},
			map[string]any{"string": "❄ ☃ ❄"},
			map[string]any{"numbers": []any{42, 1}},
			map[string]any{"object": map[string]any{"a": "A"}},
		}
		for _, a := range args {
			code, out := f.post(t, "/run", runPayload(a, nil))
			if code != http.StatusOK {
				t.Fatalf("/run %v: %d %s", a, code, out)
			}
			jsonEqual(t, "result", out, a)
		}
		o, e := f.checkStreams(t, len(args))
		if countOf(o, "hello stdout") != len(args) || countOf(e, "hello stderr") != len(args) {
			t.Errorf("want hello stdout and hello stderr once per activation:\nstdout:\n%s\nstderr:\n%s", o, e)
		}
	})

	t.Run("unicode_in_source_params_logs_and_result", func(t *testing.T) {
		f := startOpenWhisk(t)
		f.mustInit(t, initPayload(owUnicode, "main"))
		code, out := f.post(t, "/run", runPayload(map[string]any{"delimiter": "❄"}, nil))
		if code != http.StatusOK {
			t.Fatalf("/run: %d %s", code, out)
		}
		jsonEqual(t, "result", out, map[string]any{"winter": "❄ ☃ ❄"})
		o, _ := f.checkStreams(t, 1)
		mustContain(t, "stdout", o, "❄ ☃ ❄")
	})

	t.Run("export_environment_variables_at_init", func(t *testing.T) {
		f := startOpenWhisk(t)
		body, _ := json.Marshal(map[string]any{"value": map[string]any{"code": owInitEnv, "main": "main", "env": map[string]any{
			"ARRAY": []string{"a", "b"}, "OBJECT": map[string]string{"a": "A"}, "STRING": "xyz", "NUMBER": 3, "BOOL": true, "NULL": nil,
		}}})
		f.mustInit(t, string(body))
		for range 2 {
			code, out := f.post(t, "/run", runPayload(map[string]any{}, nil))
			if code != http.StatusOK {
				t.Fatalf("/run: %d %s", code, out)
			}
			var got map[string]string
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			jsonEqual(t, "ARRAY", got["ARRAY"], []string{"a", "b"})
			jsonEqual(t, "OBJECT", got["OBJECT"], map[string]string{"a": "A"})
			want := map[string]string{"STRING": "xyz", "NUMBER": "3", "BOOL": "true", "NULL": ""}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %q, want %q", k, got[k], v)
				}
			}
		}
	})

	t.Run("confirm_expected_environment_variables", func(t *testing.T) {
		f := startOpenWhisk(t, "__OW_API_HOST=xyz")
		f.mustInit(t, initPayload(owEnv, "main"))
		props := map[string]any{"api_key": "abc", "namespace": "zzz", "action_name": "xxx", "action_version": "0.0.1",
			"activation_id": "iii", "transaction_id": "ttt", "deadline": "123"}
		code, out := f.post(t, "/run", runPayload(map[string]any{}, props))
		if code != http.StatusOK {
			t.Fatalf("/run: %d %s", code, out)
		}
		want := map[string]any{"api_host": "xyz"}
		for k, v := range props {
			if k != "transaction_id" {
				want[k] = v
			}
		}
		jsonEqual(t, "activation context", out, want)
		o, e := f.checkStreams(t, 1)
		if strings.TrimSpace(strings.ReplaceAll(o+e, owSentinel, "")) != "" {
			t.Errorf("the action printed no logs, yet:\nstdout:\n%s\nstderr:\n%s", o, e)
		}
	})

	t.Run("echo_a_large_input", func(t *testing.T) {
		f := startOpenWhisk(t)
		f.mustInit(t, initPayload(owLargeInput, "main"))
		arg := map[string]any{"arg": strings.Repeat("a", 1048561)}
		code, out := f.post(t, "/run", runPayload(arg, nil))
		if code != http.StatusOK {
			t.Fatalf("/run: %d %.200s", code, out)
		}
		jsonEqual(t, "result", out, arg)
	})

	t.Run("invoke_non_standard_entry_point", func(t *testing.T) {
		f := startOpenWhisk(t)
		f.mustInit(t, initPayload(owLargeInput, "exec"))
		arg := map[string]any{"string": "hello"}
		code, out := f.post(t, "/run", runPayload(arg, nil))
		if code != http.StatusOK {
			t.Fatalf("/run: %d %s", code, out)
		}
		jsonEqual(t, "result", out, arg)
		_, e := f.checkStreams(t, 1)
		if strings.TrimSpace(strings.ReplaceAll(e, owSentinel, "")) != "" {
			t.Errorf("stderr should hold only the sentinel:\n%s", e)
		}
	})

	t.Run("fail_to_initialize_a_second_time", func(t *testing.T) {
		f := startOpenWhisk(t)
		f.mustInit(t, initPayload(owNotJSON, "main"))
		code, out := f.post(t, "/init", initPayload(owNotJSON, "main"))
		if code == http.StatusOK {
			t.Fatalf("second /init answered 200")
		}
		if code != http.StatusForbidden {
			t.Errorf("second /init: %d, want 403", code)
		}
		jsonEqual(t, "second /init", out, map[string]string{"error": "Cannot initialize the action more than once."})
		eventually(t, 5*time.Second, "the refusal logged", func() bool {
			return strings.Contains(f.stdout.String()+f.stderr.String(), "Cannot initialize the action more than once.")
		})
		f.checkStreams(t, 0)
	})

	t.Run("report_an_error_for_an_action_not_returning_json", func(t *testing.T) {
		f := startOpenWhisk(t)
		f.mustInit(t, initPayload(owNotJSON, "main"))
		code, out := f.post(t, "/run", "{}")
		if code != http.StatusBadGateway {
			t.Errorf("/run: %d, want 502", code)
		}
		jsonEqual(t, "/run", out, map[string]string{"error": "The action did not return a dictionary or array."})
		f.checkStreams(t, 1)
	})

	t.Run("initialization_with_no_code_runs_the_image", func(t *testing.T) {
		for name, body := range map[string]string{
			"empty_code": initPayload("", ""),
			"null_code":  `{"value": {"code": null, "main": "main"}}`,
			"no_value":   `{}`,
			"empty_body": ``,
		} {
			t.Run(name, func(t *testing.T) {
				f := startOpenWhisk(t)
				f.mustInit(t, body)
				code, out := f.post(t, "/run", "{}")
				if code != http.StatusOK {
					t.Fatalf("/run: %d %s", code, out)
				}
				jsonEqual(t, "result", out, map[string]string{"error": owStub})
				o, _ := f.checkStreams(t, 1)
				mustContain(t, "stdout", o, owStub)
			})
		}
	})

	t.Run("run_without_init_runs_the_image", func(t *testing.T) {
		f := startOpenWhisk(t)
		code, out := f.post(t, "/run", "{}")
		if code != http.StatusOK {
			t.Fatalf("/run: %d %s", code, out)
		}
		jsonEqual(t, "result", out, map[string]string{"error": owStub})
	})

	t.Run("respond_with_404_for_bad_run_argument", func(t *testing.T) {
		f := startOpenWhisk(t)
		code, out := f.post(t, "/run", runPayload("A", nil))
		if code != http.StatusNotFound {
			t.Errorf("/run with value \"A\": %d, want 404", code)
		}
		jsonEqual(t, "/run", out, map[string]string{"error": "The action did not receive a dictionary or array as an argument."})
		o, e := f.checkStreams(t, 1)
		if strings.TrimSpace(strings.ReplaceAll(o+e, owSentinel, "")) != "" {
			t.Errorf("nothing ran, yet:\nstdout:\n%s\nstderr:\n%s", o, e)
		}
	})

	t.Run("extract_and_run_a_compatible_zip_exec", func(t *testing.T) {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		h := &zip.FileHeader{Name: "exec", Method: zip.Deflate}
		h.SetMode(0o755)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprint(w, "#!/bin/sh\necho 'This is an example zip used with the docker skeleton action.'\necho '{\"msg\": \"hello zip\"}'\n")
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		f := startOpenWhisk(t)
		body, _ := json.Marshal(map[string]any{"value": map[string]any{"code": base64.StdEncoding.EncodeToString(buf.Bytes()), "binary": true}})
		f.mustInit(t, string(body))
		code, out := f.post(t, "/run", "{}")
		if code != http.StatusOK {
			t.Fatalf("/run: %d %s", code, out)
		}
		jsonEqual(t, "result", out, map[string]string{"msg": "hello zip"})
		o, e := f.checkStreams(t, 1)
		if got := strings.TrimSpace(strings.ReplaceAll(o, owSentinel, "")); got != "This is an example zip used with the docker skeleton action." {
			t.Errorf("stdout: %q", got)
		}
		if strings.TrimSpace(strings.ReplaceAll(e, owSentinel, "")) != "" {
			t.Errorf("stderr: %q", e)
		}
	})

	t.Run("zip_without_exec_fails_init", func(t *testing.T) {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		w, _ := zw.Create("other")
		fmt.Fprint(w, "x")
		_ = zw.Close()
		f := startOpenWhisk(t)
		body, _ := json.Marshal(map[string]any{"value": map[string]any{"code": base64.StdEncoding.EncodeToString(buf.Bytes()), "binary": true}})
		code, out := f.post(t, "/init", string(body))
		if code != http.StatusBadGateway {
			t.Errorf("/init: %d, want 502", code)
		}
		jsonEqual(t, "/init", out, map[string]string{"error": "The action failed to generate or locate a binary. See logs for details."})
		_, e := f.checkStreams(t, 1)
		mustContain(t, "stderr", e, "no file named exec")
	})

	t.Run("current_directory_is_the_read_only_action_location", func(t *testing.T) {
		f := startOpenWhisk(t)
		f.mustInit(t, initPayload(`#!/bin/bash
touch /action/x 2>/dev/null && w=yes || w=no
echo "{\"pwd_env\":\"$PWD\",\"pwd_cmd\":\"$(pwd)\",\"writable\":\"$w\"}"`, "main"))
		code, out := f.post(t, "/run", runPayload(map[string]any{}, nil))
		if code != http.StatusOK {
			t.Fatalf("/run: %d %s", code, out)
		}
		jsonEqual(t, "result", out, map[string]string{"pwd_env": "/action", "pwd_cmd": "/action", "writable": "no"})
	})

	t.Run("return_array_result_and_take_array_argument", func(t *testing.T) {
		f := startOpenWhisk(t)
		f.mustInit(t, initPayload("#!/bin/bash\narr=$1\necho $arr", "main"))
		code, out := f.post(t, "/run", runPayload([]string{"a", "b"}, nil))
		if code != http.StatusOK {
			t.Fatalf("/run: %d %s", code, out)
		}
		jsonEqual(t, "result", out, []string{"a", "b"})
	})
}

// TestOpenWhiskInitWithoutCodeKeepsTheImagesWorkingDirectory: a blackbox
// action is initialized without code (OpenWhisk's invoker sends no code
// for a Docker action), and the image's entrypoint then runs as it does
// before any init: in the image's own working directory, which its
// command may name files relative to, with nothing mounted over /action.
func TestOpenWhiskInitWithoutCodeKeepsTheImagesWorkingDirectory(t *testing.T) {
	// stub.sh, relative to the image's WorkingDir /stub.
	relative := configuredImage(t, "owskeleton.tar", func(c *v1.Config) { c.Entrypoint = []string{"/bin/sh", "stub.sh"} })
	f := startFront(t, "openwhisk", []string{"--tarball", relative})
	if code, out := f.post(t, "/run", "{}"); code != http.StatusOK || !strings.Contains(out, owStub) {
		t.Fatalf("/run before /init: %d %s", code, out)
	}
	// As OpenWhisk's invoker initializes a Docker action.
	f.mustInit(t, `{"value": {"name": "my-action", "main": "main", "binary": false, "env": {"SOME_VAR": "x"}}}`)
	code, out := f.post(t, "/run", runPayload(map[string]any{}, map[string]any{"activation_id": "a1"}))
	if code != http.StatusOK {
		t.Fatalf("/run after an init without code: %d %s\n%s", code, out, f.stderr)
	}
	jsonEqual(t, "result", out, map[string]string{"error": owStub})
}

// TestOpenWhiskStderrWithoutFinalNewline: an action whose stderr does not
// end with a newline still has its last line to itself: ocifn's line
// about the call, written after it, starts a line of its own, so that
// neither is read as part of the other.
func TestOpenWhiskStderrWithoutFinalNewline(t *testing.T) {
	f := startOpenWhisk(t)
	f.mustInit(t, initPayload("#!/bin/sh\nprintf 'first\\nno final newline' >&2\necho '{}'", "main"))
	if code, out := f.post(t, "/run", runPayload(map[string]any{}, map[string]any{"activation_id": "a1"})); code != http.StatusOK {
		t.Fatalf("/run: %d %s", code, out)
	}
	_, e := f.checkStreams(t, 1)
	if got := strings.TrimSpace(strings.ReplaceAll(e, owSentinel, "")); got != "first\nno final newline" {
		t.Errorf("the activation's stderr lines: %q, want \"first\" and \"no final newline\"", got)
	}
	if !regexp.MustCompile(`(?m)^time=\S+ level=INFO msg=call tag=a1 `).MatchString(f.stderr.String()) {
		t.Errorf("ocifn's line about the call does not start a line:\n%s", f.stderr)
	}
}

// TestOpenWhiskSingleEntrypoint: POST / takes init, activation, or both,
// as OpenWhisk's Knative proxy does.
func TestOpenWhiskSingleEntrypoint(t *testing.T) {
	f := startOpenWhisk(t)
	init := map[string]any{"code": owEnv, "main": "main"}
	// /init's body where its value belongs is refused, not taken as an
	// init without code.
	body, _ := json.Marshal(map[string]any{"init": map[string]any{"value": init}})
	if code, out := f.post(t, "/", string(body)); code != http.StatusBadRequest || !strings.Contains(out, `wraps them in \"value\"`) {
		t.Errorf("POST / with the init wrapped in value: %d %s, want 400 naming the wrapping", code, out)
	}
	activation := map[string]any{"namespace": "ns", "action_name": "act", "activation_id": "a1", "api_key": "k", "action_version": "1", "deadline": "9"}
	body, _ = json.Marshal(map[string]any{"init": init, "activation": activation, "value": map[string]any{}})
	code, out := f.post(t, "/", string(body))
	if code != http.StatusOK {
		t.Fatalf("POST / with init and activation: %d %s", code, out)
	}
	jsonEqual(t, "result", out, map[string]string{"api_host": "", "api_key": "k", "namespace": "ns", "action_name": "act", "action_version": "1", "activation_id": "a1", "deadline": "9"})

	// Knative's callers send the same init with every activation: it is
	// taken as done, in any spacing, and the activation runs.
	spaced, _ := json.MarshalIndent(map[string]any{"init": init, "activation": map[string]any{"activation_id": "a2"}, "value": map[string]any{}}, "", "  ")
	if code, out := f.post(t, "/", string(spaced)); code != http.StatusOK || !strings.Contains(out, `"activation_id": "a2"`) {
		t.Errorf("POST / with the same init again and an activation: %d %s, want the activation run", code, out)
	}
	// Another init is still refused, and its activation does not run.
	other := map[string]any{"code": owEnv, "main": "other"}
	body, _ = json.Marshal(map[string]any{"init": other, "activation": map[string]any{"activation_id": "a3"}, "value": map[string]any{}})
	if code, out := f.post(t, "/", string(body)); code != http.StatusForbidden || strings.Contains(out, "a3") {
		t.Errorf("POST / with another init and an activation: %d %s, want 403", code, out)
	}

	body, _ = json.Marshal(map[string]any{"activation": map[string]any{"namespace": "ns2"}, "value": map[string]any{}})
	// The result as the action printed it: a result that is not a web
	// action's response is not rewritten.
	if code, out := f.post(t, "/", string(body)); code != http.StatusOK || !strings.Contains(out, `"namespace": "ns2"`) {
		t.Errorf("POST / with an activation: %d %s", code, out)
	}
	// Alone, a second init is refused, the same one too.
	body, _ = json.Marshal(map[string]any{"init": init})
	if code, out := f.post(t, "/", string(body)); code != http.StatusForbidden {
		t.Errorf("POST / with a second init: %d %s, want 403", code, out)
	}
}

// TestOpenWhiskWebAction: POST / answers an action's result that holds
// statusCode, headers or body as the HTTP response it describes, as
// OpenWhisk's controller does, and one that is not a valid response with
// 502 naming the field, never with something else than the action asked.
func TestOpenWhiskWebAction(t *testing.T) {
	f := startOpenWhisk(t)
	// The action answers its argument.
	init, _ := json.Marshal(map[string]any{"init": map[string]any{"code": "#!/bin/sh\nprintf '%s\\n' \"$1\"", "main": "main"}})
	if code, out := f.post(t, "/", string(init)); code != http.StatusOK {
		t.Fatalf("POST / with an init: %d %s", code, out)
	}
	run := func(result string) (int, http.Header, string) {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"activation": map[string]any{"activation_id": "w"}, "value": json.RawMessage(result)})
		code, h, b := f.do(t, http.MethodPost, "/", body, http.Header{"Content-Type": {"application/json"}})
		return code, h, string(b)
	}
	code, h, out := run(`{"statusCode":200,"headers":{"Content-Type":"image/png"},"body":"aGVsbG8="}`)
	if code != http.StatusOK || out != "hello" || h.Get("Content-Type") != "image/png" {
		t.Errorf("binary body: %d %v %q, want 200 image/png with the decoded bytes", code, h, out)
	}
	code, h, out = run(`{"statusCode":"404","headers":{"Set-Cookie":["a=1","b=2"]},"body":"<p>gone</p>"}`)
	if code != http.StatusNotFound || out != "<p>gone</p>" || len(h.Values("Set-Cookie")) != 2 || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Errorf("text body: %d %v %q, want 404 text/html with both cookies", code, h, out)
	}
	code, _, out = run(`{"error":{"statusCode":400,"body":"no name given"}}`)
	if code != http.StatusBadRequest || out != "no name given" {
		t.Errorf("application error: %d %q, want its error's 400 and body", code, out)
	}
	code, h, out = run(`{"headers":{"X-A":"1"}}`)
	if code != http.StatusNoContent || out != "" || h.Get("X-A") != "1" {
		t.Errorf("headers only: %d %v %q, want 204 with X-A and no body", code, h, out)
	}
	for _, result := range []string{`{"statusCode":999}`, `{"statusCode":-1}`, `{"statusCode":"teapot"}`} {
		if code, _, out := run(result); code != http.StatusBadGateway || !strings.Contains(out, "statusCode") || !strings.Contains(out, "message/http") {
			t.Errorf("%s: %d %s, want 502 naming statusCode", result, code, out)
		}
	}
	if code, _, out := run(`{"headers":{"Content-Type":"image/png"},"body":"not base64"}`); code != http.StatusBadGateway || !strings.Contains(out, "base64") {
		t.Errorf("binary body not in base64: %d %s, want 502 saying so", code, out)
	}
	// The answer quotes the value at fault; the activation's log line
	// names the field alone, as the Crossplane front's never quotes a
	// function's output.
	for i, tc := range []struct{ result, answered, logged string }{
		{`{"statusCode":"tok-secret"}`, `statusCode \"tok-secret\"`, "statusCode is a string that is not a whole number"},
		{`{"headers":{"X-tok-secret":"a\u0001"}}`, "headers.X-tok-secret holds", "a value in headers holds the control character"},
		{`{"headers":{"Content-Type":"/tok-secret"},"body":"x"}`, `headers.Content-Type \"/tok-secret\"`, "headers.Content-Type is not a media type"},
	} {
		id := fmt.Sprintf("web-fault-%d", i)
		body, _ := json.Marshal(map[string]any{"activation": map[string]any{"activation_id": id}, "value": json.RawMessage(tc.result)})
		code, _, out := f.do(t, http.MethodPost, "/", body, http.Header{"Content-Type": {"application/json"}})
		if code != http.StatusBadGateway || !strings.Contains(string(out), tc.answered) {
			t.Errorf("%s: %d %s, want 502 quoting the value at fault", tc.result, code, out)
		}
		line := logLine(t, f.stderr, "the activation's log line", "tag="+id+" ")
		mustContain(t, "the activation's log line", line, "outcome=fatal", "status=502", tc.logged)
		if strings.Contains(line, "tok-secret") {
			t.Errorf("the activation's log line quotes the action's result: %s", line)
		}
	}
	code, h, out = run(`{"a":1,"nested":{"statusCode":999}}`)
	if code != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
		t.Fatalf("plain result: %d %v %s, want 200 JSON", code, h, out)
	}
	jsonEqual(t, "plain result", out, map[string]any{"a": 1, "nested": map[string]any{"statusCode": 999}})
}

// TestOpenWhiskActivationEnvironment: an activation's context becomes
// __OW_<KEY> variables up to the kernel's limits, and one past them (one
// variable over MAX_ARG_STRLEN, or all of them over a quarter of the stack
// rlimit) is answered 413 naming the key, rather than run into execve's
// E2BIG and be blamed on the action; a key no variable can be named after
// answers 400.
func TestOpenWhiskActivationEnvironment(t *testing.T) {
	f := startOpenWhisk(t)
	f.mustInit(t, initPayload(`#!/bin/sh
echo "{\"big\": ${#__OW_BIG}, \"last\": ${#__OW_K_LAST}}"`, "main"))

	// As large as one variable may be: __OW_BIG=... of 131071 bytes.
	big := strings.Repeat("x", 131071-len("__OW_BIG="))
	code, out := f.post(t, "/run", runPayload(map[string]any{}, map[string]any{"big": big}))
	if code != http.StatusOK {
		t.Fatalf("a variable of 131071 bytes: %d %s\n%s", code, out, f.stderr)
	}
	jsonEqual(t, "a variable of 131071 bytes", out, map[string]int{"big": len(big), "last": 0})

	code, out = f.post(t, "/run", runPayload(map[string]any{}, map[string]any{"big": big + "x"}))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(out, `\"big\"`) || !strings.Contains(out, "MAX_ARG_STRLEN") {
		t.Errorf("a variable of 131072 bytes: %d %s, want 413 naming the key", code, out)
	}
	code, out = f.post(t, "/run", runPayload(map[string]any{}, map[string]any{"blob": strings.Repeat("x", 200<<10)}))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(out, `\"blob\"`) || strings.Contains(out, "dictionary") {
		t.Errorf("a key of 200 KB: %d %s, want 413 naming the key", code, out)
	}

	// Thousands of keys, up to the limit less what ocifn keeps for the
	// image's environment, run: the reserve is enough for this image.
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_STACK, &l); err != nil {
		t.Fatal(err)
	}
	limit := min(l.Cur/4, 6<<20)
	limit = max(limit, 128<<10)
	budget := int(limit) - 32<<10
	const each = 1000 // bytes of one key's variable, with its NUL and pointer
	keys := map[string]any{}
	used := len("/action/exec")*2 + 2 + 8 + len("{}") + 1 + 8 + len("__OW_K_LAST=1") + 1 + 8
	for i := 0; used+each <= budget; i++ {
		name := fmt.Sprintf("k%05d", i)
		keys[name] = strings.Repeat("v", each-len("__OW_K00000=")-1-8)
		used += each
	}
	keys["k_last"] = "1"
	code, out = f.post(t, "/run", runPayload(map[string]any{}, keys))
	if code != http.StatusOK || !strings.Contains(out, `"last": 1`) {
		t.Fatalf("%d keys, %d bytes, within the limit of %d: %d %s\n%s", len(keys), used, budget, code, out, f.stderr)
	}
	keys["k_more"] = strings.Repeat("v", 2000)
	code, out = f.post(t, "/run", runPayload(map[string]any{}, keys))
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(out, fmt.Sprintf("%d variables", len(keys))) || !strings.Contains(out, "__OW_K_MORE") {
		t.Errorf("%d keys over the limit: %d %.400s, want 413 naming the largest", len(keys), code, out)
	}
	if code, out := f.post(t, "/run", `{"value": {}, "a=b": "x"}`); code != http.StatusBadRequest || !strings.Contains(out, `\"a=b\"`) {
		t.Errorf("a key with =: %d %s, want 400 naming it", code, out)
	}
	if code, out := f.post(t, "/run", `{"value": {}, "namespace": "a\u0000b"}`); code != http.StatusBadRequest || !strings.Contains(out, "NUL") {
		t.Errorf("a value with NUL: %d %s, want 400 saying so", code, out)
	}
	f.checkStreams(t, 7)
	if strings.Contains(f.stderr.String(), "Argument list too long") {
		t.Errorf("a container was run past the limits:\n%s", f.stderr)
	}
}

// TestOpenWhiskInitWithManyVariables: an init's value.env of 20,000
// variables reaches every activation whole. Each variable is an element of
// process.env that crun's JSON parser and its putenv add one at a time;
// crun create and the container's process, forked by the crun fork server,
// once kept every copy of those growing arrays, 4·N² bytes in each, and
// failed past some 12,000 variables under the 1 GiB RLIMIT_DATA (a
// segfault, or `putenv: Out of memory`).
func TestOpenWhiskInitWithManyVariables(t *testing.T) {
	const n = 20000
	f := startOpenWhisk(t)
	env := map[string]any{}
	for i := range n {
		env[fmt.Sprintf("V%05d", i)] = "x"
	}
	body, _ := json.Marshal(map[string]any{"value": map[string]any{"main": "main", "env": env,
		"code": `#!/bin/sh
echo "{\"n\": $(env | grep -c '^V[0-9]*=x$'), \"last\": \"$V19999\"}"`}})
	f.mustInit(t, string(body))
	for range 2 {
		code, out := f.post(t, "/run", runPayload(map[string]any{}, nil))
		if code != http.StatusOK {
			t.Fatalf("/run with %d variables: %d %s\n%s", n, code, out, f.stderr)
		}
		jsonEqual(t, "result", out, map[string]any{"n": n, "last": "x"})
	}
	// An environment no process can be given is refused at the init,
	// rather than taken and then refused at every activation.
	f = startOpenWhisk(t)
	large := map[string]any{}
	for i := range 3000 {
		large[fmt.Sprintf("V%04d", i)] = strings.Repeat("x", 1000)
	}
	body, _ = json.Marshal(map[string]any{"value": map[string]any{"env": large}})
	if code, out := f.post(t, "/init", string(body)); code != http.StatusRequestEntityTooLarge || !strings.Contains(out, "3000 variables") || !strings.Contains(out, "from the init's value.env") {
		t.Errorf("/init with 3 MB of value.env: %d %s, want 413 naming the variables and where they come from", code, out)
	}
	if code, out := f.post(t, "/init", initPayload("#!/bin/sh\necho {}", "main")); code != http.StatusOK {
		t.Errorf("/init after a refused one: %d %s, want the action installed", code, out)
	}
}

// TestOpenWhiskActivations: activations overlap, each in a fresh container
// that shares nothing writable with the others; bad requests get clear
// errors and the server stays up.
func TestOpenWhiskActivations(t *testing.T) {
	f := startFront(t, "openwhisk", []string{"--tarball", image("owskeleton.tar"), "--max-request-bytes", "4096", "--timeout", "3s"})
	f.mustInit(t, initPayload(`#!/bin/sh
[ -e /tmp/mark ] && seen=yes || seen=no
touch /tmp/mark
case "$1" in *sleep*) sleep 1 ;; *forever*) sleep 60 ;; esac
echo "{\"seen\": \"$seen\"}"`, "main"))

	var wg sync.WaitGroup
	codes := make([]int, 4)
	outs := make([]string, 4)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], outs[i] = f.post(t, "/run", runPayload(map[string]any{"sleep": 1}, nil))
		}()
	}
	wg.Wait()
	for i := range codes {
		if codes[i] != http.StatusOK || !strings.Contains(outs[i], `"seen": "no"`) {
			t.Errorf("activation %d: %d %s (want 200 and a fresh /tmp)", i, codes[i], outs[i])
		}
	}

	if code, out := f.post(t, "/run", runPayload(map[string]any{"forever": 1}, nil)); code != http.StatusBadGateway || !strings.Contains(out, "longer than the limit of 3s") {
		t.Errorf("activation past --timeout: %d %s", code, out)
	}
	// OpenWhisk's deadline (epoch milliseconds), when sooner, cuts the
	// activation short.
	soon := time.Now().Add(1500 * time.Millisecond).UnixMilli()
	if code, out := f.post(t, "/run", runPayload(map[string]any{"forever": 1}, map[string]any{"deadline": soon})); code != http.StatusBadGateway || !strings.Contains(out, "longer than the limit of 1.") {
		t.Errorf("activation past its deadline: %d %s", code, out)
	}
	if code, out := f.post(t, "/run", runPayload(strings.Repeat("x", 5000), nil)); code != http.StatusRequestEntityTooLarge || !strings.Contains(out, "--max-request-bytes") {
		t.Errorf("body over --max-request-bytes: %d %s", code, out)
	}
	if code, out := f.post(t, "/run", "{not json"); code != http.StatusBadRequest || !strings.Contains(out, "not a JSON object") {
		t.Errorf("malformed body: %d %s", code, out)
	}
	if code, out := f.get(t, "/run"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /run: %d %s", code, out)
	}
	if code, out := f.post(t, "/run", "{}"); code != http.StatusOK {
		t.Errorf("after bad requests: %d %s", code, out)
	}
	// Asynchronous invocations work on this front too.
	loc := f.asyncStart(t, http.MethodPost, "/run")
	if code, out := f.asyncResult(t, loc); code != http.StatusOK || !strings.Contains(out, `"seen": "no"`) {
		t.Errorf("asynchronous activation: %d %s", code, out)
	}
	code, metrics := f.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	// The two timeouts, and the two bodies refused (too large, not JSON):
	// activations that did not run are counted too.
	mustContain(t, "/metrics", metrics, `function_calls_total{method="POST"}`, `function_failures_total{method="POST"} 4`, `function_duration_seconds_bucket{method="POST"`,
		`ocifn_calls_total{outcome="timeout"} 2`, `ocifn_calls_total{outcome="error"} 2`)
}

// TestOpenWhiskOutputLimit: an action that goes on printing past
// --max-output-bytes, on stdout or on stderr, ignoring EPIPE, is stopped
// at once and answered as over the limit, not at --timeout.
func TestOpenWhiskOutputLimit(t *testing.T) {
	f := startFront(t, "openwhisk", []string{"--tarball", image("owskeleton.tar"), "--max-output-bytes", "1000", "--timeout", "8s"})
	f.mustInit(t, initPayload(`#!/bin/sh
trap "" PIPE
cat >/dev/null
case "$1" in *stderr*) exec >&2 ;; esac
while :; do echo xxxxxxxx; done`, "main"))
	for _, stream := range []string{"stdout", "stderr"} {
		start := time.Now()
		code, out := f.post(t, "/run", runPayload(map[string]any{"stream": stream}, nil))
		took := time.Since(start)
		if code != http.StatusBadGateway || !strings.Contains(out, "printed more than the limit of 1000 bytes on "+stream) {
			t.Errorf("flooding %s: %d %s, want 502 over the output limit", stream, code, out)
		}
		if took > 3*time.Second {
			t.Errorf("flooding %s took %s with an 8s timeout: the action was not stopped at the cap", stream, took)
		}
	}
}

// TestOpenWhiskPackage: an image built with ocifn build --api openwhisk
// works as an OpenWhisk Docker action: run as its platform runs it, it
// serves /init and /run on 8080 and passes the canonical cases.
func TestOpenWhiskPackage(t *testing.T) {
	f := startFrontPod(t, "openwhisk", "owskeleton.tar", "__OW_API_HOST=https://whisk.example")
	if code, out := f.post(t, "/run", "{}"); code != http.StatusOK || !strings.Contains(out, owStub) {
		t.Errorf("/run before /init: %d %s", code, out)
	}
	f.mustInit(t, initPayload(owEcho, "main"))
	arg := map[string]any{"string": "❄ ☃ ❄"}
	code, out := f.post(t, "/run", runPayload(arg, nil))
	if code != http.StatusOK {
		t.Fatalf("/run: %d %s", code, out)
	}
	jsonEqual(t, "result", out, arg)
	if code, out := f.post(t, "/init", initPayload(owEcho, "main")); code != http.StatusForbidden {
		t.Errorf("second /init: %d %s", code, out)
	}
	eventually(t, 5*time.Second, "the activations' logs and sentinels", func() bool {
		log := f.stderr.String()
		return strings.Contains(log, "hello stdout") && strings.Contains(log, "hello stderr") && countOf(log, owSentinel) == 4
	})

	g := startFrontPod(t, "openwhisk", "owskeleton.tar", "__OW_API_HOST=https://whisk.example")
	g.mustInit(t, initPayload(owEnv, "main"))
	code, out = g.post(t, "/run", runPayload(map[string]any{}, map[string]any{"namespace": "zzz", "activation_id": "iii"}))
	if code != http.StatusOK || !strings.Contains(out, `"api_host": "https://whisk.example"`) || !strings.Contains(out, `"namespace": "zzz"`) {
		t.Errorf("activation context: %d %s", code, out)
	}
}

// TestOpenWhiskActivationTimedFromArrival: an activation that waits for a
// slot is timed from its arrival, as a call of the other fronts is: with
// one slot and two activations of 2 s each, the second, which waited
// for the first, took about 4 s for its caller, and its
// duration and its line say so.
func TestOpenWhiskActivationTimedFromArrival(t *testing.T) {
	f := startFront(t, "openwhisk", []string{"--tarball", image("owskeleton.tar"), "--max-concurrency", "1"})
	f.mustInit(t, initPayload("#!/bin/sh\nsleep 2\necho '{}'", "main"))
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, out := f.post(t, "/run", runPayload(map[string]any{}, nil)); code != http.StatusOK {
				t.Errorf("activation: %d %s", code, out)
			}
		}()
	}
	wg.Wait()
	_, metrics := f.get(t, "/metrics")
	// The first took about 2 s, the second about 4 s.
	mustContain(t, "/metrics", metrics, `ocifn_call_duration_seconds_bucket{outcome="ok",le="2.5"} 1`,
		`ocifn_call_duration_seconds_bucket{outcome="ok",le="5"} 2`, `function_duration_seconds_bucket{method="POST",le="2.5"} 1`)
	var longest time.Duration
	for _, m := range regexp.MustCompile(`msg=call .* duration=(\S+)`).FindAllStringSubmatch(f.stderr.String(), -1) {
		d, err := time.ParseDuration(m[1])
		if err != nil {
			t.Fatal(err)
		}
		longest = max(longest, d)
	}
	if longest < 3900*time.Millisecond {
		t.Errorf("the activation that waited for a slot took %s by its log line, want its wait for the first (about 2 s) counted too", longest)
	}
}

// TestOpenWhiskTimeoutIsTheActionsLimit: without --timeout, the OpenWhisk
// front allows OpenWhisk's longest action limit, 5 minutes, not the
// Crossplane front's 25 s, which would stop an action of the default 60 s
// limit early; each activation's deadline is what ends it sooner.
func TestOpenWhiskTimeoutIsTheActionsLimit(t *testing.T) {
	f := startOpenWhisk(t)
	mustContain(t, "the server's log", f.stderr.String(), "msg=serving", "timeout=5m0s")
	f.mustInit(t, initPayload("#!/bin/sh\nsleep 60\necho {}", "main"))
	// However late the request arrives, its limit is what is left of the
	// 2 s: some seconds or milliseconds, never --timeout's minutes.
	soon := time.Now().Add(2 * time.Second).UnixMilli()
	code, out := f.post(t, "/run", runPayload(map[string]any{"forever": 1}, map[string]any{"deadline": soon}))
	if code != http.StatusBadGateway || !regexp.MustCompile(`longer than the limit of ([12](\.\d+)?s|\d+ms)\b`).MatchString(out) {
		t.Errorf("activation past its deadline: %d %s, want it stopped at its deadline", code, out)
	}
}

// TestOpenWhiskRefusedAsyncActivationHasTheSentinels: an asynchronous
// activation refused before it runs (its body over --max-request-bytes)
// ends with the sentinels after its log line, as every answer to /run
// does.
func TestOpenWhiskRefusedAsyncActivationHasTheSentinels(t *testing.T) {
	f := startFront(t, "openwhisk", []string{"--tarball", image("owskeleton.tar"), "--max-request-bytes", "1024"})
	code, _, body := f.do(t, http.MethodPost, "/run", []byte(runPayload(strings.Repeat("x", 5000), nil)), http.Header{"Prefer": {"respond-async"}})
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("an asynchronous activation over --max-request-bytes: %d %s, want 413", code, body)
	}
	// In OpenWhisk's form, as every error of this front, which the
	// invoker reads as the activation's.
	var answer struct{ Error string }
	if err := json.Unmarshal(body, &answer); err != nil || !strings.Contains(answer.Error, "--max-request-bytes") {
		t.Errorf("the refused asynchronous activation's answer %q is not {\"error\": ...} naming --max-request-bytes: %v", body, err)
	}
	code, h, body := f.do(t, http.MethodGet, "/invocations/0123", nil, nil)
	if err := json.Unmarshal(body, &answer); code != http.StatusNotFound || err != nil || !strings.Contains(answer.Error, "no such invocation") || h.Get("Content-Type") != "application/json" {
		t.Errorf("a poll of an unknown invocation: %d %s %q, want 404 and {\"error\": ...} saying no such invocation (%v)", code, h.Get("Content-Type"), body, err)
	}
	f.checkStreams(t, 1)
	log := f.stderr.String()
	if line, end := strings.Index(log, "path=/run status=413"), strings.LastIndex(log, owSentinel); line < 0 || end < line {
		t.Errorf("stderr does not hold the activation's line, then the sentinel:\n%s", log)
	}
}

// TestOpenWhiskAnswerNotTakenLetsItsSlotGo: an invoker that stops reading
// a large answer holds its activation's slot no longer than the call's
// timeout, as on the HTTP front: the next activation runs, and the
// stalled one is logged as an error saying why, before its sentinel.
func TestOpenWhiskAnswerNotTakenLetsItsSlotGo(t *testing.T) {
	f := startFront(t, "openwhisk", []string{"--tarball", image("owskeleton.tar"), "--timeout", "2s", "--max-concurrency", "1"})
	f.mustInit(t, initPayload(`#!/bin/sh
case "$1" in *large*) ;; *) echo '{}'; exit ;; esac
printf '{"x": "'
head -c 20000000 /dev/zero | tr '\0' x
echo '"}'`, "main"))
	conn := nonReader(t, f.url)
	body := runPayload(map[string]any{"large": true}, map[string]any{"activation_id": "stalled"})
	if _, err := fmt.Fprintf(conn, "POST /run HTTP/1.1\r\nHost: action\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
		t.Fatal(err)
	}
	f.awaitMetric(t, "ocifn_calls_in_flight 1")
	next := make(chan answer, 1)
	go func() {
		code, out := f.post(t, "/run", runPayload(map[string]any{}, nil))
		next <- answer{code, out}
	}()
	select {
	case a := <-next:
		if a.code != http.StatusOK {
			t.Errorf("the next activation: %d %q, want 200", a.code, a.body)
		}
	case <-time.After(patient(15 * time.Second)):
		t.Fatalf("the next activation did not run within 15s of an invoker that does not read its answer:\n%s", f.stderr)
	}
	eventually(t, 5*time.Second, "the stalled activation's log line", func() bool {
		return strings.Contains(f.stderr.String(), "the caller did not take the function's answer")
	})
	f.checkStreams(t, 2)
	log := f.stderr.String()
	mustContain(t, "the server log", log, "tag=stalled", "outcome=error", "path=/run status=200",
		"the caller did not take the function's answer (200000", "within the call's timeout of 2s")
	// The line is the activation's: before its sentinel.
	if line := strings.Index(log, "tag=stalled"); line < 0 || !strings.Contains(log[line:], owSentinel) {
		t.Errorf("the stalled activation's line is not followed by its sentinel:\n%s", log)
	}
}
