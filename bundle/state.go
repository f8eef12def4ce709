package bundle

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// stateLink is the name, in a bundle directory, of crun's state directory
// for the bundle's containers, or of a symlink to it.
const stateLink = "state"

// DefaultStateDir is where state directories go by default: a tmpfs on
// every Linux system and in every pod.
const DefaultStateDir = "/dev/shm"

// stateDirPrefix starts the name of every state directory made outside a
// bundle.
const stateDirPrefix = "ocifn-state-"

// makeStateDir creates the directory crun keeps the state of the bundle's
// containers in (crun --root), and returns its path.
//
// crun writes five files per container there (in the container's own
// directory its status, copies of the config and of the seccomp program,
// and the exec fifo; beside it the pid file ocifn asks for), and they are
// removed a moment later.
// On a disk filesystem that churn costs about 0.4 ms of CPU per call on the
// benchmark machine (ext4 looks for an inode not recently freed each time),
// and a full cache disk would fail every call. So the directory is made in
// parent, by default /dev/shm, and the bundle directory holds a symlink to
// it, through which Sweep finds the state of a bundle whose process died.
// With parent empty or unusable, the directory is in the bundle itself.
func makeStateDir(bundleDir, parent string) (string, error) {
	link := filepath.Join(bundleDir, stateLink)
	if parent != "" {
		dir, err := os.MkdirTemp(parent, stateDirPrefix)
		if err == nil {
			if dir, err = filepath.Abs(dir); err == nil && os.Symlink(dir, link) == nil {
				return link, nil
			}
			_ = os.Remove(dir)
		}
	}
	if err := os.Mkdir(link, 0o700); err != nil {
		return "", fmt.Errorf("cannot create the runtime state directory %s: %w", link, err)
	}
	return link, nil
}

// removeStateDir removes the state directory that the symlink of a bundle
// directory names, if it is one. A symlink that names anything but a
// state directory is left to be removed with the bundle.
func removeStateDir(bundleDir string) error {
	target, err := os.Readlink(filepath.Join(bundleDir, stateLink))
	if err != nil || !filepath.IsAbs(target) || !strings.HasPrefix(filepath.Base(target), stateDirPrefix) {
		return nil // a directory (removed with the bundle) or nothing
	}
	if err := os.RemoveAll(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cannot remove the runtime state directory %s: %w", target, err)
	}
	return nil
}
