package oci

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

const (
	errEmptyFile     = "the file is empty"
	errNotRegular    = "it is %s, not a regular file: an image tarball is read at random; save it to a file first"
	errNotTar        = "not a tar archive"
	errTruncated     = "the archive is truncated"
	errNoEndMarker   = "it has no end-of-archive marker"
	errNotInArchive  = "not in the archive"
	errLinkLoop      = "too many links"
	errTooBig        = "larger than the limit of %d bytes"
	maxLinkHops      = 16
	maxMetadataBytes = 16 << 20 // cap on index.json, manifests, configs read into memory
)

// fileKind names the kind of a file that is not a regular one.
func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a pipe"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "of mode " + m.Type().String()
}

// tarEntry is where one regular file's bytes are inside the (uncompressed)
// outer tar.
type tarEntry struct {
	offset int64
	size   int64
}

// tarIndex maps the names in an outer image tarball to the places of their
// bytes, so every blob can be read later through an io.SectionReader
// without scanning the tarball again.
type tarIndex struct {
	r       io.ReaderAt
	entries map[string]tarEntry
	links   map[string]string // name -> archive name it points to (already resolved relative to the link)
}

// openArchive opens path, decompresses it into an unlinked file under
// scratchDir when it is compressed, and indexes the tar inside. The returned
// file must be closed by the caller; it backs every reader of the index.
func openArchive(p, scratchDir string, limit int64) (*os.File, *tarIndex, error) {
	// The tarball is read at random (its index, then each blob where it
	// lies), which a pipe (bash's <(...)), a fifo or a device cannot be;
	// they were reported "empty" (a pipe's size is 0), and opening a fifo
	// that has no writer would block for ever, signals or not.
	if fi, err := os.Stat(p); err == nil && !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf(errNotRegular, fileKind(fi.Mode()))
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	if fi.Size() == 0 {
		_ = f.Close()
		return nil, nil, errors.New(errEmptyFile)
	}

	magic := make([]byte, magicLen)
	n, err := f.ReadAt(magic, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		_ = f.Close()
		return nil, nil, err
	}
	if c := detectCompression(magic[:n]); c != uncompressed {
		plain, err := decompressToScratch(f, scratchDir, limit)
		_ = f.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("cannot decompress (%s): %w", c, err)
		}
		f = plain
	}

	idx, err := indexTar(f)
	if err != nil {
		_ = f.Close()
		return nil, nil, err
	}
	return f, idx, nil
}

// decompressToScratch writes the decompressed content of f to a new file in
// dir. The file is unlinked at once, so nothing is left behind even if the
// process dies: it lives as long as the returned descriptor.
func decompressToScratch(f *os.File, dir string, limit int64) (*os.File, error) {
	if dir == "" {
		dir = os.TempDir()
	}
	out, err := os.CreateTemp(dir, "ocifn-image-*.tar")
	if err != nil {
		return nil, fmt.Errorf("cannot create scratch file: %w", err)
	}
	if err := os.Remove(out.Name()); err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("cannot unlink scratch file: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		_ = out.Close()
		return nil, err
	}
	dec, err := decompress(f)
	if err != nil {
		_ = out.Close()
		return nil, err
	}
	n, err := io.Copy(out, io.LimitReader(dec, limit+1))
	if cerr := dec.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > limit {
		err = tooLarge{fmt.Sprintf("the tarball decompresses to more than %d bytes", limit)}
	}
	if err != nil {
		_ = out.Close()
		return nil, err
	}
	return out, nil
}

// indexTar reads every header of the tar in f once. Data sections are skipped
// by seeking, so a large tarball costs one header read per entry.
func indexTar(f *os.File) (*tarIndex, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	total := fi.Size()
	if total == 0 {
		return nil, errors.New(errEmptyFile)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}

	idx := &tarIndex{r: f, entries: map[string]tarEntry{}, links: map[string]string{}}
	tr := tar.NewReader(f)
	headers := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if headers == 0 {
				return nil, fmt.Errorf("%s: %w", errNotTar, err)
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, fmt.Errorf("%s: %w", errTruncated, err)
			}
			return nil, fmt.Errorf("cannot read tar header after %d entries: %w", headers, err)
		}
		headers++
		name := cleanName(hdr.Name)
		switch hdr.Typeflag {
		case tar.TypeSymlink:
			target := hdr.Linkname
			if !path.IsAbs(target) {
				target = path.Join(path.Dir(name), target)
			}
			idx.links[name] = cleanName(target)
			delete(idx.entries, name)
		case tar.TypeLink:
			idx.links[name] = cleanName(hdr.Linkname)
			delete(idx.entries, name)
		case tar.TypeReg, tar.TypeGNUSparse:
			// tar.Reader transparently expands sparse files, whose bytes are
			// not one contiguous section of the archive: they cannot be read
			// through a SectionReader, and no image tool writes them.
			if hdr.Typeflag == tar.TypeGNUSparse || isPAXSparse(hdr) {
				delete(idx.entries, name)
				continue
			}
			off, err := f.Seek(0, io.SeekCurrent)
			if err != nil {
				return nil, err
			}
			if off+hdr.Size > total {
				return nil, fmt.Errorf("%s: %q needs %d bytes, the file ends %d bytes after its start", errTruncated, hdr.Name, hdr.Size, total-off)
			}
			idx.entries[name] = tarEntry{offset: off, size: hdr.Size}
			delete(idx.links, name)
		}
	}
	if headers == 0 {
		return nil, fmt.Errorf("%s: no entries", errNotTar)
	}
	// tar.Reader also reports a clean end when the file stops right after an
	// entry, which is how a tarball cut at a block boundary looks. A complete
	// tar ends with zero blocks, the last of them just read.
	end, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, err
	}
	if !endsWithZeroBlock(f, end) {
		return nil, fmt.Errorf("%s: %s", errTruncated, errNoEndMarker)
	}
	return idx, nil
}

func endsWithZeroBlock(r io.ReaderAt, end int64) bool {
	const block = 512
	if end < block {
		return false
	}
	b := make([]byte, block)
	if _, err := r.ReadAt(b, end-block); err != nil {
		return false
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

func isPAXSparse(hdr *tar.Header) bool {
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// cleanName turns a tar entry name into the canonical form used as a key:
// no leading "./" or "/", no trailing slash.
func cleanName(n string) string {
	n = path.Clean("/" + n)
	return strings.TrimPrefix(n, "/")
}

// resolve follows links inside the archive to a regular file.
func (t *tarIndex) resolve(name string) (tarEntry, bool) {
	name = cleanName(name)
	for range maxLinkHops {
		if e, ok := t.entries[name]; ok {
			return e, true
		}
		target, ok := t.links[name]
		if !ok {
			return tarEntry{}, false
		}
		name = target
	}
	return tarEntry{}, false
}

// has reports whether name is a regular file (possibly through links).
func (t *tarIndex) has(name string) bool {
	_, ok := t.resolve(name)
	return ok
}

// open returns a reader of the bytes of name.
func (t *tarIndex) open(name string) (*io.SectionReader, error) {
	e, ok := t.resolve(name)
	if !ok {
		if _, isLink := t.links[cleanName(name)]; isLink {
			return nil, fmt.Errorf("%q: %s or %s", name, errLinkLoop, errNotInArchive)
		}
		return nil, fmt.Errorf("%q is %s", name, errNotInArchive)
	}
	return io.NewSectionReader(t.r, e.offset, e.size), nil
}

// readAll returns the content of a small file (a manifest or a config).
func (t *tarIndex) readAll(name string) ([]byte, error) {
	sr, err := t.open(name)
	if err != nil {
		return nil, err
	}
	if sr.Size() > maxMetadataBytes {
		return nil, fmt.Errorf("%q is "+errTooBig, name, maxMetadataBytes)
	}
	b := make([]byte, sr.Size())
	if _, err := io.ReadFull(sr, b); err != nil {
		return nil, fmt.Errorf("cannot read %q: %w", name, err)
	}
	return b, nil
}

// size returns the size in bytes of name.
func (t *tarIndex) size(name string) (int64, bool) {
	e, ok := t.resolve(name)
	return e.size, ok
}
