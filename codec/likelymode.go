package codec

import (
	"bytes"
	"strings"

	"sigs.k8s.io/yaml"
)

// LikelyMode guesses which I/O mode a function's output was written for:
// "json" for a RunFunctionResponse, "functionio" for a FunctionIO document,
// "krm" for a ResourceList, "" when it cannot tell. Codecs use it to name
// the likely mode when an image was served with the wrong --io.
func LikelyMode(out []byte) string {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return ""
	}
	var doc map[string]any
	// YAML is a superset of JSON: one parser reads all three modes.
	if err := yaml.Unmarshal(out, &doc); err != nil || doc == nil {
		return ""
	}
	if kind, _ := doc["kind"].(string); kind == "ResourceList" {
		return "krm"
	}
	if kind, _ := doc["kind"].(string); kind == "FunctionIO" {
		return "functionio"
	}
	if av, _ := doc["apiVersion"].(string); strings.HasPrefix(av, "config.kubernetes.io/") {
		return "krm"
	}
	if _, ok := doc["functionConfig"]; ok {
		return "krm"
	}
	if _, ok := doc["items"].([]any); ok {
		return "krm"
	}
	for _, state := range []string{"desired", "observed"} {
		s, _ := doc[state].(map[string]any)
		if s == nil {
			continue
		}
		switch s["resources"].(type) {
		case []any:
			return "functionio"
		case map[string]any:
			return "json"
		}
		if c, _ := s["composite"].(map[string]any); c != nil {
			if _, ok := c["resource"]; ok {
				// Both modes wrap the XR in "resource"; JSON output
				// is a JSON object, FunctionIO output is YAML.
				if out[0] == '{' {
					return "json"
				}
				return "functionio"
			}
		}
	}
	if _, ok := doc["meta"]; ok {
		return "json"
	}
	if _, ok := doc["config"]; ok {
		return "functionio"
	}
	return ""
}

// modeHint is the end of a decode error when the output looks like another
// mode's: which --io the image was likely written for.
func modeHint(out []byte, self string) string {
	m := LikelyMode(out)
	if m == "" || m == self {
		return ""
	}
	return "; it looks like " + modeDoc[m] + ": was the image written for --io " + m + "?"
}

// modeDoc names what each mode prints.
var modeDoc = map[string]string{
	"json":       "a RunFunctionResponse (the json I/O mode)",
	"functionio": "a FunctionIO document (the functionio I/O mode, Crossplane 1.13's xfn)",
	"krm":        "a KRM ResourceList (the krm I/O mode)",
}
