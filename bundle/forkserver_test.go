package bundle

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/ocifn/ocifn/host"
	"golang.org/x/sys/unix"
)

// forkServerRuntime returns the crun on PATH (make puts the one hack/crun.sh
// builds first), which must serve as a fork server.
func forkServerRuntime(t *testing.T) *Runtime {
	t.Helper()
	rt, err := FindRuntime("crun")
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.Launch(); got != "fork-server" {
		t.Fatalf("crun at %s: %s, want a fork server (run through make, which builds it with hack/crun-patches)", rt.Path(), got)
	}
	return rt
}

// stdioFiles returns files in a new directory dir to give crun as its
// descriptors 0-3: stdin, stdout, stderr and log, closed when the test ends.
func stdioFiles(t *testing.T) (dir string, files []*os.File) {
	t.Helper()
	dir = t.TempDir()
	for _, name := range []string{"stdin", "stdout", "stderr", "log"} {
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		files = append(files, f)
	}
	return dir, files
}

// runCaptured runs crun with args through rt.run and returns its stdout and
// stderr.
func runCaptured(t *testing.T, rt *Runtime, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	dir, files := stdioFiles(t)
	err = rt.run(context.Background(), args, files...)
	out, _ := os.ReadFile(filepath.Join(dir, "stdout"))
	errOut, _ := os.ReadFile(filepath.Join(dir, "stderr"))
	return string(out), string(errOut), err
}

// TestForkServerRunsCrun: a command forked by the server prints what the
// executed crun prints, on the descriptors it was given, and a failing
// one reports its exit status and its error as an executed crun does.
func TestForkServerRunsCrun(t *testing.T) {
	rt := forkServerRuntime(t)
	want, err := exec.Command(rt.Path(), "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := runCaptured(t, rt, "--version")
	if err != nil || out != string(want) {
		t.Errorf("crun --version through the fork server: %q, %v; want %q", out, err, want)
	}
	_, errOut, err := runCaptured(t, rt, "no-such-command")
	if err == nil || err.Error() != "exit status 1" || !strings.Contains(errOut, "unknown command no-such-command") {
		t.Errorf("an unknown command: error %v, stderr %q; want exit status 1 and crun's complaint", err, errOut)
	}
	if got := rt.Launch(); got != "fork-server" {
		t.Errorf("after a failed command: %s, want the server still in use", got)
	}
}

// TestForkServerGoneMeansExec: once the server has died, crun is executed
// again, and the log line says why.
func TestForkServerGoneMeansExec(t *testing.T) {
	rt := forkServerRuntime(t)
	pid := rt.fork.cmd.Process.Pid
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Its reaper collects it; until then a command could still be sent
	// to its socket, and fail (as one running when it dies does).
	for deadline := time.Now().Add(5 * time.Second); unix.Kill(pid, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("fork server %d still there", pid)
		}
	}
	out, _, err := runCaptured(t, rt, "--version")
	if err != nil || !strings.HasPrefix(out, "crun version") {
		t.Errorf("crun --version after the server died: %q, %v", out, err)
	}
	if got := rt.Launch(); !strings.HasPrefix(got, "exec (the fork server failed: ") {
		t.Errorf("Launch() = %q, want exec and why", got)
	}
}

// TestForkServerRefused: a crun without the patch refuses the flag, and
// the reason is crun's own first line.
func TestForkServerRefused(t *testing.T) {
	unpatched := filepath.Join(t.TempDir(), "crun")
	script := "#!/bin/sh\necho \"crun: unrecognized option '$1'\" >&2\necho \"Try 'crun --help'\" >&2\nexit 64\n"
	if err := os.WriteFile(unpatched, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s := &forkServer{}
	if conn := s.start(unpatched); conn != nil {
		t.Fatal("a fork server was started from a crun that refuses the flag")
	}
	want := "exec (crun does not serve as a fork server: crun: unrecognized option '--ocifn-fork-server')"
	if got := s.mode(); got != want {
		t.Errorf("mode() = %q, want %q", got, want)
	}
}

// TestWrapperIsExecuted: a runtime that is a wrapper script is executed
// for every command, so that what it does around crun still happens.
func TestWrapperIsExecuted(t *testing.T) {
	wrapper := filepath.Join(t.TempDir(), "crun-wrapper")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\necho wrapped\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	rt := &Runtime{path: wrapper, sealed: &sealedBinary{}, fork: &forkServer{}}
	if got := rt.Launch(); !strings.HasPrefix(got, "exec (no sealed copy") {
		t.Errorf("Launch() = %q, want exec", got)
	}
	out, _, err := runCaptured(t, rt, "create")
	if err != nil || !bytes.Equal([]byte(out), []byte("wrapped\n")) {
		t.Errorf("the wrapper's output: %q, %v", out, err)
	}
	if rt.fork.started {
		t.Error("a fork server was started for a wrapper")
	}
}

// TestForkServerDiesMidCommand: when the server dies while its child runs
// a command, the command fails, that child (an orphan now) is killed and
// reaped rather than left to finish behind ocifn's back, and crun is
// executed from then on. The child is held in a write to a full pipe.
func TestForkServerDiesMidCommand(t *testing.T) {
	// As in ocifn, the orphan comes to this process.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	rt := forkServerRuntime(t)
	server := rt.fork.cmd.Process.Pid

	full, null := fullPipe(t), devNull(t)
	done := make(chan error, 1)
	go func() { done <- rt.run(context.Background(), []string{"--version"}, null, full, null, null) }()

	var child int
	for deadline := time.Now().Add(5 * time.Second); child == 0; time.Sleep(5 * time.Millisecond) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", server, server)); len(bytes.TrimSpace(b)) > 0 {
			child, _ = strconv.Atoi(strings.Fields(string(b))[0])
		}
		if time.Now().After(deadline) {
			t.Fatal("the server forked no child")
		}
	}
	if err := unix.Kill(server, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || errors.Is(err, errNotSent) || !strings.Contains(err.Error(), "ended while crun ran") {
			t.Errorf("the command the server's death interrupted: %v, want an error saying so", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not return after the server died")
	}
	// Killed and reaped: no process, not even a zombie, by that pid.
	if err := unix.Kill(child, 0); !errors.Is(err, unix.ESRCH) {
		t.Errorf("the orphaned child %d is still there (kill 0: %v)", child, err)
	}
	out, _, err := runCaptured(t, rt, "--version")
	if err != nil || !strings.HasPrefix(out, "crun version") {
		t.Errorf("crun --version after the server died: %q, %v", out, err)
	}
	if got := rt.Launch(); !strings.HasPrefix(got, "exec (the fork server failed: ") {
		t.Errorf("Launch() = %q, want exec and why", got)
	}
}

// fullPipe returns the write end of a pipe that is full, in blocking mode:
// a command writing to it waits until the test ends.
func fullPipe(t *testing.T) *os.File {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	full := os.NewFile(uintptr(p[1]), "full pipe")
	t.Cleanup(func() { full.Close(); unix.Close(p[0]) })
	for chunk := make([]byte, 4096); ; {
		if _, err := unix.Write(p[1], chunk); err != nil {
			break // EAGAIN: full
		}
	}
	if err := unix.SetNonblock(p[1], false); err != nil {
		t.Fatal(err)
	}
	return full
}

func devNull(t *testing.T) *os.File {
	t.Helper()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { null.Close() })
	return null
}

// TestForkServerHonoursContext: a command forked by the server is killed
// when its context ends, as an executed one is, and the server goes on.
func TestForkServerHonoursContext(t *testing.T) {
	rt := forkServerRuntime(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	null := devNull(t)
	start := time.Now()
	err := rt.run(ctx, []string{"--version"}, null, fullPipe(t), null, null)
	if err == nil || err.Error() != "signal: killed" || time.Since(start) > 5*time.Second {
		t.Errorf("a command held past its context: %v after %s, want killed after 200ms", err, time.Since(start))
	}
	if out, _, err := runCaptured(t, rt, "--version"); err != nil || !strings.HasPrefix(out, "crun version") {
		t.Errorf("the next command: %q, %v", out, err)
	}
	if got := rt.Launch(); got != "fork-server" {
		t.Errorf("Launch() = %q, want the server still in use", got)
	}
}

// TestForkServerSeesAChangedConfig: the server parses a bundle's
// config.json once for every `crun create` from it; a config changed since
// is parsed again, so each container runs what its bundle says at its
// creation.
func TestForkServerSeesAChangedConfig(t *testing.T) {
	rt, bundle, state := crunBundle(t)
	config := filepath.Join(bundle, "config.json")
	template := []byte(crunConfig)
	// Each container prints a word of its config and exits.
	run := func(id, word string) string {
		t.Helper()
		b := bytes.Replace(template, []byte(`"sh"`), []byte(`"/bin/busybox", "echo", "`+word+`"`), 1)
		if current, _ := os.ReadFile(config); !bytes.Equal(current, b) {
			if err := os.WriteFile(config, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		dir, files := stdioFiles(t)
		root := "--root=" + state
		if err := rt.run(context.Background(), []string{"--cgroup-manager=disabled", root, "create", "--bundle", bundle, id}, files...); err != nil {
			errOut, _ := os.ReadFile(filepath.Join(dir, "stderr"))
			t.Fatalf("crun create %s: %v: %s", id, err, errOut)
		}
		defer exec.Command(rt.Path(), "--cgroup-manager=disabled", root, "delete", "--force", id).Run()
		if out, err := exec.Command(rt.Path(), "--cgroup-manager=disabled", root, "start", id).CombinedOutput(); err != nil {
			t.Fatalf("crun start %s: %v: %s", id, err, out)
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if out, _ := os.ReadFile(filepath.Join(dir, "stdout")); len(out) > 0 {
				return strings.TrimSpace(string(out))
			}
		}
		t.Fatalf("container %s printed nothing", id)
		return ""
	}
	for i, word := range []string{"first", "first", "second", "third", "third"} {
		if got := run(fmt.Sprintf("c%d", i), word); got != word {
			t.Errorf("container %d printed %q, want %q (its config at its creation)", i, got, word)
		}
	}
}

// crunConfig is the shape of ocifn's configs for crunBundle: a user
// namespace mapping the container's root to unprivileged host IDs, as crun
// needs on any host. Its process is "sh", which tests replace.
const crunConfig = `{"ociVersion": "1.0.2",
	"process": {"user": {"uid": 0, "gid": 0}, "args": ["sh"], "cwd": "/", "env": ["PATH=/bin"], "noNewPrivileges": true},
	"root": {"path": "rootfs", "readonly": true}, "hostname": "t",
	"mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}, {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755"]}],
	"linux": {"uidMappings": [{"containerID": 0, "hostID": 100000, "size": 65536}], "gidMappings": [{"containerID": 0, "hostID": 100000, "size": 65536}],
		"namespaces": [{"type": "user"}, {"type": "pid"}, {"type": "mount"}, {"type": "ipc"}, {"type": "uts"}, {"type": "network"}, {"type": "cgroup"}]}}`

// crunBundle returns the crun fork server's runtime, a bundle directory
// with a rootfs of busybox alone (no config yet) and a state directory for
// crun, as root; it skips otherwise.
func crunBundle(t *testing.T) (rt *Runtime, bundle, state string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("maps the container's IDs to a range of host IDs, which needs root")
	}
	// On a hybrid cgroup host crun refuses to create containers while the
	// cgroup2 mount has controllers; ocifn covers it in its own mount
	// namespace (host.Reexec), and so does this test, in a mount namespace
	// of this goroutine's thread, which the fork server and every crun
	// started from it inherit. The thread is never unlocked: it ends with
	// the test, and no other goroutine runs on it.
	runtime.LockOSThread()
	if cg, err := host.DetectCgroups(); err != nil {
		t.Fatal(err)
	} else if cg.NeedsMask() {
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", cg.Unified, "tmpfs", unix.MS_RDONLY, "size=4k,mode=555"); err != nil {
			t.Fatal(err)
		}
	}
	rt = forkServerRuntime(t)
	bundle, state = t.TempDir(), t.TempDir()
	for _, d := range []string{filepath.Dir(bundle), bundle} { // the container's IDs reach the rootfs
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	rootfs := filepath.Join(bundle, "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	busybox, err := os.ReadFile("/bin/busybox") // busybox-static, from hack/deps.sh
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "busybox"), busybox, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"proc", "dev"} {
		if err := os.Mkdir(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return rt, bundle, state
}

// TestSeccompLoadErrorFailsCreate: the container's process loads its
// seccomp filter before it tells crun create it is ready
// (hack/crun-patches/seccomp-before-the-exec-fifo.patch), so a filter the
// kernel refuses fails the creation, with crun's message as it is on the
// log ocifn reads, not wrapped in the log's JSON twice; an error of the
// set-up before it, which the same patch sends the same way (a missing
// executable), still does too.
func TestSeccompLoadErrorFailsCreate(t *testing.T) {
	rt, bundle, state := crunBundle(t)
	root := "--root=" + state
	// create fails to create container id from config and returns the
	// error crun logged, as ocifn reads it.
	create := func(id, config string) string {
		t.Helper()
		if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		dir, files := stdioFiles(t)
		err := rt.run(context.Background(), []string{"--cgroup-manager=disabled", root, "--log=/proc/self/fd/3", "--log-format=json", "create", "--bundle", bundle, id}, files...)
		defer exec.Command(rt.Path(), "--cgroup-manager=disabled", root, "delete", "--force", id).Run()
		if err == nil {
			t.Fatalf("crun create %s succeeded", id)
		}
		logged, _ := os.ReadFile(filepath.Join(dir, "log"))
		l := &runtimeLog{done: make(chan struct{})}
		l.buf.Write(logged)
		close(l.done)
		return l.wait()
	}
	// One instruction of an opcode that does not exist.
	bad := base64.StdEncoding.EncodeToString([]byte{0xff, 0xff, 0, 0, 0, 0, 0, 0})
	config := strings.Replace(crunConfig, `"ociVersion": "1.0.2",`, `"ociVersion": "1.0.2", "annotations": {"`+seccompBPFAnnotation+`": "`+bad+`"},`, 1)
	config = strings.Replace(config, `"args": ["sh"]`, `"args": ["/bin/busybox", "true"]`, 1)
	if msg := create("bad-filter", config); !strings.Contains(msg, "seccomp") || strings.Contains(msg, "{") {
		t.Errorf("crun create's error: %q, want crun's message about the seccomp filter, once", msg)
	}
	missing := strings.Replace(crunConfig, `"args": ["sh"]`, `"args": ["/bin/missing"]`, 1)
	if msg := create("missing", missing); !strings.Contains(msg, "/bin/missing") || strings.Contains(msg, "{") {
		t.Errorf("crun create's error: %q, want crun's message naming the missing executable, once", msg)
	}
}

// TestKillTree: a dead server's child is killed with every process below
// it (as a container's first process, cloned by crun create), and all are
// reaped, none left a zombie.
func TestKillTree(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	// A shell with two children, one with a child of its own.
	cmd := exec.Command("/bin/sh", "-c", "sleep 100 & sh -c 'sleep 100 & wait' & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	top := cmd.Process.Pid
	var all []int
	for deadline := time.Now().Add(5 * time.Second); len(all) < 4; time.Sleep(10 * time.Millisecond) {
		all = []int{top}
		for i := 0; i < len(all); i++ {
			all = append(all, childrenOf(all[i])...)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process tree has %v, want 4 processes", all)
		}
	}
	pidfd, err := unix.PidfdOpen(top, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	killTree(pidfd, top)
	for _, p := range all {
		if err := unix.Kill(p, 0); !errors.Is(err, unix.ESRCH) {
			t.Errorf("process %d of the tree is still there (kill 0: %v)", p, err)
		}
	}
}

// TestKillTreeOfAReapedProcess: killTree of a process that has been
// reaped already (its pidfd says so) kills nothing: its pid may name
// another process by then, here a shell with a child, whose processes are
// not the reaped one's.
func TestKillTreeOfAReapedProcess(t *testing.T) {
	gone := exec.Command("true")
	if err := gone.Start(); err != nil {
		t.Fatal(err)
	}
	pidfd, err := unix.PidfdOpen(gone.Process.Pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	if err := gone.Wait(); err != nil {
		t.Fatal(err)
	}
	pid := gone.Process.Pid
	startWithPid(t, pid, "/bin/sh", "-c", "sleep 60 & wait")
	var below []int
	for deadline := time.Now().Add(5 * time.Second); len(below) == 0; time.Sleep(10 * time.Millisecond) {
		if below = childrenOf(pid); time.Now().After(deadline) {
			t.Fatalf("the shell %d started no process", pid)
		}
	}
	t.Cleanup(func() { _ = unix.Kill(below[0], unix.SIGKILL) })
	killTree(pidfd, pid)
	for _, p := range append([]int{pid}, below...) {
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if len(stat) == 0 || strings.Contains(string(stat), ") Z ") || strings.Contains(string(stat), ") T ") {
			t.Errorf("killTree of a reaped process killed or stopped process %d, of the one that has its pid now: %q", p, stat)
		}
	}
}

// TestForkServerDiesRightAfterItsFork: a server killed between its fork and
// anything else it does still leaves the caller its child's pid, which the
// child writes itself, so the orphan can be found and killed. The server
// is stopped there under ptrace: at the return of the system call that made
// its child.
func TestForkServerDiesRightAfterItsFork(t *testing.T) {
	// As in ocifn, the orphan comes to this process, which reaps it.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	rt := forkServerRuntime(t)

	// A server of its own, which no goroutine waits for: this test
	// traces and reaps it.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	sock, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	defer sock.Close()
	null := devNull(t)
	// Ptrace requests must all come from the thread that attached.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	proc, err := os.StartProcess(rt.Path(), []string{"crun", forkServerFlag, "3"}, &os.ProcAttr{Files: []*os.File{null, null, null, theirs}})
	theirs.Close()
	if err != nil {
		t.Fatal(err)
	}
	server, serverReaped := proc.Pid, false
	defer func() {
		if serverReaped {
			return
		}
		// A failure before the server was killed: its children first,
		// then it (EXITKILL would, but only once attached).
		for _, c := range childrenOf(server) {
			_ = unix.Kill(c, unix.SIGKILL)
			defer reapOrphan(c)
		}
		_ = unix.Kill(server, unix.SIGKILL)
		var ws unix.WaitStatus
		_, _ = unix.Wait4(server, &ws, unix.WALL, nil)
	}()
	var ready [8]byte
	if n, err := sock.Read(ready[:]); err != nil || string(ready[:n]) != "ready" {
		t.Fatalf("the server said %q, %v", ready[:n], err)
	}

	wait := func() unix.WaitStatus {
		t.Helper()
		var ws unix.WaitStatus
		if _, err := unix.Wait4(server, &ws, unix.WALL, nil); err != nil {
			t.Fatal(err)
		}
		if ws.Exited() || ws.Signaled() {
			t.Fatalf("the server ended under ptrace: %v", ws)
		}
		return ws
	}
	if err := unix.PtraceAttach(server); err != nil {
		// Not a missing feature of ocifn's: the machine forbids tracing
		// (Yama's ptrace_scope 2 or 3, a sandbox).
		t.Skipf("cannot trace the fork server here: %v", err)
	}
	wait()
	if err := unix.PtraceSetOptions(server, unix.PTRACE_O_TRACESYSGOOD|unix.PTRACE_O_EXITKILL); err != nil {
		t.Fatal(err)
	}

	// A command that blocks once run: crun --version on a full pipe.
	r, w, err := childPipe(false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rights := unix.UnixRights(int(w.Fd()), int(null.Fd()), int(fullPipe(t).Fd()), int(null.Fd()), int(null.Fd()))
	if err := unix.Sendmsg(fds[0], []byte("crun\x00--version\x00"), rights, nil, 0); err != nil {
		t.Fatal(err)
	}
	w.Close()

	// From system call stop to system call stop, until one returns the
	// pid of a new child of the server's.
	child := 0
	for stops := 0; child == 0; stops++ {
		if stops > 100000 {
			t.Fatal("the server made no child")
		}
		if err := unix.PtraceSyscall(server, 0); err != nil {
			t.Fatal(err)
		}
		ws := wait()
		if !ws.Stopped() || ws.StopSignal() != unix.SIGTRAP|0x80 {
			continue // not a system call: nothing the server blocks comes here
		}
		var info struct {
			op   uint8
			_    [3]uint8
			arch uint32
			ip   uint64
			sp   uint64
			rval int64 // at an exit; the number at an entry
			_    [56]byte
		}
		if _, _, e := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_GET_SYSCALL_INFO, uintptr(server), unsafe.Sizeof(info), uintptr(unsafe.Pointer(&info)), 0, 0); e != 0 {
			if e == unix.EIO || e == unix.EINVAL {
				t.Skipf("PTRACE_GET_SYSCALL_INFO (Linux 5.3) is missing here: %v", e)
			}
			t.Fatal(e)
		}
		const exit = 2 // PTRACE_SYSCALL_INFO_EXIT
		if info.op == exit && info.rval > 0 && slices.Contains(childrenOf(server), int(info.rval)) {
			child = int(info.rval)
		}
	}
	// Killed before it could record anything of its child.
	if err := unix.Kill(server, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(server, &ws, unix.WALL, nil); err != nil || !ws.Signaled() {
		t.Fatalf("the server did not end: %v, %v", ws, err)
	}
	serverReaped = true
	defer func() {
		_ = unix.Kill(child, unix.SIGKILL)
		reapOrphan(child)
	}()

	_ = r.SetReadDeadline(time.Now().Add(10 * time.Second))
	kind, value, err := readRecord(r)
	if err != nil || kind != recordPID || int(value) != child {
		t.Fatalf("the reply after the server died: record %d %d, %v; want the pid record of its child %d", kind, value, err, child)
	}
	if kind, value, err := readRecord(r); !errors.Is(err, io.EOF) {
		t.Errorf("after the pid record: record %d %d, %v; want the end of the pipe", kind, value, err)
	}
	// The orphan runs on, blocked on its full stdout: it is the caller's
	// to kill (run's killTree).
	if err := unix.Kill(child, 0); err != nil {
		t.Errorf("the child %d: %v, want it still there", child, err)
	}
}

// TestForkServerContextEndingAroundTheFork: commands whose context ends
// about when the server forks for them end as the context says (crun
// killed, or never run), never as a server that failed to reply, and the
// server stays in use. A deadline set for the wait of the child's pid once
// landed on the wait of its status.
func TestForkServerContextEndingAroundTheFork(t *testing.T) {
	rt := forkServerRuntime(t)
	null := devNull(t)
	for i := range 400 {
		d := time.Duration(i%40) * 25 * time.Microsecond
		ctx, cancel := context.WithTimeout(context.Background(), d)
		err := rt.run(ctx, []string{"--version"}, null, null, null, null)
		cancel()
		if err != nil && strings.Contains(err.Error(), "did not reply") {
			t.Fatalf("run %d (context of %s): %v", i, d, err)
		}
	}
	if mode := rt.fork.mode(); mode != "fork-server" {
		t.Errorf("after 400 commands whose context ended: %s, want the fork server still in use", mode)
	}
}

// TestAbandonSparesAReapedChildsPid: a command given up before its child
// named itself, whose replies say the child has been reaped already (its
// pid and its status), leaves alone the process that has that pid now:
// another one, once the pid is reused (here a sleep stands for it).
func TestAbandonSparesAReapedChildsPid(t *testing.T) {
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = other.Process.Kill()
		_ = other.Wait()
	})
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var replies [16]byte
	binary.NativeEndian.PutUint32(replies[0:], recordPID)
	binary.NativeEndian.PutUint32(replies[4:], uint32(other.Process.Pid))
	binary.NativeEndian.PutUint32(replies[8:], recordStatus)
	if _, err := w.Write(replies[:]); err != nil {
		t.Fatal(err)
	}
	w.Close()
	(&forkServer{}).abandon(nil, r, time.Now())
	stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", other.Process.Pid))
	if len(stat) == 0 || strings.Contains(string(stat), ") Z ") {
		t.Errorf("abandon killed process %d, which its replies said was not the child any more", other.Process.Pid)
	}
}

// TestStatusThereWhateverTheDeadline: statusThere sees a status record
// that is there, even once r's read deadline has passed, as abandon's
// (the stuck server's time from the command's sending) has when the
// child named itself just before it: Go fails a read past its deadline
// before it tries it, and a reaped child's pid was then taken for a live
// one's, and killed with what was below it.
func TestStatusThereWhateverTheDeadline(t *testing.T) {
	r, w, err := childPipe(false)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	var status [8]byte
	binary.NativeEndian.PutUint32(status[0:], recordStatus)
	if _, err := w.Write(status[:]); err != nil {
		t.Fatal(err)
	}
	_ = r.SetReadDeadline(time.Now().Add(-time.Second))
	if !statusThere(r) {
		t.Error("statusThere past r's deadline: false, with a status record there")
	}
	if statusThere(r) {
		t.Error("statusThere of an empty pipe: true")
	}
}
