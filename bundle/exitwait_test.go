package bundle

import (
	"os/exec"
	"runtime"
	"testing"

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
			code, reaped, err := exitCode(pid, f)
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
				if err := reap(pid); err != nil {
					t.Errorf("%q: reap: %v", tc.script, err)
				}
			}
			if err := reap(pid); err != unix.ECHILD {
				t.Errorf("%q: reaped twice: %v", tc.script, err)
			}
		}
	}
}
