package oci

import (
	"bufio"
	"bytes"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// compression is how a blob or a tarball is compressed, told by its first
// bytes: file names and media types are not trusted for this.
type compression string

const (
	uncompressed compression = "none"
	gzipped      compression = "gzip"
	zstded       compression = "zstd"
	// Formats that no image layer uses; named only to give a clear error.
	bzip2ed compression = "bzip2"
	xzed    compression = "xz"
)

var magics = []struct {
	c     compression
	magic []byte
}{
	{gzipped, []byte{0x1f, 0x8b}},
	{zstded, []byte{0x28, 0xb5, 0x2f, 0xfd}},
	{bzip2ed, []byte{0x42, 0x5a, 0x68}},
	{xzed, []byte{0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00}},
}

const (
	magicLen                  = 6
	errUnsupportedCompression = "compressed with %s, which is not supported (gzip, zstd or none are)"
)

func detectCompression(head []byte) compression {
	for _, m := range magics {
		if bytes.HasPrefix(head, m.magic) {
			return m.c
		}
	}
	return uncompressed
}

// maxZstdWindow is the largest window a zstd layer may ask for.
const maxZstdWindow = 128 << 20

// decompress returns the decompressed content of r (gzip, zstd or none).
// It decompresses in the calling goroutine, so when it returns io.EOF all
// of r has been consumed by it, and nothing reads r after Close. An
// uncompressed stream is returned as is.
func decompress(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(magicLen) // a short or empty stream is uncompressed
	switch detectCompression(head) {
	case gzipped:
		return gzip.NewReader(br)
	case zstded:
		// A frame may ask for a window of up to 512 MiB by default, which
		// the decoder allocates whatever the layer's size: a 7 KB layer
		// could take 512 MiB. 128 MiB is what `zstd --long` writes; the
		// format's recommendation for decoders is 8 MiB.
		d, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return nil, err
		}
		return d.IOReadCloser(), nil
	case uncompressed:
		return io.NopCloser(br), nil
	default:
		return nil, fmt.Errorf(errUnsupportedCompression, detectCompression(head))
	}
}
