package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// fnTarball returns a docker-save tarball of a one-file image, and the
// digest Open reports for it.
func fnTarball(t *testing.T, body string) ([]byte, v1.Hash) {
	t.Helper()
	var buf bytes.Buffer
	if err := tarball.Write(nil, pkgTestImage(t, map[string]string{"fn": body}, v1.Config{Entrypoint: []string{"/fn"}}), &buf); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "fn.tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	return buf.Bytes(), img.Digest()
}

// entry is one tar entry of a crafted layer.
type entry struct {
	name, link string
	typ        byte
	body       []byte
}

func rawLayer(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644}
		switch e.typ {
		case tar.TypeReg:
			h.Size = int64(len(e.body))
		case tar.TypeDir:
			h.Mode = 0o755
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func packageOf(t *testing.T, layers ...[]byte) v1.Image {
	t.Helper()
	img := empty.Image
	for _, l := range layers {
		var err error
		if img, err = mutate.AppendLayers(img, static.NewLayer(l, types.DockerUncompressedLayer)); err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{Entrypoint: []string{"/ocifn"}, Labels: map[string]string{LabelFunction: FunctionTarball}}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// TestFunctionFromPackageIsWhatTheContainerFinds: the function read from a
// package (inspect, render, test) is the one its container finds at
// /ocifn/function.tar once the layers are applied, which ocifn serve runs;
// a package where a second entry, a link or a whiteout could make them
// differ is refused, naming why.
func TestFunctionFromPackageIsWhatTheContainerFinds(t *testing.T) {
	a, digestA := fnTarball(t, "benign")
	b, _ := fnTarball(t, "other")
	dir := entry{name: "ocifn/", typ: tar.TypeDir}
	fileA := entry{name: "ocifn/function.tar", typ: tar.TypeReg, body: a}

	pkg := packageOf(t, rawLayer(t, dir, fileA), rawLayer(t, entry{name: "etc/", typ: tar.TypeDir}, entry{name: "etc/x", typ: tar.TypeReg, body: b}))
	fn, err := FunctionFromPackage(pkg, t.TempDir(), 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	defer fn.Close()
	root := filepath.Join(t.TempDir(), "rootfs")
	if err := Unpack(context.Background(), pkg, root, withExtractor(extractInThread)); err != nil {
		t.Fatal(err)
	}
	served, err := Open(filepath.Join(root, "ocifn/function.tar"))
	if err != nil {
		t.Fatal(err)
	}
	defer served.Close()
	if fn.Digest() != digestA || served.Digest() != digestA {
		t.Errorf("read %s, the container finds %s; want both %s", fn.Digest(), served.Digest(), digestA)
	}

	for name, c := range map[string]struct {
		layers [][]byte
		want   string
	}{
		"twice in a layer": {[][]byte{rawLayer(t, dir, fileA, entry{name: "ocifn/function.tar", typ: tar.TypeReg, body: b})},
			"in the package twice (layers 1 and 1)"},
		"again in a layer above": {[][]byte{rawLayer(t, dir, fileA), rawLayer(t, dir, entry{name: "ocifn/function.tar", typ: tar.TypeReg, body: b})},
			"in the package twice (layers 1 and 2)"},
		"a hard link above": {[][]byte{rawLayer(t, dir, fileA), rawLayer(t, entry{name: "other.tar", typ: tar.TypeReg, body: b}, entry{name: "ocifn/function.tar", typ: tar.TypeLink, link: "other.tar"})},
			"/ocifn/function.tar is not a regular file"},
		"a whiteout above": {[][]byte{rawLayer(t, dir, fileA), rawLayer(t, dir, entry{name: "ocifn/.wh.function.tar", typ: tar.TypeReg})},
			"/ocifn/.wh.function.tar hides /ocifn/function.tar"},
		"its directory whited out above": {[][]byte{rawLayer(t, dir, fileA), rawLayer(t, entry{name: ".wh.ocifn", typ: tar.TypeReg})},
			"/.wh.ocifn hides"},
		"its directory made opaque above": {[][]byte{rawLayer(t, dir, fileA), rawLayer(t, dir, entry{name: "ocifn/.wh..wh..opq", typ: tar.TypeReg})},
			"/ocifn/.wh..wh..opq hides"},
		"its directory a link": {[][]byte{rawLayer(t, entry{name: "elsewhere/", typ: tar.TypeDir}, entry{name: "ocifn", typ: tar.TypeSymlink, link: "elsewhere"}), rawLayer(t, dir, fileA)},
			"/ocifn, on the path of /ocifn/function.tar, is not a directory"},
	} {
		t.Run(name, func(t *testing.T) {
			fn, err := FunctionFromPackage(packageOf(t, c.layers...), t.TempDir(), 1<<30)
			if err == nil {
				fn.Close()
				t.Fatalf("read %s, want the package refused", fn.Digest())
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
}

// TestPackageScansAreBounded: reading a package's layers (for its function
// image, or for its package.yaml) stops once they have decompressed to
// more than maxScanBytes (plus the function's own limit), instead of
// reading a decompression bomb to its end to check its diff_id.
func TestPackageScansAreBounded(t *testing.T) {
	defer func(n int64) { maxScanBytes = n }(maxScanBytes)
	maxScanBytes = 64 << 10
	fn, _ := fnTarball(t, "benign")
	dir := entry{name: "ocifn/", typ: tar.TypeDir}
	function := entry{name: "ocifn/function.tar", typ: tar.TypeReg, body: fn}
	meta := entry{name: PackageFile, typ: tar.TypeReg, body: []byte("apiVersion: meta.pkg.crossplane.io/v1beta1\nkind: Function\nmetadata:\n  name: fn\n")}
	zeros := entry{name: "zeros", typ: tar.TypeReg, body: make([]byte, 2<<20)}
	small := packageOf(t, rawLayer(t, meta, dir, function))
	bomb := packageOf(t, rawLayer(t, meta, dir, function), rawLayer(t, zeros))

	img, err := FunctionFromPackage(small, t.TempDir(), 1<<20)
	if err != nil {
		t.Fatalf("a package within the bound: %v", err)
	}
	img.Close()
	if _, _, _, err := PackageYAML(small); err != nil {
		t.Fatalf("a package within the bound: %v", err)
	}
	want := fmt.Sprintf(errScanBytes, maxScanBytes+1<<20)
	if img, err := FunctionFromPackage(bomb, t.TempDir(), 1<<20); err == nil || !strings.Contains(err.Error(), want) {
		if err == nil {
			img.Close()
		}
		t.Errorf("the function of a package whose layers decompress past the bound: %v, want %q", err, want)
	}
	// package.yaml is looked for from the top layer down, where the zeros
	// are: in one layer, or in two each within the bound.
	want = fmt.Sprintf(errScanBytes, maxScanBytes)
	if _, _, _, err := PackageYAML(bomb); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("package.yaml of a package whose top layer decompresses past the bound: %v, want %q", err, want)
	}
	half := entry{name: "zeros", typ: tar.TypeReg, body: make([]byte, maxScanBytes*3/4)}
	two := packageOf(t, rawLayer(t, meta, dir, function), rawLayer(t, half), rawLayer(t, half))
	if _, _, _, err := PackageYAML(two); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("package.yaml of a package whose top layers decompress past the bound together: %v, want %q", err, want)
	}
	// A limit near the largest int64 does not overflow the bound away.
	if b := scanBudget(math.MaxInt64); b.limit != math.MaxInt64 {
		t.Errorf("scanBudget(MaxInt64).limit = %d", b.limit)
	}
}
