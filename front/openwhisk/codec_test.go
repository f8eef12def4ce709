package openwhisk

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/ocifn/ocifn/front"
)

func TestArgs(t *testing.T) {
	base := []string{"/action/exec"}
	small := []byte(`{"a":1}`)
	if got := Args(base, small); !reflect.DeepEqual(got, []string{"/action/exec", `{"a":1}`}) {
		t.Errorf("small value: %q", got)
	}
	edge := []byte(strings.Repeat("a", front.MaxArgBytes))
	if got := Args(base, edge); len(got) != 2 {
		t.Errorf("a value of exactly %d bytes should be argv[1]", front.MaxArgBytes)
	}
	big := []byte(strings.Repeat("a", front.MaxArgBytes+1))
	if got := Args(base, big); !reflect.DeepEqual(got, base) {
		t.Errorf("a value over the argument limit should only be on stdin, got %d args", len(got))
	}
	if base[0] != "/action/exec" || len(base) != 1 {
		t.Error("Args changed its base")
	}
}

func TestEnvValue(t *testing.T) {
	for raw, want := range map[string]string{
		`"xyz"`:          "xyz",
		`""`:             "",
		`3`:              "3",
		`true`:           "true",
		`null`:           "",
		`["a", "b"]`:     `["a","b"]`,
		`{"a": "A"}`:     `{"a":"A"}`,
		`"snow ☃ man"`:   "snow ☃ man",
		`"line\nbreak"`:  "line\nbreak",
		` 12.5 `:         "12.5",
		`{"n": [1, {}]}`: `{"n":[1,{}]}`,
	} {
		if got := EnvValue(json.RawMessage(raw)); got != want {
			t.Errorf("EnvValue(%s) = %q, want %q", raw, got, want)
		}
	}
}

func TestInitEnv(t *testing.T) {
	got, err := InitEnv(map[string]json.RawMessage{"SOME_VAR": json.RawMessage(`"xyz"`), "ANOTHER_VAR": json.RawMessage(`""`), "NUMBER": json.RawMessage(`3`)})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ANOTHER_VAR=", "NUMBER=3", "SOME_VAR=xyz"}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	for _, bad := range []string{"", "A=B"} {
		if _, err := InitEnv(map[string]json.RawMessage{bad: json.RawMessage(`"x"`)}); err == nil {
			t.Errorf("name %q accepted", bad)
		}
	}
	if _, err := InitEnv(map[string]json.RawMessage{"X": json.RawMessage(`"a\u0000b"`)}); err == nil {
		t.Error("a NUL byte in a value accepted")
	}
}

func TestActivationEnv(t *testing.T) {
	msg := map[string]json.RawMessage{
		"value":          json.RawMessage(`{"x":1}`),
		"namespace":      json.RawMessage(`"zzz"`),
		"action_name":    json.RawMessage(`"xxx"`),
		"action_version": json.RawMessage(`"0.0.1"`),
		"activation_id":  json.RawMessage(`"iii"`),
		"transaction_id": json.RawMessage(`"ttt"`),
		"api_key":        json.RawMessage(`"abc"`),
		"deadline":       json.RawMessage(`123`),
	}
	want := []string{"__OW_ACTION_NAME=xxx", "__OW_ACTION_VERSION=0.0.1", "__OW_ACTIVATION_ID=iii", "__OW_API_HOST=https://whisk", "__OW_API_KEY=abc", "__OW_DEADLINE=123", "__OW_NAMESPACE=zzz", "__OW_TRANSACTION_ID=ttt"}
	if got, err := ActivationEnv(msg, "https://whisk"); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q, %v\nwant %q", got, err, want)
	}
	msg["api_host"] = json.RawMessage(`"xyz"`)
	got, err := ActivationEnv(msg, "https://whisk")
	if err != nil || !contains(got, "__OW_API_HOST=xyz") || contains(got, "__OW_API_HOST=https://whisk") {
		t.Errorf("api_host of the activation should win over the server's: %q, %v", got, err)
	}
	if got, err := ActivationEnv(map[string]json.RawMessage{}, ""); len(got) != 0 || err != nil {
		t.Errorf("empty message gave %q, %v", got, err)
	}
}

// TestActivationEnvRefused: a key or value no environment can carry is an
// error naming the key, not a variable silently left out; so is a
// variable longer than Linux passes in one (MAX_ARG_STRLEN), which would
// make execve fail with E2BIG.
func TestActivationEnvRefused(t *testing.T) {
	for _, tc := range []struct {
		msg      map[string]json.RawMessage
		key      string
		tooLarge bool
	}{
		{map[string]json.RawMessage{"": json.RawMessage(`"x"`)}, `""`, false},
		{map[string]json.RawMessage{"a=b": json.RawMessage(`"x"`)}, `"a=b"`, false},
		{map[string]json.RawMessage{"a\x00b": json.RawMessage(`"x"`)}, `"a\x00b"`, false},
		{map[string]json.RawMessage{"nul": json.RawMessage(`"a\u0000b"`)}, `"nul"`, false},
		{map[string]json.RawMessage{"namespace": json.RawMessage(`"a"`), "NameSpace": json.RawMessage(`"b"`)}, "__OW_NAMESPACE", false},
		{map[string]json.RawMessage{"big": json.RawMessage(`"` + strings.Repeat("x", 200<<10) + `"`)}, `"big"`, true},
		{map[string]json.RawMessage{"edge": json.RawMessage(`"` + strings.Repeat("x", front.MaxArgBytes-len("__OW_EDGE=")+1) + `"`)}, `"edge"`, true},
	} {
		_, err := ActivationEnv(tc.msg, "")
		var tooLarge *TooLargeError
		if err == nil || !strings.Contains(err.Error(), tc.key) || errors.As(err, &tooLarge) != tc.tooLarge {
			t.Errorf("%.60q: got %v, want an error naming %s (too large: %v)", tc.msg, err, tc.key, tc.tooLarge)
		}
	}
	edge := map[string]json.RawMessage{"edge": json.RawMessage(`"` + strings.Repeat("x", front.MaxArgBytes-len("__OW_EDGE=")) + `"`)}
	if _, err := ActivationEnv(edge, ""); err != nil {
		t.Errorf("a variable of exactly %d bytes: %v", front.MaxArgBytes, err)
	}
}

func TestExecLimit(t *testing.T) {
	for stack, want := range map[uint64]int{
		8 << 20:        2 << 20,
		256 << 10:      128 << 10, // never below ARG_MAX
		64 << 20:       6 << 20,   // never above 3/4 of _STK_LIM
		math.MaxUint64: 6 << 20,   // unlimited
	} {
		if got := ExecLimit(stack); got != want {
			t.Errorf("ExecLimit(%d) = %d, want %d", stack, got, want)
		}
	}
}

func TestCheckExecSize(t *testing.T) {
	origin := func(name string) string { return "from " + name }
	args := []string{"/action/exec", `{"a":1}`}
	var env []string
	for i := range 3000 {
		env = append(env, fmt.Sprintf("__OW_K%d=%s", i, strings.Repeat("v", 700)))
	}
	env = append(env, "__OW_HUGE="+strings.Repeat("h", 1000))
	err := CheckExecSize(args, env, 2<<20, origin)
	var tooLarge *TooLargeError
	if !errors.As(err, &tooLarge) || !strings.Contains(err.Error(), "__OW_HUGE") || !strings.Contains(err.Error(), "from __OW_HUGE") || !strings.Contains(err.Error(), "3001 variables") {
		t.Errorf("3001 variables of 700 bytes: %v, want a TooLargeError naming the largest", err)
	}
	if err := CheckExecSize(args, env[:2000], 2<<20, origin); err != nil {
		t.Errorf("2000 variables of 700 bytes, within 2 MiB: %v", err)
	}
	if err := CheckExecSize(args, env[:2000], 1<<20, origin); err == nil {
		t.Error("2000 variables of 700 bytes, over 1 MiB: no error")
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestParseOutput(t *testing.T) {
	for _, tc := range []struct {
		name, stdout, logs, result string
		ok                         bool
	}{
		{"object_alone", `{"a":1}`, "", `{"a":1}`, true},
		{"object_with_newline", "{\"a\":1}\n", "", `{"a":1}`, true},
		{"logs_then_object", "hello stdout\n{\"a\":1}\n", "hello stdout\n", `{"a":1}`, true},
		{"array", "[\"a\", \"b\"]\n", "", `["a", "b"]`, true},
		{"not_json", "not a json object\n", "", "not a json object", false},
		{"number", "42\n", "", "42", false},
		{"string", "\"s\"\n", "", `"s"`, false},
		{"empty", "", "", "", false},
		{"only_newlines", "\n\n", "\n", "", false},
		{"object_not_last", "{\"a\":1}\ntrailing\n", "{\"a\":1}\n", "trailing", false},
		{"unicode", "❄ ☃ ❄\n{\"winter\":\"❄ ☃ ❄\"}\n", "❄ ☃ ❄\n", `{"winter":"❄ ☃ ❄"}`, true},
		{"broken_object", "{\"a\":\n", "", `{"a":`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := ParseOutput([]byte(tc.stdout))
			if string(o.Logs) != tc.logs || string(o.Result) != tc.result || o.OK != tc.ok {
				t.Errorf("got logs %q result %q ok %v, want %q %q %v", o.Logs, o.Result, o.OK, tc.logs, tc.result, tc.ok)
			}
		})
	}
}

func TestFrame(t *testing.T) {
	for in, want := range map[string]string{
		"":          Sentinel + "\n",
		"a\n":       "a\n" + Sentinel + "\n",
		"no ending": "no ending\n" + Sentinel + "\n",
	} {
		if got := string(Frame([]byte(in))); got != want {
			t.Errorf("Frame(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestInitEnvTooLong(t *testing.T) {
	long := json.RawMessage(`"` + strings.Repeat("x", front.MaxArgBytes) + `"`)
	if _, err := InitEnv(map[string]json.RawMessage{"LONG": long}); err == nil || !strings.Contains(err.Error(), "value.env.LONG") {
		t.Errorf("a variable over MAX_ARG_STRLEN: %v, want an error naming it", err)
	}
}
