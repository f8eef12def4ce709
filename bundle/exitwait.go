package bundle

import (
	"os"
	"os/exec"

	"golang.org/x/sys/unix"
)

// awaitExit returns once process pid has ended, without reaping it; the
// caller's wait then returns at once.
//
// Why not just a blocking wait: a goroutine in a blocking system call holds
// an OS thread, and while any does, Go's system monitor polls every 20 µs
// to take back its processor. With a container's process and crun each
// waited for so, on every call, that polling and the thread switches it
// causes were a large part of ocifn's own CPU under load (Go's system
// monitor alone 13% in perf; docs/performance.md). A pidfd becomes readable
// when its process ends, and Go's network poller waits for that as it waits
// for the pipes, holding no thread. Where pidfds are missing
// (Linux < 5.10), the caller's blocking wait does the waiting.
func awaitExit(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(fd uintptr) bool {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(p, 0)
		// An error other than EINTR would repeat: give up waiting here.
		return n > 0 || (err != nil && err != unix.EINTR)
	})
}

// runToExit runs cmd as cmd.Run does, waiting for its end through
// awaitExit.
func runToExit(cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	awaitExit(cmd.Process.Pid)
	return cmd.Wait()
}
