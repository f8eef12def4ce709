package bundle

import (
	"os"
	"os/exec"
	"path/filepath"
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

// TestSealedBinaryLeavesScriptsAlone: a runtime that is a script (a
// wrapper around crun) is run from its own path, since its interpreter
// could not open a close-on-exec memfd.
func TestSealedBinaryLeavesScriptsAlone(t *testing.T) {
	script := filepath.Join(t.TempDir(), "crun-wrapper")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := &sealedBinary{}
	if got := s.exe(script); got != script {
		t.Errorf("exe(%s) = %s, want the script itself", script, got)
	}
	if err := exec.Command(s.exe(script)).Run(); err != nil {
		t.Errorf("running the script: %v", err)
	}
}
