package bundle

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The child's end of a pipe is a blocking descriptor, as a child expects
// its standard streams to be, and ours is non-blocking; data flows both
// ways through a real child.
func TestChildPipe(t *testing.T) {
	blocking := func(f *os.File) bool {
		fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fl&unix.O_NONBLOCK == 0
	}
	inW, inR, err := childPipe(true)
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := childPipe(false)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]*os.File{"stdin's read end": inR, "stdout's write end": outW} {
		if !blocking(f) {
			t.Errorf("the child's end (%s) is non-blocking", name)
		}
	}
	// Fd on a pollable File would switch it to blocking mode: look at our
	// ends' flags through a SyscallConn instead.
	for name, f := range map[string]*os.File{"stdin's write end": inW, "stdout's read end": outR} {
		rc, err := f.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var fl int
		_ = rc.Control(func(fd uintptr) { fl, _ = unix.FcntlInt(fd, unix.F_GETFL, 0) })
		if fl&unix.O_NONBLOCK == 0 {
			t.Errorf("our end (%s) is blocking", name)
		}
	}

	cmd := exec.Command("cat")
	cmd.Stdin, cmd.Stdout = inR, outW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	inR.Close()
	outW.Close()
	if _, err := inW.Write([]byte("through the pipes")); err != nil {
		t.Fatal(err)
	}
	inW.Close()
	got, err := io.ReadAll(outR)
	if err != nil || string(got) != "through the pipes" {
		t.Errorf("read %q, %v", got, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

// removeState removes crun's state directory by the names crun uses, and
// anything else in it too.
func TestRemoveState(t *testing.T) {
	for name, files := range map[string][]string{
		"crun's files":      {"status", "config.json", "seccomp.bpf"},
		"an unknown file":   {"status", "config.json", "something-else"},
		"a fifo not opened": {"status", "exec.fifo"},
		"nothing":           nil,
	} {
		dir := filepath.Join(t.TempDir(), "ocifn-0123")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := removeState(dir); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s: the directory is still there (%v)", name, err)
		}
	}
	if err := removeState(filepath.Join(t.TempDir(), "gone")); err != nil {
		t.Errorf("a directory already gone: %v", err)
	}
}

// readSmallFile reads what a small file holds into the buffer it is lent,
// allocating nothing for it, and refuses a file that fills the buffer
// rather than return part of it.
func TestReadSmallFile(t *testing.T) {
	dir := t.TempDir()
	small, big := filepath.Join(dir, "pid"), filepath.Join(dir, "big")
	if err := os.WriteFile(small, []byte("4242\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, make([]byte, 32), 0o600); err != nil {
		t.Fatal(err)
	}
	var buf [32]byte
	if b, err := readSmallFile(small, buf[:]); err != nil || string(b) != "4242\n" {
		t.Errorf("readSmallFile(small) = %q, %v", b, err)
	}
	if b, err := readSmallFile(big, buf[:]); err == nil || !strings.Contains(err.Error(), "larger than 31 bytes") {
		t.Errorf("readSmallFile of 32 bytes into 32: %d bytes, error %v; want larger than 31 bytes", len(b), err)
	}
	var page [4096]byte
	if b, err := readSmallFile("/proc/self/cgroup", page[:]); err != nil || len(b) == 0 {
		t.Errorf("readSmallFile(/proc/self/cgroup) = %q, %v", b, err)
	}
	n := testing.AllocsPerRun(100, func() {
		var buf [32]byte
		if _, err := readSmallFile(small, buf[:]); err != nil {
			t.Fatal(err)
		}
	})
	switch {
	case raceEnabled:
		// x/sys/unix's Read tells the race detector of the bytes it
		// wrote, which makes the lent buffer escape, in that build only.
		t.Logf("under the race detector, readSmallFile allocated %v times a read: not counted", n)
	case n > 1:
		// One: the path, made a C string for open.
		t.Errorf("readSmallFile allocated %v times a read, want once (the path)", n)
	}
}
