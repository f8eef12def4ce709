package oci

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestZstdWindowIsBounded: a zstd layer that asks for a window larger than
// maxZstdWindow is refused when read, instead of the decoder allocating it
// whatever the layer's size; one within it decodes.
func TestZstdWindowIsBounded(t *testing.T) {
	frame := func(window int) []byte {
		var buf bytes.Buffer
		enc, err := zstd.NewWriter(&buf, zstd.WithWindowSize(window), zstd.WithEncoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		zeros := make([]byte, 1<<20)
		for range 8 {
			if _, err := enc.Write(zeros); err != nil {
				t.Fatal(err)
			}
		}
		if err := enc.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	for _, c := range []struct {
		window int
		ok     bool
	}{{8 << 20, true}, {maxZstdWindow, true}, {512 << 20, false}} {
		dec, err := decompress(bytes.NewReader(frame(c.window)))
		if err == nil {
			var n int64
			n, err = io.Copy(io.Discard, dec)
			dec.Close()
			if err == nil && n != 8<<20 {
				t.Errorf("window %d MiB: %d bytes decoded, want %d", c.window>>20, n, 8<<20)
			}
		}
		if c.ok && err != nil {
			t.Errorf("window %d MiB: %v, want it decoded", c.window>>20, err)
		}
		if !c.ok && !errors.Is(err, zstd.ErrWindowSizeExceeded) {
			t.Errorf("window %d MiB: %v, want %v", c.window>>20, err, zstd.ErrWindowSizeExceeded)
		}
	}
}
