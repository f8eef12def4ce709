package main

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

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
	tar := tarballOfImages(t, "ocifn-runtime:dev", "labelizer:latest")
	o := &buildOptions{runtimeTarball: tar}
	_, _, err := o.runtime(context.Background())
	if err == nil || !strings.Contains(err.Error(), "give --runtime-image-tarball a tarball of the runtime image alone") {
		t.Errorf("a runtime tarball of two images: %v, want it refused saying to give the runtime image alone", err)
	}
}

// TestRuntimeTarballLayersAreChecked: a runtime image tarball whose layer
// is not the one its manifest and config name is refused, naming the
// tarball, as a function image's is; it was packaged as it was, to fail
// only at push or in the cluster's pull.
func TestRuntimeTarballLayersAreChecked(t *testing.T) {
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Labels: map[string]string{oci.LabelVersion: "v0.1.0"}})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag("ocifn-runtime:dev")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "runtime.tar")
	if err := tarball.WriteToFile(good, ref, img); err != nil {
		t.Fatal(err)
	}
	o := &buildOptions{runtimeTarball: good}
	_, closeRuntime, err := o.runtime(context.Background())
	if err != nil {
		t.Fatalf("the runtime image as written: %v", err)
	}
	closeRuntime()

	// The second layer's file holds another layer, a good gzip stream of
	// a good tar: only the digests tell.
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	victim, err := layers[1].Digest()
	if err != nil {
		t.Fatal(err)
	}
	other, err := random.Layer(1024, types.DockerLayer)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := other.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	swapped, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "damaged.tar")
	replaceInTar(t, good, bad, func(name string) bool { return strings.Contains(name, victim.Hex) }, swapped)
	o = &buildOptions{runtimeTarball: bad}
	_, _, err = o.runtime(context.Background())
	if err == nil || !strings.Contains(err.Error(), "the runtime image "+bad+" does not match its digests: layer "+victim.String()) || !strings.Contains(err.Error(), "digest mismatch") {
		t.Errorf("a runtime tarball with a layer swapped: %v, want it refused naming the tarball and the layer", err)
	}
}

// replaceInTar copies the tar src to dst with the data of the one file
// match picks replaced.
func replaceInTar(t *testing.T, src, dst string, match func(string) bool, data []byte) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tr, tw := tar.NewReader(in), tar.NewWriter(out)
	replaced := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if hdr.Typeflag == tar.TypeReg && match(hdr.Name) {
			b, hdr.Size = data, int64(len(data))
			replaced++
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if replaced != 1 {
		t.Fatalf("%d files of %s replaced, want 1", replaced, src)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// tarballOfImages writes a docker save tarball of a random image under each
// of names, and returns its path.
func tarballOfImages(t *testing.T, names ...string) string {
	t.Helper()
	refs := map[name.Reference]v1.Image{}
	for _, n := range names {
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
	return tar
}
