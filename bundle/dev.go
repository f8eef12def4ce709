package bundle

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// devNodes are the devices of a container's /dev: the ones the runtime spec
// says every Linux container has (/dev/console and /dev/ptmx aside, which
// need a terminal).
var devNodes = []struct {
	name         string
	major, minor uint32
}{
	{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7},
	{"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0},
}

// devLinks are the symlinks of a container's /dev, as crun makes them, less
// "core", which points at /proc/kcore: masked anyway.
var devLinks = []struct{ name, target string }{
	{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"},
	{"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"},
	{"ptmx", "pts/ptmx"},
}

// devMountPoints are where the config mounts devpts, shm and mqueue.
var devMountPoints = []string{"pts", "shm", "mqueue"}

// devDir is the directory every container of a bundle gets as its /dev.
type devDir struct {
	path string
	// bound says that its devices are bind mounts of the host's, in
	// ocifn's own mount namespace, rather than device nodes.
	bound bool
}

// makeDev makes, once for the bundle, the directory that every container
// of the bundle gets as its /dev, bind mounted read-only. Its devices are
// device nodes where this process may make them (root on the host), else,
// when ocifn has a mount namespace of its own (ownMounts), bind mounts of
// the host's devices. It returns a zero devDir when neither works (the
// cache directory is on a nodev filesystem, say); containers then get
// crun's tmpfs /dev.
//
// Why: for a tmpfs /dev, crun mounts the tmpfs and then, in a user
// namespace where it may not create device nodes, bind mounts each of the
// six host devices onto a file of its own, three mount calls each; every
// one of those mounts is made and torn down again per container. One read-
// only bind mount of a directory that already holds the devices costs crun
// about 0.5 ms less of the kernel's time per container
// (docs/performance.md, what was tried). The container sees the same
// devices; its /dev is read-only, where the tmpfs was writable by the
// function's root.
func makeDev(bundleDir string, ownMounts bool) (devDir, error) {
	d := devDir{path: filepath.Join(bundleDir, "dev")}
	if err := os.Mkdir(d.path, 0o755); err != nil {
		return devDir{}, fmt.Errorf("cannot create the containers' /dev %s: %w", d.path, err)
	}
	usable, err := d.fill(ownMounts)
	if err != nil || !usable {
		return devDir{}, errors.Join(err, d.remove())
	}
	return d, nil
}

// fill creates d's devices, links and mount points. It reports false,
// without an error, when devices that work cannot be had this way.
func (d *devDir) fill(ownMounts bool) (bool, error) {
	// The umask must not take the containers' access away.
	if err := os.Chmod(d.path, 0o755); err != nil {
		return false, fmt.Errorf("cannot set the mode of %s: %w", d.path, err)
	}
	for i, n := range devNodes {
		p := filepath.Join(d.path, n.name)
		var err error
		if !d.bound {
			err = unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(n.major, n.minor)))
			d.bound = i == 0 && err != nil && ownMounts
		}
		if d.bound {
			// Not root on the host: a file, and the host's device bind
			// mounted on it, in ocifn's own mount namespace only.
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				return false, fmt.Errorf("cannot create the mount point %s: %w", p, err)
			}
			err = bindReadOnly("/dev/"+n.name, p)
		} else if err == nil {
			err = os.Chmod(p, 0o666)
		}
		// A node that cannot be made (EPERM: not root on the host; or a
		// filesystem without device nodes) or bound: the tmpfs /dev
		// still works.
		if err != nil {
			return false, nil
		}
	}
	// On a nodev filesystem the nodes exist but cannot be opened; a bind
	// mount of them would be nodev too.
	f, err := os.OpenFile(filepath.Join(d.path, "null"), os.O_WRONLY, 0)
	if err != nil {
		return false, nil
	}
	f.Close()
	for _, l := range devLinks {
		if err := os.Symlink(l.target, filepath.Join(d.path, l.name)); err != nil {
			return false, fmt.Errorf("cannot create the symlink %s: %w", l.name, err)
		}
	}
	for _, m := range devMountPoints {
		p := filepath.Join(d.path, m)
		if err := os.Mkdir(p, 0o755); err != nil {
			return false, fmt.Errorf("cannot create the mount point %s: %w", p, err)
		}
		if err := os.Chmod(p, 0o755); err != nil {
			return false, fmt.Errorf("cannot set the mode of %s: %w", p, err)
		}
	}
	return true, nil
}

// lockedFlags are the flags of a mount that statfs reports (ST_*) and the
// mount flags (MS_*) that keep each.
var lockedFlags = []struct {
	st int64
	ms uintptr
}{
	{unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NODEV, unix.MS_NODEV}, {unix.ST_NOEXEC, unix.MS_NOEXEC},
	{unix.ST_NOATIME, unix.MS_NOATIME}, {unix.ST_NODIRATIME, unix.MS_NODIRATIME}, {unix.ST_RELATIME, unix.MS_RELATIME},
}

// bindReadOnly bind mounts the host's device src on the file dst, read-only.
//
// Why: a container gets these mounts carried along by the "rbind" of its
// /dev, whose "ro" covers only the top mount, not the device mounts below
// it; a writable one let a function's `touch /dev/null` set the times of
// the host's /dev/null (its owner and mode it cannot change: it does not
// own the node). A device node still reads and writes on a read-only mount.
// The flags the host mounted /dev with are kept: in this user namespace
// they are locked, and a remount that dropped one would fail.
func bindReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dst, &st); err != nil {
		return err
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY)
	for _, f := range lockedFlags {
		if st.Flags&f.st != 0 {
			flags |= f.ms
		}
	}
	// Neither noatime nor relatime: strictatime, which a remount without
	// an atime flag would replace with relatime.
	if st.Flags&(unix.ST_NOATIME|unix.ST_RELATIME) == 0 {
		flags |= unix.MS_STRICTATIME
	}
	return unix.Mount("", dst, "", flags, "")
}

// unmount undoes the bind mounts of d's devices, if it has them. The mounts
// live in this process's mount namespace: a bundle left by a process that
// died has none.
func (d devDir) unmount() error {
	if !d.bound {
		return nil
	}
	var errs []error
	for _, n := range devNodes {
		p := filepath.Join(d.path, n.name)
		err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("cannot unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// remove unmounts d's devices and removes d.
func (d devDir) remove() error {
	err := d.unmount()
	if rmErr := os.RemoveAll(d.path); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("cannot remove %s: %w", d.path, rmErr))
	}
	return err
}

// checkDevicesCarried creates a container and checks that its /dev/null is
// the null device: crun carries the bind mounts below a bind mount along
// only when it honours "rbind" in a user namespace (crun 1.8.1 does not;
// the crun hack/crun.sh builds does), and without them /dev would hold
// empty files. The container never runs.
func (b *Bundle) checkDevicesCarried() error {
	c, err := b.create()
	if err != nil {
		// crun 1.8.1 fails here, finding no /dev/null to bind over, and
		// its words alone do not say why.
		return fmt.Errorf("no container could be made with the prepared /dev (%w): this crun likely does not carry bind mounts along with an rbind mount in a user namespace (crun 1.8.1 does not; hack/crun-patches)", err)
	}
	defer c.discard()
	var st unix.Stat_t
	null := fmt.Sprintf("/proc/%d/root/dev/null", c.pid)
	if err := unix.Stat(null, &st); err != nil {
		return fmt.Errorf("cannot look at a container's /dev/null: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != unix.Mkdev(1, 3) {
		return errors.New("a container's /dev/null is not the null device: this crun does not carry bind mounts along with an rbind mount in a user namespace (hack/crun-patches)")
	}
	return nil
}
