package codec

import (
	"strings"
	"testing"
)

func TestSniff(t *testing.T) {
	cases := []struct {
		name, out, want string
	}{
		{"json_response", `{"desired": {"resources": {}}, "results": []}`, "json"},
		{"json_resource_list", `{"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList", "items": []}`, "krm"},
		{"yaml_resource_list", "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n", "krm"},
		{"yaml_items_without_kind", "items:\n- kind: ConfigMap\n", "krm"},
		{"yaml_function_io_with_kind", "apiVersion: apiextensions.crossplane.io/v1alpha1\nkind: FunctionIO\ndesired:\n  composite: {}\n", "functionio"},
		{"yaml_function_io_without_kind", "---\n# from xfn\nconfig: {}\nobserved:\n  composite:\n    resource: {}\ndesired: {}\n", "functionio"},
		{"json_function_io", `{"kind": "FunctionIO", "desired": {}}`, "functionio"},
		{"plain_text", "hello world\n", ""},
		{"other_yaml_object", "apiVersion: v1\nkind: ConfigMap\n", ""},
		{"invalid_json", `{"desired": `, ""},
		{"json_array", `[{"desired": {}}]`, ""},
		{"empty", "  \n", ""},
		{"json_with_unknown_field", `{"desired_state": {}}`, ""},
		{"yaml_response", "desired:\n  resources:\n    a:\n      resource: {kind: A}\nresults:\n- severity: SEVERITY_NORMAL\n  message: m\n", "json"},
		{"yaml_function_io_resource_list", "desired:\n  resources:\n  - name: a\n    resource: {kind: A}\nresults:\n- severity: Normal\n  message: m\n", "functionio"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Sniff([]byte(tc.out)); got != tc.want {
				t.Errorf("Sniff = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMismatch(t *testing.T) {
	cases := []struct {
		name, mode, out string
		want            []string // substrings; none means no mismatch
	}{
		{"resource_list_in_json_mode", "json", "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n",
			[]string{"a KRM ResourceList", "not a RunFunctionResponse", "--io krm"}},
		{"function_io_in_json_mode", "json", "desired:\n  composite: {}\n  resources:\n  - name: a\n    resource: {}\nresults: []\n",
			[]string{"a FunctionIO document", "--io functionio"}},
		{"response_in_krm_mode", "krm", `{"desired": {}, "results": [{"severity": "SEVERITY_NORMAL", "message": "m"}]}`,
			[]string{"a RunFunctionResponse", "not a KRM ResourceList", "--io json"}},
		{"yaml_response_in_json_mode", "json", "desired: {}\nresults: []\n",
			[]string{"a RunFunctionResponse in YAML", "print it as JSON", "-o=json"}},
		{"same_mode", "krm", "kind: ResourceList\n", nil},
		{"unknown_output", "json", "oops", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Mismatch(tc.mode, []byte(tc.out))
			if len(tc.want) == 0 && got != "" {
				t.Fatalf("Mismatch = %q, want none", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("Mismatch = %q, lacks %q", got, w)
				}
			}
		})
	}
}
