package bundle

import (
	"errors"
	"os"
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
	dir := t.TempDir()
	orphan := filepath.Join(dir, "orphan.pid")
	crun := filepath.Join(dir, "crun")
	// `create` leaves a process behind with the log (fd 3) open, as the
	// container's first process would be, and fails without a pid file.
	script := `#!/bin/sh
case " $* " in *" create "*) ;; *) exit 0 ;; esac
sleep 60 &
echo $! >` + orphan + `
echo '{"msg":"writing file pid: No space left on device","level":"error"}' >&3
exit 1
`
	if err := os.WriteFile(crun, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	b := &Bundle{dir: dir, runtime: &Runtime{path: crun, sealed: &sealedBinary{}, fork: &forkServer{}, stateDir: t.TempDir()}}
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
