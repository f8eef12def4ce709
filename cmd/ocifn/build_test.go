package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

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

// TestRuntimeTarballOfSeveralImages: a runtime image tarball that holds
// several images is refused saying to give the runtime image alone, not
// to choose one by name, which no flag of build does for the runtime
// (--image chooses the function image).
func TestRuntimeTarballOfSeveralImages(t *testing.T) {
	refs := map[name.Reference]v1.Image{}
	for _, n := range []string{"ocifn-runtime:dev", "labelizer:latest"} {
		img, err := random.Image(256, 1)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := name.NewTag(n)
		if err != nil {
			t.Fatal(err)
		}
		refs[ref] = img
	}
	tar := filepath.Join(t.TempDir(), "images.tar")
	if err := tarball.MultiRefWriteToFile(tar, refs); err != nil {
		t.Fatal(err)
	}
	o := &buildOptions{runtimeTarball: tar}
	_, _, err := o.runtime(context.Background())
	if err == nil || !strings.Contains(err.Error(), "give --runtime-image-tarball a tarball of the runtime image alone") {
		t.Errorf("a runtime tarball of two images: %v, want it refused saying to give the runtime image alone", err)
	}
}
