package oci

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

const (
	errNotPackage     = "the image is not an ocifn package (its config has no %s label)"
	errNoFunctionFile = "the package has no %s in any layer"
	errNoPackageFile  = "the image has no " + PackageFile + " (neither in a layer annotated " + AnnotationKey + ": " + PackageAnnotation + " nor at the root of any layer)"
	maxPackageYAML    = 64 << 20
	// A package made of another (crossplane xpkg build
	// --embed-runtime-image-tarball of an ocifn package, say) keeps the
	// other's mark.
	errSeveralBaseLayers = "layers %d and %d are both marked " + AnnotationKey + ": " + PackageAnnotation + " %s: Crossplane refuses a package with more than one (\"multiple annotated base layers\"), and which one holds its " + PackageFile + " is not said (was the package built on another package?)"
)

// OpenFunction opens the function image in a tarball: the image itself, as
// Open reads it, or, when the tarball is an ocifn package (`ocifn build`
// output, or a package pulled with Pull), the function image the package
// embeds at FunctionTarball. The options apply as for Open; the embedded
// tarball is copied to the scratch directory (an unlinked file).
func OpenFunction(path string, opts ...OpenOption) (*Image, error) {
	img, err := Open(path, opts...)
	if err != nil {
		return nil, err
	}
	if !IsPackage(img.ConfigFile()) {
		return img, nil
	}
	defer img.Close()
	o := openOptions{}
	for _, opt := range opts {
		opt(&o)
	}
	fn, err := FunctionFromPackage(img.Image(), o.scratchDir, o.limit())
	if err != nil {
		return nil, fmt.Errorf("cannot read the function image of package %q: %w", path, err)
	}
	return fn, nil
}

// IOMode is the I/O mode recorded for the function: the package's LabelIO
// when the image came out of a package (FunctionFromPackage), else the
// image's own; "" when neither records one.
func (i *Image) IOMode() string {
	if i.ioMode != "" {
		return i.ioMode
	}
	if i.cfg == nil {
		return ""
	}
	return i.cfg.Config.Labels[LabelIO]
}

// IsPackage reports whether an image config is that of an ocifn package.
func IsPackage(cf *v1.ConfigFile) bool {
	return cf != nil && cf.Config.Labels[LabelFunction] != ""
}

// FunctionFromPackage reads the function image embedded in an ocifn
// package image (from a tarball or a registry). The embedded tarball, at
// most limit bytes (also once decompressed), is copied into an unlinked
// file in scratchDir (default os.TempDir()), which the returned Image's
// Close frees. The layer it comes from is checked against its digest and
// diff_id.
func FunctionFromPackage(pkg v1.Image, scratchDir string, limit int64) (*Image, error) {
	cf, err := pkg.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("cannot read the package config: %w", err)
	}
	if !IsPackage(cf) {
		return nil, fmt.Errorf(errNotPackage, LabelFunction)
	}
	want := cleanName(cf.Config.Labels[LabelFunction])
	layers, err := pkg.Layers()
	if err != nil {
		return nil, fmt.Errorf("cannot list the package's layers: %w", err)
	}
	if len(layers) != len(cf.RootFS.DiffIDs) {
		return nil, fmt.Errorf(errLayerCount, len(layers), len(cf.RootFS.DiffIDs))
	}
	if scratchDir == "" {
		scratchDir = os.TempDir()
	}
	// Every layer is read, so that what is read here is what the package's
	// container finds at the path once its layers are applied (ocifn serve
	// runs that one): an image where a second entry, a whiteout or a link
	// could decide otherwise is refused rather than read one way here and
	// served another.
	w := &functionWalk{want: want, dir: scratchDir, limit: limit, in: -1}
	budget := scanBudget(limit)
	for i := range layers {
		w.layer = i
		if _, err := scanLayer(context.Background(), layers[i], cf.RootFS.DiffIDs[i], budget, w.visit); err != nil {
			w.close()
			return nil, fmt.Errorf("layer %d/%d: %w", i+1, len(layers), err)
		}
	}
	if w.file == nil {
		return nil, fmt.Errorf(errNoFunctionFile, "/"+want)
	}
	img, err := openScratch(w.file, scratchDir, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", "/"+want, err)
	}
	img.ioMode = cf.Config.Labels[LabelIO]
	return img, nil
}

// functionWalk finds the embedded function tarball in a package's layers,
// bottom to top, and copies it into an unlinked scratch file.
type functionWalk struct {
	want      string // the tarball's path, cleaned
	dir       string
	limit     int64
	layer, in int // the layer being read; the one that had the file
	file      *os.File
}

func (w *functionWalk) visit(hdr *tar.Header, r io.Reader) (bool, error) {
	name := cleanName(hdr.Name)
	switch {
	case name == w.want:
		if hdr.Typeflag != tar.TypeReg {
			return false, fmt.Errorf("/%s is not a regular file in the package (tar type %q)", w.want, hdr.Typeflag)
		}
		if w.file != nil {
			return false, fmt.Errorf("/%s is in the package twice (layers %d and %d): which one a container finds depends on how its layers are applied", w.want, w.in+1, w.layer+1)
		}
		f, err := copyToScratch(w.want, r, hdr.Size, w.dir, w.limit)
		if err != nil {
			return false, err
		}
		w.file, w.in = f, w.layer
	case strings.HasPrefix(w.want, name+"/") && hdr.Typeflag != tar.TypeDir:
		return false, fmt.Errorf("/%s, on the path of /%s, is not a directory in the package (tar type %q)", name, w.want, hdr.Typeflag)
	case w.file != nil && w.layer > w.in && hides(name, w.want):
		return false, fmt.Errorf("/%s hides /%s from the layers below it", name, w.want)
	}
	return false, nil
}

func (w *functionWalk) close() {
	if w.file != nil {
		_ = w.file.Close()
	}
}

// hides says whether the entry name is a whiteout that hides want of the
// layers below it: want's own, an ancestor's, or an opaque directory above
// it.
func hides(name, want string) bool {
	dir, base := path.Split(name)
	hidden, ok := strings.CutPrefix(base, ".wh.")
	if !ok {
		return false
	}
	if hidden == ".wh..opq" {
		return strings.HasPrefix(want, dir)
	}
	target := dir + hidden
	return target == want || strings.HasPrefix(want, target+"/")
}

// openScratch opens the image tarball in an (unlinked) file, decompressing
// it to another one if needed.
func openScratch(f *os.File, dir string, limit int64) (*Image, error) {
	magic := make([]byte, magicLen)
	n, _ := f.ReadAt(magic, 0)
	if detectCompression(magic[:n]) != uncompressed {
		plain, err := decompressToScratch(f, dir, limit)
		_ = f.Close()
		if err != nil {
			return nil, err
		}
		f = plain
	}
	idx, err := indexTar(f)
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	img, err := openImage(idx, "")
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	img.file = f
	return img, nil
}

// copyToScratch copies the regular file name, size bytes from r, into a
// new unlinked file in dir.
func copyToScratch(name string, r io.Reader, size int64, dir string, limit int64) (*os.File, error) {
	if size > limit {
		return nil, tooLarge{fmt.Sprintf("%s is "+errTooBig, name, limit)}
	}
	f, err := os.CreateTemp(dir, "ocifn-function-*.tar")
	if err != nil {
		return nil, fmt.Errorf("cannot create a scratch file: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		_ = f.Close()
		return nil, err
	}
	if _, err := io.Copy(f, io.LimitReader(r, limit)); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cannot copy %s: %w", name, err)
	}
	return f, nil
}

// readFromLayer returns the content of the regular file name in a layer,
// if it has it (at most limit bytes).
func readFromLayer(l v1.Layer, diffID v1.Hash, budget *byteBudget, name string, limit int64) ([]byte, bool, error) {
	var data []byte
	found, err := scanLayer(context.Background(), l, diffID, budget, func(hdr *tar.Header, r io.Reader) (bool, error) {
		if cleanName(hdr.Name) != name || hdr.Typeflag != tar.TypeReg {
			return false, nil
		}
		if hdr.Size > limit {
			return false, fmt.Errorf("%s is "+errTooBig, name, limit)
		}
		b, err := io.ReadAll(r)
		data = b
		return true, err
	})
	return data, found, err
}

// maxScanBytes caps what reading a package's layers may decompress, its
// layers together: what a package holds (package.yaml, an embedded
// function image, a runtime image) takes kilobytes to a few gigabytes,
// while a layer of a few megabytes can decompress to terabytes of zeros,
// which would be read for hours to check its diff_id. The embedded
// function's own limit comes on top. A variable for the tests.
var maxScanBytes int64 = 8 << 30

// errScanBytes is the error of a scan past its budget.
const errScanBytes = "the package's layers decompress to more than %d bytes, more than a package holds (its own files and, at most, its function image's limit): refusing to read them on"

// scanBudget is the budget of one scan of a package's layers, for a
// function image of at most limit bytes (0: none looked for).
func scanBudget(limit int64) *byteBudget {
	return &byteBudget{limit: maxScanBytes + min(max(limit, 0), math.MaxInt64-maxScanBytes), exceeded: errScanBytes}
}

// scanLayer calls visit on each entry of the layer until it returns true,
// then reads the rest of the layer and checks its digest and diff_id. The
// layer's uncompressed bytes are charged to budget; a done ctx stops it.
func scanLayer(ctx context.Context, l v1.Layer, diffID v1.Hash, budget *byteBudget, visit func(*tar.Header, io.Reader) (bool, error)) (bool, error) {
	digest, err := l.Digest()
	if err != nil {
		return false, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return false, fmt.Errorf("cannot open layer %s: %w", digest, err)
	}
	defer rc.Close()
	blobHash := sha256.New()
	blob := io.TeeReader(rc, blobHash)
	dec, err := decompress(blob)
	if err != nil {
		return false, fmt.Errorf("cannot decompress layer %s: %w", digest, err)
	}
	defer dec.Close()
	tarHash := sha256.New()
	stream := &guardedReader{ctx: ctx, r: io.TeeReader(dec, tarHash), budget: budget}
	tr := tar.NewReader(stream)
	found := false
	for !found {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return false, fmt.Errorf("cannot read layer %s: %w", digest, err)
		}
		if found, err = visit(hdr, tr); err != nil {
			return false, fmt.Errorf("layer %s: %w", digest, err)
		}
	}
	if _, err := io.Copy(io.Discard, stream); err != nil {
		return false, fmt.Errorf("cannot read layer %s: %w", digest, err)
	}
	if _, err := io.Copy(io.Discard, blob); err != nil {
		return false, fmt.Errorf("cannot read layer %s: %w", digest, err)
	}
	if digest != diffID {
		if err := checkHash(blobHash, digest, errLayerDigest); err != nil {
			return false, fmt.Errorf("layer %s: %w", digest, err)
		}
	}
	if err := checkHash(tarHash, diffID, errLayerDiffID); err != nil {
		return false, fmt.Errorf("layer %s: %w", digest, err)
	}
	return found, nil
}

// VerifyLayers reads every layer of img, checking it against its digest
// and the config's rootfs.diff_ids as Unpack does while it applies it, for
// an image that is copied, not unpacked: Open verifies the config and the
// manifest of a tarball, not its layers, and a layer that does not match
// would be copied as it is, to fail only where it is pulled.
func VerifyLayers(ctx context.Context, img v1.Image) error {
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("cannot read config: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("cannot list layers: %w", err)
	}
	if len(layers) != len(cf.RootFS.DiffIDs) {
		return fmt.Errorf(errLayerCount, len(layers), len(cf.RootFS.DiffIDs))
	}
	// Nothing is written: the bytes read cost time alone, which ctx ends.
	budget := &byteBudget{}
	for i, l := range layers {
		if _, err := scanLayer(ctx, l, cf.RootFS.DiffIDs[i], budget, func(*tar.Header, io.Reader) (bool, error) { return false, nil }); err != nil {
			return err
		}
	}
	return nil
}

// PackageYAML returns the package.yaml of a package image and the index
// of the layer it came from: the layer annotated io.crossplane.xpkg: base
// in the manifest (a pushed package) or in the config's layer labels (a
// package tarball), and, failing both, the topmost layer with a
// package.yaml at its root. annotated says which of the first two found it.
func PackageYAML(img v1.Image) (data []byte, layer int, annotated bool, err error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, 0, false, fmt.Errorf("cannot read the image config: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, 0, false, fmt.Errorf("cannot list the image's layers: %w", err)
	}
	if len(layers) != len(cf.RootFS.DiffIDs) {
		return nil, 0, false, fmt.Errorf(errLayerCount, len(layers), len(cf.RootFS.DiffIDs))
	}
	i, err := PackageLayerIndex(img)
	if err != nil {
		return nil, 0, false, err
	}
	budget := scanBudget(0)
	if i >= 0 {
		data, found, err := readFromLayer(layers[i], cf.RootFS.DiffIDs[i], budget, PackageFile, maxPackageYAML)
		if err != nil {
			return nil, i, true, err
		}
		if !found {
			return nil, i, true, fmt.Errorf("layer %d is annotated %s: %s but has no %s at its root", i+1, AnnotationKey, PackageAnnotation, PackageFile)
		}
		return data, i, true, nil
	}
	for i := len(layers) - 1; i >= 0; i-- {
		data, found, err := readFromLayer(layers[i], cf.RootFS.DiffIDs[i], budget, PackageFile, maxPackageYAML)
		if err != nil {
			return nil, i, false, err
		}
		if found {
			return data, i, false, nil
		}
	}
	return nil, -1, false, errors.New(errNoPackageFile)
}

// PackageLayerIndex returns the index of the layer that the manifest
// annotates io.crossplane.xpkg: base, or else the one the config labels so
// (see LayerLabel); -1 if neither does. Two layers marked so are an error:
// Crossplane refuses such a package ("multiple annotated base layers"),
// and which one holds its package.yaml is not said.
func PackageLayerIndex(img v1.Image) (int, error) {
	m, err := img.Manifest()
	if err != nil {
		return -1, fmt.Errorf("cannot read the manifest: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return -1, fmt.Errorf("cannot read the image config: %w", err)
	}
	for _, by := range []struct {
		where string
		marks func(v1.Descriptor) bool
	}{
		{"in the manifest", func(l v1.Descriptor) bool { return l.Annotations[AnnotationKey] == PackageAnnotation }},
		{"by the config's layer labels", func(l v1.Descriptor) bool {
			return cf.Config.Labels[LayerLabel(l.Digest.String())] == PackageAnnotation
		}},
	} {
		found := -1
		for i, l := range m.Layers {
			if !by.marks(l) {
				continue
			}
			if found >= 0 {
				return -1, fmt.Errorf(errSeveralBaseLayers, found+1, i+1, by.where)
			}
			found = i
		}
		if found >= 0 {
			return found, nil
		}
	}
	return -1, nil
}
