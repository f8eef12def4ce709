package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// pkgTestTar is a tar of regular files (name -> content), in name order.
func pkgTestTar(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o755, Size: int64(len(files[n]))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[n])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pkgTestImage is a one-layer image with an uncompressed layer, as
// `buildah push docker-archive:` writes them.
func pkgTestImage(t *testing.T, files map[string]string, cfg v1.Config) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, static.NewLayer(pkgTestTar(t, files), types.DockerUncompressedLayer))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config = "linux", "amd64", cfg
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// layerEntries lists a layer's entries and the content of its files.
func layerEntries(t *testing.T, l v1.Layer) ([]string, map[string][]byte) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var names []string
	content := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names, content
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			content[h.Name] = b
		}
	}
}

// TestPackageLayout builds a package from a runtime image and a gzipped
// function tarball and checks what Crossplane and `ocifn serve` rely on.
func TestPackageLayout(t *testing.T) {
	dir := t.TempDir()
	runtimeImg := pkgTestImage(t, map[string]string{"usr/local/bin/ocifn": "#!ocifn"}, v1.Config{
		Entrypoint: []string{"/usr/local/bin/ocifn", "serve"},
		Env:        []string{"PATH=/usr/local/bin"},
		Labels:     map[string]string{LabelVersion: "v1.2.3", LabelCrunVersion: "1.8.1"},
	})
	fnImg := pkgTestImage(t, map[string]string{"fn/run.sh": "cat"}, v1.Config{
		Entrypoint: []string{"/bin/sh", "/fn/run.sh"}, Env: []string{"A=b"}, WorkingDir: "/fn",
	})
	runtimePath := filepath.Join(dir, "runtime.tar")
	if err := tarball.WriteToFile(runtimePath, nil, runtimeImg); err != nil {
		t.Fatal(err)
	}
	var plain bytes.Buffer
	if err := tarball.Write(nil, fnImg, &plain); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(plain.Bytes())
	_ = zw.Close()
	fnPath := filepath.Join(dir, "function.tgz")
	if err := os.WriteFile(fnPath, gz.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}

	rt, fn := mustOpen(t, runtimePath), mustOpen(t, fnPath)
	meta, err := ParsePackageMeta([]byte(testFunction + "---\n" + testCRD))
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	normalized := filepath.Join(work, "function.tar")
	if err := WriteFunctionTarball(context.Background(), fn, normalized); err != nil {
		t.Fatal(err)
	}
	// The label is the digest ocifn serve and inspect will report: the
	// embedded tarball's.
	embedded, err := Open(normalized)
	if err != nil {
		t.Fatal(err)
	}
	embeddedDigest := embedded.Digest()
	embedded.Close()
	pkg, err := BuildPackage(PackageInput{
		Runtime: rt.Image(), FunctionTarball: normalized, Function: fn, Meta: meta,
		Labels: map[string]string{LabelBuildVersion: "v9"}, IO: "krm",
	})
	if err != nil {
		t.Fatal(err)
	}
	// Without an I/O mode, nothing is recorded: the default stays json.
	plainPkg, err := BuildPackage(PackageInput{Runtime: rt.Image(), FunctionTarball: normalized, Function: fn, Meta: meta})
	if err != nil {
		t.Fatal(err)
	}
	if pcf, err := plainPkg.ConfigFile(); err != nil || pcf.Config.Labels[LabelIO] != "" || slices.ContainsFunc(pcf.Config.Env, func(e string) bool { return strings.HasPrefix(e, EnvIO+"=") }) {
		t.Errorf("a package built without an I/O mode records one: %v %v", pcf.Config.Labels, pcf.Config.Env)
	}
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	xpkg := filepath.Join(out, "function.xpkg")
	var calls int
	if err := WritePackage(context.Background(), pkg, xpkg, nil, func(done, total int64) { calls++ }); err != nil {
		t.Fatal(err)
	}
	if calls == 0 {
		t.Error("WritePackage reported no progress")
	}
	if ents, _ := os.ReadDir(out); len(ents) != 1 {
		t.Errorf("the output directory holds %d entries, want only the package (no temporary files left)", len(ents))
	}
	// Interrupted: the package already there is left as it was, and no
	// temporary file either.
	before, _ := os.ReadFile(xpkg)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WritePackage(cancelled, plainPkg, xpkg, nil, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("WritePackage with its context cancelled: %v, want %v", err, context.Canceled)
	}
	if after, _ := os.ReadFile(xpkg); !bytes.Equal(before, after) {
		t.Error("an interrupted WritePackage changed the package already there")
	}
	if ents, _ := os.ReadDir(out); len(ents) != 1 {
		t.Errorf("after an interrupted write the output directory holds %d entries, want only the package", len(ents))
	}

	// Read back the way `ocifn push` and Crossplane would.
	got, err := Open(xpkg)
	if err != nil {
		t.Fatalf("the package does not open: %v", err)
	}
	defer got.Close()
	img := got.Image()
	// A package cannot make ocifn write more than the limit: the embedded
	// image is refused before it is copied.
	if _, err := FunctionFromPackage(img, t.TempDir(), 100); err == nil || !strings.Contains(err.Error(), "larger than the limit of 100 bytes") {
		t.Errorf("an embedded image over the limit: got %v", err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 3 {
		t.Fatalf("layers: got %d, want runtime + function + metadata = 3", len(layers))
	}
	for i, l := range layers {
		if mt, _ := l.MediaType(); mt != types.DockerLayer {
			t.Errorf("layer %d: media type %s, want gzip (%s)", i, mt, types.DockerLayer)
		}
	}
	rtDiff, _ := mustLayers(t, rt.Image())[0].DiffID()
	if d, _ := layers[0].DiffID(); d != rtDiff {
		t.Errorf("runtime layer diff_id %s, want %s (same content)", d, rtDiff)
	}

	names, content := layerEntries(t, layers[2])
	if !slices.Equal(names, []string{PackageFile}) {
		t.Errorf("metadata layer entries: %v, want only %s", names, PackageFile)
	}
	if !bytes.Equal(content[PackageFile], meta.Raw) {
		t.Errorf("package.yaml:\n%s\nwant:\n%s", content[PackageFile], meta.Raw)
	}
	names, content = layerEntries(t, layers[1])
	if !slices.Equal(names, []string{"ocifn/", "ocifn/function.tar"}) {
		t.Errorf("function layer entries: %v", names)
	}
	want, _ := os.ReadFile(normalized)
	if !bytes.Equal(content["ocifn/function.tar"], want) {
		t.Error("the function layer does not hold the function tarball as written")
	}

	cf := got.ConfigFile()
	if !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/ocifn", "serve"}) || cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("the runtime's entrypoint and platform are not kept: %v %s/%s", cf.Config.Entrypoint, cf.OS, cf.Architecture)
	}
	if !slices.Equal(cf.Config.Env, []string{"PATH=/usr/local/bin", EnvIO + "=krm"}) {
		t.Errorf("env %v: want the runtime's, and the I/O mode for ocifn serve", cf.Config.Env)
	}
	metaDigest, _ := layers[2].Digest()
	for k, v := range map[string]string{
		LabelVersion: "v1.2.3", LabelCrunVersion: "1.8.1", LabelBuildVersion: "v9",
		LabelFunction: FunctionTarball, LabelFunctionDigest: embeddedDigest.String(),
		LayerLabel(metaDigest.String()): PackageAnnotation, LabelIO: "krm",
	} {
		if cf.Config.Labels[k] != v {
			t.Errorf("label %s: got %q, want %q", k, cf.Config.Labels[k], v)
		}
	}

	// The docker-save tarball has no layer annotations; the label finds the
	// layer, and Push's annotation puts it into the manifest.
	if i, err := PackageLayerIndex(img); err != nil || i != 2 {
		t.Errorf("PackageLayerIndex from the labels: %d, %v", i, err)
	}
	annotated, err := AnnotateLayers(img)
	if err != nil {
		t.Fatal(err)
	}
	m, err := annotated.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range m.Layers {
		want := ""
		if i == 2 {
			want = PackageAnnotation
		}
		if l.Annotations[AnnotationKey] != want {
			t.Errorf("manifest layer %d: annotation %q, want %q", i, l.Annotations[AnnotationKey], want)
		}
	}
	acf, _ := annotated.ConfigFile()
	if !slices.Equal(acf.RootFS.DiffIDs, cf.RootFS.DiffIDs) {
		t.Error("annotating changed the layers")
	}
	data, idx, byAnnotation, err := PackageYAML(annotated)
	if err != nil || idx != 2 || !byAnnotation || !bytes.Equal(data, meta.Raw) {
		t.Errorf("PackageYAML: layer %d, annotated %t, %v", idx, byAnnotation, err)
	}

	// `ocifn serve --tarball function.xpkg` serves the embedded image.
	inner, err := OpenFunction(xpkg, WithScratchDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	wantCfg, _ := fnImg.ConfigName()
	if gotCfg, _ := inner.Image().ConfigName(); gotCfg != wantCfg {
		t.Errorf("embedded function config %s, want %s", gotCfg, wantCfg)
	}
	if inner.Digest() != fn.Digest() {
		t.Errorf("embedded function digest %s, want %s", inner.Digest(), fn.Digest())
	}
	if inner.IOMode() != "krm" {
		t.Errorf("the embedded function's I/O mode is %q, want the package's krm", inner.IOMode())
	}
	self, err := OpenFunction(fnPath)
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	if self.Digest() != fn.Digest() {
		t.Error("OpenFunction of a plain image tarball is not the image")
	}
	if self.IOMode() != "" {
		t.Errorf("an image without the label has the I/O mode %q", self.IOMode())
	}

	info, err := InspectPackage(annotated, dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.Function == nil || !slices.Equal(info.Function.Entrypoint, []string{"/bin/sh", "/fn/run.sh"}) || info.Function.WorkingDir != "/fn" ||
		info.Runtime.OcifnVersion != "v1.2.3" || info.Meta.Function.Name != "function-labels" || len(info.Meta.CRDs) != 1 {
		t.Errorf("InspectPackage: %+v %+v", info, info.Function)
	}
}

// mustOpen opens an image tarball, closed when the test ends.
func mustOpen(t *testing.T, path string) *Image {
	t.Helper()
	img, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { img.Close() })
	return img
}

func mustLayers(t *testing.T, img v1.Image) []v1.Layer {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// TestOpenFunctionRejectsPackageWithoutFunction checks the error when the
// label points at a file no layer has.
func TestOpenFunctionRejectsPackageWithoutFunction(t *testing.T) {
	img := pkgTestImage(t, map[string]string{"package.yaml": testFunction}, v1.Config{
		Entrypoint: []string{"/x"}, Labels: map[string]string{LabelFunction: FunctionTarball},
	})
	p := filepath.Join(t.TempDir(), "p.xpkg")
	if err := tarball.WriteToFile(p, nil, img); err != nil {
		t.Fatal(err)
	}
	_, err := OpenFunction(p)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("no /ocifn/function.tar in any layer")) {
		t.Errorf("got %v", err)
	}
}

// A package built without --io from an image that records its own I/O mode
// runs in that mode, and inspect says so.
func TestInspectReportsTheImagesIOMode(t *testing.T) {
	dir := t.TempDir()
	runtimeImg := pkgTestImage(t, map[string]string{"usr/local/bin/ocifn": "#!ocifn"}, v1.Config{Entrypoint: []string{"/usr/local/bin/ocifn", "serve"}})
	fnImg := pkgTestImage(t, map[string]string{"fn": "x"}, v1.Config{Entrypoint: []string{"/fn"}, Labels: map[string]string{LabelIO: "krm"}})
	runtimePath, fnPath := filepath.Join(dir, "runtime.tar"), filepath.Join(dir, "fn.tar")
	for path, img := range map[string]v1.Image{runtimePath: runtimeImg, fnPath: fnImg} {
		if err := tarball.WriteToFile(path, nil, img); err != nil {
			t.Fatal(err)
		}
	}
	rt, fn := mustOpen(t, runtimePath), mustOpen(t, fnPath)
	meta, err := ParsePackageMeta([]byte(testFunction))
	if err != nil {
		t.Fatal(err)
	}
	normalized := filepath.Join(dir, "function.tar")
	if err := WriteFunctionTarball(context.Background(), fn, normalized); err != nil {
		t.Fatal(err)
	}
	pkg, err := BuildPackage(PackageInput{Runtime: rt.Image(), FunctionTarball: normalized, Function: fn, Meta: meta})
	if err != nil {
		t.Fatal(err)
	}
	info, err := InspectPackage(pkg, dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.Runtime.IO != "krm" {
		t.Errorf("inspect says the package serves --io %q, want the image's own krm", info.Runtime.IO)
	}
}

// TestIOModeFromImageLabel: an author can record the I/O mode on the
// function image itself, with the same label a package carries.
func TestIOModeFromImageLabel(t *testing.T) {
	img := pkgTestImage(t, map[string]string{"fn": "x"}, v1.Config{Entrypoint: []string{"/fn"}, Labels: map[string]string{LabelIO: "functionio"}})
	path := filepath.Join(t.TempDir(), "fn.tar")
	if err := tarball.WriteToFile(path, nil, img); err != nil {
		t.Fatal(err)
	}
	fn, err := OpenFunction(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fn.Close()
	if fn.IOMode() != "functionio" {
		t.Errorf("IOMode %q, want the label's functionio", fn.IOMode())
	}
}
