package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/containers/storage/pkg/archive"
	"github.com/containers/storage/pkg/chrootarchive"
	"github.com/containers/storage/pkg/idtools"
)

const (
	errFmtUnpack      = "cannot unpack image into %q: %w"
	errFmtLayer       = "cannot unpack layer %d/%d (%s): %w"
	errLayerDigest    = "compressed digest mismatch: expected %s, got %s"
	errLayerDiffID    = "diff_id mismatch: expected %s, got %s"
	errMaxBytes       = "the image is larger than the limit of %d uncompressed bytes"
	errMountPoint     = "cannot create mount point %q: %w"
	errMappingsNoRoot = "the id mappings do not map container root (0)"
	mountPointMode    = 0o755
	mountPointModeTmp = 0o777 | os.ModeSticky
	defaultRootfsMode = 0o755
)

// mountPoints are the directories a container runtime mounts over.
var mountPoints = []string{"proc", "dev", "sys", "tmp", "etc"}

// MountPoints returns the directories Unpack makes sure exist at the top of
// every rootfs, because the runtime mounts over them.
func MountPoints() []string { return append([]string(nil), mountPoints...) }

// UnpackOption changes how Unpack applies layers.
type UnpackOption func(*unpackOptions)

type unpackOptions struct {
	uids, gids []idtools.IDMap
	chownToMe  bool
	maxBytes   int64
	warn       func(Warning)
	// extract applies one sanitized layer tar to dest; by default a
	// re-executed child chrooted into dest (see chrootExtract).
	extract extractFunc
}

// extractFunc applies an uncompressed layer tar to the directory dest.
type extractFunc func(dest string, layer io.Reader, opts *archive.TarOptions) error

// chrootExtract applies a layer in a re-executed child that pivot_roots
// into dest, so that no entry can reach outside it.
func chrootExtract(dest string, layer io.Reader, opts *archive.TarOptions) error {
	_, err := chrootarchive.ApplyUncompressedLayer(dest, layer, opts)
	return err
}

// maxWarnings is how many entries of one layer get a Warning of their own;
// the others are counted in one more.
const maxWarnings = 10

// WithWarnings calls warn for each entry that Unpack neutralised rather
// than refused (see Warning), at most maxWarnings per layer and then one
// that counts the rest.
func WithWarnings(warn func(Warning)) UnpackOption {
	return func(o *unpackOptions) { o.warn = warn }
}

// WithIDMappings shifts file ownership from container ids to host ids,
// e.g. container 0..65535 to host 100000..165535 (root mode). It replaces
// WithoutChown.
func WithIDMappings(uids, gids []idtools.IDMap) UnpackOption {
	return func(o *unpackOptions) {
		o.uids, o.gids, o.chownToMe = uids, gids, false
	}
}

// WithoutChown makes the unpacking user own every file, whatever the
// layers say (rootless single-id mode). It replaces WithIDMappings.
func WithoutChown() UnpackOption {
	return func(o *unpackOptions) {
		o.uids, o.gids, o.chownToMe = nil, nil, true
	}
}

// WithMaxBytes caps the total uncompressed size of all layers; Unpack
// fails once more would be read.
func WithMaxBytes(n int64) UnpackOption {
	return func(o *unpackOptions) { o.maxBytes = n }
}

// Unpack applies the layers of img in order to the directory dest (created
// if missing, expected empty) and verifies each layer while it streams it:
// the blob against the layer digest and the uncompressed tar against the
// config's rootfs.diff_ids. Whiteouts are applied, hard links and symlinks kept,
// device nodes and fifos skipped, setuid and setgid bits and extended
// attributes other than user.* stripped, and whiteouts that aim at a
// directory or its parent refused (see sanitize). Every layer is
// extracted by a re-executed child that pivot_roots into dest, so no entry
// can reach outside it; the
// program must call reexec.Init() (containers/storage/pkg/reexec) first
// thing in main, and must run as root or inside a user namespace.
//
// Afterwards the MountPoints exist (mode 0755, tmp 1777), owned by the
// mapped root with WithIDMappings. Existing entries, including symlinks,
// are left alone.
//
// Entries that would reach outside the rootfs and are applied inside it
// instead are reported to WithWarnings. Unpack refuses to start when the
// file system of dest has less space free than the layers' sizes, and an
// error for a disk that fills later says how much was read and was free.
//
// On error dest holds a partial rootfs that the caller should remove.
func Unpack(ctx context.Context, img v1.Image, dest string, opts ...UnpackOption) error {
	o := unpackOptions{warn: func(Warning) {}, extract: chrootExtract}
	for _, opt := range opts {
		opt(&o)
	}
	if err := unpack(ctx, img, dest, o); err != nil {
		return fmt.Errorf(errFmtUnpack, dest, err)
	}
	return nil
}

func unpack(ctx context.Context, img v1.Image, dest string, o unpackOptions) error {
	cfg, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("cannot read config: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("cannot list layers: %w", err)
	}
	if len(layers) != len(cfg.RootFS.DiffIDs) {
		return fmt.Errorf(errLayerCount, len(layers), len(cfg.RootFS.DiffIDs))
	}

	owner, err := o.rootOwner()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dest, defaultRootfsMode); err != nil {
		return err
	}
	if len(o.uids) > 0 || len(o.gids) > 0 {
		if err := os.Lchown(dest, owner.UID, owner.GID); err != nil {
			return err
		}
	}

	tarOpts := &archive.TarOptions{
		UIDMaps: o.uids,
		GIDMaps: o.gids,
		// Never create device nodes, even as root: a rootfs lives in a cache
		// directory on the host, where a device node would be a way in.
		InUserNS: true,
	}
	if o.chownToMe {
		tarOpts.ChownOpts = &idtools.IDPair{UID: os.Getuid(), GID: os.Getgid()}
	}

	need, free, err := checkSpace(dest, layers)
	if err != nil {
		return err
	}

	budget := &byteBudget{limit: o.maxBytes}
	// Names of the entries of the layers applied so far (see sanitize).
	seen := names{}
	for i, l := range layers {
		if err := ctx.Err(); err != nil {
			return err
		}
		digest, err := l.Digest()
		if err != nil {
			return fmt.Errorf(errFmtLayer, i+1, len(layers), "?", err)
		}
		if err := applyLayer(ctx, l, digest, cfg.RootFS.DiffIDs[i], dest, tarOpts, budget, seen, o); err != nil {
			if isNoSpace(err) {
				err = fmt.Errorf(errNoSpace, budget.used, need, free, err)
			}
			return fmt.Errorf(errFmtLayer, i+1, len(layers), digest, err)
		}
	}
	if err := ensureMountPoints(dest, owner); err != nil {
		if isNoSpace(err) {
			err = fmt.Errorf(errNoSpace, budget.used, need, free, err)
		}
		return err
	}
	return nil
}

const (
	errNoSpace     = "out of space with %d bytes of the layers read: the image needs at least %d bytes unpacked (the size of its layers), and %d bytes were free: %w"
	errSpaceBefore = "not enough space: the image needs at least %d bytes unpacked (the size of its layers), and %d bytes are free"
)

// checkSpace returns how much space the layers need at least (their
// size in the image: a compressed layer unpacks to more) and how much the
// file system of dest has free for unprivileged use, and refuses to start
// when the second is smaller.
func checkSpace(dest string, layers []v1.Layer) (need, free int64, err error) {
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return 0, 0, fmt.Errorf("cannot read the size of a layer: %w", err)
		}
		need += n
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dest, &st); err != nil {
		return 0, 0, fmt.Errorf("cannot read the free space of %s: %w", dest, err)
	}
	free = int64(st.Bavail) * st.Bsize
	if need > free {
		return need, free, fmt.Errorf(errSpaceBefore, need, free)
	}
	return need, free, nil
}

// isNoSpace reports whether err is, or reports, ENOSPC: the extracting
// child reports its errors as text.
func isNoSpace(err error) bool {
	return errors.Is(err, unix.ENOSPC) || strings.Contains(err.Error(), unix.ENOSPC.Error())
}

// rootOwner is the host owner of directories that belong to container root.
// owned returns what says why an entry's owner cannot be unpacked with
// the options' id mappings, or nil when every owner can (no mappings, or
// every entry made the unpacker's own).
func (o unpackOptions) owned() func(uid, gid int) error {
	if o.chownToMe || (len(o.uids) == 0 && len(o.gids) == 0) {
		return nil
	}
	return func(uid, gid int) error {
		for _, id := range []struct {
			what string
			id   int
			maps []idtools.IDMap
		}{{"uid", uid, o.uids}, {"gid", gid, o.gids}} {
			if len(id.maps) == 0 {
				continue
			}
			if _, err := idtools.RawToHost(id.id, id.maps); err != nil {
				return fmt.Errorf("owned by %s %d, which the container ids mapped (%s) do not hold: give ocifn --id-map-size %d or more, or change the owner in the image",
					id.what, id.id, mappingsText(id.maps), id.id+1)
			}
		}
		return nil
	}
}

// mappingsText is maps as container-id ranges: "0-65535".
func mappingsText(maps []idtools.IDMap) string {
	parts := make([]string, len(maps))
	for i, m := range maps {
		parts[i] = fmt.Sprintf("%d-%d", m.ContainerID, m.ContainerID+m.Size-1)
	}
	return strings.Join(parts, ", ")
}

func (o unpackOptions) rootOwner() (idtools.IDPair, error) {
	if len(o.uids) == 0 && len(o.gids) == 0 {
		return idtools.IDPair{UID: os.Getuid(), GID: os.Getgid()}, nil
	}
	uid, gid, err := idtools.GetRootUIDGID(o.uids, o.gids)
	if err != nil {
		return idtools.IDPair{}, fmt.Errorf("%s: %w", errMappingsNoRoot, err)
	}
	return idtools.IDPair{UID: uid, GID: gid}, nil
}

// applyLayer streams one layer into dest in a single pass: the blob is
// hashed as it is read, decompressed, the tar hashed again as it comes out
// of the decompressor, and fed to the extracting child.
func applyLayer(ctx context.Context, l v1.Layer, digest, diffID v1.Hash, dest string, opts *archive.TarOptions, budget *byteBudget, seen names, o unpackOptions) error {
	rc, err := l.Compressed()
	if err != nil {
		return fmt.Errorf("cannot open blob: %w", err)
	}
	defer rc.Close()

	blobHash := sha256.New()
	blob := io.TeeReader(rc, blobHash)
	dec, err := decompress(blob)
	if err != nil {
		return fmt.Errorf("cannot decompress: %w", err)
	}
	defer dec.Close()

	tarHash := sha256.New()
	stream := &guardedReader{ctx: ctx, r: io.TeeReader(dec, tarHash), budget: budget}
	// The extractor reads the layer through sanitize (see sanitize.go).
	pr, pw := io.Pipe()
	var sanitizeErr error
	sanitized := make(chan struct{})
	warnings := 0
	warn := func(entry, reason string) {
		if warnings++; warnings <= maxWarnings {
			o.warn(Warning{Layer: digest.String(), Entry: entry, Reason: reason})
		}
	}
	go func() {
		defer close(sanitized)
		sanitizeErr = sanitize(stream, pw, seen, o.owned(), warn)
	}()
	applyErr := o.extract(dest, pr, opts)
	// The extractor may stop early; stop the copy and wait for it before
	// the rest of stream is read below.
	pr.CloseWithError(io.ErrClosedPipe)
	<-sanitized
	if warnings > maxWarnings {
		o.warn(Warning{Layer: digest.String(), Reason: fmt.Sprintf("%d more entries neutralised like the ones before", warnings-maxWarnings)})
	}
	if stream.err != nil {
		// Cancelled or over the limit: the child's error only echoes ours.
		return stream.err
	}

	// The child may stop reading at the tar's end-of-archive marker, or
	// early when it fails; the digests cover every byte, so read the rest.
	_, tarTailErr := io.Copy(io.Discard, stream)
	if stream.err != nil {
		return stream.err
	}
	_, blobTailErr := io.Copy(io.Discard, blob)

	// A digest mismatch explains a broken stream better than the broken
	// stream's own error, so it comes first wherever the hash is complete.
	// An uncompressed blob is its own tar stream (digest == diff_id): the
	// diff_id check covers it and names the mismatch better.
	if blobTailErr == nil && digest != diffID {
		if err := checkHash(blobHash, digest, errLayerDigest); err != nil {
			return err
		}
	}
	if tarTailErr == nil {
		if err := checkHash(tarHash, diffID, errLayerDiffID); err != nil {
			return err
		}
	}
	// A stream that cannot be read explains a failed extraction.
	switch {
	case blobTailErr != nil:
		return fmt.Errorf("cannot read blob: %w", blobTailErr)
	case tarTailErr != nil:
		return fmt.Errorf("cannot decompress: %w", tarTailErr)
	case sanitizeErr != nil && !errors.Is(sanitizeErr, io.ErrClosedPipe):
		return fmt.Errorf("cannot apply: %w", sanitizeErr)
	case applyErr != nil:
		return fmt.Errorf("cannot apply: %w", applyErr)
	}
	return nil
}

// checkHash compares a finished sha256 with the digest it must have.
func checkHash(h hash.Hash, want v1.Hash, format string) error {
	if want.Algorithm != "sha256" {
		return fmt.Errorf(errUnsupportedAlg, want.Algorithm)
	}
	got := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
	if got != want {
		return fmt.Errorf(format, want, got)
	}
	return nil
}

// byteBudget counts uncompressed bytes across all layers of one Unpack, or
// of one scan of a package's layers.
type byteBudget struct {
	limit int64 // 0: no limit
	used  int64
	// exceeded is the error's format past limit, with limit as its one
	// argument (errMaxBytes if empty).
	exceeded string
}

// guardedReader stops a layer stream when ctx is done or the byte budget is
// spent. Its error is sticky, so the caller can tell its own reason for a
// failed extraction from the child's.
type guardedReader struct {
	ctx    context.Context
	r      io.Reader
	budget *byteBudget
	err    error
}

// Read implements io.Reader.
func (g *guardedReader) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if err := g.ctx.Err(); err != nil {
		g.err = err
		return 0, err
	}
	n, err := g.r.Read(p)
	if cerr := g.charge(int64(n)); cerr != nil {
		return 0, cerr
	}
	return n, err
}

// charge counts n more bytes against the budget: those read, and what an
// entry takes on disk beyond its bytes in the layer (see diskExtra).
func (g *guardedReader) charge(n int64) error {
	g.budget.used += n
	if g.budget.limit > 0 && g.budget.used > g.budget.limit {
		if g.budget.exceeded != "" {
			g.err = fmt.Errorf(g.budget.exceeded, g.budget.limit)
		} else {
			g.err = tooLarge{fmt.Sprintf(errMaxBytes, g.budget.limit)}
		}
		return g.err
	}
	return nil
}

// ensureMountPoints creates the MountPoints that are missing at the top of
// rootfs. The rootfs came from an untrusted image: an existing entry is
// never followed or changed (a symlink "tmp -> /" must not make the host's
// root 1777), and a new directory is opened without following links
// before its mode and owner are set.
func ensureMountPoints(rootfs string, owner idtools.IDPair) error {
	for _, name := range mountPoints {
		p := filepath.Join(rootfs, name)
		mode := os.FileMode(mountPointMode)
		if name == "tmp" {
			mode = mountPointModeTmp
		}
		if err := unix.Mkdir(p, 0o700); err != nil {
			if errors.Is(err, unix.EEXIST) {
				continue
			}
			return fmt.Errorf(errMountPoint, name, err)
		}
		if err := setDirOwnerMode(p, owner, mode); err != nil {
			return fmt.Errorf(errMountPoint, name, err)
		}
	}
	return nil
}

// setDirOwnerMode sets owner and mode of the directory p, refusing to
// follow p if it is a symlink.
func setDirOwnerMode(p string, owner idtools.IDPair, mode os.FileMode) error {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if owner.UID != os.Getuid() || owner.GID != os.Getgid() {
		if err := unix.Fchown(fd, owner.UID, owner.GID); err != nil {
			return err
		}
	}
	perm := uint32(mode.Perm())
	if mode&os.ModeSticky != 0 {
		perm |= unix.S_ISVTX
	}
	return unix.Fchmod(fd, perm)
}

// withExtractor replaces how layers are applied (for tests: see
// extractInThread).
func withExtractor(e extractFunc) UnpackOption {
	return func(o *unpackOptions) { o.extract = e }
}
