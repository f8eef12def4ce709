package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"
)

// kinds describes each mode's output for a mismatch message.
var kinds = map[string]string{
	"json":       "a RunFunctionResponse",
	"functionio": "a FunctionIO document (Crossplane 1.13 xfn)",
	"krm":        "a KRM ResourceList",
}

// Sniff guesses which I/O mode's output out is: "json" for a
// RunFunctionResponse, "functionio" for an xfn FunctionIO document, "krm"
// for a ResourceList; "" when it cannot tell. It is for error messages
// only: a function that prints another mode's answer was most likely run
// in the wrong mode.
func Sniff(out []byte) string {
	out = bytes.TrimSpace(trimBOM(out))
	if len(out) == 0 {
		return ""
	}
	var top map[string]any
	if out[0] == '{' {
		if err := json.Unmarshal(out, &top); err != nil {
			return ""
		}
	} else {
		// Not JSON: only the YAML modes print anything else. A leading
		// document separator or comment is YAML too.
		if err := yaml.Unmarshal(out, &top); err != nil || top == nil {
			return ""
		}
	}
	kind, _ := top["kind"].(string)
	apiVersion, _ := top["apiVersion"].(string)
	switch {
	case kind == "ResourceList" || strings.HasPrefix(apiVersion, "config.kubernetes.io/"):
		return "krm"
	case kind == "FunctionIO" || strings.HasPrefix(apiVersion, "apiextensions.crossplane.io/v1alpha1"):
		return "functionio"
	}
	if _, ok := top["items"].([]any); ok && out[0] != '{' {
		return "krm"
	}
	if len(top) > 0 && isResponse(top) {
		// In YAML too: a json-mode function that forgot to print JSON
		// (yq without -o json) is not in the wrong mode.
		return "json"
	}
	if out[0] != '{' {
		// YAML with a state in it: FunctionIO's top-level keys.
		for _, k := range []string{"desired", "observed", "config"} {
			if _, ok := top[k]; ok {
				return "functionio"
			}
		}
	}
	return ""
}

// isResponse reports whether a decoded JSON or YAML object is a valid
// RunFunctionResponse.
func isResponse(top map[string]any) bool {
	b, err := json.Marshal(top)
	return err == nil && protojson.Unmarshal(b, &fnv1.RunFunctionResponse{}) == nil
}

// Mismatch says, when out looks like another mode's output than mode's,
// which mode the function most likely needs; "" when it does not.
func Mismatch(mode string, out []byte) string {
	likely := Sniff(out)
	if likely == "json" && mode == "json" && !isJSON(out) {
		return "the output is a RunFunctionResponse in YAML, and the json I/O mode reads JSON: print it as JSON (with yq: -o=json)"
	}
	if likely == "" || likely == mode {
		return ""
	}
	return fmt.Sprintf("the output looks like %s, not %s: the function was probably written for the %q I/O mode; run it with --io %s (or build its package with ocifn build --io %s)",
		kinds[likely], kinds[mode], likely, likely, likely)
}

// isJSON reports whether out starts as a JSON object does.
func isJSON(out []byte) bool {
	out = bytes.TrimSpace(trimBOM(out))
	return len(out) > 0 && out[0] == '{'
}

// trimBOM drops a UTF-8 byte order mark that begins out. Some runtimes
// (PowerShell, .NET) print one before their output; RFC 8259 lets a JSON
// reader ignore it, and the YAML decoder does: it says nothing of the
// answer, which is not YAML for having one.
func trimBOM(out []byte) []byte { return bytes.TrimPrefix(out, []byte("\uFEFF")) }

// withResults adds to err, about a part of the function's answer that
// cannot be read, the results that could, which what names ("results",
// "other results"): the answer is refused, but a failure the function
// reported is not lost behind the unreadable part.
func withResults(err error, what string, rs []*fnv1.Result) error {
	if len(rs) == 0 {
		return err
	}
	var b strings.Builder
	for i, r := range rs {
		if b.Len() >= resultsBytes {
			fmt.Fprintf(&b, "; and %d more", len(rs)-i)
			break
		}
		sev := strings.ToLower(strings.TrimPrefix(r.GetSeverity().String(), "SEVERITY_"))
		fmt.Fprintf(&b, "; %s: %s", sev, clip(r.GetMessage(), resultsBytes-b.Len()))
	}
	return &refusal{reason: err, results: fmt.Sprintf(" (the function's %s%s)", what, b.String())}
}

// resultsBytes bounds the results a refusal quotes. They are the function's
// own words, and an answer that was not refused would carry them whole; but
// that answer is checked against the largest response a caller takes, the
// refusal's Fatal message is not: YAML aliases made 80 MB of results out of
// 128 KB of output, more than gRPC may send.
const resultsBytes = 64 << 10

// refusal is why a function's answer is refused, followed by the results
// it reported (see withResults): bounded tells the one from the other.
type refusal struct {
	reason  error
	results string
}

func (r *refusal) Error() string { return r.reason.Error() + r.results }
func (r *refusal) Unwrap() error { return r.reason }

// refusalBytes bounds why a YAML mode refuses an answer: well above any
// reason it writes (a QuoteHead, a hint, a path), but a reason quotes the
// function's own strings (an apiVersion, a severity, a resource's name, a
// field path, a key), each of any length and, quoted, up to three times as
// long: a function printing 6 KB had an 18 KB reason, and one printing
// tens of megabytes could have had an answer larger than a response may be.
const refusalBytes = 4000

// bounded clips the reason of err, a YAML mode's refusal of an answer, to
// refusalBytes. The results a refusal carries are bounded apart (see
// resultsBytes), so that a long reason does not cut them off.
func bounded(err error) error {
	var r *refusal
	if errors.As(err, &r) {
		if len(r.reason.Error()) <= refusalBytes {
			return err
		}
		return &refusal{reason: errors.New(clip(r.reason.Error(), refusalBytes)), results: r.results}
	}
	if err == nil || len(err.Error()) <= refusalBytes {
		return err
	}
	return errors.New(clip(err.Error(), refusalBytes))
}
