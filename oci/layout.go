package oci

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocifn/ocifn/spec"
)

const (
	ociIndexName = "index.json"

	// Annotations that name an entry of an OCI layout's index.json: the
	// OCI one (podman, skopeo, buildah) and containerd's (Docker 25+).
	annotationRefName        = "org.opencontainers.image.ref.name"
	annotationContainerdName = "io.containerd.image.name"
	// BuildKit stores attestations as extra "platform unknown/unknown"
	// manifests in an index, marked with this annotation.
	annotationReferenceType = "vnd.docker.reference.type"

	maxIndexDepth = 4

	errNoOCIImages    = "index.json lists no manifests"
	errBadIndex       = "cannot parse image index %s"
	errBadManifest    = "cannot parse manifest %s"
	errMissingBlob    = "%s names %s %s which is " + errNotInArchive
	errBlobSize       = "%s %s: " + errSizeMismatch
	errIndexTooDeep   = "image indexes nested more than %d deep"
	errNoPlatform     = "index %s has no manifest for %s; it has: %s"
	errOCIConfigParse = "cannot parse config %s: %w"
)

// ociCandidates lists the entries of an OCI layout's index.json.
func ociCandidates(idx *tarIndex) (*v1.IndexManifest, []candidate, error) {
	b, err := idx.readAll(ociIndexName)
	if err != nil {
		return nil, nil, err
	}
	im, err := v1.ParseIndexManifest(bytes.NewReader(b))
	if err != nil {
		return nil, nil, fmt.Errorf(errBadIndex+": %w", ociIndexName, err)
	}
	if len(im.Manifests) == 0 {
		return nil, nil, errors.New(errNoOCIImages)
	}
	cs := make([]candidate, len(im.Manifests))
	for i, d := range im.Manifests {
		cs[i] = candidate{names: descriptorNames(d), label: "<unnamed " + d.Digest.String() + ">", digest: d.Digest.String()}
	}
	return im, cs, nil
}

// descriptorNames returns the image names an index entry carries.
func descriptorNames(d v1.Descriptor) []string {
	var names []string
	for _, k := range []string{annotationRefName, annotationContainerdName} {
		if n := d.Annotations[k]; n != "" && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	return names
}

// blobName is where the OCI image layout keeps the blob with digest h.
func blobName(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// readBlob reads a small blob (index, manifest, config) and verifies its
// size and digest against the descriptor that names it.
func readBlob(idx *tarIndex, d v1.Descriptor, what, namedBy string) ([]byte, error) {
	if d.Digest.Algorithm != "sha256" {
		return nil, fmt.Errorf("%s %s: "+errUnsupportedAlg, what, d.Digest, d.Digest.Algorithm)
	}
	size, ok := idx.size(blobName(d.Digest))
	if !ok {
		return nil, fmt.Errorf(errMissingBlob, namedBy, what, d.Digest)
	}
	if d.Size != size {
		return nil, fmt.Errorf(errBlobSize, what, d.Digest, d.Size, size)
	}
	b, err := idx.readAll(blobName(d.Digest))
	if err != nil {
		return nil, err
	}
	if err := verifyBlob(b, d.Digest); err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, d.Digest, err)
	}
	return b, nil
}

// isIndex tells whether a descriptor (or, when it has no media type, the
// blob it points to) is an image index rather than an image manifest.
func isIndex(mt types.MediaType, blob []byte) bool {
	switch mt {
	case types.OCIImageIndex, types.DockerManifestList:
		return true
	case types.OCIManifestSchema1, types.DockerManifestSchema2:
		return false
	}
	var probe struct {
		MediaType types.MediaType `json:"mediaType"`
		Manifests json.RawMessage `json:"manifests"`
	}
	if json.Unmarshal(blob, &probe) != nil {
		return false
	}
	return probe.MediaType.IsIndex() || probe.Manifests != nil
}

// resolveManifest follows d through nested indexes down to one image
// manifest, picking linux/GOARCH where an index lists platforms. It also
// returns the platforms of the last index it picked from.
func resolveManifest(idx *tarIndex, d v1.Descriptor, namedBy string, depth int) (v1.Descriptor, []byte, []string, error) {
	if depth > maxIndexDepth {
		return v1.Descriptor{}, nil, nil, fmt.Errorf(errIndexTooDeep, maxIndexDepth)
	}
	b, err := readBlob(idx, d, "manifest", namedBy)
	if err != nil {
		return v1.Descriptor{}, nil, nil, err
	}
	if !isIndex(d.MediaType, b) {
		return d, b, nil, nil
	}
	im, err := v1.ParseIndexManifest(bytes.NewReader(b))
	if err != nil {
		return v1.Descriptor{}, nil, nil, fmt.Errorf(errBadIndex+": %w", d.Digest, err)
	}
	child, err := pickPlatform(im.Manifests, d.Digest.String())
	if err != nil {
		return v1.Descriptor{}, nil, nil, err
	}
	md, raw, platforms, err := resolveManifest(idx, child, "index "+d.Digest.String(), depth+1)
	if platforms == nil {
		platforms = platformNames(im.Manifests)
	}
	return md, raw, platforms, err
}

// platformNames lists the platforms of index entries, attestations left
// out.
func platformNames(ds []v1.Descriptor) []string {
	var names []string
	for _, d := range ds {
		if d.Platform != nil && d.Annotations[annotationReferenceType] == "" {
			names = append(names, d.Platform.String())
		}
	}
	return names
}

// wantPlatform is the platform of the containers this program runs.
func wantPlatform() v1.Platform {
	return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
}

// pickPlatform chooses the entry for linux/GOARCH among index entries. An
// index with one entry that names no platform gives that entry.
func pickPlatform(ds []v1.Descriptor, where string) (v1.Descriptor, error) {
	want := wantPlatform()
	var usable []v1.Descriptor
	for _, d := range ds {
		if d.Annotations[annotationReferenceType] != "" {
			continue
		}
		if d.Platform != nil && d.Platform.OS == want.OS && d.Platform.Architecture == want.Architecture {
			return d, nil
		}
		usable = append(usable, d)
	}
	if len(usable) == 1 && usable[0].Platform == nil {
		return usable[0], nil
	}
	// None for this machine's architecture: one for the other ABI its CPU
	// runs (linux/386 on amd64, linux/arm on arm64), as build accepts
	// such an image from a docker-save tarball.
	var runs []v1.Descriptor
	for _, d := range usable {
		if d.Platform != nil && d.Platform.OS == want.OS && spec.Runs(want.Architecture, d.Platform.Architecture) {
			runs = append(runs, d)
		}
	}
	if len(runs) == 1 {
		return runs[0], nil
	}
	have := make([]string, 0, len(usable))
	for _, d := range usable {
		if d.Platform == nil {
			have = append(have, "<no platform> "+d.Digest.String())
			continue
		}
		have = append(have, d.Platform.String())
	}
	if len(have) == 0 {
		have = append(have, "nothing")
	}
	return v1.Descriptor{}, fmt.Errorf(errNoPlatform, where, want.String(), strings.Join(have, ", "))
}

// ociImage reads and verifies the manifest and config of one OCI image
// and checks that every layer blob it names is in the archive.
func ociImage(idx *tarIndex, md v1.Descriptor, rawManifest []byte) (*imageCore, error) {
	m, err := v1.ParseManifest(bytes.NewReader(rawManifest))
	if err != nil {
		return nil, fmt.Errorf(errBadManifest+": %w", md.Digest, err)
	}
	where := "manifest " + md.Digest.String()
	rawCfg, err := readBlob(idx, m.Config, "config", where)
	if err != nil {
		return nil, err
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(rawCfg))
	if err != nil {
		return nil, fmt.Errorf(errOCIConfigParse, m.Config.Digest, err)
	}
	if len(m.Layers) != len(cfg.RootFS.DiffIDs) {
		return nil, fmt.Errorf(errLayerCount, len(m.Layers), len(cfg.RootFS.DiffIDs))
	}
	mt := md.MediaType
	if mt == "" {
		mt = m.MediaType
	}
	if mt == "" {
		mt = types.OCIManifestSchema1
	}
	core := &imageCore{rawConfig: rawCfg, rawManifest: rawManifest, mediaType: mt, layers: map[v1.Hash]*blobLayer{}}
	for i, ld := range m.Layers {
		if ld.Digest.Algorithm != "sha256" {
			return nil, fmt.Errorf("layer %s: "+errUnsupportedAlg, ld.Digest, ld.Digest.Algorithm)
		}
		size, ok := idx.size(blobName(ld.Digest))
		if !ok {
			return nil, fmt.Errorf(errMissingBlob, where, "layer", ld.Digest)
		}
		if size != ld.Size {
			return nil, fmt.Errorf(errBlobSize, "layer", ld.Digest, ld.Size, size)
		}
		if _, dup := core.layers[ld.Digest]; dup {
			continue
		}
		core.layers[ld.Digest] = &blobLayer{
			idx:    idx,
			path:   blobName(ld.Digest),
			digest: ld.Digest,
			diffID: cfg.RootFS.DiffIDs[i],
			size:   ld.Size,
			mt:     ld.MediaType,
		}
	}
	return core, nil
}
