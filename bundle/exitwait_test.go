package bundle

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestExitCodeLeavesAZombie: a call reads its function's exit code, or
// 128+N for signal N, without reaping the process, which release reaps
// later; nothing of the status is lost on the way.
func TestExitCodeLeavesAZombie(t *testing.T) {
	if (runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64") && !childInfoFits {
		t.Fatalf("childInfo does not fit siginfo on %s: every call would reap on its path", runtime.GOARCH)
	}
	for _, tc := range []struct {
		script string
		want   int
	}{
		{"exit 0", 0},
		{"exit 7", 7},
		{"exit 255", 255},
		// SIGKILL: a signal the test's own parent cannot have set to be
		// ignored.
		{"kill -KILL $$", 128 + 9},
	} {
		for _, withPidfd := range []bool{true, false} {
			cmd := exec.Command("sh", "-c", tc.script)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pid := cmd.Process.Pid
			f := exitFD(pid)
			if !withPidfd && f != nil {
				f.Close()
				f = nil
			}
			code, reaped, _, err := exitCode(pid, f)
			if f != nil {
				f.Close()
			}
			if err != nil || code != tc.want {
				t.Errorf("%q: exit code %d (%v), want %d", tc.script, code, err, tc.want)
			}
			if reaped == childInfoFits {
				t.Errorf("%q: reaped %v where childInfo fits is %v", tc.script, reaped, childInfoFits)
			}
			if !reaped {
				// Still a zombie: waitid finds it again, then reap takes it.
				var info unix.Siginfo
				if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
					t.Errorf("%q: the process was reaped already: %v", tc.script, err)
				}
				if _, err := reap(pid); err != nil {
					t.Errorf("%q: reap: %v", tc.script, err)
				}
			}
			if _, err := reap(pid); err != unix.ECHILD {
				t.Errorf("%q: reaped twice: %v", tc.script, err)
			}
		}
	}
}

// TestReapCountsCPU: reap returns the CPU time of the process and of the
// children it reaped, and runtimeOf reads a live process's so far.
func TestReapCountsCPU(t *testing.T) {
	// A shell that burns CPU in a child (about 0.25 s here), reaps it,
	// says so, then waits to be let go.
	cmd := exec.Command("sh", "-c", `( i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done ); echo reaped; read -r _`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "reaped\n" {
		t.Fatalf("the shell said %q, %v", line, err)
	}
	own := runtimeOf(pid)
	if own <= 0 || own > 50*time.Millisecond {
		t.Errorf("runtimeOf(shell) = %s, want its own few ms", own)
	}
	stdin.Close()
	awaitExit(pid)
	cpu, err := reap(pid)
	if err != nil {
		t.Fatal(err)
	}
	if cpu < own+20*time.Millisecond {
		t.Errorf("reap: %s of CPU, want the shell's %s and its child's more", cpu, own)
	}
	if got := runtimeOf(pid); got != -1 {
		t.Errorf("runtimeOf(reaped process) = %s, want -1", got)
	}
}

// TestHoldNamespaces: the namespaces a container's release lets go of are
// the process's own, each of its kind, whether opened through the pidfd's
// ioctls or from /proc: without a pidfd, or with a descriptor the ioctls
// refuse (as a kernel before 6.11 refuses them all), which must not be
// taken for a descriptor of its own.
func TestHoldNamespaces(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pid := cmd.Process.Pid
	pidfd := exitFD(pid)
	if pidfd == nil {
		t.Fatal("no pidfd for the child")
	}
	defer pidfd.Close()
	notPidfd, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer notPidfd.Close()
	for _, via := range []struct {
		name  string
		pidfd *os.File
	}{{"pidfd", pidfd}, {"/proc", nil}, {"/proc, the ioctls refused", notPidfd}} {
		held := holdNamespaces(pid, via.pidfd)
		if len(held) != len(heldNamespaces) {
			t.Fatalf("through %s: %d namespaces held, want %d", via.name, len(held), len(heldNamespaces))
		}
		for i, f := range held {
			var got, want unix.Stat_t
			if err := unix.Fstat(int(f.Fd()), &got); err != nil {
				t.Fatal(err)
			}
			path := fmt.Sprintf("/proc/%d/ns/%s", pid, heldNamespaces[i].name)
			if err := unix.Stat(path, &want); err != nil {
				t.Fatal(err)
			}
			if got.Dev != want.Dev || got.Ino != want.Ino {
				t.Errorf("through %s: held %s is namespace %d:%d, want %s's %d:%d", via.name, heldNamespaces[i].name, got.Dev, got.Ino, path, want.Dev, want.Ino)
			}
			if flags, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
				t.Errorf("through %s: held %s is not close-on-exec (%v)", via.name, heldNamespaces[i].name, err)
			}
			f.Close()
		}
	}
}
