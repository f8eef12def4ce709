package bundle

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Runtime is the OCI runtime binary (crun) and, once bound to a bundle, where
// it keeps the state of that bundle's containers.
type Runtime struct {
	path     string
	stateDir string
	version  string
	// sealed is the sealed in-memory copy of the binary that crun is run
	// from; shared by every copy of this Runtime. nil: run path.
	sealed *sealedBinary
	// fork is the resident crun that creates containers, started from the
	// sealed copy on first use; shared like sealed. nil: execute crun.
	fork *forkServer
	// stuck hears of the commands killed at their deadline; a bundle's
	// own (Options.OnStuck). nil: none hears.
	stuck *stuckNotes
}

// Stuck is a runtime command that did not end within its time (a crun
// create 1 s past its call's end, a crun delete or kill after 5 s, a crun
// start at its call's end) and was killed with what it started, or, sent
// to a fork server that never ran it, had the server killed.
type Stuck struct {
	// Command is crun's command: create, delete, kill or start.
	Command string
	// Container is the container it was for.
	Container string
	// Err is how the command ended.
	Err error
}

// stuckNotes tells OnStuck of each container once: the commands that may
// follow one killed for the same container (its delete, Close's delete of
// what is left) would repeat what the first said.
type stuckNotes struct {
	on   func(Stuck)
	mu   sync.Mutex
	seen map[string]bool
}

// stuckNotesMax bounds the containers remembered; container names are
// never reused, so forgetting them all only risks one more line for one.
const stuckNotesMax = 1024

// noteStuck tells of the command crun was run with (a, its arguments
// without the global ones), which ended with err after ctx had: killed at
// its deadline.
func (r *Runtime) noteStuck(a []string, err error) {
	n := r.stuck
	if n == nil || n.on == nil {
		return
	}
	command, container := "", ""
	for i, arg := range a {
		if !strings.HasPrefix(arg, "-") {
			command = arg
			// kill ID SIGNAL; the others end with the container.
			if container = a[len(a)-1]; command == "kill" && i+1 < len(a) {
				container = a[i+1]
			}
			break
		}
	}
	n.mu.Lock()
	if n.seen[container] {
		n.mu.Unlock()
		return
	}
	if n.seen == nil || len(n.seen) >= stuckNotesMax {
		n.seen = map[string]bool{}
	}
	n.seen[container] = true
	n.mu.Unlock()
	n.on(Stuck{Command: command, Container: container, Err: err})
}

// FindRuntime locates crun (a path, or a name looked up on PATH) and checks
// that it runs.
func FindRuntime(name string) (*Runtime, error) {
	path, err := exec.LookPath(name)
	if err != nil && strings.Contains(name, "/") {
		// A path is not looked up on PATH: what is wrong is the file
		// it names (missing, not executable).
		return nil, fmt.Errorf("cannot use the OCI runtime %s (--runtime): %w", name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot find the OCI runtime %q on PATH: ocifn needs crun (Debian/Ubuntu: apt-get install crun), or its path in --runtime: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), versionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.Cancel = func() error { return killCommand(cmd.Process) }
	// A process it started that outlives it would hold stdout open.
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s --version did not answer within %s: the OCI runtime (--runtime) hangs", path, versionTimeout)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot run %s --version: %w", path, err)
	}
	version, _, _ := strings.Cut(string(out), "\n")
	return &Runtime{path: path, version: strings.TrimSpace(version), sealed: &sealedBinary{}, fork: &forkServer{}}, nil
}

// versionTimeout bounds `crun --version` at startup, which takes
// milliseconds: a runtime that never answers it kept the server from
// listening, or saying why, for ever.
const versionTimeout = 10 * time.Second

// Version is the first line of `crun --version`, e.g. "crun version 1.8.1".
func (r *Runtime) Version() string { return r.version }

// Path is the runtime binary.
func (r *Runtime) Path() string { return r.path }

// Exit describes how a call's container ended.
type Exit struct {
	// Code is the exit status of the function's process; 128+N if signal N
	// ended it.
	Code int
	// RuntimeError is what crun itself reported, if it failed to create or
	// start the container.
	RuntimeError string
	// OOMKilled, when not empty, says that the kernel's OOM killer killed
	// processes of the call's cgroup at its memory limit: it names the
	// container, the limit and how many processes were killed.
	OOMKilled string
	// Start is the time from asking for a container to its process running
	// the function's entrypoint.
	Start time.Duration
	// Duration is the wall time of the whole call.
	Duration time.Duration
}

// Call is one run of the function: its standard streams and, for fronts
// whose protocol needs them, process arguments, extra environment, a working
// directory and extra read-only bind mounts. A Call that sets none of the
// latter runs with the bundle's own config and may use a warm container.
type Call struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Args, when not nil, replace the process's arguments (entrypoint and
	// command of the image).
	Args []string
	// Env is added to the image's environment; a name set in both takes
	// this value.
	Env []string
	// Cwd, when set, is the process's working directory.
	Cwd string
	// Mounts are bind mounted read-only into the container.
	Mounts []Mount
}

// Mount is a host directory bind mounted read-only into a call's container.
type Mount struct {
	// Source is the host path; Destination the absolute path inside.
	Source, Destination string
}

// custom reports whether the call needs a config of its own.
func (c *Call) custom() bool {
	return c.Args != nil || len(c.Env) > 0 || c.Cwd != "" || len(c.Mounts) > 0
}

// Run starts one fresh container from the bundle, writes stdin to it, copies
// its output to stdout and stderr, and waits for it to end. When ctx ends
// first, every process of the container is killed.
//
// A failed copy of stdout or stderr (a writer's size cap, say) ends the call
// as ctx ending does: every process of the container is killed at once,
// rather than left to run, perhaps ignoring EPIPE, until ctx ends. The
// copy's error is returned as it is.
func (b *Bundle) Run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (Exit, error) {
	return b.Call(ctx, Call{Stdin: stdin, Stdout: stdout, Stderr: stderr})
}

// Call runs one call as Run does. Warm containers are created with the
// bundle's fixed config, so a call with arguments, environment, a working
// directory or mounts of its own gets a container created for it from a
// config written for it.
func (b *Bundle) Call(ctx context.Context, call Call) (Exit, error) {
	start := time.Now()
	var c *container
	var err error
	pooled := !call.custom()
	if pooled {
		c, err = b.started(ctx)
	} else {
		c, err = b.startedWith(ctx, &call)
	}
	if err != nil {
		if pooled {
			b.done()
		}
		return Exit{Duration: time.Since(start)}, err
	}
	defer func() {
		if pooled {
			// The pool counts the call as running until here, before the
			// release settles.
			b.leave()
		}
		b.release(c, pooled)
	}()
	stdin := call.Stdin
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	exit, err := c.wait(ctx, stdin, call.Stdout, call.Stderr)
	exit.Start = c.running.Sub(start)
	exit.Duration = time.Since(start)
	return exit, err
}

// startedWith creates and starts a container from a config made for call.
func (b *Bundle) startedWith(ctx context.Context, call *Call) (*container, error) {
	config, err := b.writeCallConfig(call)
	if err != nil {
		return nil, err
	}
	defer os.Remove(config)
	return b.createStarted(ctx, config)
}

// started returns a container whose process runs the entrypoint: a warm
// one from the pool if there is one that still starts, else a new one.
func (b *Bundle) started(ctx context.Context) (*container, error) {
	if c := b.take(); c != nil {
		if err := c.start(ctx); err == nil {
			return c, nil
		}
		// Its process died while it waited (the OOM killer, a stray
		// kill): the call gets a new container instead.
		c.discard()
		b.misses.Add(1)
	}
	return b.createStarted(ctx, "")
}

// createStarted creates a container from the config file config (empty:
// the bundle's own) and starts it.
func (b *Bundle) createStarted(ctx context.Context, config string) (*container, error) {
	c, err := b.createWith(ctx, config)
	if err != nil {
		return nil, err
	}
	if err := c.start(ctx); err != nil {
		c.discard()
		return nil, &RuntimeError{Op: "start", Message: err.Error()}
	}
	return c, nil
}

// container is a created container, with the host ends of its standard
// streams.
type container struct {
	rt      *Runtime
	id      string
	pid     int
	created time.Time
	// running is when its process was let go to run the entrypoint.
	running time.Time
	stdin   *os.File // write end
	stdout  *os.File // read end
	stderr  *os.File // read end
	log     *runtimeLog
	// pidfd is a pidfd of the container's process (nil: none), opened when
	// it was created, so that a call finds it ready.
	pidfd *os.File
	// exited is set once the container's process has been waited for, and
	// reaped once it has also been reaped.
	exited, reaped bool
	// ending says, during wait, whether its process was killed first
	// (endKilled) or seen to end by itself (endSeen).
	ending atomic.Int32
	// heldPipes are the inodes of its output and log pipes, taken when
	// the waits for them were bounded (bound), to find who holds them.
	heldPipes []uint64
	// setupCPU is the CPU time its process used before it was started,
	// crun's set-up of the container (-1: not known); cpu, once it has
	// been reaped, what it and the children it reaped used in all.
	setupCPU, cpu time.Duration
	// cgroup is the container's own cgroup directory, when calls run in
	// cgroups of their own.
	cgroup string
	// namespaces holds the container's namespaces whose teardown would
	// delay its answer; see holdNamespaces.
	namespaces []*os.File
	// fifo is the write end of the container's exec fifo, when fifoOpen:
	// opened when it was created; see openExecFifo.
	fifo     int
	fifoOpen bool
}

// createTimeout bounds a container's creation for the pool: crun takes
// milliseconds; one stuck (a hung mount, a stopped fork server) must not
// hold a worker, or the server's shutdown, for ever.
const createTimeout = 30 * time.Second

// create asks crun to create a container whose process waits for `crun
// start`. crun hands the container's init to ocifn, its subreaper, when it
// exits, so ocifn can wait for the function and read its exit status.
func (b *Bundle) create() (c *container, err error) {
	return b.createIn(context.Background())
}

// createIn creates a container as create does, unless ctx ends first.
func (b *Bundle) createIn(ctx context.Context) (c *container, err error) {
	ctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	return b.createWith(ctx, "")
}

// createGrace is how long a crun create that ctx's end finds under way
// may still take before it is killed. Killed midway, crun leaves the
// container's first process to ocifn, its subreaper, with no pid file to
// name it: the process ends once its set-up with crun fails, and stayed a
// zombie for the life of the server, one per call whose caller gave up
// while its container was made. Let finish, crun either makes the
// container, which is then removed as any other, or fails and removes
// what it made itself. A crun create takes milliseconds; one that takes
// longer is stuck, and killed.
const createGrace = time.Second

// graceAfter returns a context that ends grace after ctx does, and the
// function that releases it. Its cause (context.Cause) says so, with
// ctx's own: what crun's failure then names is the call's timeout, or its
// caller's going, not "context canceled".
func graceAfter(ctx context.Context, grace time.Duration) (context.Context, context.CancelFunc) {
	late, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		over := &graceOver{grace: grace, cause: context.Cause(ctx)}
		time.AfterFunc(grace, func() { cancel(over) })
	})
	return late, func() {
		stop()
		cancel(nil)
	}
}

// graceOver is the cause of a graceAfter context's end. Its message
// names the cause alone, which says whose end it was: a call's (its
// timeout, its caller's going) or a pool refill's own deadline.
type graceOver struct {
	grace time.Duration
	cause error
}

func (e *graceOver) Error() string {
	return fmt.Sprintf("%v, and %s more", e.cause, e.grace)
}

func (e *graceOver) Unwrap() error { return e.cause }

// createWith creates a container from the config file config, or from the
// bundle's own config when it is empty. If ctx ends first, crun is let
// finish for createGrace, then killed, and what it made is removed.
func (b *Bundle) createWith(ctx context.Context, config string) (c *container, err error) {
	if err := ctx.Err(); err != nil {
		return nil, &RuntimeError{Op: "create", Message: context.Cause(ctx).Error()}
	}
	id, err := containerID()
	if err != nil {
		return nil, err
	}
	var files []*os.File
	defer func() {
		if err != nil {
			for _, f := range files {
				f.Close()
			}
		}
	}()
	pipe := func(childReads bool) (ours, theirs *os.File, err error) {
		ours, theirs, err = childPipe(childReads)
		if err == nil {
			files = append(files, ours, theirs)
		}
		return ours, theirs, err
	}
	inW, inR, err := pipe(true)
	if err != nil {
		return nil, fmt.Errorf("cannot create the stdin pipe: %w", err)
	}
	outR, outW, err := pipe(false)
	if err != nil {
		return nil, fmt.Errorf("cannot create the stdout pipe: %w", err)
	}
	errR, errW, err := pipe(false)
	if err != nil {
		return nil, fmt.Errorf("cannot create the stderr pipe: %w", err)
	}
	logR, logW, err := childPipe(false)
	if err != nil {
		return nil, fmt.Errorf("cannot create the runtime log pipe: %w", err)
	}
	files = append(files, logW)
	// Read the log while crun runs: it must never block on a full pipe.
	log := readLog(logR)

	pidFile := filepath.Join(b.runtime.stateDir, id+".pid")
	// crun reports its own failures on a separate pipe (fd 3), as JSON, so
	// they are never confused with what the function writes on stderr.
	//
	// --no-new-keyring: by default crun makes each container a session
	// keyring of its own, which the function could not use (the seccomp
	// profile denies every keyring syscall, and /proc/keys is masked) and
	// which costs more than it seems, since keyrings are not namespaced: each
	// is charged, until the kernel collects it after the container, to the
	// user ocifn runs as on the host, whose key quota (200 by default) every
	// process of that user on the machine shares. Under load one server held
	// 24 to 46 of them at a time. The container keeps ocifn's session
	// keyring instead.
	args := []string{"--log=/proc/self/fd/3", "--log-format=json", "create", "--no-new-keyring", "--bundle", b.dir, "--pid-file", pidFile}
	if config != "" {
		args = append(args, "--config", config)
	}
	runCtx, stopRun := graceAfter(ctx, createGrace)
	runErr := b.runtime.run(runCtx, append(args, id), inR, outW, errW, logW)
	stopRun()
	// The container holds its own copies now.
	for _, f := range []*os.File{inR, outW, errW, logW} {
		f.Close()
	}
	files = []*os.File{inW, outR, errR}
	pid, pidErr := readPid(pidFile)
	_ = os.Remove(pidFile)
	if runErr != nil || pidErr != nil {
		// Kill first: a process of the container holds the log pipe open
		// until it is gone.
		b.runtime.forceDelete(id)
		if pid > 0 && slices.Contains(childrenOf(os.Getpid()), pid) {
			// Ours, not reaped: the pid still names it. crun delete
			// kills it unless crun had already removed its state.
			_ = unix.Kill(pid, unix.SIGKILL)
			_, _, _ = waitPid(pid, nil)
		}
		msg, closed := log.waitFor(logGrace)
		if !closed {
			// A process that neither crun delete nor ocifn knows of
			// holds it: a container's first process whose pid crun
			// could not write (its state directory full, say).
			killLogHolders(log.inode(), b.runtime.fork.pid())
			msg, closed = log.waitFor(logGrace)
		}
		switch {
		case !closed:
			msg = "crun's log pipe stayed open after crun create failed"
			if runErr != nil {
				msg += ": " + runErr.Error()
			}
		case msg != "":
		case runErr != nil:
			msg = runErr.Error()
		default:
			msg = pidErr.Error()
		}
		removeCallCgroup(id)
		return nil, &RuntimeError{Op: "create", Message: msg}
	}
	c = &container{rt: b.runtime, id: id, pid: pid, created: time.Now(), stdin: inW, stdout: outR, stderr: errR, log: log, cgroup: cgroupOf(pid), pidfd: exitFD(pid), setupCPU: runtimeOf(pid)}
	c.namespaces = holdNamespaces(pid, c.pidfd)
	if fd, err := c.openExecFifo(); err == nil {
		c.fifo, c.fifoOpen = fd, true
	}
	if ctx.Err() != nil {
		// Made after ctx ended: nobody will start it.
		files = nil // discard closes them
		c.discard()
		return nil, &RuntimeError{Op: "create", Message: context.Cause(ctx).Error()}
	}
	return c, nil
}

// runtimeOf returns the CPU time process pid has used so far, in
// nanoseconds as the scheduler counts it (the first field of
// /proc/PID/schedstat; the process has one thread), or -1 if it cannot be
// read. A created container's process waits for its start, so what it has
// used is crun's set-up of the container: ocifn's crun tells `crun create`
// it is ready once it has nothing left but to wait
// (hack/crun-patches/seccomp-before-the-exec-fifo.patch). The few µs of
// its last write and close, if the scheduler has not yet counted them, go
// to the function.
func runtimeOf(pid int) time.Duration {
	var buf [128]byte // three numbers
	b, err := readSmallFile(fmt.Sprintf("/proc/%d/schedstat", pid), buf[:])
	if err != nil {
		return -1
	}
	field, _, _ := strings.Cut(string(b), " ")
	ns, err := strconv.ParseInt(field, 10, 64)
	if err != nil {
		return -1
	}
	return time.Duration(ns)
}

// heldNamespaces are the namespaces of a container that ocifn holds from
// its creation to its release (holdNamespaces): those whose teardown, when
// their last process exits, is slow enough to delay the call's answer. Each
// is opened through the container's pidfd, with the pidfd ioctl that
// returns it (Linux 6.11), or else from /proc.
var heldNamespaces = []struct {
	name  string // in /proc/PID/ns
	ioctl uint   // PIDFD_GET_MNT_NAMESPACE and the others, <linux/pidfd.h>
}{{"mnt", 0xff03}, {"net", 0xff04}, {"ipc", 0xff02}}

// holdNamespaces returns references to the namespaces of process pid that
// heldNamespaces names, those it could open, through pidfd when it is not
// nil and the kernel has the ioctls: three paths walked through /proc cost
// a container 35 µs of the refill's CPU at one client in a closed loop
// (perf), where an ioctl on a descriptor already open walks none.
//
// Why: when the last process of a mount namespace exits, the kernel
// unmounts the whole tree and waits for an expedited RCU grace period
// (which interrupts every CPU) before that process becomes a zombie, so
// all of it lay between the function's exit and its answer: 0.2-0.4 ms per
// call, measured (docs/performance.md). A network namespace and an IPC
// namespace are torn down by kernel workers right after the exit instead
// (cleanup_net, which waits for RCU grace periods, expedited ones under
// the rtnl lock, and free_ipc, which unmounts the namespace's mqueue), and
// they ran on the other CPU, with their interrupts on both, while ocifn
// read the function's output and answered: holding them too took 60 µs
// off the server's own time of a call at 20 calls/s (docs/performance.md).
// While ocifn holds them, the exit leaves them standing, and their
// teardown happens when release closes the references, off the call's
// path. The container is no less isolated: its processes are gone, and
// nothing can enter a namespace through a descriptor that only ocifn has
// (close-on-exec, so no container inherits it; the ioctls' descriptors
// are close-on-exec too).
func holdNamespaces(pid int, pidfd *os.File) []*os.File {
	var rc syscall.RawConn
	if pidfd != nil {
		rc, _ = pidfd.SyscallConn()
	}
	held := make([]*os.File, 0, len(heldNamespaces))
	for _, ns := range heldNamespaces {
		fd := -1
		if rc != nil {
			_ = rc.Control(func(p uintptr) {
				// IoctlRetInt returns 0, not -1, with its error.
				if n, err := unix.IoctlRetInt(int(p), ns.ioctl); err == nil {
					fd = n
				}
			})
		}
		if fd < 0 {
			// An older kernel (ENOTTY): the path. unix.Open: os.Open would
			// try the descriptor with the poller.
			var err error
			if fd, err = unix.Open(fmt.Sprintf("/proc/%d/ns/%s", pid, ns.name), unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
				continue // its teardown stays on the call's path; nothing else changes
			}
		}
		held = append(held, os.NewFile(uintptr(fd), ns.name))
	}
	return held
}

// closePidfd closes the container's pidfd, if it has one.
func (c *container) closePidfd() {
	if c.pidfd != nil {
		c.pidfd.Close()
		c.pidfd = nil
	}
}

// releaseNamespaces lets go of the container's namespaces that ocifn held:
// with its processes gone, the kernel tears them down now.
func (c *container) releaseNamespaces() {
	for _, f := range c.namespaces {
		f.Close()
	}
	c.namespaces = nil
}

// wait feeds the running container its input, copies its output, and waits
// for its process to exit.
func (c *container) wait(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (Exit, error) {
	// Kill the container when the call is cancelled, or when a copy of
	// its output fails (a writer past its cap): the call has failed then,
	// and a function that ignores EPIPE would run on until ctx ends.
	// Killing its init ends its pid namespace, and with it every process
	// it started. The kill is waited for below: the container's clean-up,
	// and a Close after it, must not run while it does.
	//
	// Once the process has ended, by itself or killed, its pipes end as
	// soon as what it wrote is read, unless a process outside the
	// container holds them open: one that the runtime left behind (a
	// --runtime wrapper's child, say) held the call, and the server's
	// shutdown after it, for as long as it lived. So the same func, if
	// ctx ends after the end was seen, and every kill, bound the waits
	// for the pipes to outputGrace from then.
	killDone := make(chan struct{})
	kill := func() {
		defer close(killDone)
		if c.ending.CompareAndSwap(endRunning, endKilled) {
			c.kill()
		}
		c.bound(time.Now().Add(outputGrace))
	}
	stopKill := context.AfterFunc(ctx, kill)
	// A failed copy kills through the same path: the first to call
	// stopKill, ctx's end (which then calls kill) or a failed copy (which
	// keeps it from running, then kills), is the one that kills; none
	// does once the process has been seen to end (ending). A context of
	// the call's own, cancelled by a failed copy, would do the same for 5
	// more allocations per call.
	var wg sync.WaitGroup
	// The copies' errors, stdout's, stderr's, then stdin's: one variable
	// the goroutines share, one allocation.
	var copyErr [3]error
	wg.Add(3)
	go func() {
		defer wg.Done()
		// A function that exits without reading its input makes this
		// fail with EPIPE; that is its right, not an error.
		_, copyErr[2] = io.Copy(c.stdin, stdin)
		c.stdin.Close()
	}()
	for i, s := range [2]struct {
		w io.Writer
		r *os.File
	}{{stdout, c.stdout}, {stderr, c.stderr}} {
		go func() {
			defer wg.Done()
			if _, copyErr[i] = copyOut(s.w, s.r); copyErr[i] != nil && !errors.Is(copyErr[i], os.ErrDeadlineExceeded) && stopKill() {
				kill()
			}
			s.r.Close()
		}()
	}

	var exit Exit
	code, reaped, cpu, werr := exitCode(c.pid, c.pidfd)
	// Whether the function ended by itself or was killed is decided here,
	// not from ctx afterwards: a deadline that passes just after a
	// function finished must not turn its answer into a timeout.
	killed := !c.ending.CompareAndSwap(endRunning, endSeen)
	if killed {
		<-killDone
	}
	exit.Code = code
	c.exited, c.reaped, c.cpu = werr == nil, reaped, cpu
	// The cgroup is removed with the container: read it before.
	exit.OOMKilled = c.oomKilled()
	wg.Wait()
	exit.RuntimeError = c.log.wait()
	if !stopKill() {
		// ctx's end, or a failed copy, called kill: let it finish.
		<-killDone
	}
	// A pipe cut at its deadline was held by a process outside the
	// container: not a failed copy, but the runtime's fault.
	held := errors.Is(c.log.err, os.ErrDeadlineExceeded)
	for i, err := range copyErr {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			copyErr[i], held = nil, true
		}
	}
	if held {
		// Such a process has come to ocifn, the subreaper, if the one
		// that started it has ended: it must not outlive the call.
		spare := c.rt.fork.pid()
		for _, ino := range c.heldPipes {
			killLogHolders(ino, spare)
		}
		msg := fmt.Sprintf("a process it left behind, outside the function's container, held the container's output open after the function's process ended; ocifn stopped reading it %s after the call's end", outputGrace)
		if exit.RuntimeError != "" {
			msg = exit.RuntimeError + "; " + msg
		}
		exit.RuntimeError = msg
	}
	switch {
	case werr != nil:
		return exit, fmt.Errorf("cannot wait for the function's process %d: %w", c.pid, werr)
	// A failed copy comes first: it killed the container (unless it had
	// exited already), even if ctx ended too while it was being killed.
	case copyErr[0] != nil:
		return exit, copyErr[0]
	case copyErr[1] != nil:
		return exit, copyErr[1]
	case killed:
		return exit, fmt.Errorf("the function was stopped: %w", context.Cause(ctx))
	}
	return exit, nil
}

// The states of container.ending.
const (
	endRunning = iota
	endKilled
	endSeen
)

// outputGrace is how long the pipes of a container whose process has
// ended, or been killed, are still read once its call has ended: what the
// function wrote is in them by then, and is read within microseconds.
const outputGrace = time.Second

// bound ends, at the latest at, the reads of the container's output and
// log pipes and the write of its input, and notes the pipes' inodes for
// killLogHolders.
func (c *container) bound(at time.Time) {
	for _, f := range []*os.File{c.stdout, c.stderr, c.log.r} {
		if ino := pipeInode(f); ino != 0 {
			c.heldPipes = append(c.heldPipes, ino)
		}
		_ = f.SetReadDeadline(at)
	}
	_ = c.stdin.SetWriteDeadline(at)
}

// kill kills the container's init through its pidfd, which cannot name
// another process, or with crun kill when it has none.
func (c *container) kill() {
	if c.pidfd == nil {
		c.rt.kill(c.id)
		return
	}
	if rc, err := c.pidfd.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _ = unix.PidfdSendSignal(int(fd), unix.SIGKILL, nil, 0) })
	}
}

// copyBuffers lends the buffers that copy a container's output. io.Copy
// from a pipe allocates 32 KiB per copy (File.WriteTo falls back to a
// generic copy for pipes): two per call were two thirds of what a trivial
// call allocated, and made Go's collector run every 20 calls or so.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyOut copies src to dst, as io.Copy does, through a lent buffer.
func copyOut(dst io.Writer, src *os.File) (int64, error) {
	buf := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(buf)
	// Only src's Read: its WriteTo would take a buffer of its own.
	return io.CopyBuffer(dst, struct{ io.Reader }{src}, *buf)
}

// start lets a created container's process run its entrypoint; a crun
// start, if it needs one, is killed when ctx ends.
//
// crun's own `crun start` opens the container's exec.fifo for writing,
// unlinks it and writes one byte, which releases the process waiting on the
// other end; nothing else happens for a container without hooks or a notify
// socket, like ours. Doing that here saves executing crun, whose start-up
// alone (dynamic linking) costs more CPU than a small function. Should the
// fifo not be there or have no reader (another crun version), `crun start`
// does it.
//
// The fifo is opened when the container is created (openExecFifo), so that
// a call only writes: the open's path lookup through the state directory
// was 40 µs of a call at 20 calls/s, its caches cold (perf). It is closed,
// and unlinked with the rest of the container's state, by release, off the
// call's path: only crun's own status and a second start would look at it,
// and ocifn asks for neither (it deletes with --force). The unlink was
// 18 µs of the start at 4 clients (pprof).
func (c *container) start(ctx context.Context) error {
	if !c.fifoOpen {
		fd, err := c.openExecFifo()
		if err != nil {
			if out, err := c.rt.command(ctx, "start", c.id).CombinedOutput(); err != nil {
				if ctx.Err() != nil {
					c.rt.noteStuck([]string{"start", c.id}, err)
				}
				// createStarted names the command.
				if out = bytes.TrimSpace(out); len(out) > 0 {
					return fmt.Errorf("%v: %s", err, out)
				}
				return err
			}
			c.running = time.Now()
			return nil
		}
		c.fifo, c.fifoOpen = fd, true
	}
	if _, err := unix.Write(c.fifo, []byte{0}); err != nil {
		c.closeFifo()
		return fmt.Errorf("cannot start the container: %w", &os.PathError{Op: "write", Path: c.execFifo(), Err: err})
	}
	c.running = time.Now()
	return nil
}

// execFifo is the path of the fifo the container's process waits on.
func (c *container) execFifo() string {
	return filepath.Join(c.rt.stateDir, c.id, "exec.fifo")
}

// openExecFifo opens the write end of the container's exec fifo, without
// blocking: it fails (ENXIO) unless the container's process has the other
// end open. Holding it open does not start the container, whose process
// waits for a byte. Closed unwritten, by ocifn or by the kernel when ocifn
// dies, it ends that process with ocifn's crun
// (hack/crun-patches/unwritten-exec-fifo-ends-the-wait.patch); crun 1.8.1
// itself retries a read of nothing over and over until the process is
// killed. So discard closes it only once the process has been killed and
// reaped, and release after its start.
func (c *container) openExecFifo() (int, error) {
	return unix.Open(c.execFifo(), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
}

// closeFifo closes the exec fifo's write end, if it is open.
func (c *container) closeFifo() {
	if c.fifoOpen {
		unix.Close(c.fifo)
		c.fifoOpen = false
	}
}

// release removes a container that ran, off the call's path; Close waits
// for every release. For a call the pool served (pooled), it waits first
// while the server has nothing else to do, for the next call or a few
// milliseconds at most, and holds back the refill with it while the pool
// has a container ready (settle). After that, it reaps the container's
// process, if the call left it a zombie (exitCode). Once it has been
// reaped, with no hooks and no cgroup of its own, `crun delete` would only
// remove its state directory, so that is done here; otherwise (a cgroup to
// remove, a process that may still run) crun deletes it.
func (b *Bundle) release(c *container, pooled bool) {
	b.pending.Add(1)
	go func() {
		defer b.pending.Done()
		if b.pool != nil {
			if pooled {
				b.pool.settle()
			}
			// Refill beside the clean-up (if settle has not already),
			// and again once it is done.
			b.pool.poke()
			defer b.pool.poke()
		}
		defer c.releaseNamespaces()
		c.closeFifo()
		c.closePidfd()
		if c.exited && !c.reaped {
			cpu, err := reap(c.pid)
			c.reaped, c.cpu = err == nil, cpu
		}
		if c.reaped && !c.running.IsZero() && c.setupCPU >= 0 {
			b.functionCPU.Add(int64(max(0, c.cpu-c.setupCPU)))
		}
		if c.reaped && cgroupManagerFlag() == "--cgroup-manager=disabled" &&
			removeState(filepath.Join(c.rt.stateDir, c.id)) == nil {
			return
		}
		// A failure leaves state that Close sweeps away.
		c.rt.forceDelete(c.id)
	}()
}

func readPid(path string) (int, error) {
	var buf [32]byte // a number
	b, err := readSmallFile(path, buf[:])
	if err != nil {
		return 0, fmt.Errorf("cannot read the container's pid file: %w", err)
	}
	text := strings.TrimSpace(string(b))
	pid, err := strconv.Atoi(text)
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("the container's pid file holds %q, not a pid", text)
	}
	return pid, nil
}

// RuntimeError is a failure of crun itself, as opposed to the function.
type RuntimeError struct {
	Op      string
	Message string
}

func (e *RuntimeError) Error() string { return "crun " + e.Op + ": " + e.Message }

// runtimeLog collects the errors crun writes on its log pipe, bounded.
type runtimeLog struct {
	buf  bytes.Buffer
	done chan struct{}
	// r is the pipe's read end, closed once every writer has closed it.
	r *os.File
	// err is why it was not read to its end (a deadline, see bound),
	// once done is closed.
	err error
}

func readLog(r *os.File) *runtimeLog {
	l := &runtimeLog{done: make(chan struct{}), r: r}
	go func() {
		defer close(l.done)
		defer r.Close()
		if _, l.err = io.Copy(&l.buf, io.LimitReader(r, 64<<10)); l.err == nil {
			_, l.err = io.Copy(io.Discard, r)
		}
	}()
	return l
}

// wait returns, once every writer has closed the log, the messages of its
// error entries: crun also logs warnings (an unknown syscall name in the
// seccomp profile, say), which must not fail a call.
func (l *runtimeLog) wait() string {
	<-l.done
	return l.errors()
}

// inode is the pipe's inode number, to find who holds it, or 0 once every
// writer has closed it (os.File's Stat is safe beside its Close).
func (l *runtimeLog) inode() uint64 { return pipeInode(l.r) }

// pipeInode is the inode number of the pipe f is an end of, or 0 once f
// is closed.
func pipeInode(f *os.File) uint64 {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st == nil {
		return 0
	}
	return st.Ino
}

// logGrace is how long a failed crun create's log may stay open after
// crun has deleted what it made, before ocifn looks for who holds it.
const logGrace = time.Second

// waitFor waits as wait does, for d at most, and says whether every writer
// closed the log by then (the messages are "" otherwise).
func (l *runtimeLog) waitFor(d time.Duration) (string, bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.done:
		return l.errors(), true
	case <-t.C:
		return "", false
	}
}

// errors returns the messages of the log's error entries; the log has
// been read to its end.
func (l *runtimeLog) errors() string {
	var msgs []string
	for _, line := range strings.Split(l.buf.String(), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		var e struct{ Msg, Level string }
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			msgs = append(msgs, line) // not JSON: keep it as it is
			continue
		}
		if e.Level == "error" || e.Level == "fatal" || e.Level == "" {
			msgs = append(msgs, e.Msg)
		}
	}
	return strings.Join(msgs, "; ")
}

func (r *Runtime) args(a ...string) []string {
	// The cgroup manager is disabled unless PrepareLimits found a cgroup v2
	// tree delegated to ocifn: the host's cgroups are not ours to change,
	// and a hybrid host has no usable cgroup2 hierarchy for crun.
	base := []string{cgroupManagerFlag()}
	if r.stateDir != "" {
		base = append(base, "--root="+r.stateDir)
	}
	return append(base, a...)
}

// run runs crun with the arguments a and files as its descriptors 0, 1, 2,
// ...: forked by the fork server if there is one, else executed. crun is
// killed if ctx ends first.
func (r *Runtime) run(ctx context.Context, a []string, files ...*os.File) error {
	if exe, ok := r.forkServerExe(); ok {
		if conn := r.fork.start(exe); conn != nil {
			err := r.fork.run(ctx, conn, append([]string{filepath.Base(r.path)}, r.args(a...)...), files)
			if !errors.Is(err, errNotSent) {
				if err != nil && ctx.Err() != nil {
					r.noteStuck(a, err)
				}
				return err
			}
		}
	}
	cmd := r.command(ctx, a...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = files[0], files[1], files[2]
	cmd.ExtraFiles = files[3:]
	err := runToExit(cmd)
	if err != nil && ctx.Err() != nil {
		r.noteStuck(a, err)
	}
	return err
}

// Launch says how containers are created, for the log: "fork-server" (a
// resident crun forks per container), or "exec" and why not.
func (r *Runtime) Launch() string {
	exe, ok := r.forkServerExe()
	if !ok {
		if r.fork == nil {
			return "exec"
		}
		return "exec (no sealed copy of the runtime to serve from: a wrapper script, or no memfd)"
	}
	r.fork.start(exe)
	return r.fork.mode()
}

// forkServerExe returns the sealed copy of crun to start the fork server
// from, and whether there is to be one. A runtime that is a wrapper script
// is not a crun binary (it has no sealed copy): it is executed for every
// command, so that whatever it does around crun still happens.
func (r *Runtime) forkServerExe() (string, bool) {
	if r.fork == nil {
		return "", false
	}
	exe := r.sealed.exe(r.path)
	return exe, exe != r.path
}

func (r *Runtime) command(ctx context.Context, a ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if exe := r.sealed.exe(r.path); exe != r.path {
		cmd = exec.CommandContext(ctx, exe, r.args(a...)...)
		cmd.Args[0] = filepath.Base(r.path)
	} else {
		cmd = exec.CommandContext(ctx, r.path, r.args(a...)...)
	}
	cmd.Env = runtimeEnv()
	// ctx's end kills what the command started too: a --runtime wrapper
	// that runs crun as its child, killed alone, left a crun that hung
	// (a delete, say) running for as long as it liked, then a zombie of
	// this process, the subreaper it had come to.
	cmd.Cancel = func() error { return killCommand(cmd.Process) }
	return cmd
}

// killCommand kills an executed runtime command, p, with every process
// below it, and reaps those below it once they have come to this process;
// p is left for its Wait.
//
// Through p's own handle, the pidfd Go took as it started it: os/exec
// calls Cancel when the context ends before Wait has taken the command's
// end, which may be after Process.Wait reaped it, and a pidfd opened from
// the pid then, or a kill of the pid, hit whatever process had that pid
// by then, with every process below it. The handle is not lent once p has
// been waited for (os.ErrProcessDone).
func killCommand(p *os.Process) error {
	err := p.WithHandle(func(fd uintptr) {
		for _, q := range killAll(int(fd), p.Pid) {
			if q != p.Pid {
				reapOrphan(q)
			}
		}
	})
	if errors.Is(err, os.ErrNoHandle) {
		// No pidfds: Kill knows whether Wait has reaped p.
		return p.Kill()
	}
	return err
}

// containerOrders are the variables crun reads from its own environment as
// orders for the container it creates: LISTEN_FDS hands it that many of
// crun's descriptors from 3 on (its log pipe, here) and sets LISTEN_PID;
// NOTIFY_SOCKET gives it a notify socket and the variable; a seccomp
// receiver is sent the container's seccomp listener. systemd and podman set
// the first two for a socket-activated or notifying service, and ocifn
// run as one would pass them on to every function.
var containerOrders = []string{"LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "RUN_OCI_SECCOMP_RECEIVER"}

// runtimeEnv is ocifn's environment without containerOrders: the
// environment crun runs with, executed or as the fork server.
var runtimeEnv = sync.OnceValue(func() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(containerOrders, name)
	})
})

// kill sends SIGKILL to a container's init.
func (r *Runtime) kill(id string) {
	r.runQuietly("kill", id, "KILL")
}

// forceDelete kills a container if it runs and removes its state; "no such
// container" is not an error. With calls in cgroups of their own, every
// call ends with it (it removes the cgroup), so it goes to the fork server
// like `crun create`.
func (r *Runtime) forceDelete(id string) {
	r.runQuietly("delete", "--force", id)
}

// runQuietly runs crun with the arguments a, its output discarded, for at
// most 5 s; the caller does not need to know how it ended.
func (r *Runtime) runQuietly(a ...string) {
	ctx, cancel := context.WithTimeoutCause(context.Background(), 5*time.Second, errQuietTime)
	defer cancel()
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		_ = r.command(ctx, a...).Run()
		return
	}
	defer null.Close()
	_ = r.run(ctx, a, null, null, null)
}

// errQuietTime is the cause of the end of runQuietly's time.
var errQuietTime = errors.New("its 5s")

// containerID returns a new unique container name.
func containerID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("cannot generate a container id: %w", err)
	}
	return "ocifn-" + hex.EncodeToString(b[:]), nil
}
