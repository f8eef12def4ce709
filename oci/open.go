package oci

import (
	"errors"
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
)

const (
	errFmtRead        = "cannot read image tarball %q: %w"
	errUnknownFormat  = "the archive has neither manifest.json (docker save) nor index.json (OCI image layout)"
	errNeedName       = "the archive holds %d images, choose one by name (an unnamed one by its digest, sha256:…): %s"
	errNameNotFound   = "no image named %q in the archive; it holds: %s"
	errSeveralMatches = "several images are named %q: %s"
)

// ErrSeveralImages is wrapped by the error of Open when the archive holds
// several images and no name chose one.
var ErrSeveralImages = errors.New("several images")

// severalImages is the error that lists the images to choose from.
type severalImages struct{ msg string }

func (e severalImages) Error() string        { return e.msg }
func (e severalImages) Is(target error) bool { return target == ErrSeveralImages }

// ErrTooLarge is wrapped by the errors of an image past the size limit its
// caller set (WithMaxBytes, WithMaxScratchBytes), so that the caller can
// name the setting that raises it.
var ErrTooLarge = errors.New("image past its size limit")

// tooLarge is an error of an image past its size limit.
type tooLarge struct{ msg string }

func (e tooLarge) Error() string        { return e.msg }
func (e tooLarge) Is(target error) bool { return target == ErrTooLarge }

// OpenOption changes how Open reads an image tarball.
type OpenOption func(*openOptions)

type openOptions struct {
	name       string
	scratchDir string
	// maxBytes caps what is written to the scratch directory: a
	// decompressed tarball, or the image a package embeds.
	maxBytes int64
}

// DefaultMaxScratchBytes caps the decompressed size of an image tarball,
// and of the image tarball a package embeds, by default.
const DefaultMaxScratchBytes = 8 << 30

// WithMaxScratchBytes caps what Open and OpenFunction write to the scratch
// directory: a compressed tarball's decompressed size, and the size of the
// image tarball a package embeds (0: DefaultMaxScratchBytes). A hostile
// package pulled from a registry cannot fill the disk with it.
func WithMaxScratchBytes(n int64) OpenOption { return func(o *openOptions) { o.maxBytes = n } }

func (o openOptions) limit() int64 {
	if o.maxBytes > 0 {
		return o.maxBytes
	}
	return DefaultMaxScratchBytes
}

// WithImageName selects the image of that name (docker RepoTags or OCI
// ref name; "foo", "foo:latest", "docker.io/library/foo:latest" and
// "localhost/foo:latest" are the same name) in a tarball of several images,
// or the one of that digest (sha256:…, an OCI index entry's manifest or a
// docker save image's config, its ID), which unnamed images have alone.
func WithImageName(name string) OpenOption {
	return func(o *openOptions) { o.name = name }
}

// WithScratchDir sets where a compressed tarball is decompressed to
// (default: os.TempDir()). The file is unlinked at once and its space is
// freed by Close.
func WithScratchDir(dir string) OpenOption {
	return func(o *openOptions) { o.scratchDir = dir }
}

// Image is one image read from a tarball, with its manifest and config
// verified against their digests. Layers are verified by Unpack.
type Image struct {
	img    v1.Image
	name   string
	cfg    *v1.ConfigFile
	digest v1.Hash
	file   *os.File
	// ioMode is the I/O mode of the package the image came from.
	ioMode string
	// platforms are those of the multi-platform image this one was
	// picked from (linux/GOARCH), if any.
	platforms []string
}

// Open reads the image tarball at path: `docker save` output or an OCI
// image layout archive, either of them plain or compressed.
func Open(path string, opts ...OpenOption) (*Image, error) {
	o := openOptions{}
	for _, opt := range opts {
		opt(&o)
	}
	f, idx, err := openArchive(path, o.scratchDir, o.limit())
	if err != nil {
		return nil, fmt.Errorf(errFmtRead, path, err)
	}
	img, err := openImage(idx, o.name)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf(errFmtRead, path, err)
	}
	img.file = f
	return img, nil
}

// openImage selects and loads one image from an indexed archive.
func openImage(idx *tarIndex, want string) (*Image, error) {
	var (
		core      *imageCore
		name      string
		platforms []string
		err       error
	)
	switch {
	case idx.has(dockerManifestName):
		core, name, err = openDockerSave(idx, want)
	case idx.has(ociIndexName):
		core, name, platforms, err = openOCILayout(idx, want)
	default:
		err = errors.New(errUnknownFormat)
	}
	if err != nil {
		return nil, err
	}
	img, err := partial.CompressedToImage(core)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("cannot parse config: %w", err)
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("cannot compute manifest digest: %w", err)
	}
	return &Image{img: img, name: name, cfg: cfg, digest: digest, platforms: platforms}, nil
}

// openDockerSave selects an image of a docker-save manifest.json.
func openDockerSave(idx *tarIndex, want string) (*imageCore, string, error) {
	entries, cs, err := dockerCandidates(idx)
	if err != nil {
		return nil, "", err
	}
	chosen, err := chooseCandidates(cs, want)
	if err != nil {
		return nil, "", err
	}
	if len(chosen) > 1 {
		return nil, "", fmt.Errorf(errSeveralMatches, want, listNames(pickCandidates(cs, chosen)))
	}
	core, err := dockerImage(idx, entries[chosen[0]])
	return core, chosenName(cs[chosen[0]], want), err
}

// openOCILayout selects an image of an OCI layout's index.json, following
// nested indexes down to the manifest for this platform. It also returns
// the platforms of the multi-platform image it was picked from, if any.
func openOCILayout(idx *tarIndex, want string) (*imageCore, string, []string, error) {
	im, cs, err := ociCandidates(idx)
	if err != nil {
		return nil, "", nil, err
	}
	chosen, err := chooseCandidates(cs, want)
	if err != nil {
		// Several unnamed entries that each name a platform are one
		// multi-platform image spread over index.json itself.
		if want != "" || !allPlatformsOneName(im.Manifests) {
			return nil, "", nil, err
		}
		chosen = make([]int, len(im.Manifests))
		for i := range chosen {
			chosen[i] = i
		}
	}
	top := im.Manifests[chosen[0]]
	var platforms []string
	if len(chosen) > 1 {
		ds := make([]v1.Descriptor, len(chosen))
		for i, c := range chosen {
			ds[i] = im.Manifests[c]
		}
		if top, err = pickPlatform(ds, ociIndexName); err != nil {
			return nil, "", nil, err
		}
		platforms = platformNames(ds)
	}
	md, raw, nested, err := resolveManifest(idx, top, ociIndexName, 0)
	if err != nil {
		return nil, "", nil, err
	}
	if nested != nil {
		platforms = nested
	}
	core, err := ociImage(idx, md, raw)
	return core, chosenName(candidate{names: descriptorNames(top)}, want), platforms, err
}

// chooseCandidates returns the indexes of the candidates that want selects. Without
// a name, there must be exactly one candidate.
func chooseCandidates(cs []candidate, want string) ([]int, error) {
	if want == "" {
		if len(cs) == 1 {
			return []int{0}, nil
		}
		return nil, severalImages{fmt.Sprintf(errNeedName, len(cs), listNames(cs))}
	}
	if len(cs) == 1 && len(cs[0].names) == 0 {
		// A lone unnamed image (e.g. `buildah push NAME oci-archive:f.tar`)
		// has no name that could contradict the one asked for.
		return []int{0}, nil
	}
	var chosen []int
	seen := map[string]bool{}
	for i, c := range cs {
		// The digest the list of candidates shows is the only way to
		// choose an unnamed one (skopeo copy into one OCI layout without
		// a tag, docker save by image ID).
		if _, ok := c.matchedName(want); !ok && (c.digest == "" || c.digest != want) {
			continue
		}
		// An image tagged twice in one layout (:latest and :v1) is an
		// entry per name, of one digest: that digest, or a name given
		// to both, chooses one image, not several to pick a platform of.
		if c.digest != "" {
			if seen[c.digest] {
				continue
			}
			seen[c.digest] = true
		}
		chosen = append(chosen, i)
	}
	if len(chosen) == 0 {
		return nil, fmt.Errorf(errNameNotFound, want, listNames(cs))
	}
	return chosen, nil
}

// pickCandidates returns the candidates at indexes is.
func pickCandidates(cs []candidate, is []int) []candidate {
	out := make([]candidate, len(is))
	for i, c := range is {
		out[i] = cs[c]
	}
	return out
}

// chosenName is the name of the chosen image as the archive spells it.
func chosenName(c candidate, want string) string {
	if want != "" {
		if n, ok := c.matchedName(want); ok {
			return n
		}
	}
	return c.defaultName()
}

// allPlatformsOneName reports whether index entries all declare a platform
// and share one name (or none).
func allPlatformsOneName(ds []v1.Descriptor) bool {
	seen := map[string]bool{}
	for _, d := range ds {
		if d.Platform == nil {
			return false
		}
		seen[d.Annotations[annotationRefName]] = true
	}
	return len(seen) == 1
}

// Image returns the image as a go-containerregistry v1.Image.
func (i *Image) Image() v1.Image { return i.img }

// Platforms returns the platforms of the multi-platform image (an index)
// that Open picked this one from, for this machine's; nil if the archive
// held no index of platforms.
func (i *Image) Platforms() []string { return i.platforms }

// Name returns the image's name as stored in the tarball ("" if it has none).
func (i *Image) Name() string { return i.name }

// ConfigFile returns the image's parsed, verified config.
func (i *Image) ConfigFile() *v1.ConfigFile { return i.cfg }

// Digest returns the manifest digest. docker save output stores no
// manifest: there it is the digest of a Docker v2 manifest made from the
// archive's config and layers, stable for the same content.
func (i *Image) Digest() v1.Hash { return i.digest }

// Close releases the tarball (and the decompressed scratch file, if any).
// The v1.Image cannot be read after Close.
func (i *Image) Close() error {
	if i.file == nil {
		return nil
	}
	err := i.file.Close()
	i.file = nil
	return err
}
