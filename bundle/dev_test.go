package bundle

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestMakeDev(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("device nodes need root (CI runs as root)")
	}
	bundle := t.TempDir()
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
	bundle := t.TempDir()
	if err := unix.Mount("tmpfs", bundle, "tmpfs", unix.MS_NODEV, "size=1m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(bundle, unix.MNT_DETACH) })
	d, err := makeDev(bundle, false)
	if err != nil || d.path != "" {
		t.Fatalf("makeDev on nodev: %+v, %v; want no directory and no error", d, err)
	}
	if _, err := os.Stat(filepath.Join(bundle, "dev")); !os.IsNotExist(err) {
		t.Errorf("the unusable directory was left behind: %v", err)
	}
}
