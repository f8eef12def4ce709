package bundle

import (
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSealedBinary: the copy carries every seal crun checks for, cannot be
// written, and runs.
func TestSealedBinary(t *testing.T) {
	path, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true binary")
	}
	s := &sealedBinary{}
	exe := s.exe(path)
	if exe == path || s.f == nil {
		t.Fatalf("no sealed copy of %s was made", path)
	}
	seals, err := unix.FcntlInt(s.f.Fd(), unix.F_GET_SEALS, 0)
	if err != nil || seals != crunSeals {
		t.Fatalf("seals %#x (%v), want %#x", seals, err, crunSeals)
	}
	if _, err := s.f.WriteAt([]byte{0}, 0); err == nil {
		t.Error("writing to the sealed copy succeeded")
	}
	if err := exec.Command(exe).Run(); err != nil {
		t.Errorf("running %s (the copy of %s): %v", exe, path, err)
	}
	if again := s.exe(path); again != exe {
		t.Errorf("a second copy was made: %s, then %s", exe, again)
	}
	var none *sealedBinary
	if got := none.exe(path); got != path {
		t.Errorf("without a sealed copy: %s, want %s", got, path)
	}
}
