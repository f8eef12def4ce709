package openwhisk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// maxArgBytes is the longest argument Linux passes to a program
// (MAX_ARG_STRLEN, 32 pages, less its terminating NUL). A larger value is
// only on stdin, as OpenWhisk's Docker skeleton does.
const maxArgBytes = 131071

// Sentinel ends the logs of every activation on stdout and stderr, so that
// OpenWhisk's invoker knows where an activation's logs stop.
const Sentinel = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX"

// Args returns the process arguments of an activation: base, then value as
// JSON when it fits in one argument.
func Args(base []string, value []byte) []string {
	args := append([]string(nil), base...)
	if len(value) <= maxArgBytes {
		args = append(args, string(value))
	}
	return args
}

// EnvValue renders a JSON value the way OpenWhisk exports it to the
// environment: a string as it is, null as the empty string, anything else
// as its JSON text.
func EnvValue(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			return s
		}
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// InitEnv returns the environment an init's value.env adds to every
// activation, sorted by name. A name that cannot be an environment variable
// is an error.
func InitEnv(env map[string]json.RawMessage) ([]string, error) {
	out := make([]string, 0, len(env))
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("value.env: %q is not a valid environment variable name", k)
		}
		val := EnvValue(v)
		if strings.Contains(val, "\x00") {
			return nil, fmt.Errorf("value.env.%s holds a NUL byte", k)
		}
		out = append(out, k+"="+val)
	}
	sort.Strings(out)
	return out, nil
}

// ActivationEnv returns the activation context as environment variables:
// every key of msg but value becomes __OW_<KEY>. __OW_API_HOST is apiHost
// unless msg sets api_host. Values holding NUL bytes are dropped: no
// environment can carry them.
func ActivationEnv(msg map[string]json.RawMessage, apiHost string) []string {
	var out []string
	if _, ok := msg["api_host"]; !ok && apiHost != "" {
		out = append(out, "__OW_API_HOST="+apiHost)
	}
	for k, v := range msg {
		if k == "value" || k == "" || strings.ContainsAny(k, "=\x00") {
			continue
		}
		val := EnvValue(v)
		if strings.Contains(val, "\x00") {
			continue
		}
		out = append(out, "__OW_"+strings.ToUpper(k)+"="+val)
	}
	sort.Strings(out)
	return out
}

// Outcome is what an activation's stdout says.
type Outcome struct {
	// Logs is stdout before the result line, each line ending in "\n".
	Logs []byte
	// Result is the last line: a JSON object or array when OK.
	Result []byte
	// OK reports whether Result is a JSON object or array.
	OK bool
}

// ParseOutput splits an activation's stdout into its logs and its result,
// the last line (a final newline does not start a new, empty line).
func ParseOutput(stdout []byte) Outcome {
	body := stdout
	if n := len(body); n > 0 && body[n-1] == '\n' {
		body = body[:n-1]
	}
	var o Outcome
	if i := bytes.LastIndexByte(body, '\n'); i >= 0 {
		o.Logs = stdout[:i+1]
		o.Result = bytes.TrimSpace(body[i+1:])
	} else {
		o.Result = bytes.TrimSpace(body)
	}
	o.OK = isObjectOrArray(o.Result)
	return o
}

// isObjectOrArray reports whether b is one JSON object or array.
func isObjectOrArray(b []byte) bool {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || (b[0] != '{' && b[0] != '[') {
		return false
	}
	return json.Valid(b)
}

// Frame returns logs followed by the sentinel line, the whole block an
// activation writes on one of ocifn's streams.
func Frame(logs []byte) []byte {
	out := make([]byte, 0, len(logs)+len(Sentinel)+2)
	out = append(out, logs...)
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(append(out, Sentinel...), '\n')
}
