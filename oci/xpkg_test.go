package oci

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

const testFunction = `apiVersion: meta.pkg.crossplane.io/v1
kind: Function
metadata:
  name: function-labels
  annotations:
    meta.crossplane.io/maintainer: Platform Team
spec:
  crossplane:
    version: ">=v1.17.0"
  dependsOn:
  - provider: xpkg.upbound.io/upbound/provider-aws-s3
    version: ">=v1.0.0"
`

const testCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: inputs.labels.fn.example.org
spec:
  group: labels.fn.example.org
`

func TestParsePackageMeta(t *testing.T) {
	cases := map[string]struct {
		yaml     string
		wantErr  []string // substrings of the error; nil: valid
		wantName string
		wantCRDs int
	}{
		"function_alone": {yaml: testFunction, wantName: "function-labels"},
		"function_v1beta1": {
			yaml:     strings.Replace(testFunction, "meta.pkg.crossplane.io/v1", "meta.pkg.crossplane.io/v1beta1", 1),
			wantName: "function-labels",
		},
		"function_and_crds": {
			yaml:     "---\n" + testFunction + "---\n" + testCRD + "---\n" + strings.Replace(testCRD, "inputs.", "others.", 1),
			wantName: "function-labels", wantCRDs: 2,
		},
		"empty_and_comment_documents_are_ignored": {
			yaml:     "# package\n---\n---\n# nothing\n---\n" + testFunction + "---\n",
			wantName: "function-labels",
		},
		"two_functions": {
			yaml:    testFunction + "---\n" + strings.Replace(testFunction, "function-labels", "function-other", 1),
			wantErr: []string{"document 2 (Function function-other", "exactly one Function", "document 1 is one already"},
		},
		"deployment_in_the_stream": {
			yaml:    testFunction + "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n",
			wantErr: []string{"document 2 (Deployment web, apps/v1) cannot be in a Function package"},
		},
		"provider_metadata": {
			yaml:    "apiVersion: meta.pkg.crossplane.io/v1\nkind: Provider\nmetadata:\n  name: provider-x\n",
			wantErr: []string{"document 1 (Provider provider-x", "cannot be in a Function package"},
		},
		"no_function": {
			yaml:    testCRD,
			wantErr: []string{"no Function object", "1 documents"},
		},
		"empty": {
			yaml:    "",
			wantErr: []string{"no Function object"},
		},
		"bad_yaml": {
			yaml:    testFunction + "---\nkind: [unclosed\n",
			wantErr: []string{"document 2 is not a valid YAML object"},
		},
		"not_an_object": {
			yaml:    "- a\n- b\n",
			wantErr: []string{"document 1 is not a valid YAML object"},
		},
		"no_kind": {
			yaml:    testFunction + "---\nmetadata:\n  name: x\n",
			wantErr: []string{"document 2 has no apiVersion or kind"},
		},
		"unsupported_function_version": {
			yaml:    strings.Replace(testFunction, "meta.pkg.crossplane.io/v1", "meta.pkg.crossplane.io/v1alpha1", 1),
			wantErr: []string{"document 1 (Function function-labels, meta.pkg.crossplane.io/v1alpha1)", "not supported"},
		},
		"function_without_name": {
			yaml:    "apiVersion: meta.pkg.crossplane.io/v1\nkind: Function\nmetadata: {}\n",
			wantErr: []string{"document 1 (Function, meta.pkg.crossplane.io/v1)", "the name is empty"},
		},
		"function_with_invalid_name": {
			yaml:    strings.Replace(testFunction, "function-labels", "Function_Labels", 1),
			wantErr: []string{`metadata.name "Function_Labels"`, "lower case"},
		},
		"crd_without_name": {
			yaml:    testFunction + "---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {}\n",
			wantErr: []string{"document 2 (CustomResourceDefinition, apiextensions.k8s.io/v1) has no metadata.name"},
		},
		"duplicate_crd": {
			yaml:    testFunction + "---\n" + testCRD + "---\n" + testCRD,
			wantErr: []string{"document 3 (CustomResourceDefinition inputs.labels.fn.example.org", "document 2 defines the same"},
		},
		"crd_of_old_api": {
			yaml:    testFunction + "---\n" + strings.Replace(testCRD, "apiextensions.k8s.io/v1", "apiextensions.k8s.io/v1beta1", 1),
			wantErr: []string{"document 2 (CustomResourceDefinition inputs.labels.fn.example.org, apiextensions.k8s.io/v1beta1) cannot be in a Function package"},
		},
		"dependency_without_package": {
			yaml:    strings.Replace(testFunction, "provider: xpkg.upbound.io/upbound/provider-aws-s3", "provider: \"\"", 1),
			wantErr: []string{"spec.dependsOn[0] names no package"},
		},
		"crossplane_version_not_a_constraint": {
			yaml:    strings.Replace(testFunction, `version: ">=v1.17.0"`, `version: "one point seventeen"`, 1),
			wantErr: []string{`spec.crossplane.version "one point seventeen" is not a semantic version constraint`},
		},
		"dependency_version_not_a_constraint": {
			yaml:    strings.Replace(testFunction, `version: ">=v1.0.0"`, `version: "latest"`, 1),
			wantErr: []string{`spec.dependsOn[0].version "latest" is neither a semantic version constraint nor a digest`},
		},
		// Crossplane's resolver installs a dependency pinned to a digest
		// as it is, and crossplane xpkg build packages it.
		"dependency_pinned_to_a_digest": {
			yaml:     strings.Replace(testFunction, `version: ">=v1.0.0"`, `version: "sha256:ab6ca7003810ce0d4e079302e9af32987c888b5ccf3927f63d80df78097b0733"`, 1),
			wantName: "function-labels",
		},
		"dependency_digest_cut_short": {
			yaml:    strings.Replace(testFunction, `version: ">=v1.0.0"`, `version: "sha256:ab6ca700"`, 1),
			wantErr: []string{`spec.dependsOn[0].version "sha256:ab6ca700" is neither a semantic version constraint nor a digest (sha256:<64 hex digits>)`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			pm, err := ParsePackageMeta([]byte(tc.yaml))
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("want an error containing %q, got none", tc.wantErr)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if pm.Function.Name != tc.wantName {
				t.Errorf("name: got %q, want %q", pm.Function.Name, tc.wantName)
			}
			if len(pm.CRDs) != tc.wantCRDs {
				t.Errorf("CRDs: got %v, want %d", pm.CRDs, tc.wantCRDs)
			}
			// What goes into the package must itself be valid and the same.
			again, err := ParsePackageMeta(pm.Raw)
			if err != nil {
				t.Fatalf("the package.yaml written does not parse: %v\n%s", err, pm.Raw)
			}
			if again.Function.Name != pm.Function.Name || len(again.CRDs) != len(pm.CRDs) {
				t.Errorf("re-parsed %+v, want %+v", again, pm)
			}
		})
	}
}

func TestParsePackageMetaFields(t *testing.T) {
	pm, err := ParsePackageMeta([]byte(testFunction))
	if err != nil {
		t.Fatal(err)
	}
	f := pm.Function
	if f.APIVersion != "meta.pkg.crossplane.io/v1" || f.Crossplane != ">=v1.17.0" {
		t.Errorf("apiVersion %q, crossplane %q", f.APIVersion, f.Crossplane)
	}
	if f.Annotations["meta.crossplane.io/maintainer"] != "Platform Team" {
		t.Errorf("annotations: %v", f.Annotations)
	}
	if len(f.DependsOn) != 1 || f.DependsOn[0].String() != "xpkg.upbound.io/upbound/provider-aws-s3 >=v1.0.0" {
		t.Errorf("dependsOn: %v", f.DependsOn)
	}
}

func TestGenerateFunctionMeta(t *testing.T) {
	for _, caps := range [][]string{DefaultCapabilities, {CapabilityComposition}, nil} {
		data, err := GenerateFunctionMeta("function-labels", caps)
		if err != nil {
			t.Fatal(err)
		}
		pm, err := ParsePackageMeta(data)
		if err != nil {
			t.Fatalf("generated metadata is invalid: %v\n%s", err, data)
		}
		if pm.Function.Name != "function-labels" || pm.Function.APIVersion != "meta.pkg.crossplane.io/v1" {
			t.Errorf("got %+v", pm.Function)
		}
		if !slices.Equal(pm.Function.Capabilities, caps) {
			t.Errorf("capabilities %v, want %v:\n%s", pm.Function.Capabilities, caps, data)
		}
		// Crossplane reads spec.capabilities (meta.pkg.crossplane.io/v1
		// MetaSpec); nothing at all is written when there are none.
		if got := bytes.Contains(data, []byte("\nspec:\n  capabilities:\n")); got != (len(caps) > 0) {
			t.Errorf("spec.capabilities written: %t, want %t:\n%s", got, len(caps) > 0, data)
		}
	}
	for _, bad := range []string{"", "Upper", "under_score", "-dash", strings.Repeat("a", 254)} {
		if _, err := GenerateFunctionMeta(bad, DefaultCapabilities); err == nil {
			t.Errorf("name %q: want an error", bad)
		}
	}
	for _, bad := range []string{"", "two words", "x: y", "-a"} {
		if _, err := GenerateFunctionMeta("function-labels", []string{bad}); err == nil || !strings.Contains(err.Error(), "capability") {
			t.Errorf("capability %q: got %v, want an error", bad, err)
		}
	}
}

// TestParsePackageMetaWarnings: a key Crossplane would ignore, and a
// capability it does not know, are named with where they are and what was
// likely meant; the stream is still valid and packaged as it is.
func TestParsePackageMetaWarnings(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"none", testFunction + "  capabilities: [composition, operation]\n", ""},
		// Crossplane matches capabilities ignoring case and separators.
		{"fuzzy_capability", testFunction + "  capabilities: [Composition, OPERATION]\n", ""},
		{"spec_key", strings.Replace(testFunction, "dependsOn:", "dependOn:", 1),
			`document 1 (Function function-labels, meta.pkg.crossplane.io/v1): unknown field "dependOn" at spec, which Crossplane ignores; did you mean "dependsOn"?`},
		{"dependency_key", testFunction + "    apiVersoin: pkg.crossplane.io/v1\n",
			`unknown field "apiVersoin" at spec.dependsOn[0], which Crossplane ignores; did you mean "apiVersion"?`},
		{"metadata_key", strings.Replace(testFunction, "  annotations:", "  anotations:", 1),
			`unknown field "anotations" at metadata, which Crossplane ignores; did you mean "annotations"?`},
		{"every_key", strings.Replace(strings.Replace(testFunction, "dependsOn:", "dependOn:", 1), "  annotations:", "  anotations:", 1) + "  capabilitis: [composition]\n",
			`unknown field "anotations" at metadata, which Crossplane ignores; did you mean "annotations"?
document 1 (Function function-labels, meta.pkg.crossplane.io/v1): unknown field "capabilitis" at spec, which Crossplane ignores; did you mean "capabilities"?
document 1 (Function function-labels, meta.pkg.crossplane.io/v1): unknown field "dependOn" at spec, which Crossplane ignores; did you mean "dependsOn"?`},
		{"capability", testFunction + "  capabilities: [compositon]\n",
			`spec.capabilities[0] "compositon" is not a capability Crossplane knows (composition, operation), and a Function declares only what Crossplane may use it for, so a misspelt one bars it; did you mean "composition"?`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pm, err := ParsePackageMeta([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join(pm.Warnings, "\n")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("warnings %q, want one containing %q", got, tc.want)
			}
		})
	}
}
