package e2e

import (
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestTarballWithSeveralImages needs --image to pick one, and the error
// without it lists the images present.
func TestTarballWithSeveralImages(t *testing.T) {
	multi := filepath.Join(t.TempDir(), "two.tar")
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
}
