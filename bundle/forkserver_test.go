package bundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

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

// runCaptured runs crun with args through rt.run and returns its stdout and
// stderr.
func runCaptured(t *testing.T, rt *Runtime, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	dir := t.TempDir()
	files := make([]*os.File, 4)
	for i, name := range []string{"stdin", "stdout", "stderr", "log"} {
		f, ferr := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o600)
		if ferr != nil {
			t.Fatal(ferr)
		}
		defer f.Close()
		files[i] = f
	}
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
