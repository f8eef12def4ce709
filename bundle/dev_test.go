package bundle

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMakeDev(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("device nodes need root (CI runs as root)")
	}
	// A tmpfs of its own: TMPDIR may be on a nodev filesystem.
	bundle := tmpfs(t, 0)
	d, err := makeDev(bundle, false)
	if err != nil || d.path != filepath.Join(bundle, "dev") || d.bound {
		t.Fatalf("makeDev: %+v, %v; want device nodes in %s/dev", d, err, bundle)
	}
	dir := d.path
	for _, n := range devNodes {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, n.name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Mode&0o777 != 0o666 || unix.Major(st.Rdev) != n.major || unix.Minor(st.Rdev) != n.minor {
			t.Errorf("%s: mode %o, device %d:%d; want a character device %d:%d, mode 666", n.name, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), n.major, n.minor)
		}
	}
	for _, l := range devLinks {
		if got, err := os.Readlink(filepath.Join(dir, l.name)); err != nil || got != l.target {
			t.Errorf("%s: %q, %v; want a link to %s", l.name, got, err, l.target)
		}
	}
	for _, d := range append(devMountPoints, ".") {
		if fi, err := os.Stat(filepath.Join(dir, d)); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: %v, %v; want a directory, mode 755", d, fi.Mode(), err)
		}
	}
}

// On a nodev filesystem the nodes could be made but not opened: containers
// must keep crun's tmpfs /dev there.
func TestMakeDevOnNodev(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("mounting a tmpfs needs root (CI runs as root)")
	}
	bundle := tmpfs(t, unix.MS_NODEV)
	d, err := makeDev(bundle, false)
	if err != nil || d.path != "" {
		t.Fatalf("makeDev on nodev: %+v, %v; want no directory and no error", d, err)
	}
	if _, err := os.Stat(filepath.Join(bundle, "dev")); !os.IsNotExist(err) {
		t.Errorf("the unusable directory was left behind: %v", err)
	}
}

// tmpfs mounts a small tmpfs with flags on a new temporary directory.
func tmpfs(t *testing.T, flags uintptr) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// Unprivileged, ocifn may not make device nodes: in a mount namespace of
// its own it binds the host's, and removing the directory unbinds them.
// The test does that on a thread of its own, in a new mount namespace and
// without CAP_MKNOD, so neither the host nor other tests see it.
func TestMakeDevBindsTheHostsDevices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("a mount namespace needs root (CI runs as root)")
	}
	bundle := tmpfs(t, 0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Never unlocked: the thread ends with the goroutine, and its
		// namespace with it.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			t.Error(err)
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			t.Error(err)
			return
		}
		if err := dropCapability(unix.CAP_MKNOD); err != nil {
			t.Error(err)
			return
		}
		d, err := makeDev(bundle, true)
		if err != nil || !d.bound {
			t.Errorf("makeDev without CAP_MKNOD: %+v, %v; want the host's devices bound", d, err)
			return
		}
		for _, n := range devNodes {
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(d.path, n.name), &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != unix.Mkdev(n.major, n.minor) {
				t.Errorf("%s: %v; want the host's device %d:%d", n.name, err, n.major, n.minor)
			}
			// The rbind of a container's /dev carries these mounts along
			// as they are: read-only, or a touch sets the host's node's
			// times.
			var fs unix.Statfs_t
			if err := unix.Statfs(filepath.Join(d.path, n.name), &fs); err != nil || fs.Flags&unix.ST_RDONLY == 0 {
				t.Errorf("%s: mount flags %#x, %v; want a read-only mount", n.name, fs.Flags, err)
			}
		}
		if err := d.remove(); err != nil {
			t.Errorf("remove: %v", err)
		}
		if _, err := os.Stat(d.path); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", d.path, err)
		}
		mounts, _ := os.ReadFile("/proc/thread-self/mountinfo")
		if strings.Contains(string(mounts), d.path) {
			t.Errorf("mounts left under %s:\n%s", d.path, mounts)
		}
	}()
	<-done
}

// dropCapability takes capability c out of the calling thread's effective
// set.
func dropCapability(c int) error {
	h := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var d [2]unix.CapUserData
	if err := unix.Capget(&h, &d[0]); err != nil {
		return err
	}
	d[c/32].Effective &^= 1 << (c % 32)
	return unix.Capset(&h, &d[0])
}
