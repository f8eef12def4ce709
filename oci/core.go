package oci

import (
	"bytes"
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const (
	errDigestMismatch = "digest mismatch: expected %s, got %s"
	errSizeMismatch   = "size mismatch: expected %d bytes, the archive has %d"
	errUnsupportedAlg = "unsupported digest algorithm %q (only sha256 is supported)"
)

// imageCore is one image of an archive, with its manifest and config
// already read and verified. It is the partial.CompressedImageCore from
// which go-containerregistry builds the full v1.Image.
type imageCore struct {
	rawConfig   []byte
	rawManifest []byte
	mediaType   types.MediaType
	layers      map[v1.Hash]*blobLayer
}

var _ partial.CompressedImageCore = (*imageCore)(nil)

// RawConfigFile implements partial.CompressedImageCore.
func (c *imageCore) RawConfigFile() ([]byte, error) { return c.rawConfig, nil }

// MediaType implements partial.CompressedImageCore.
func (c *imageCore) MediaType() (types.MediaType, error) { return c.mediaType, nil }

// RawManifest implements partial.CompressedImageCore.
func (c *imageCore) RawManifest() ([]byte, error) { return c.rawManifest, nil }

// LayerByDigest implements partial.CompressedImageCore.
func (c *imageCore) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if l, ok := c.layers[h]; ok {
		return l, nil
	}
	return nil, fmt.Errorf("layer %s is %s", h, errNotInArchive)
}

// blobLayer is one layer blob inside the archive. Its bytes are read
// lazily, through a section of the archive file.
type blobLayer struct {
	idx    *tarIndex
	path   string // the blob's name in the archive
	digest v1.Hash
	diffID v1.Hash
	size   int64
	mt     types.MediaType
}

var (
	_ partial.CompressedLayer = (*blobLayer)(nil)
	_ partial.WithDiffID      = (*blobLayer)(nil)
)

// Digest implements partial.CompressedLayer.
func (l *blobLayer) Digest() (v1.Hash, error) { return l.digest, nil }

// DiffID implements partial.WithDiffID; it is what the config declares,
// Unpack checks the content against it.
func (l *blobLayer) DiffID() (v1.Hash, error) { return l.diffID, nil }

// Size implements partial.CompressedLayer.
func (l *blobLayer) Size() (int64, error) { return l.size, nil }

// MediaType implements partial.CompressedLayer.
func (l *blobLayer) MediaType() (types.MediaType, error) { return l.mt, nil }

// Compressed implements partial.CompressedLayer. The bytes are returned as
// stored, unverified: Unpack verifies them while it applies the layer.
func (l *blobLayer) Compressed() (io.ReadCloser, error) {
	sr, err := l.idx.open(l.path)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(sr), nil
}

// verifyBlob checks that b has digest want.
func verifyBlob(b []byte, want v1.Hash) error {
	if want.Algorithm != "sha256" {
		return fmt.Errorf(errUnsupportedAlg, want.Algorithm)
	}
	got, _, err := v1.SHA256(bytes.NewReader(b))
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf(errDigestMismatch, want, got)
	}
	return nil
}

// hashSection computes the sha256 of a blob in the archive.
func hashSection(idx *tarIndex, name string) (v1.Hash, error) {
	sr, err := idx.open(name)
	if err != nil {
		return v1.Hash{}, err
	}
	h, _, err := v1.SHA256(sr)
	return h, err
}
