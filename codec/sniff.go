package codec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"
)

// kinds describes each mode's output for a mismatch message.
var kinds = map[string]string{
	"json":       "a RunFunctionResponse in JSON",
	"functionio": "a FunctionIO document (Crossplane 1.13 xfn)",
	"krm":        "a KRM ResourceList",
}

// Sniff guesses which I/O mode's output out is: "json" for a
// RunFunctionResponse, "functionio" for an xfn FunctionIO document, "krm"
// for a ResourceList; "" when it cannot tell. It is for error messages
// only: a function that prints another mode's answer was most likely run
// in the wrong mode.
func Sniff(out []byte) string {
	out = bytes.TrimSpace(out)
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
	if out[0] != '{' {
		// YAML with a state in it: FunctionIO's top-level keys.
		for _, k := range []string{"desired", "observed", "config"} {
			if _, ok := top[k]; ok {
				return "functionio"
			}
		}
		return ""
	}
	if len(top) > 0 && protojson.Unmarshal(out, &fnv1.RunFunctionResponse{}) == nil {
		return "json"
	}
	return ""
}

// Mismatch says, when out looks like another mode's output than mode's,
// which mode the function most likely needs; "" when it does not.
func Mismatch(mode string, out []byte) string {
	likely := Sniff(out)
	if likely == "" || likely == mode {
		return ""
	}
	return fmt.Sprintf("the output looks like %s, not %s: the function was probably written for the %q I/O mode; run it with --io %s (or build its package with ocifn build --io %s)",
		kinds[likely], kinds[mode], likely, likely, likely)
}
