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

// TestSealedBinaryWhateverTheChildsDescriptors: the copy runs even when the
// child's descriptors end just below it. Go's fork moves its status pipe,
// when it has a lower number, to the first descriptor above those it
// passes; a path through the child's /proc/self/fd then named that pipe,
// and exec failed with EACCES.
func TestSealedBinaryWhateverTheChildsDescriptors(t *testing.T) {
	path, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true binary")
	}
	// Free descriptors below the copy, for the status pipe to take.
	var holes []*os.File
	for range 16 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		holes = append(holes, f)
	}
	s := &sealedBinary{}
	exe := s.exe(path)
	for _, f := range holes {
		f.Close()
	}
	if s.f == nil {
		t.Fatalf("no sealed copy of %s was made", path)
	}
	// The child gets one descriptor, the copy's minus one, as its
	// standard streams and first extra file.
	below := int(s.f.Fd()) - 1
	devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	if err := unix.Dup3(int(devNull.Fd()), below, unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	passed := os.NewFile(uintptr(below), "below the copy")
	defer passed.Close()
	for range 3 {
		cmd := exec.Command(exe)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = passed, passed, passed
		cmd.ExtraFiles = []*os.File{passed}
		if err := cmd.Run(); err != nil {
			t.Fatalf("running %s with descriptor %d passed: %v", exe, below, err)
		}
	}
}
