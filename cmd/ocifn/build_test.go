package main

import (
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocifn/ocifn/oci"
)

// TestIsRuntimeRefusesPackages: a package keeps its runtime's version
// label, but building on it would make a package with two function images
// and two package.yaml layers, so it is refused as a runtime image, as is a
// Crossplane package made of the runtime image.
func TestIsRuntimeRefusesPackages(t *testing.T) {
	runtime := map[string]string{oci.LabelVersion: "v0.1.0"}
	with := func(k, v string) *v1.ConfigFile {
		l := map[string]string{k: v}
		for k, v := range runtime {
			l[k] = v
		}
		return &v1.ConfigFile{Config: v1.Config{Labels: l}}
	}
	if err := isRuntime(&v1.ConfigFile{Config: v1.Config{Labels: runtime}}, "runtime.tar"); err != nil {
		t.Errorf("the runtime image: %v", err)
	}
	for _, cf := range []*v1.ConfigFile{
		with(oci.LabelFunction, oci.FunctionTarball),
		with(oci.LayerLabel("sha256:"+strings.Repeat("0", 64)), oci.PackageAnnotation),
	} {
		err := isRuntime(cf, "function.xpkg")
		if err == nil || !strings.Contains(err.Error(), "function.xpkg is a Function package") {
			t.Errorf("labels %v: %v, want refused as a package", cf.Config.Labels, err)
		}
	}
}
