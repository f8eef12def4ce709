package oci

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	dockerManifestName = "manifest.json"

	errNoDockerImages     = "manifest.json lists no images"
	errBadDockerManifest  = "cannot parse manifest.json"
	errConfigNameNoDigest = "manifest.json names config %q, whose name does not carry its digest (expected <sha256 hex>.json, sha256:<hex> or blobs/sha256/<hex>)"
	errMissingConfig      = "manifest.json names config %q which is " + errNotInArchive
	errMissingLayer       = "manifest.json names layer %q which is " + errNotInArchive
	errLayerCount         = "the image has %d layer(s) but its config lists %d rootfs.diff_ids"
	errLayerCompression   = "layer %q is compressed with %s, which is not an image layer format"
	errLayerNameDigest    = "layer %q: its name says digest %s but its content is uncompressed with diff_id %s"
)

// dockerEntry is one image in a docker-save manifest.json.
type dockerEntry struct {
	Config   string
	RepoTags []string
	Layers   []string
}

var (
	// Names that carry the sha256 of their content: "blobs/sha256/<hex>"
	// (Docker 25+), "<hex>.json" (docker, podman, skopeo configs),
	// "sha256:<hex>" (go-containerregistry configs), "<hex>.tar",
	// "<hex>.tar.gz", "<hex>.tar.zst" (go-containerregistry, buildah layers).
	// Legacy "<id>/layer.tar" carries no digest.
	blobPathRE = regexp.MustCompile(`^blobs/sha256/([0-9a-f]{64})$`)
	configRE   = regexp.MustCompile(`^(?:sha256:)?([0-9a-f]{64})(?:\.json)?$`)
	layerRE    = regexp.MustCompile(`^(?:sha256:)?([0-9a-f]{64})\.tar(?:\.gz|\.zst)?$`)
)

// digestFromName returns the digest carried by an archive name, if any.
func digestFromName(name string, base *regexp.Regexp) (v1.Hash, bool) {
	n := cleanName(name)
	m := blobPathRE.FindStringSubmatch(n)
	if m == nil && path.Dir(n) == "." {
		m = base.FindStringSubmatch(n)
	}
	if m == nil {
		return v1.Hash{}, false
	}
	return v1.Hash{Algorithm: "sha256", Hex: m[1]}, true
}

// dockerCandidates lists the images of a docker-save manifest.json.
func dockerCandidates(idx *tarIndex) ([]dockerEntry, []candidate, error) {
	b, err := idx.readAll(dockerManifestName)
	if err != nil {
		return nil, nil, err
	}
	var entries []dockerEntry
	if err := json.Unmarshal(b, &entries); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", errBadDockerManifest, err)
	}
	if len(entries) == 0 {
		return nil, nil, errors.New(errNoDockerImages)
	}
	cs := make([]candidate, len(entries))
	for i, e := range entries {
		cs[i] = candidate{names: e.RepoTags, label: fmt.Sprintf("<unnamed image with config %s>", e.Config)}
		if d, ok := digestFromName(e.Config, configRE); ok {
			cs[i].digest = d.String()
			cs[i].label = "<unnamed " + cs[i].digest + ">"
		}
	}
	return entries, cs, nil
}

// dockerImage reads and verifies the config of one docker-save image and
// describes its layers. docker save declares no manifest, so one is made
// up: each layer's digest is the one its file name carries, or for an
// uncompressed layer its diff_id, or else the hash of the blob.
func dockerImage(idx *tarIndex, e dockerEntry) (*imageCore, error) {
	cfgDigest, ok := digestFromName(e.Config, configRE)
	if !ok {
		return nil, fmt.Errorf(errConfigNameNoDigest, e.Config)
	}
	if !idx.has(e.Config) {
		return nil, fmt.Errorf(errMissingConfig, e.Config)
	}
	rawCfg, err := idx.readAll(e.Config)
	if err != nil {
		return nil, err
	}
	if err := verifyBlob(rawCfg, cfgDigest); err != nil {
		return nil, fmt.Errorf("config %q: %w", e.Config, err)
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(rawCfg))
	if err != nil {
		return nil, fmt.Errorf("cannot parse config %q: %w", e.Config, err)
	}
	if len(e.Layers) != len(cfg.RootFS.DiffIDs) {
		return nil, fmt.Errorf(errLayerCount, len(e.Layers), len(cfg.RootFS.DiffIDs))
	}

	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.DockerManifestSchema2,
		Config: v1.Descriptor{
			MediaType: types.DockerConfigJSON,
			Size:      int64(len(rawCfg)),
			Digest:    cfgDigest,
		},
	}
	core := &imageCore{rawConfig: rawCfg, mediaType: types.DockerManifestSchema2, layers: map[v1.Hash]*blobLayer{}}
	for i, p := range e.Layers {
		size, ok := idx.size(p)
		if !ok {
			return nil, fmt.Errorf(errMissingLayer, p)
		}
		l := &blobLayer{idx: idx, path: p, diffID: cfg.RootFS.DiffIDs[i], size: size}
		comp, err := peekCompression(idx, p)
		if err != nil {
			return nil, err
		}
		declared, hasDigest := digestFromName(p, layerRE)
		switch comp {
		case uncompressed:
			l.mt = types.DockerUncompressedLayer
			l.digest = l.diffID
			if hasDigest && declared != l.diffID {
				return nil, fmt.Errorf(errLayerNameDigest, p, declared, l.diffID)
			}
		case gzipped, zstded:
			l.mt = types.DockerLayer
			if comp == zstded {
				l.mt = types.OCILayerZStd
			}
			l.digest = declared
			if !hasDigest {
				if l.digest, err = hashSection(idx, p); err != nil {
					return nil, fmt.Errorf("cannot hash layer %q: %w", p, err)
				}
			}
		default:
			return nil, fmt.Errorf(errLayerCompression, p, comp)
		}
		core.layers[l.digest] = l
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: l.mt, Size: l.size, Digest: l.digest})
	}
	if core.rawManifest, err = json.Marshal(m); err != nil {
		return nil, err
	}
	return core, nil
}

// peekCompression tells how a blob in the archive is compressed.
func peekCompression(idx *tarIndex, name string) (compression, error) {
	sr, err := idx.open(name)
	if err != nil {
		return "", err
	}
	b := make([]byte, magicLen)
	n, _ := sr.ReadAt(b, 0)
	return detectCompression(b[:n]), nil
}
