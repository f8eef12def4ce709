package bundle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRuntimeLogKeepsErrorsOnly: crun's warnings must not fail a call;
// its errors, and anything that is not JSON, are reported.
func TestRuntimeLogKeepsErrorsOnly(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	l := readLog(r)
	_, _ = w.WriteString(`{"msg":"unknown seccomp syscall 'mount_setattr' ignored","level":"warning","time":"x"}` + "\n" +
		`{"msg":"executable file not found","level":"error","time":"x"}` + "\n" +
		"plain text failure\n")
	w.Close()
	if got, want := l.wait(), "executable file not found; plain text failure"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}

	r, w, _ = os.Pipe()
	l = readLog(r)
	_, _ = w.WriteString(`{"msg":"just a warning","level":"warning","time":"x"}` + "\n")
	w.Close()
	if got := l.wait(); got != "" {
		t.Errorf("a warning alone reads as an error: %q", got)
	}
}

// errCapped is what cappedWriter fails with.
var errCapped = errors.New("over the cap")

// cappedWriter takes up to max bytes, then fails, as a front's cap does.
type cappedWriter struct{ n, max int }

func (w *cappedWriter) Write(p []byte) (int, error) {
	if w.n+len(p) > w.max {
		return 0, errCapped
	}
	w.n += len(p)
	return len(p), nil
}

// plainContainer runs script with sh as a container's process would run,
// without crun: its standard streams on pipes, waited for through a pidfd.
func plainContainer(t *testing.T, script string) *container {
	t.Helper()
	var pipes [4][2]*os.File // stdin, stdout, stderr, crun's log: read, write
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		pipes[i] = [2]*os.File{r, w}
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = pipes[0][0], pipes[1][1], pipes[2][1]
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*os.File{pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1]} {
		f.Close()
	}
	pid := cmd.Process.Pid
	c := &container{pid: pid, pidfd: exitFD(pid), stdin: pipes[0][1], stdout: pipes[1][0], stderr: pipes[2][0], log: readLog(pipes[3][0])}
	t.Cleanup(func() {
		if c.pidfd != nil {
			_ = unix.PidfdSendSignal(int(c.pidfd.Fd()), unix.SIGKILL, nil, 0)
		}
		if !c.reaped {
			_, _ = reap(pid)
		}
		c.closePidfd()
	})
	if c.pidfd == nil {
		t.Skip("no pidfd: the kill would need crun")
	}
	return c
}

// TestWaitKillsAtAFailedOutputCopy: once a copy of the function's output
// fails (past a cap), its process is killed at once, even when it ignores
// EPIPE and would print on until the call's timeout, and the call fails
// with the copy's error. A function within the cap runs to its own end;
// one that prints nothing and runs on is killed when ctx ends.
func TestWaitKillsAtAFailedOutputCopy(t *testing.T) {
	const flood = `trap "" PIPE; cat >/dev/null; while :; do echo xxxxxxxx; done`
	const killed = 128 + int(unix.SIGKILL)
	for _, tc := range []struct {
		name, script string
		capStderr    bool
		timeout      time.Duration
		code         int
		err          error
	}{
		{"stdout_past_its_cap", flood, false, 5 * time.Second, killed, errCapped},
		{"stderr_past_its_cap", "exec >&2; " + flood, true, 5 * time.Second, killed, errCapped},
		{"within_the_cap", `trap "" PIPE; cat >/dev/null; echo xxxxxxxx; echo xxxxxxxx >&2`, false, 5 * time.Second, 0, nil},
		{"until_ctx_ends", `cat >/dev/null; while :; do :; done`, false, 200 * time.Millisecond, killed, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := plainContainer(t, tc.script)
			capped := &cappedWriter{max: 1000}
			var stdout, stderr io.Writer = capped, io.Discard
			if tc.capStderr {
				stdout, stderr = io.Discard, capped
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			start := time.Now()
			exit, err := c.wait(ctx, strings.NewReader("the request"), stdout, stderr)
			if took := time.Since(start); took > tc.timeout+2*time.Second || (tc.err == errCapped && ctx.Err() != nil) {
				t.Errorf("the call took %s (its context: %v): the function ran on past its cap", took, ctx.Err())
			}
			if exit.Code != tc.code {
				t.Errorf("exit code %d, want %d", exit.Code, tc.code)
			}
			switch {
			case tc.err == context.DeadlineExceeded:
				if !errors.Is(err, tc.err) || !strings.Contains(fmt.Sprint(err), "the function was stopped") {
					t.Errorf("error %v, want the function stopped at its deadline", err)
				}
			case err != tc.err:
				t.Errorf("error %v, want %v as it is", err, tc.err)
			}
			if tc.err == nil && capped.n != 9 {
				t.Errorf("%d bytes copied, want 9", capped.n)
			}
		})
	}
}

// TestCreateFailureKillsAnUnknownContainerProcess: when crun create fails
// after it has started the container's first process but without telling
// its pid (crun could not write the pid file into a full state directory,
// and removed its state), that process, which holds crun's log pipe open,
// is found, killed and reaped, and the creation fails with crun's message
// instead of waiting for the log's end forever.
func TestCreateFailureKillsAnUnknownContainerProcess(t *testing.T) {
	// As in ocifn, the orphan comes to this process.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
	orphan := filepath.Join(t.TempDir(), "orphan.pid")
	// `create` leaves a process behind with the log (fd 3) open, as the
	// container's first process would be, and fails without a pid file.
	b := standIn(t, `case " $* " in *" create "*) ;; *) exit 0 ;; esac
sleep 60 &
echo $! >`+orphan+`
echo '{"msg":"writing file pid: No space left on device","level":"error"}' >&3
exit 1`)
	done := make(chan error, 1)
	go func() {
		_, err := b.create()
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("create did not return")
	}
	if err == nil || !strings.Contains(err.Error(), "No space left on device") {
		t.Errorf("create: %v, want crun's message", err)
	}
	data, rerr := os.ReadFile(orphan)
	if rerr != nil {
		t.Fatal(rerr)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	if pid <= 0 {
		t.Fatalf("no pid in %q", data)
	}
	if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
		_ = unix.Kill(pid, unix.SIGKILL)
		t.Errorf("the process crun left, %d, is still there (kill 0: %v), killed and reaped it should be", pid, err)
	}
}

// TestStuckCommandsAreToldOncePerContainer: a runtime command killed at
// its deadline is told of (OnStuck) with crun's command and the container,
// once per container however many commands for it are killed after (a
// container's delete after its create, Close's delete of what is left);
// one that ends in time, even failing, is not.
func TestStuckCommandsAreToldOncePerContainer(t *testing.T) {
	dir := t.TempDir()
	hangs, fails := filepath.Join(dir, "crun-hangs"), filepath.Join(dir, "crun-fails")
	if err := os.WriteFile(hangs, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(fails, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var told []Stuck
	notes := &stuckNotes{on: func(s Stuck) { told = append(told, s) }}
	null := devNull(t)
	run := func(path string, a ...string) {
		r := &Runtime{path: path, stuck: notes}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := r.run(ctx, a, null, null, null); err == nil {
			t.Errorf("%s %v: no error", path, a)
		}
	}
	run(hangs, "delete", "--force", "ocifn-a")
	run(hangs, "delete", "--force", "ocifn-a")
	run(hangs, "kill", "ocifn-b", "KILL")
	run(fails, "delete", "--force", "ocifn-c")
	var got []string
	for _, s := range told {
		got = append(got, fmt.Sprintf("%s %s %v", s.Command, s.Container, s.Err))
	}
	want := []string{"delete ocifn-a signal: killed", "kill ocifn-b signal: killed"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("told %q, want %q", got, want)
	}
}

// startWithPid starts the command argv as the process pid, a pid that has
// just been reaped, through ns_last_pid (root in this pid namespace), and
// kills it with the test.
func startWithPid(t *testing.T, pid int, argv ...string) *exec.Cmd {
	t.Helper()
	for range 10 {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0); err != nil {
			t.Fatalf("a pid reused on purpose needs ns_last_pid (root): %v", err)
		}
		other := exec.Command(argv[0], argv[1:]...)
		if err := other.Start(); err != nil {
			t.Fatal(err)
		}
		if other.Process.Pid == pid {
			t.Cleanup(func() {
				_ = other.Process.Kill()
				_ = other.Wait()
			})
			return other
		}
		// Another process's fork came in between.
		_ = other.Process.Kill()
		_ = other.Wait()
	}
	t.Fatalf("pid %d could not be given to another process", pid)
	return nil
}

// ended says whether process pid, a child of this one, ends within d.
func ended(t *testing.T, pid int, d time.Duration) bool {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for {
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(d.Milliseconds()))
		if !errors.Is(err, unix.EINTR) {
			return n > 0
		}
	}
}

// TestCancelAfterWaitSparesAReusedPid: os/exec calls a command's Cancel
// when its context ends before Wait has taken the command's end, which
// may be after Process.Wait has reaped it; the pid may name another
// process by then, which Cancel leaves alone.
func TestCancelAfterWaitSparesAReusedPid(t *testing.T) {
	r := &Runtime{path: "/bin/true"}
	cmd := r.command(context.Background(), "delete", "--force", "ocifn-x")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	other := startWithPid(t, cmd.Process.Pid, "sleep", "60")
	err := cmd.Cancel()
	if ended(t, other.Process.Pid, time.Second) {
		t.Errorf("Cancel after Wait killed process %d, which has the reaped command's pid now", other.Process.Pid)
	}
	if !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Cancel after Wait: %v, want %v", err, os.ErrProcessDone)
	}
}

// TestGraceOverNamesWhoseEndItWas: the cause of a graceAfter context's
// end names its parent's cause, which a pool refill's deadline and a
// call's timeout each say in their own words, and not a call's end for
// both.
func TestGraceOverNamesWhoseEndItWas(t *testing.T) {
	refill, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	late, release := graceAfter(refill, time.Millisecond)
	defer release()
	<-late.Done()
	if got, want := context.Cause(late).Error(), "context deadline exceeded, and 1ms more"; got != want {
		t.Errorf("a refill's end: %q, want %q", got, want)
	}
	if !errors.Is(context.Cause(late), context.DeadlineExceeded) {
		t.Errorf("a refill's end %v does not unwrap to its deadline", context.Cause(late))
	}
}
