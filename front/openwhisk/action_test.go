package openwhisk

import (
	"archive/zip"
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestActionFilesIgnoreTheUmask: an action's files and directories are
// readable (exec and the zip's executables runnable) by every id, whatever
// ocifn's umask: run as root, ocifn owns them on the host, and the
// container's ids, mapped elsewhere, read them as others. Under umask 077
// exec was 0700, and every activation failed with "crun create: open
// executable: Permission denied".
func TestActionFilesIgnoreTheUmask(t *testing.T) {
	old := unix.Umask(0o077)
	defer unix.Umask(old)

	text := t.TempDir()
	code := "#!/bin/sh\necho '{}'\n"
	if err := writeAction(text, &InitValue{Code: &code}); err != nil {
		t.Fatal(err)
	}

	var zipped bytes.Buffer
	zw := zip.NewWriter(&zipped)
	for _, f := range []struct {
		name string
		mode os.FileMode
	}{{"exec", 0o700}, {"lib/", os.ModeDir | 0o700}, {"lib/data.json", 0o600}, {"bin/tools/run", 0o700}} {
		h := &zip.FileHeader{Name: f.name}
		h.SetMode(f.mode)
		if _, err := zw.CreateHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	binary := t.TempDir()
	code64 := base64.StdEncoding.EncodeToString(zipped.Bytes())
	if err := writeAction(binary, &InitValue{Code: &code64, Binary: true}); err != nil {
		t.Fatal(err)
	}

	for path, want := range map[string]os.FileMode{
		filepath.Join(text, "exec"):            0o755,
		filepath.Join(binary, "exec"):          0o755,
		filepath.Join(binary, "lib"):           os.ModeDir | 0o755,
		filepath.Join(binary, "lib/data.json"): 0o644,
		filepath.Join(binary, "bin"):           os.ModeDir | 0o755,
		filepath.Join(binary, "bin/tools"):     os.ModeDir | 0o755,
		filepath.Join(binary, "bin/tools/run"): 0o755,
	} {
		st, err := os.Lstat(path)
		if err != nil {
			t.Error(err)
			continue
		}
		if st.Mode() != want {
			t.Errorf("%s: mode %v, want %v", path, st.Mode(), want)
		}
	}
}
