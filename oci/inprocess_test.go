package oci

import (
	"errors"
	"fmt"
	"io"
	"runtime"

	"github.com/containers/storage/pkg/archive"
	"golang.org/x/sys/unix"
)

// errThreadChroot marks a failure to set up extractInThread itself.
var errThreadChroot = errors.New("cannot chroot a thread into the rootfs")

// extractInThread applies a layer the way the re-executed child does
// (archive.UnpackLayer at "/" of a chroot into dest, umask 0), but in this
// process: on an OS thread of its own that leaves the file system context
// it shares with the others (unshare CLONE_FS) and chroots into dest. No
// new process, so FuzzUnpack runs thousands of inputs per second instead
// of a few, through the same sanitizer and the same extractor; and still
// a chroot, so an input that would write through a symlink such as "evil
// -> /" cannot reach the host's files. The goroutine never unlocks its
// thread, so Go ends the thread with it, chroot and all.
func extractInThread(dest string, layer io.Reader, opts *archive.TarOptions) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		for _, step := range []func() error{
			func() error { return unix.Unshare(unix.CLONE_FS) },
			func() error { return unix.Chroot(dest) },
			func() error { return unix.Chdir("/") },
		} {
			if err := step(); err != nil {
				errc <- fmt.Errorf("%w: %w", errThreadChroot, err)
				return
			}
		}
		unix.Umask(0)
		_, err := archive.UnpackLayer("/", layer, opts)
		errc <- err
	}()
	return <-errc
}
