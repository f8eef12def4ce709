package bundle

import (
	"os"
	"testing"
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
