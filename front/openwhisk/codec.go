package openwhisk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/ocifn/ocifn/front"
)

// Sentinel ends the logs of every activation on stdout and stderr, so that
// OpenWhisk's invoker knows where an activation's logs stop.
const Sentinel = "XXX_THE_END_OF_A_WHISK_ACTIVATION_XXX"

// Args returns the process arguments of an activation: base, then value as
// JSON when it fits in one argument (front.MaxArgBytes); a larger value is
// only on stdin, as OpenWhisk's Docker skeleton does.
func Args(base []string, value []byte) []string {
	args := append([]string(nil), base...)
	if len(value) <= front.MaxArgBytes {
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
		if n := len(k) + 1 + len(val); n > front.MaxArgBytes {
			return nil, fmt.Errorf("value.env.%s would be an environment variable of %d bytes, more than the %d bytes Linux passes in one (MAX_ARG_STRLEN)", k, n, front.MaxArgBytes)
		}
		out = append(out, k+"="+val)
	}
	sort.Strings(out)
	return out, nil
}

// ActivationEnv returns the activation context as environment variables:
// every key of msg but value becomes __OW_<KEY>, upper-cased, its value as
// EnvValue renders it. __OW_API_HOST is apiHost unless msg sets api_host.
// A key no variable can be named after (empty, holding = or NUL), two keys
// that name the same variable (a and A), a value holding NUL and a
// variable longer than Linux passes to a program (MAX_ARG_STRLEN) are
// errors naming the key: no environment can carry them, and an activation
// that runs without part of its context, or not at all, must not look like
// the action's doing.
func ActivationEnv(msg map[string]json.RawMessage, apiHost string) ([]string, error) {
	var out []string
	if _, ok := msg["api_host"]; !ok && apiHost != "" {
		out = append(out, "__OW_API_HOST="+apiHost)
	}
	keys := make([]string, 0, len(msg))
	for k := range msg {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	names := map[string]string{}
	for _, k := range keys {
		if k == "value" {
			continue
		}
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("the activation's key %q cannot name an environment variable (__OW_<KEY>): it is empty or holds = or NUL", k)
		}
		name := "__OW_" + strings.ToUpper(k)
		if other, ok := names[name]; ok {
			return nil, fmt.Errorf("the activation's keys %q and %q would both be the environment variable %s", other, k, name)
		}
		names[name] = k
		val := EnvValue(msg[k])
		if strings.Contains(val, "\x00") {
			return nil, fmt.Errorf("the activation's key %q holds a NUL byte, which no environment variable can carry", k)
		}
		v := name + "=" + val
		if len(v) > front.MaxArgBytes {
			return nil, &TooLargeError{fmt.Sprintf("the activation's key %q would be the environment variable %s of %d bytes, more than the %d bytes Linux passes in one (MAX_ARG_STRLEN); large data belongs in value, which goes on stdin", k, name, len(v), front.MaxArgBytes)}
		}
		out = append(out, v)
	}
	sort.Strings(out)
	return out, nil
}

// TooLargeError is an activation whose process Linux would refuse to run
// (execve fails with E2BIG): the request asks for more than a program can
// be given.
type TooLargeError struct{ Msg string }

func (e *TooLargeError) Error() string { return e.Msg }

// Exec limits of Linux (fs/exec.c): the strings of argv and envp and a
// pointer to each may take a quarter of the stack rlimit, at most
// maxStackArgs (3/4 of _STK_LIM) and at least minStackArgs (ARG_MAX).
const (
	maxStackArgs = 6 << 20
	minStackArgs = 128 << 10
	// imageEnvReserve is kept out of the limit for what ocifn does not
	// see here: the image's own environment, merged in by the runner,
	// and the interpreter a #! line adds.
	imageEnvReserve = 32 << 10
)

// ExecLimit returns the bytes of arguments and environment, their
// pointers included, a program started with the given stack rlimit (its
// soft limit, inherited by the container) may be given.
func ExecLimit(stackRlimit uint64) int {
	limit := uint64(maxStackArgs)
	if q := stackRlimit / 4; q < limit {
		limit = q
	}
	return int(max(limit, minStackArgs))
}

// CheckExecSize returns a TooLargeError when args and env, with the
// image's environment reserve, take more than limit (ExecLimit), naming
// the largest variable and, from origin, where it comes from.
func CheckExecSize(args, env []string, limit int, origin func(name string) string) error {
	const ptr = strconv.IntSize / 8
	argBytes, envBytes := 0, 0
	for _, a := range args {
		argBytes += len(a) + 1 + ptr
	}
	if len(args) > 0 {
		// execve copies the file name onto the new stack too.
		argBytes += len(args[0]) + 1
	}
	largest := ""
	for _, e := range env {
		envBytes += len(e) + 1 + ptr
		if len(e) > len(largest) {
			largest = e
		}
	}
	budget := limit - imageEnvReserve
	if argBytes+envBytes <= budget {
		return nil
	}
	msg := fmt.Sprintf("the activation's process would get %d bytes of arguments and %d of environment (%d variables), more than Linux passes to a program here: %d bytes (a quarter of the stack rlimit, from 128 KiB to 6 MiB) less %d kept for the image's own environment",
		argBytes, envBytes, len(env), limit, imageEnvReserve)
	if largest != "" {
		name, _, _ := strings.Cut(largest, "=")
		msg += fmt.Sprintf("; the largest variable is %s, %d bytes", name, len(largest))
		if o := origin(name); o != "" {
			msg += ", " + o
		}
	}
	return &TooLargeError{msg + "; large data belongs in value, which goes on stdin"}
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
