package openwhisk

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestArgs(t *testing.T) {
	base := []string{"/action/exec"}
	small := []byte(`{"a":1}`)
	if got := Args(base, small); !reflect.DeepEqual(got, []string{"/action/exec", `{"a":1}`}) {
		t.Errorf("small value: %q", got)
	}
	edge := []byte(strings.Repeat("a", maxArgBytes))
	if got := Args(base, edge); len(got) != 2 {
		t.Errorf("a value of exactly %d bytes should be argv[1]", maxArgBytes)
	}
	big := []byte(strings.Repeat("a", maxArgBytes+1))
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
	if got := ActivationEnv(msg, "https://whisk"); !reflect.DeepEqual(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	msg["api_host"] = json.RawMessage(`"xyz"`)
	got := ActivationEnv(msg, "https://whisk")
	if !contains(got, "__OW_API_HOST=xyz") || contains(got, "__OW_API_HOST=https://whisk") {
		t.Errorf("api_host of the activation should win over the server's: %q", got)
	}
	if got := ActivationEnv(map[string]json.RawMessage{}, ""); len(got) != 0 {
		t.Errorf("empty message gave %q", got)
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
