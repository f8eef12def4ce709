package bundle

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// bundlePrefix starts the name of every bundle directory in a cache
// directory.
const bundlePrefix = "bundle-"

// newPrefix starts the name of a bundle directory until it is locked; Sweep
// leaves such a directory alone while it is young.
const newPrefix = ".new-"

// newLockedDir creates a bundle directory that is locked from the moment
// Sweep can see it: it is made and locked under another name, then renamed.
func newLockedDir(parent string) (string, *os.File, error) {
	tmp, err := os.MkdirTemp(parent, newPrefix+bundlePrefix)
	if err != nil {
		return "", nil, fmt.Errorf("cannot create a bundle directory in %s: %w", parent, err)
	}
	lock, err := lockDir(tmp)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return "", nil, err
	}
	dir := filepath.Join(parent, strings.TrimPrefix(filepath.Base(tmp), newPrefix))
	if err := os.Rename(tmp, dir); err != nil {
		lock.Close()
		_ = os.RemoveAll(tmp)
		return "", nil, fmt.Errorf("cannot create a bundle directory in %s: %w", parent, err)
	}
	return dir, lock, nil
}

// newDirGrace is how old an unlocked directory being created must be before
// Sweep takes it for the remains of a process that died making it.
const newDirGrace = time.Minute

// lockDir creates and locks the lock file of a bundle directory.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot create the lock of %s: %w", dir, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("cannot lock %s: %w", dir, err)
	}
	return f, nil
}

// Sweep removes from the cache directory parent what ocifn processes that
// died left behind: bundle directories nobody holds the lock of, with every
// container still running from them. Live bundles are left alone. It
// returns the directories it removed.
func Sweep(rt *Runtime, parent string) ([]string, error) {
	entries, err := os.ReadDir(parent)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the cache directory %s: %w", parent, err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if strings.HasPrefix(e.Name(), newPrefix+bundlePrefix) {
			if info, err := e.Info(); err != nil || time.Since(info.ModTime()) < newDirGrace {
				continue
			}
		} else if !strings.HasPrefix(e.Name(), bundlePrefix) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		lock, err := lockDir(dir)
		if err != nil {
			// Held by a live process (or unreadable): not ours.
			continue
		}
		err = remove(dir, &Runtime{path: rt.path, stateDir: filepath.Join(dir, stateLink)})
		lock.Close()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, dir)
	}
	return removed, errors.Join(errs...)
}

// remove kills and deletes every container whose state is in the bundle's
// state directory, togetherAtMost at a time (a stuck crun delete is killed
// after 5 s), then removes the bundle directory.
func remove(dir string, rt *Runtime) error {
	if states, err := os.ReadDir(rt.stateDir); err == nil {
		var ids []string
		for _, s := range states {
			if s.IsDir() {
				ids = append(ids, s.Name())
			}
		}
		together(ids, rt.forceDelete)
	}
	return removeDir(dir)
}

// togetherAtMost is how many containers together brings down at once: as
// many crun processes at a time, beside the calls', must stay well within
// a pod's pids limit, while the 5 s a stuck one takes to be killed is
// paid once per so many containers, not once per container.
const togetherAtMost = 16

// together calls f for every item, togetherAtMost at a time, and returns
// once every call has.
func together[T any](items []T, f func(T)) {
	var g errgroup.Group
	g.SetLimit(togetherAtMost)
	for _, it := range items {
		g.Go(func() error {
			f(it)
			return nil
		})
	}
	_ = g.Wait()
}

// removeDir removes a bundle directory and the state directory it links
// to.
func removeDir(dir string) error {
	stateErr := removeStateDir(dir)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("cannot remove the bundle %s: %w", dir, err)
	}
	return stateErr
}
