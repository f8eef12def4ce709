package oci

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnpackWarnsOfNeutralisedEntries: entries that climb out of the
// rootfs are unpacked inside it, and each gets a Warning naming the layer
// by digest, the entry, and where it went instead; a layer with many gets
// maxWarnings and one that counts the rest. The in-process extractor the
// fuzzer uses does what the re-executed child does.
func TestUnpackWarnsOfNeutralisedEntries(t *testing.T) {
	many := []tentry{}
	for i := range maxWarnings + 5 {
		many = append(many, entFile(fmt.Sprintf("../up-%d", i), "x"))
	}
	layers := [][]byte{
		makeTar(t, entFile("a", "a"), entFile("keep", "k"), entFile("plain", "p")),
		makeTar(t, entFile("/abs", "x"), entFile("../escape", "x"), entFile("../.wh.a", ""), entHardlink("h", "../keep"), entFile("./fine", "f"), entFile("d/../fine2", "f")),
		makeTar(t, many...),
	}
	for name, opts := range map[string][]UnpackOption{"chroot_child": nil, "in_process": {withExtractor(extractInThread)}} {
		t.Run(name, func(t *testing.T) {
			s := newSandbox(t)
			img := newImage(t, gzipLayer, layers...)
			ls, _ := img.Layers()
			digest, _ := ls[1].Digest()
			var got []Warning
			err := Unpack(t.Context(), img, s.dest, append(opts, WithWarnings(func(w Warning) { got = append(got, w) }))...)
			if err != nil {
				t.Fatal(err)
			}
			s.assertContained(t)
			want := []Warning{
				{digest.String(), "/abs", "an absolute name; unpacked inside the rootfs as /abs"},
				{digest.String(), "../escape", "a name that climbs out of the rootfs; unpacked inside the rootfs as /escape"},
				{digest.String(), "../.wh.a", "a whiteout aimed outside the rootfs; applied inside it, to /a"},
				{digest.String(), "h", `a hard link to "../keep", outside the rootfs; linked inside it to /keep`},
			}
			if len(got) != len(want)+maxWarnings+1 {
				t.Fatalf("%d warnings, want %d:\n%v", len(got), len(want)+maxWarnings+1, got)
			}
			for i, w := range want {
				if got[i] != w {
					t.Errorf("warning %d:\n got %v\nwant %v", i, got[i], w)
				}
			}
			last := got[len(got)-1]
			if last.Entry != "" || !strings.Contains(last.Reason, "5 more entries neutralised") || last.Layer == digest.String() {
				t.Errorf("the summary of the third layer: %+v", last)
			}
			for _, p := range []string{"abs", "escape", "h", "fine", "fine2", "up-0"} {
				if _, err := os.Lstat(filepath.Join(s.dest, p)); err != nil {
					t.Errorf("%s not unpacked inside the rootfs: %v", p, err)
				}
			}
			assertAbsent(t, filepath.Join(s.dest, "a"))
			if a, b := statT(t, filepath.Join(s.dest, "h")), statT(t, filepath.Join(s.dest, "keep")); a.Ino != b.Ino {
				t.Errorf("h is not a hard link to keep")
			}
		})
	}
}
