package bundle

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// forkServer is a resident crun that forks once per `crun create` instead
// of being executed once per container: the exec of crun, its page faults
// and the teardown of its address space were about a tenth of a container's
// CPU (docs/performance.md, what was tried). It is crun's own code, started
// once per process from the sealed copy
// (hack/crun-patches/fork-server.patch says how it serves). A crun without
// that patch refuses the flag at once, and crun is then executed per
// command as before.
type forkServer struct {
	mu      sync.Mutex
	started bool
	conn    *net.UnixConn // nil: no server; execute crun
	cmd     *exec.Cmd
	exited  chan struct{} // closed once cmd has ended and been reaped
	stderr  *boundedBuffer
	// why says why crun is executed instead (no server), for the log.
	why string
	// users counts the bundles that use the server (hold, let).
	users int
}

// forkServerFlag starts crun as a fork server on the descriptor given
// after it.
const forkServerFlag = "--ocifn-fork-server"

// errNotSent means the command never reached the server: it is safe to
// execute crun instead.
var errNotSent = errors.New("crun fork server: command not sent")

// start starts the server from the binary exe once; it reports whether
// there is one.
func (s *forkServer) start(exe string) *net.UnixConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return s.conn
	}
	s.started = true
	conn, err := s.spawn(exe)
	if err != nil {
		s.why = err.Error()
		return nil
	}
	s.conn = conn
	return conn
}

func (s *forkServer) spawn(exe string) (*net.UnixConn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "crun fork server")
	theirs := os.NewFile(uintptr(fds[1]), "crun fork server")
	defer ours.Close() // FileConn holds its own copy
	// The server's descriptor 3 (ExtraFiles[0]).
	cmd := exec.Command(exe, forkServerFlag, "3")
	cmd.Args[0] = "crun"
	cmd.Env = runtimeEnv()
	cmd.ExtraFiles = []*os.File{theirs}
	s.stderr = &boundedBuffer{max: 4096}
	cmd.Stderr = s.stderr
	err = cmd.Start()
	// Only the server may hold its end: a crun that exits at once must
	// leave end of file here.
	theirs.Close()
	if err != nil {
		return nil, err
	}
	c, err := net.FileConn(ours)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	conn := c.(*net.UnixConn)
	// A crun that serves says so first; one without the patch exits
	// with a usage error, which is end of file here.
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hello [16]byte
	n, err := conn.Read(hello[:])
	_ = conn.SetReadDeadline(time.Time{})
	if err != nil || string(hello[:n]) != "ready" {
		conn.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// crun's first line says why (an unpatched crun: "unrecognized
		// option"); the usage hints after it say nothing here.
		msg := s.stderrLine()
		if msg == "no message" {
			msg = fmt.Sprint(err)
		}
		return nil, fmt.Errorf("crun does not serve as a fork server: %s", msg)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	go func(exited chan struct{}) { // reap it whenever it ends
		_ = cmd.Wait()
		close(exited)
	}(s.exited)
	return conn, nil
}

// The kinds of the records the server replies with
// (hack/crun-patches/fork-server.patch): the child's pid, which the child
// writes itself before it runs the command, then its wait status; or an
// errno alone if the command was not run.
const (
	recordPID    = 1
	recordStatus = 2
	recordErrno  = 3
)

// run runs the command line args (args[0] is crun's name) in a child of
// the server, with files as its descriptors 0, 1, 2, ..., and returns how
// it ended as exec.Cmd.Run would: nil or an error naming its exit status.
// If ctx ends first, the child is killed, as exec.CommandContext would.
func (s *forkServer) run(ctx context.Context, conn *net.UnixConn, args []string, files []*os.File) error {
	r, w, err := childPipe(false)
	if err != nil {
		return fmt.Errorf("%w: %v", errNotSent, err)
	}
	defer func() {
		if r != nil {
			r.Close()
		}
	}()
	n := 0
	for _, a := range args {
		n += len(a) + 1
	}
	line := make([]byte, 0, n)
	for _, a := range args {
		line = append(append(line, a...), 0)
	}
	fds := []int{int(w.Fd())}
	for _, f := range files {
		fds = append(fds, int(f.Fd()))
	}
	_, _, err = conn.WriteMsgUnix(line, unix.UnixRights(fds...), nil)
	w.Close()
	if err != nil {
		s.broken(fmt.Sprintf("sending to it failed: %v", err))
		return fmt.Errorf("%w: %v", errNotSent, err)
	}
	sent := time.Now()
	// Until the child names itself, ctx's end stops the wait; what the
	// server does with the command then is seen to in the background.
	fired := make(chan struct{})
	stopWait := context.AfterFunc(ctx, func() {
		_ = r.SetReadDeadline(time.Now())
		close(fired)
	})
	kind, value, err := readRecord(r)
	if !stopWait() {
		// ctx ended: once its deadline is set, no later read sees it.
		<-fired
		_ = r.SetReadDeadline(time.Time{})
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Every command ocifn sends has stuckAfter at least: a
			// server that has not forked for it by now is killed here,
			// before the caller's next command (the delete of the
			// container it asked for) goes to it too.
			if time.Since(sent) >= stuckAfter {
				s.kill(conn, fmt.Sprintf("it ran no crun for a command within %s", stuckAfter))
			}
			go s.abandon(conn, r, sent)
			r = nil // abandon closes it
			return fmt.Errorf("crun fork server did not run crun before %w", context.Cause(ctx))
		}
	}
	switch {
	case err != nil:
		// No child named itself, and a forked one does so before it
		// runs crun: the server ended before it forked, or it ended
		// too after a child that died before it named itself. Nothing
		// of this command is left, and crun may be executed instead.
		s.broken("it ended before it ran crun")
		return fmt.Errorf("%w: crun fork server ended before it ran crun: %s", errNotSent, s.stderrLine())
	case kind == recordErrno:
		// Not run (it could not fork): executing crun instead is safe.
		return fmt.Errorf("%w: %v", errNotSent, syscall.Errno(value))
	case kind == recordStatus:
		// The child was killed before it could name itself.
		return exitError(unix.WaitStatus(value))
	case kind != recordPID:
		return fmt.Errorf("crun fork server: unexpected reply %d", kind)
	}
	pid := int(value)
	// Held from now on: the pid cannot name another process later. (A
	// command that ended and was reaped before this could have its pid
	// reused by then only after the kernel had gone through every other
	// pid up to pid_max, in far less time than that takes.)
	pidfd, pidfdErr := unix.PidfdOpen(pid, 0)
	if pidfdErr == nil {
		// Killed when ctx ends, with what it started, as an executed
		// command is (killCommand): the container's first process that a
		// crun create had cloned came to ocifn, the subreaper, when the
		// child alone was killed, and ended there a zombie for the life of
		// the server. The server reaps the child and replies as for any
		// end; ocifn reaps the others. The descriptor is closed once no
		// kill can use it.
		killed := make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			defer close(killed)
			procs := killAll(pidfd, pid)
			// A server that does not reply for the killed child within
			// replyGrace is stuck: the wait ends there.
			_ = r.SetReadDeadline(time.Now().Add(replyGrace))
			for _, p := range procs {
				if p != pid {
					reapOrphan(p)
				}
			}
		})
		defer func() {
			if !stop() {
				<-killed
			}
			unix.Close(pidfd)
		}()
	}
	kind, value, err = readRecord(r)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// Stuck: crun is executed from now on. Its child, killed, comes
		// to ocifn with the server's end, to be reaped.
		s.kill(conn, fmt.Sprintf("it did not reply within %s of the kill of its child", replyGrace))
		if pidfdErr == nil {
			killTree(pidfd, pid)
		}
		return fmt.Errorf("crun fork server did not reply within %s of the kill of its child %d, after %w", replyGrace, pid, context.Cause(ctx))
	}
	if err != nil || kind != recordStatus {
		// The server died while its child ran crun. That child, an
		// orphan now, must not go on to make a container nobody knows
		// of: kill it and what it has started (a container's first
		// process, which would wait on the exec fifo holding crun's log
		// pipe), and reap them, as ocifn (the subreaper) inherits them.
		s.broken("it ended while crun ran")
		if pidfdErr == nil {
			killTree(pidfd, pid)
		}
		return fmt.Errorf("crun fork server ended while crun ran: %s", s.stderrLine())
	}
	return exitError(unix.WaitStatus(value))
}

// replyGrace is how long the server has to reply for a child killed
// because its command's context ended.
const replyGrace = 5 * time.Second

// stuckAfter is how long the server may take to fork for a command, from
// its sending, before it is taken as stuck (stopped, or in the kernel) and
// killed, crun being executed from then on. It forks in microseconds. It
// was replyGrace after the command's end: a call whose crun create a
// stopped server never ran was answered 5 s late, held by the crun delete
// of its container sent to the server too, and the next calls' commands
// went to it meanwhile; a shutdown waited those 5 s for the warm
// containers' deletes, then 5 s more for the server's end.
const stuckAfter = createGrace

// abandon sees to a command whose caller stopped waiting before its child
// named itself (sent at sent): a server that names no child within
// stuckAfter of that is killed; a child named, by then or just before the
// kill, is killed with what it started, as the command's context has
// ended. It reads the command's replies on r and closes r.
func (s *forkServer) abandon(conn *net.UnixConn, r *os.File, sent time.Time) {
	defer r.Close()
	_ = r.SetReadDeadline(sent.Add(stuckAfter))
	kind, value, err := readRecord(r)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		s.kill(conn, fmt.Sprintf("it ran no crun for a command within %s", stuckAfter))
		// Killed, it may still have named a child just before.
		_ = r.SetReadDeadline(time.Now().Add(replyGrace))
		kind, value, err = readRecord(r)
	}
	if err != nil || kind != recordPID {
		return
	}
	// Held first; then, unless its status is there already (it has been
	// reaped, and its pid may name another process), the child still
	// runs, with perhaps a container's first process started.
	pid := int(value)
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(pidfd)
	if statusThere(r) {
		return
	}
	killTree(pidfd, pid)
	_ = r.SetReadDeadline(time.Now().Add(replyGrace))
	_, _, _ = readRecord(r)
}

// statusThere says, without waiting, whether a status record is the next
// thing in r: the command's child has been reaped. (A read with a deadline
// of now, as this was, never reads: Go fails it before it tries, so a
// child reaped, whose pid may name another process by then, was killed
// with the processes below that one. So does RawConn.Read once r's
// deadline has passed, as abandon's may have: Control reads whatever the
// deadline.)
func statusThere(r *os.File) bool {
	rc, err := r.SyscallConn()
	if err != nil {
		return false
	}
	var b [8]byte
	n := 0
	_ = rc.Control(func(fd uintptr) {
		n, _ = unix.Read(int(fd), b[:]) // r is non-blocking: EAGAIN if empty
	})
	return n == len(b) && int32(binary.NativeEndian.Uint32(b[:4])) == recordStatus
}

// exitError says how a command ended as exec.Cmd.Run would: nil, or an
// error naming its exit status or signal.
func exitError(ws unix.WaitStatus) error {
	switch {
	case ws.Exited() && ws.ExitStatus() == 0:
		return nil
	case ws.Signaled():
		return fmt.Errorf("signal: %v", ws.Signal())
	default:
		return fmt.Errorf("exit status %d", ws.ExitStatus())
	}
}

// readRecord reads one reply record: two native-endian int32.
func readRecord(r io.Reader) (kind, value int32, err error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, 0, err
	}
	return int32(binary.NativeEndian.Uint32(b[:4])), int32(binary.NativeEndian.Uint32(b[4:])), nil
}

// killTree kills the process pid (held by pidfd) and every process below
// it, and reaps them all once they have come to this process, the
// subreaper. Each is stopped before its children are listed: a process
// with a signal pending cannot finish a fork (the kernel checks under the
// lock that attaches the child), so none is missed.
func killTree(pidfd, pid int) {
	for _, p := range killAll(pidfd, pid) {
		reapOrphan(p)
	}
}

// killAll kills, as killTree does, the process pid and every process below
// it, and returns them, pid first, unreaped: none if pid has been reaped
// already (pidfd says so), as its parent may have done while the caller
// held it, whose pid may name another process by then, with processes
// below it that are not its own.
func killAll(pidfd, pid int) []int {
	procs, fds := []int{pid}, []int{pidfd}
	if err := unix.PidfdSendSignal(pidfd, unix.SIGSTOP, nil, 0); errors.Is(err, unix.ESRCH) {
		return nil
	}
	for i := 0; i < len(procs); i++ {
		for _, c := range childrenOf(procs[i]) {
			fd, err := unix.PidfdOpen(c, 0)
			if err != nil {
				continue // gone already
			}
			_ = unix.PidfdSendSignal(fd, unix.SIGSTOP, nil, 0)
			procs, fds = append(procs, c), append(fds, fd)
		}
	}
	for i, fd := range fds {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		if i > 0 {
			unix.Close(fd)
		}
	}
	return procs
}

// killLogHolders kills, with what they started, and reaps the children of
// this process (the subreaper, to which a container's first process comes
// when crun create exits) that hold the pipe with inode ino open: what
// crun left of a container it failed to create and whose pid ocifn never
// learnt, waiting on its exec fifo with crun's log pipe open.
//
// The fork server (spare) is left alone: it holds a command's descriptors
// only while it hands them to its child.
func killLogHolders(ino uint64, spare int) {
	if ino == 0 {
		return
	}
	want := fmt.Sprintf("pipe:[%d]", ino)
	for _, pid := range childrenOf(os.Getpid()) {
		if pid == spare {
			continue
		}
		// Held first, so that the pid checked is the one killed.
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if writes(pid, want) {
			killTree(fd, pid)
		}
		unix.Close(fd)
	}
}

// writes says whether process pid has a descriptor open for writing on
// what readlink of /proc/PID/fd/N names target: a pipe's write end, not
// its read end, which has the same name.
func writes(pid int, target string) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err != nil || l != target {
			continue
		}
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(info)) {
			if v, ok := strings.CutPrefix(line, "flags:"); ok {
				if flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil && flags&(unix.O_WRONLY|unix.O_RDWR) != 0 {
					return true
				}
			}
		}
	}
	return false
}

// pid is the server's process, or 0 if none runs.
func (s *forkServer) pid() int {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// childrenOf lists the children of every thread of pid.
func childrenOf(pid int) []int {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, c := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(c); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// reapOrphan waits for the killed child of a dead server, once it has
// become this process's child: the kernel hands it over as the server
// exits, which may be a little after the server's descriptors closed.
func reapOrphan(pid int) {
	awaitExit(pid)
	for deadline := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
		got, err := unix.Wait4(pid, nil, unix.WNOHANG, nil)
		if got == pid || (err != nil && !errors.Is(err, unix.ECHILD)) || time.Now().After(deadline) {
			return
		}
	}
}

// broken stops using a server that failed: crun is executed from now on.
// Its socket is closed, so a server still alive ends as it does at
// ocifn's exit: it lets the commands it runs finish and replies for them.
func (s *forkServer) broken(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil {
		return
	}
	s.conn.Close()
	s.conn = nil
	s.why = "the fork server failed: " + why
}

// kill stops using a server that is stuck, as broken does, and kills it,
// if it is still the server conn is the socket of.
func (s *forkServer) kill(conn *net.UnixConn, why string) {
	s.mu.Lock()
	if s.conn != conn || s.cmd == nil {
		s.mu.Unlock()
		return
	}
	cmd := s.cmd
	s.mu.Unlock()
	s.broken(why)
	_ = cmd.Process.Kill()
}

// stderrLine is the first line the server wrote on its stderr, if any.
func (s *forkServer) stderrLine() string {
	line, _, _ := strings.Cut(strings.TrimSpace(string(s.stderr.Bytes())), "\n")
	if line == "" {
		return "no message"
	}
	return line
}

// hold counts a user of the server; let ends a use, and the last one stops
// it. nil holds nothing.
func (s *forkServer) hold() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.users++
	s.mu.Unlock()
}

func (s *forkServer) let() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.users--
	last := s.users == 0
	s.mu.Unlock()
	if last {
		s.stop()
	}
}

// stop ends the server and waits until it has: with its socket closed it
// lets the commands it runs finish, replies for them and exits; after 5 s
// it is killed. A server with no command running (no child) is killed at
// once: it has nothing to finish, and one that is stopped held the
// shutdown those 5 s. A later command starts a new one.
func (s *forkServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	if s.cmd != nil {
		if len(childrenOf(s.cmd.Process.Pid)) == 0 {
			_ = s.cmd.Process.Kill()
		}
		select {
		case <-s.exited:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	s.started, s.cmd, s.exited, s.why = false, nil, nil, ""
}

// mode says how crun is run, for the log: "fork-server", or "exec" and why.
func (s *forkServer) mode() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		return "fork-server"
	}
	if s.why == "" {
		return "exec"
	}
	return "exec (" + s.why + ")"
}

// boundedBuffer keeps the first max bytes written to it.
type boundedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *boundedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}
