package oci

import (
	"archive/tar"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
)

// What sanitize changes or refuses in a layer before the extractor sees it.
// The extractor (containers/storage, chrooted into the rootfs) already keeps
// every entry inside the rootfs and skips device nodes; these rules stop
// what would be harmless inside a container but is not in a directory of
// the host, where the rootfs lives and where host users and processes may
// reach it.
const (
	// setuid and setgid bits are stripped: functions run with
	// noNewPrivileges, so the bits mean nothing there, but on the host a
	// setuid file owned by (mapped) root in a cache directory is a way up.
	modeSetuidSetgid = 0o6000

	errFmtEntry       = "entry %q: %w"
	errWhiteoutTarget = "a whiteout must name an entry of its own directory"
	errTarHeader      = "cannot copy its header: %w"
	errSparse         = "sparse files expand past the size of the layer"
)

// errRefused marks an entry sanitize will not unpack at all.
var errRefused = errors.New("refused")

// keptXattrPrefix is the only extended attribute namespace kept. The others
// carry privilege (security.capability gives file capabilities to whoever
// runs the file on the host), policy (security.selinux, system ACLs) or are
// reserved to root (trusted.*).
const keptXattrPrefix = "user."

// Warning is an entry of a layer that Unpack neutralised rather than
// refused: it would have reached outside the rootfs in a plain directory,
// and the extractor, chrooted into the rootfs, applied it inside instead.
// An image builder never writes one; an image that has one was made by
// hand, and perhaps to attack.
type Warning struct {
	// Layer is the digest of the layer with the entry.
	Layer string
	// Entry is the entry's name as the layer has it ("" for a summary).
	Entry string
	// Reason says what the entry aimed at and what was done instead.
	Reason string
}

// String implements fmt.Stringer.
func (w Warning) String() string {
	return fmt.Sprintf("layer %s: entry %q: %s", w.Layer, w.Entry, w.Reason)
}

// climbsOut reports whether a name in a layer, taken relative to the root
// of the rootfs, would reach outside it: an absolute name, or one whose
// "../" go above its start.
func climbsOut(name string) bool {
	clean := path.Clean(name)
	return path.IsAbs(name) || clean == ".." || strings.HasPrefix(clean, "../")
}

// neutralised says why an entry the sanitizer keeps gets a Warning, or ""
// if it does not.
func neutralised(hdr *tar.Header) string {
	rooted := rootedName(hdr.Name)
	if climbsOut(hdr.Name) {
		if target, ok := strings.CutPrefix(path.Base(hdr.Name), ".wh."); ok {
			return fmt.Sprintf("a whiteout aimed outside the rootfs; applied inside it, to %s", path.Join(path.Dir(rooted), target))
		}
		what := "a name that climbs out of the rootfs"
		if path.IsAbs(hdr.Name) {
			what = "an absolute name"
		}
		return fmt.Sprintf("%s; unpacked inside the rootfs as %s", what, rooted)
	}
	if hdr.Typeflag == tar.TypeLink && climbsOut(hdr.Linkname) {
		return fmt.Sprintf("a hard link to %q, outside the rootfs; linked inside it to %s", hdr.Linkname, rootedName(hdr.Linkname))
	}
	return ""
}

// sanitize copies the layer tar from r to w, entry by entry:
//   - setuid and setgid bits are cleared;
//   - extended attributes other than user.* are dropped;
//   - fifos, device nodes and PAX global headers are dropped (the extractor
//     would create fifos; nothing in a read-only rootfs needs one);
//   - a whiteout whose target is not a plain name (".wh.." aims at the
//     directory itself, ".wh..." at its parent) is refused;
//   - a hard link to a name that no entry of this or an earlier layer had
//     (a host file such as /etc/shadow, or a path through a symlink) is
//     refused: the extractor would fail on it too, without saying which
//     entry it was.
//
// An entry that climbs out of the rootfs (see neutralised) is kept, for the
// extractor puts it inside, and warn is called with its name and why.
//
// seen holds the names of the entries of the earlier layers, and gets this
// layer's. An error names the entry. w is closed with the error (nil at
// the end of the archive), so the extractor reading it stops too.
//
// owned, when set, says why an entry's owner cannot be unpacked (an id the
// container's mappings do not hold): the extractor's own error for it
// names neither the entry nor what would map it.
func sanitize(r io.Reader, w *io.PipeWriter, seen names, owned func(uid, gid int) error, warn func(entry, reason string)) error {
	err := copySanitized(r, w, seen, owned, warn)
	w.CloseWithError(err)
	return err
}

func copySanitized(r io.Reader, w io.Writer, seen names, owned func(uid, gid int) error, warn func(entry, reason string)) error {
	budget, ok := r.(charger)
	if !ok {
		budget = noBudget{}
	}
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return tw.Close()
		}
		if err != nil {
			return err
		}
		keep, err := sanitizeHeader(hdr)
		if err == nil && keep && owned != nil {
			err = owned(hdr.Uid, hdr.Gid)
		}
		if err == nil && keep && hdr.Typeflag == tar.TypeLink {
			if !seen.has(rootedName(hdr.Linkname)) {
				err = fmt.Errorf("%w: hard link to %q: no such file or directory in the image", errRefused, hdr.Linkname)
			}
		}
		if err != nil {
			return fmt.Errorf(errFmtEntry, hdr.Name, err)
		}
		if !keep {
			continue
		}
		if err := budget.charge(diskExtra(hdr)); err != nil {
			return err
		}
		if why := neutralised(hdr); why != "" {
			warn(hdr.Name, why)
		}
		if err := writeParents(tw, seen, budget, rootedName(hdr.Name), hdr.ModTime); err != nil {
			return fmt.Errorf(errFmtEntry, hdr.Name, err)
		}
		seen.add(rootedName(hdr.Name))
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf(errFmtEntry, hdr.Name, fmt.Errorf(errTarHeader, err))
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return fmt.Errorf(errFmtEntry, hdr.Name, err)
		}
	}
}

// charger is a layer stream whose byte budget can be charged for more
// than the bytes read (the unpacking's guardedReader).
type charger interface{ charge(n int64) error }

// noBudget is the charger of a stream that has no budget.
type noBudget struct{}

func (noBudget) charge(int64) error { return nil }

// diskBlock is what a file system gives the smallest entry: an inode and
// a block.
const diskBlock = 4096

// diskExtra is what an entry takes on disk beyond its bytes in the layer:
// an empty file or a directory is a 512-byte header in the tar but a
// block on disk, so a layer of many of them would fill eight times the
// disk that --max-rootfs-bytes allows.
func diskExtra(hdr *tar.Header) int64 {
	inTar := 512 + (hdr.Size+511)/512*512
	onDisk := max(diskBlock, (hdr.Size+diskBlock-1)/diskBlock*diskBlock)
	return max(0, onDisk-inTar)
}

// writeParents writes an entry for each directory above name that no entry
// of this or an earlier layer made, outermost first. The extractor would
// make them itself, owned by root on the host, which a container whose IDs
// are mapped sees as nobody; they get what Docker gives the parents it
// makes: the container's root, mode 0755. Each takes a block on disk, which
// budget is charged for.
func writeParents(tw *tar.Writer, seen names, budget charger, name string, mtime time.Time) error {
	parent := path.Dir(name)
	if parent == "/" || seen.has(parent) {
		return nil
	}
	if err := writeParents(tw, seen, budget, parent, mtime); err != nil {
		return err
	}
	if err := budget.charge(diskBlock); err != nil {
		return err
	}
	seen.add(parent)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: parent[1:] + "/", Mode: 0o755, ModTime: mtime}); err != nil {
		return fmt.Errorf(errTarHeader, err)
	}
	return nil
}

// isSparse reports whether the reader expands hdr's entry from a sparse
// map (old GNU or PAX GNU.sparse format).
func isSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// rootedName is where the extractor, chrooted into the rootfs, puts name.
func rootedName(name string) string { return path.Clean("/" + name) }

// sanitizeHeader changes hdr in place and reports whether to keep the entry.
func sanitizeHeader(hdr *tar.Header) (bool, error) {
	switch hdr.Typeflag {
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo, tar.TypeXGlobalHeader:
		return false, nil
	}
	// A sparse entry reads as its full size, holes as zeros: a few bytes
	// of layer could become terabytes on disk, past --max-rootfs-bytes,
	// which counts the bytes of the layer. Image builders never write them.
	if isSparse(hdr) {
		return false, fmt.Errorf("%w: %s", errRefused, errSparse)
	}
	if target, ok := strings.CutPrefix(path.Base(hdr.Name), ".wh."); ok && !strings.HasPrefix(target, ".wh.") {
		if target == "" || target == "." || target == ".." {
			return false, fmt.Errorf("%w: %s", errRefused, errWhiteoutTarget)
		}
	}
	hdr.Mode &^= modeSetuidSetgid
	for k := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok {
			continue
		}
		if !strings.HasPrefix(name, keptXattrPrefix) {
			delete(hdr.PAXRecords, k)
		}
	}
	for k := range hdr.Xattrs {
		if !strings.HasPrefix(k, keptXattrPrefix) {
			delete(hdr.Xattrs, k)
		}
	}
	// Let the writer choose a format that can hold what is left; but the
	// one it would choose first, USTAR, rounds the modification time to
	// the second and drops the access and change times, which PAX keeps.
	hdr.Format = tar.FormatUnknown
	if hdr.ModTime.Nanosecond() != 0 || !hdr.AccessTime.IsZero() || !hdr.ChangeTime.IsZero() {
		hdr.Format = tar.FormatPAX
	}
	return true, nil
}

// names is a set of entry names kept by a digest of each, not the name:
// a layer may hold millions of entries with names of up to 4 KiB, and
// only whether a name was seen matters. The digest is SHA-256's, not a
// faster hash's that a crafted layer could make collide: a collision would
// let through a hard link to a file the image lacks.
type names map[[16]byte]struct{}

func nameKey(name string) [16]byte {
	sum := sha256.Sum256([]byte(name))
	return [16]byte(sum[:16])
}

func (n names) add(name string)      { n[nameKey(name)] = struct{}{} }
func (n names) has(name string) bool { _, ok := n[nameKey(name)]; return ok }
