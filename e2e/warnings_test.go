package e2e

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestNeutralisedEntriesAreNamed: an image whose last layer has entries
// that aim outside the rootfs (a "../" name, an absolute name, a whiteout
// through "../", a hard link through "../") is served, each entry lands
// inside the rootfs, and the server logs one warning per entry that names
// the layer by digest and the entry. Entries of the other layers, made by
// buildah, get none.
func TestNeutralisedEntriesAreNamed(t *testing.T) {
	dir := t.TempDir()
	marker := fmt.Sprintf("ocifn-named-%d", os.Getpid())
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	writeHeader(t, tw, &tar.Header{Name: "../../" + marker}, "climbed")
	writeHeader(t, tw, &tar.Header{Name: "/abs-" + marker}, "absolute")
	writeHeader(t, tw, &tar.Header{Name: "../.wh.gone-" + marker}, "")
	writeHeader(t, tw, &tar.Header{Name: "target"}, "t")
	writeHeader(t, tw, &tar.Header{Name: "linked", Typeflag: tar.TypeLink, Linkname: "../target"}, "")
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	digest, _ := layer.Digest()
	diffID, _ := layer.DiffID()

	cache := cacheDir(t)
	s := startServer(t, []string{"--tarball", writeImage(t, dir, layer), "--cache-dir", cache})
	rsp := s.call(t, shRequest(t, "t-named", `cat /`+marker+` /abs-`+marker+` /linked >&2; jq -c '{desired: .desired}'`))
	if len(rsp.GetResults()) != 0 {
		t.Fatalf("results %v\n%s", rsp.GetResults(), s.stderr)
	}
	eventually(t, 5*time.Second, "the call logged", func() bool { return strings.Contains(s.stderr.String(), "msg=call tag=t-named") })
	log := s.stderr.String()
	// The function found the entries inside its rootfs.
	mustContain(t, "function stderr", log, "climbedabsolutet")

	var warnings []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `msg="image entry neutralised"`) {
			warnings = append(warnings, l)
		}
	}
	want := []struct{ entry, reason string }{
		{"../../" + marker, "a name that climbs out of the rootfs; unpacked inside the rootfs as /" + marker},
		{"/abs-" + marker, "an absolute name; unpacked inside the rootfs as /abs-" + marker},
		{"../.wh.gone-" + marker, "a whiteout aimed outside the rootfs; applied inside it, to /gone-" + marker},
		{"linked", `a hard link to \"../target\", outside the rootfs; linked inside it to /target`},
	}
	if len(warnings) != len(want) {
		t.Fatalf("%d warnings, want %d:\n%s", len(warnings), len(want), strings.Join(warnings, "\n"))
	}
	for i, w := range want {
		l := warnings[i]
		if !strings.Contains(l, "level=WARN") || !strings.Contains(l, "entry="+w.entry) && !strings.Contains(l, fmt.Sprintf("entry=%q", w.entry)) || !strings.Contains(l, w.reason) {
			t.Errorf("warning %d: %s\nwant entry %q and reason %q", i, l, w.entry, w.reason)
		}
		if !strings.Contains(l, "layer="+digest.String()) && !strings.Contains(l, "layer="+diffID.String()) {
			t.Errorf("warning %d does not name the layer (%s or %s): %s", i, digest, diffID, l)
		}
	}
	if _, err := os.Lstat("/" + marker); err == nil {
		t.Errorf("/%s was created on the host", marker)
	}
}
