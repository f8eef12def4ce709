package bundle

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// sealedBinary runs crun from a sealed in-memory copy of its binary, made
// once per process.
//
// Every crun process first makes sure it does not run from a file that a
// container could overwrite through /proc/<pid>/exe (CVE-2019-5736): unless
// its own executable is a memfd sealed against writes, it copies (or
// read-only bind-mounts) itself and executes that copy, which is a second
// exec and dynamic linking on every call. Started from the sealed copy, a
// container cost 1.7 ms less CPU on the benchmark machine (7.5 to 5.8 ms;
// docs/performance.md, what was tried). Started from a memfd that already has
// the seals crun checks for (seal, shrink, grow, write), crun finds itself
// protected and goes on at once; the protection is the same, as the copy
// cannot be written by anyone (runc's memfd-bind does this for runc).
type sealedBinary struct {
	once sync.Once
	f    *os.File
	// path executes f.
	path string
}

// crunSeals are the seals crun's is_self_cloned() requires, all of them.
const crunSeals = unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE

// exe returns the path to execute crun from: the sealed copy, or path
// itself if the copy cannot be made (no memfd support).
func (s *sealedBinary) exe(path string) string {
	if s == nil {
		return path
	}
	s.once.Do(func() {
		f, err := sealedCopy(path)
		if err != nil {
			return
		}
		// The file is close-on-exec: the kernel opens the path before it
		// closes those descriptors, so a child can still execute it, and
		// crun itself does not inherit it. The path names this process's
		// descriptor, not the child's: before it executes, Go's child
		// moves descriptors of its own onto numbers above the ones it
		// passes, which may be this one's. It must lead to the copy
		// (a /proc of another pid namespace would not).
		s.path = fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd())
		info, err := f.Stat()
		if viaProc, perr := os.Stat(s.path); err != nil || perr != nil || !os.SameFile(info, viaProc) {
			f.Close()
			return
		}
		s.f = f
	})
	if s.f == nil {
		return path
	}
	return s.path
}

// elfMagic starts every ELF executable.
var elfMagic = []byte{0x7f, 'E', 'L', 'F'}

// sealedCopy copies the file at path into a new memfd and seals it. Only an
// ELF binary is copied: a script (a --runtime wrapper, say) run from a
// close-on-exec memfd would hand its interpreter a path the interpreter
// cannot open, and crun's self-check does not concern it anyway.
func sealedCopy(path string) (*os.File, error) {
	src, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	head := make([]byte, len(elfMagic))
	if _, err := io.ReadFull(src, head); err != nil || !bytes.Equal(head, elfMagic) {
		return nil, fmt.Errorf("%s is not an ELF binary", path)
	}
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("crun_cloned:/proc/self/exe", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "crun (sealed copy)")
	if _, err := io.Copy(f, src); err != nil {
		f.Close()
		return nil, fmt.Errorf("cannot copy %s: %w", path, err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, crunSeals); err != nil {
		f.Close()
		return nil, fmt.Errorf("cannot seal the copy of %s: %w", path, err)
	}
	return f, nil
}
