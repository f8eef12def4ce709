package front

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInvocationWriteLeavesNoTemporaryFile: a result that cannot be renamed
// into place fails its write and leaves no temporary file behind.
func TestInvocationWriteLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	iv, err := OpenInvocations(dir, time.Hour, 1<<20, 1<<20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer iv.Close()
	id := strings.Repeat("ab", 32)
	// A non-empty directory where the result goes: the rename fails.
	if err := os.MkdirAll(filepath.Join(iv.path(id), "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := iv.write(id, record{Running: true, Created: time.Now()}); err == nil {
		t.Fatal("write over a directory succeeded")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}
