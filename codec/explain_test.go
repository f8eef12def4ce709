package codec

import (
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/encoding/protojson"
)

func TestExplainResponse(t *testing.T) {
	cases := []struct {
		name string
		out  string
		want []string // substrings of the explanation, in order
	}{
		{"snake_case_name_suggests_the_field", `{"desired_state": {}}`,
			[]string{`unknown field "desired_state" at $.desired_state`, `did you mean "desired"?`}},
		{"misspelt_name_suggests_the_field", `{"desried": {}}`,
			[]string{`unknown field "desried" at $.desried`, `did you mean "desired"?`}},
		{"state_at_the_top_level", `{"resources": {"a": {"resource": {}}}, "composite": {"resource": {}}}`,
			[]string{`unknown field "composite" at $.composite`, `looks like a State`, `"composite" and "resources"`, `under "desired"`}},
		{"request_printed_back", `{"desired": {}, "observed": {}, "input": {}}`,
			[]string{`unknown field "observed" at $.observed`, `looks like the RunFunctionRequest`}},
		{"composed_resource_without_wrapper", `{"desired": {"resources": {"bucket": {"apiVersion": "s3/v1", "kind": "Bucket"}}}}`,
			[]string{`unknown field "apiVersion" at $.desired.resources.bucket.apiVersion`, `without its wrapper`, `{"resource": {`}},
		{"resources_as_a_list", `{"desired": {"resources": [{"resource": {}}]}}`,
			[]string{`$.desired.resources is an array; want an object keyed by composition resource name`}},
		{"nested_unknown_field_has_its_path", `{"results": [{"severity": "SEVERITY_NORMAL"}, {"severity": "SEVERITY_NORMAL", "msg": "x"}]}`,
			[]string{`unknown field "msg" at $.results[1].msg`, `did you mean "message"?`}},
		{"enum_without_prefix", `{"results": [{"severity": "Normal", "message": "x"}]}`,
			[]string{`$.results[0].severity is "Normal", which is not a Severity`, `SEVERITY_FATAL`, `did you mean "SEVERITY_NORMAL"?`}},
		{"ready_as_boolean", `{"desired": {"resources": {"a": {"resource": {}, "ready": true}}}}`,
			[]string{`$.desired.resources.a.ready is the boolean true`, `want the name of a Ready value as a string`, `READY_UNSPECIFIED, READY_TRUE, READY_FALSE`, `did you mean "READY_TRUE"?`}},
		// What YAML's False, no or off are, written where a person means READY_FALSE.
		{"ready_as_boolean_false", `{"desired": {"resources": {"a": {"resource": {}, "ready": false}}}}`,
			[]string{`$.desired.resources.a.ready is the boolean false`, `READY_UNSPECIFIED, READY_TRUE, READY_FALSE`, `did you mean "READY_FALSE"?`}},
		{"severity_as_a_number_no_value_has", `{"results": [{"severity": 1.5, "message": "x"}]}`,
			[]string{`$.results[0].severity is the number 1.5`, `SEVERITY_UNSPECIFIED, SEVERITY_FATAL, SEVERITY_WARNING, SEVERITY_NORMAL`}},
		{"resource_not_an_object", `{"desired": {"composite": {"resource": "x"}}}`,
			[]string{`$.desired.composite.resource is the string "x"; want a JSON object`}},
		{"top_level_array", `[{"desired": {}}]`,
			[]string{`the output is an array; a RunFunctionResponse is a JSON object`}},
		{"several_values", `{"desired": {}} {"desired": {}}`,
			[]string{`more than one JSON value`}},
		// Not a second value: what a script echoed after its answer.
		{"what_is_not_json_after_the_value", "{\"desired\": {}}\nProcessing done\n",
			[]string{`after the JSON value the output goes on with what is not JSON, "Processing done\n" at line 2, column 1`, `stderr`}},
		{"nul_after_the_value", "{\"desired\": {}}\x00",
			[]string{`what is not JSON, "\x00" at line 1, column 16`}},
		{"nested_past_what_decoders_read", strings.Repeat("[", 100000) + strings.Repeat("]", 100000),
			[]string{`the output nests more than 10000 levels deep`, `at line 1, column 10001`}},
		{"syntax_error_has_a_position", "{\n  \"desired\": {,}\n}",
			[]string{`not valid JSON`, `line 2, column`}},
		{"truncated", `{"desired": {`,
			[]string{`ends before the JSON value is complete`}},
		{"connection_details_not_base64", `{"desired": {"composite": {"resource": {}, "connectionDetails": {"password": "not base64!"}}}}`,
			[]string{`$.desired.composite.connectionDetails.password is not base64`}},
		// What JavaScript's JSON.stringify prints for a string cut in the
		// middle of an emoji, and Python's json.dumps for text decoded
		// with surrogateescape: encoding/json reads it as U+FFFD, and
		// protojson's error was "unexpected EOF" near the end of the
		// output, "invalid escape code" of the bytes after it elsewhere.
		{"lone_high_surrogate_at_the_end", `{"results": [{"message": "a\ud83d"}]}`,
			[]string{`the escape \ud83d at line 1, column 28 is half of a UTF-16 surrogate pair`, `valid Unicode`}},
		{"lone_low_surrogate_in_the_middle", "{\n \"results\": [{\"severity\": \"SEVERITY_NORMAL\",\n  \"message\": \"a\\udcffbcdefgh\"}]}",
			[]string{`the escape \udcff at line 3, column 16 is half of a UTF-16 surrogate pair`}},
		{"high_surrogate_then_another_escape", `{"results": [{"message": "\ud83d\u0041"}]}`,
			[]string{`the escape \ud83d at line 1, column 27`}},
		{"unknown_field_lists_the_fields", `{"zzz": 1}`,
			[]string{`unknown field "zzz" at $.zzz`, `RunFunctionResponse has the fields "meta", "desired"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Every case is also invalid for protojson: the explanation
			// is only asked for then.
			if err := protojson.Unmarshal([]byte(c.out), &fnv1.RunFunctionResponse{}); err == nil {
				t.Fatalf("protojson accepts %s", c.out)
			}
			got := explainResponse([]byte(c.out))
			rest := got
			for _, w := range c.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("explanation lacks %q (in order):\n%s", w, got)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

// TestExplainResponseAcceptsValidResponses: the walk must not flag what
// protojson accepts, or authors would chase phantom errors.
func TestExplainResponseAcceptsValidResponses(t *testing.T) {
	for _, out := range []string{
		`{}`,
		`{"desired": null}`,
		`{"meta": {"tag": "t", "ttl": "60s"}, "desired": {"composite": {"resource": {"a": [1, {"b": null}]}, "ready": "READY_TRUE"}, "resources": {}}}`,
		`{"desired": {"resources": {"a": {"resource": {}, "connection_details": {"k": "dmFsdWU="}, "ready": 1}}}}`,
		`{"results": [{"severity": "SEVERITY_WARNING", "message": "m", "target": "TARGET_COMPOSITE_AND_CLAIM"}], "context": {"x": 1}}`,
		`{"conditions": [{"type": "Synced", "status": "STATUS_CONDITION_TRUE", "reason": "R"}]}`,
		`{"requirements": {"extraResources": {"e": {"apiVersion": "v1", "kind": "ConfigMap", "matchName": "n"}}}}`,
		// A surrogate pair is one character; an escaped backslash
		// before "ud83d" is text, not an escape.
		`{"results": [{"message": "\ud83d\ude00 \\ud83d \\\u00e9"}]}`,
	} {
		if err := protojson.Unmarshal([]byte(out), &fnv1.RunFunctionResponse{}); err != nil {
			t.Fatalf("test case is not valid for protojson: %v\n%s", err, out)
		}
		if got := explainResponse([]byte(out)); got != "" {
			t.Errorf("valid response %s explained as an error: %s", out, got)
		}
	}
}

func TestDecodeResponseExplains(t *testing.T) {
	_, err := JSON{}.Decode(nil, []byte(`{"desired_state": {}}`))
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range []string{"not a valid RunFunctionResponse", `unknown field "desired_state" at $.desired_state; did you mean "desired"?`, `output began with`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q: %v", w, err)
		}
	}
}
