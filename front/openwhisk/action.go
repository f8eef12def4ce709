package openwhisk

import (
	"archive/zip"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ActionDir is where an action's files are mounted, read-only, in every
// activation's container; it is the activation's working directory.
const ActionDir = "/action"

// execName is the program an action with code runs, in ActionDir.
const execName = "exec"

// maxZipBytes bounds what an action's zip may unpack to, and maxZipFiles
// how many entries it may hold: a zip bomb must not fill the disk.
const (
	maxZipBytes = 512 << 20
	maxZipFiles = 10000
)

// InitValue is the value of an /init request.
type InitValue struct {
	Name   string                     `json:"name"`
	Main   string                     `json:"main"`
	Code   *string                    `json:"code"`
	Binary bool                       `json:"binary"`
	Env    map[string]json.RawMessage `json:"env"`
}

// hasCode reports whether the init brings code; without it the image's own
// entrypoint is the action.
func (v *InitValue) hasCode() bool { return v.Code != nil && *v.Code != "" }

// errNoExec is an init whose files hold no executable exec.
var errNoExec = errors.New("the action failed to generate or locate a binary")

// writeAction puts the init's code into dir: text as an executable exec, a
// base64 zip unpacked. dir must exist and be empty.
func writeAction(dir string, v *InitValue) error {
	if !v.hasCode() {
		return nil
	}
	if !v.Binary {
		exec := filepath.Join(dir, execName)
		if err := os.WriteFile(exec, []byte(*v.Code), 0o755); err != nil {
			return err
		}
		// Not left to ocifn's umask: under 077, exec was 0700, owned by
		// the host's root, and the container's ids could not run it.
		return os.Chmod(exec, 0o755)
	}
	data, err := base64.StdEncoding.DecodeString(strings.TrimSpace(*v.Code))
	if err != nil {
		return fmt.Errorf("value.code is not base64 (binary is true): %w", err)
	}
	if err := unzip(dir, data); err != nil {
		return err
	}
	st, err := os.Stat(filepath.Join(dir, execName))
	if err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("%w: the zip holds no file named %s at its root", errNoExec, execName)
	}
	// Zip tools do not always keep modes; exec must run.
	return os.Chmod(filepath.Join(dir, execName), 0o755)
}

// unzip unpacks a zip into dir. Every entry is treated as hostile: names
// must stay inside dir, links are refused, sizes are bounded.
func unzip(dir string, data []byte) error {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return fmt.Errorf("value.code is not a zip archive: %w", err)
	}
	if len(zr.File) > maxZipFiles {
		return fmt.Errorf("the zip holds %d entries, more than the limit of %d", len(zr.File), maxZipFiles)
	}
	var total int64
	for _, f := range zr.File {
		name := filepath.Clean(strings.TrimPrefix(f.Name, "./"))
		if !filepath.IsLocal(name) {
			return fmt.Errorf("zip entry %q: its path leaves the action directory", f.Name)
		}
		dest := filepath.Join(dir, name)
		mode := f.Mode()
		switch {
		case mode.IsDir():
			if err := mkdirAll(dir, name); err != nil {
				return fmt.Errorf("zip entry %q: %w", f.Name, err)
			}
			continue
		case !mode.IsRegular():
			return fmt.Errorf("zip entry %q: only regular files and directories are allowed, not %s", f.Name, mode.Type())
		}
		if err := mkdirAll(dir, filepath.Dir(name)); err != nil {
			return fmt.Errorf("zip entry %q: %w", f.Name, err)
		}
		perm := os.FileMode(0o644)
		if mode&0o111 != 0 {
			perm = 0o755
		}
		n, err := extract(f, dest, perm, maxZipBytes-total)
		total += n
		if err != nil {
			return fmt.Errorf("zip entry %q: %w", f.Name, err)
		}
	}
	return nil
}

// mkdirAll makes the directory name, local to dir, and those above it,
// each 0755 whatever ocifn's umask: the container's ids, not the host's
// root that owns them, must list and cross them.
func mkdirAll(dir, name string) error {
	path := dir
	for _, part := range strings.Split(name, string(filepath.Separator)) {
		if part == "." {
			continue
		}
		path = filepath.Join(path, part)
		err := os.Mkdir(path, 0o755)
		if errors.Is(err, fs.ErrExist) {
			if st, serr := os.Lstat(path); serr == nil && st.IsDir() {
				continue
			}
			return fmt.Errorf("%s: %w", path, syscall.ENOTDIR)
		}
		if err == nil {
			err = os.Chmod(path, 0o755)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func extract(f *zip.File, dest string, perm os.FileMode, budget int64) (int64, error) {
	r, err := f.Open()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	// O_EXCL: an earlier entry of the same name must not be overwritten
	// through a path that changed meaning.
	w, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_TRUNC, perm)
	if err != nil {
		return 0, err
	}
	// Not left to ocifn's umask, which would take the container's
	// ids' read (and run) bits away.
	err = w.Chmod(perm)
	var n int64
	if err == nil {
		n, err = io.Copy(w, io.LimitReader(r, budget+1))
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > budget {
		err = fmt.Errorf("the zip unpacks to more than the limit of %d bytes", maxZipBytes)
	}
	return n, err
}
