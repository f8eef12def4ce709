package bundle

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The descriptors made for every call go through these helpers rather than
// os.Pipe, os.Open and os.RemoveAll: those register every descriptor with
// Go's poller, or try to (an os.Open of a regular or /proc file costs four
// fcntl calls and a failed epoll_ctl besides the open), and an end handed to
// crun is then put back into blocking mode by File.Fd. With these, a
// trivial call makes 123 system calls in ocifn's serving process instead of
// 195 (strace -c over 300 calls; docs/performance.md, what was tried).

// childPipe returns a pipe whose one end goes to a child (crun, and through
// it the container). That end stays an ordinary blocking descriptor that
// the poller never sees, as a child expects its standard streams; ours is
// non-blocking, so reads and writes on it wait in the poller. childReads
// says which end the child gets: the read end (its stdin) or the write end.
func childPipe(childReads bool) (ours, theirs *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	our, their := p[0], p[1]
	if childReads {
		our, their = p[1], p[0]
	}
	// A pipe's only status flag is O_NONBLOCK: clearing all clears it.
	if _, err := unix.FcntlInt(uintptr(their), unix.F_SETFL, 0); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	// A non-blocking descriptor makes os.NewFile return a pollable File; a
	// blocking one, a plain one.
	return os.NewFile(uintptr(our), "|0"), os.NewFile(uintptr(their), "|1"), nil
}

// readSmallFile reads a small file, such as a pid file or a cgroup's
// memory.events, into buf with an open, a read and a close, and returns
// what it read. A file that fills buf is an error, not a truncated read.
//
// The caller lends buf, an array of its own, so that the read allocates
// nothing: every container has two such files read (its pid file and its
// process's schedstat), and a page allocated for each was a third of all
// that a trivial call allocated, which set the pace of Go's collector.
func readSmallFile(path string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == len(buf) {
			return nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("larger than %d bytes", len(buf)-1)}
		}
		return buf[:n], nil
	}
}

// crunStateFiles are the files crun keeps in a container's state directory
// (exec.fifo too: ocifn's start leaves it for this).
var crunStateFiles = []string{"status", "config.json", "seccomp.bpf", "exec.fifo"}

// removeState removes a container's state directory: crun's files by name,
// then the directory, which takes half the system calls of os.RemoveAll
// (it tries the directory as a file first, then opens and lists it). A
// directory with anything else in it (another crun version's files) is
// removed by os.RemoveAll.
func removeState(dir string) error {
	for _, name := range crunStateFiles {
		_ = unix.Unlink(filepath.Join(dir, name))
	}
	if err := unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	return os.RemoveAll(dir)
}
