package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestTarballWithSeveralImages needs --image to pick one, and the error
// without it lists the images present. ocifn render, which has no --image,
// says to pick it with the Function's annotation, which then works.
func TestTarballWithSeveralImages(t *testing.T) {
	dir := t.TempDir()
	multi := filepath.Join(dir, "two.tar")
	refs := map[name.Reference]v1.Image{}
	for _, fn := range []string{"labelizer", "failing"} {
		img, err := tarball.ImageFromPath(image(fn+".tar"), nil)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := name.ParseReference("example.org/fn/" + fn + ":v1")
		if err != nil {
			t.Fatal(err)
		}
		refs[ref] = img
	}
	if err := tarball.MultiRefWriteToFile(multi, refs); err != nil {
		t.Fatal(err)
	}

	out := startProcess(t, []string{"--insecure", "--tarball", multi}).wait(t)
	mustContain(t, "error without --image", out, "--image NAME", "example.org/fn/labelizer:v1", "example.org/fn/failing:v1")

	s := startServer(t, []string{"--tarball", multi, "--image", "example.org/fn/labelizer:v1"})
	req := loadRequest(t, "labelizer", "request.json")
	want := withTag(loadResponse(t, "labelizer", "expected.json"), req)
	if d := diff(want, s.call(t, req)); d != "" {
		t.Errorf("response (-want +got):\n%s", d)
	}

	files := map[string]string{
		"xr.yaml": "apiVersion: example.org/v1\nkind: XApp\nmetadata:\n  name: app\nspec: {}\n",
		"composition.yaml": `apiVersion: apiextensions.crossplane.io/v1
kind: Composition
metadata:
  name: xapps.example.org
spec:
  compositeTypeRef: {apiVersion: example.org/v1, kind: XApp}
  mode: Pipeline
  pipeline:
  - step: label
    functionRef: {name: function-labelizer}
`,
	}
	function := func(annotations string) string {
		return "apiVersion: pkg.crossplane.io/v1\nkind: Function\nmetadata:\n  name: function-labelizer\n  annotations:\n    render.ocifn.dev/tarball: two.tar\n" +
			annotations + "spec:\n  package: registry.example.com/function-labelizer:v0.1.0\n"
	}
	files["functions.yaml"] = function("")
	files["picked.yaml"] = function("    render.ocifn.dev/image: example.org/fn/labelizer:v1\n")
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := runIn(t, dir, nil, "render", "xr.yaml", "composition.yaml", "functions.yaml")
	if r.exit == 0 || !strings.Contains(r.stderr, "the Function's annotation render.ocifn.dev/image: NAME") || strings.Contains(r.stderr, "--image") {
		t.Errorf("render of a tarball of two images, no annotation: exit %d, stderr %q; want a failure naming the annotation, not --image", r.exit, r.stderr)
	}
	if r := runIn(t, dir, nil, "render", "xr.yaml", "composition.yaml", "picked.yaml"); r.exit != 0 {
		t.Errorf("render with render.ocifn.dev/image: exit %d, stderr %q", r.exit, r.stderr)
	}
}
