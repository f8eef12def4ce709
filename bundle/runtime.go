package bundle

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Runtime is the OCI runtime binary (crun) and, once bound to a bundle, where
// it keeps the state of that bundle's containers.
type Runtime struct {
	path     string
	stateDir string
	version  string
}

// FindRuntime locates crun (a path, or a name looked up on PATH) and checks
// that it runs.
func FindRuntime(name string) (*Runtime, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("cannot find the OCI runtime %q: ocifn needs crun on PATH (Debian/Ubuntu: apt-get install crun): %w", name, err)
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("cannot run %s --version: %w", path, err)
	}
	version, _, _ := strings.Cut(string(out), "\n")
	return &Runtime{path: path, version: strings.TrimSpace(version)}, nil
}

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
	// Duration is the wall time from starting crun to its exit.
	Duration time.Duration
}

// killDelay is how long a cancelled call may take to end after its
// container was sent SIGKILL, before crun itself is killed.
const killDelay = time.Second

// Run starts one fresh container from the bundle, writes stdin to it, copies
// its output to stdout and stderr, and waits for it to end. When ctx ends
// first, every process of the container is killed and its state removed.
//
// A write error on stdout (for example a size cap) ends the copy; the
// function then gets EPIPE and the error is returned once it exits.
func (b *Bundle) Run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (Exit, error) {
	id, err := containerID()
	if err != nil {
		return Exit{}, err
	}
	rt := b.runtime
	// crun reports its own failures on a separate pipe, so they are never
	// confused with what the function wrote on stderr.
	logR, logW, err := os.Pipe()
	if err != nil {
		return Exit{}, fmt.Errorf("cannot create the runtime log pipe: %w", err)
	}
	defer logR.Close()
	var runtimeLog bytes.Buffer
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		_, _ = io.Copy(&runtimeLog, io.LimitReader(logR, 64<<10))
		_, _ = io.Copy(io.Discard, logR)
	}()

	cmd := exec.CommandContext(ctx, rt.path, rt.args("--log=/proc/self/fd/3", "run", "--bundle", b.dir, id)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.ExtraFiles = []*os.File{logW}
	// crun keeps running the container if crun itself is killed, so a
	// cancelled call kills the container first; crun then returns.
	cmd.Cancel = func() error {
		_ = rt.command(context.Background(), "kill", id, "KILL").Run()
		return nil
	}
	cmd.WaitDelay = killDelay
	start := time.Now()
	err = cmd.Start()
	logW.Close()
	if err != nil {
		<-logDone
		return Exit{}, fmt.Errorf("cannot start %s: %w", rt.path, err)
	}
	err = cmd.Wait()
	exit := Exit{Duration: time.Since(start)}
	<-logDone
	exit.RuntimeError = strings.TrimSpace(runtimeLog.String())

	if ctx.Err() != nil || errors.Is(err, exec.ErrWaitDelay) {
		// The container may have been created after the kill was sent, or
		// crun may have been killed: make sure nothing of it remains.
		b.remove(id)
		return exit, fmt.Errorf("the function was stopped: %w", context.Cause(ctx))
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		exit.Code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			exit.Code = 128 + int(ws.Signal())
		}
		return exit, nil
	case err != nil:
		// An output copy failed (e.g. stdout over its cap): the container
		// has ended, but report why its output is incomplete.
		b.remove(id)
		return exit, err
	}
	return exit, nil
}

// remove forcibly deletes a container and ignores "no such container".
func (b *Bundle) remove(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = b.runtime.command(ctx, "delete", "--force", id).Run()
}

func (r *Runtime) args(a ...string) []string {
	// The cgroup manager is disabled: the host's cgroups are not ours to
	// change, and a hybrid host has no usable cgroup2 hierarchy for crun.
	base := []string{"--cgroup-manager=disabled"}
	if r.stateDir != "" {
		base = append(base, "--root="+r.stateDir)
	}
	return append(base, a...)
}

func (r *Runtime) command(ctx context.Context, a ...string) *exec.Cmd {
	return exec.CommandContext(ctx, r.path, r.args(a...)...)
}

// containerID returns a new unique container name.
func containerID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("cannot generate a container id: %w", err)
	}
	return "ocifn-" + hex.EncodeToString(b[:]), nil
}
