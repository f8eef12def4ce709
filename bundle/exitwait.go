package bundle

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// exitFD returns a descriptor that becomes readable when process pid ends
// (a pidfd on Go's network poller), or nil where pidfds are missing (Linux
// < 5.10): the waits below then block instead.
//
// Why not just a blocking wait: a goroutine in a blocking system call holds
// an OS thread, and while any does, Go's system monitor polls every 20 µs
// to take back its processor. With a container's process and crun each
// waited for so, on every call, that polling and the thread switches it
// causes were a large part of ocifn's own CPU under load (Go's system
// monitor alone 13% in perf; docs/performance.md). Go's network poller
// waits for a pidfd as it waits for the pipes, holding no thread.
func exitFD(pid int) *os.File {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), "pidfd")
}

// awaitFD returns once the process of pidfd f has ended, without reaping
// it; a nil f returns at once.
func awaitFD(f *os.File) {
	if f == nil {
		return
	}
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

// awaitExit returns once process pid has ended, without reaping it; the
// caller's wait then returns at once.
func awaitExit(pid int) {
	if f := exitFD(pid); f != nil {
		awaitFD(f)
		f.Close()
	}
}

// awaitPid returns once process pid has ended, through its pidfd f if it
// is not nil, without reaping it.
func awaitPid(pid int, f *os.File) {
	if f != nil {
		awaitFD(f)
	} else {
		awaitExit(pid)
	}
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

// waitPid waits for a process that crun handed to us as subreaper, through
// its pidfd f if not nil, reaps it, and returns its exit code (128+N for
// signal N) and the CPU time it used (see reapCPU).
func waitPid(pid int, f *os.File) (int, time.Duration, error) {
	awaitPid(pid, f)
	ws, cpu, err := reapCPU(pid)
	if err != nil {
		return -1, 0, err
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal()), cpu, nil
	}
	return ws.ExitStatus(), cpu, nil
}

// childInfo is siginfo_t as waitid fills it in for a child, on 64-bit
// Linux but MIPS (childInfoFits): x/sys/unix's Siginfo leaves the union
// that holds the status opaque.
type childInfo struct {
	signo, errno, code int32
	_                  int32
	pid                int32
	uid                uint32
	status             int32
	_                  [100]byte
}

// cldExited is si_code for a child that exited (CLD_EXITED in
// <signal.h>; x/sys/unix does not name it). With WEXITED, the other codes
// (CLD_KILLED, CLD_DUMPED) mean that a signal ended it.
const cldExited = 1

// childInfoFits says whether childInfo is the kernel's layout here: the
// union starts at 16 only where pointers take 8 bytes, and MIPS swaps
// si_code and si_errno.
const childInfoFits = strconv.IntSize == 64 && unsafe.Offsetof(unix.Siginfo{}.Code) == unsafe.Offsetof(childInfo{}.code)

// exitCode waits for a process that crun handed to us as subreaper and
// returns its exit code (128+N for signal N), and whether it reaped it,
// with the CPU time it used if it did; f is the process's pidfd, or nil.
//
// Where childInfo fits the kernel's siginfo (amd64 and arm64), the
// process stays a zombie until release reaps it, after the call has been
// answered: the kernel's release of a container's process (its /proc
// entries flushed among the rest) took 0.1 ms at the median at 20 calls/s
// (strace -T of wait4), all of it between the function's exit and its
// answer (docs/performance.md).
func exitCode(pid int, f *os.File) (code int, reaped bool, cpu time.Duration, err error) {
	if !childInfoFits {
		code, cpu, err = waitPid(pid, f)
		return code, err == nil, cpu, err
	}
	awaitPid(pid, f)
	var info childInfo
	for {
		err = unix.Waitid(unix.P_PID, pid, (*unix.Siginfo)(unsafe.Pointer(&info)), unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case err != nil:
		return -1, false, 0, err
	case info.code == cldExited:
		return int(info.status), false, 0, nil
	default: // CLD_KILLED, CLD_DUMPED
		return 128 + int(info.status), false, 0, nil
	}
}

// reap reaps a process that has ended and returns the CPU time it used
// (see reapCPU).
func reap(pid int) (time.Duration, error) {
	_, cpu, err := reapCPU(pid)
	return cpu, err
}

// reapCPU reaps process pid, waiting for its end if need be, and returns
// its wait status and the CPU time, user and system, that it and the
// children it reaped used: the kernel's exact runtime, which /proc's
// clock ticks would round to 10 ms.
func reapCPU(pid int) (unix.WaitStatus, time.Duration, error) {
	var ws unix.WaitStatus
	var ru unix.Rusage
	for {
		_, err := unix.Wait4(pid, &ws, 0, &ru)
		if !errors.Is(err, unix.EINTR) {
			return ws, time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), err
		}
	}
}
