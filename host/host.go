// Package host adapts the ocifn process to the machine it runs on: it
// detects the cgroup layout and the process's privileges, and, when needed,
// re-executes the process inside namespaces of its own so that crun can run
// rootless containers without any change to the host.
//
// Go cannot move a running, multi-threaded process into new user or mount
// namespaces (unshare affects only the calling thread), so the work is done
// once, at startup, by starting the same binary again with clone flags and
// waiting for it. The child sees the marker variable and finishes the setup
// from the inside.
package host

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// marker is set in the environment of the re-executed child. Its value says
// which cgroup2 mount to mask ("" for none).
const marker = "_OCIFN_NAMESPACED"

// cgroupMarker, in the re-executed child's environment, is the cgroup2
// mount point to mount its own cgroup namespace's cgroupfs on.
const cgroupMarker = "_OCIFN_CGROUPNS"

// CgroupMountError is why FinishInside could not mount the cgroupfs of the
// process's own cgroup namespace ("" if it did or had nothing to do); the
// per-call limits then fall back to rlimits and say why.
var CgroupMountError string

// reexecParent is the ocifn process that re-executed this one (0: none).
var reexecParent int

// ReexecParent returns the pid of the ocifn process that re-executed this
// one into its namespaces and waits for it, or 0 if this process was not
// re-executed.
func ReexecParent() int { return reexecParent }

// CgroupLayout is how the host mounts cgroups.
type CgroupLayout string

// Cgroup layouts.
const (
	// CgroupUnified is pure cgroup v2 at /sys/fs/cgroup.
	CgroupUnified CgroupLayout = "unified"
	// CgroupLegacy is cgroup v1 only.
	CgroupLegacy CgroupLayout = "legacy"
	// CgroupHybrid is v1 controllers plus a cgroup2 mount elsewhere, usually
	// /sys/fs/cgroup/unified.
	CgroupHybrid CgroupLayout = "hybrid"
	// CgroupNone is no cgroup filesystem mounted at all (a container whose
	// runtime mounted none): crun then refuses every container, "invalid
	// file system type on '/sys/fs/cgroup'", even with its cgroup manager
	// disabled, unless a tmpfs is mounted there.
	CgroupNone CgroupLayout = "none"
)

// CgroupRoot is where crun looks for the cgroup filesystem.
const CgroupRoot = "/sys/fs/cgroup"

// Cgroups describes the cgroup mounts of this process's mount namespace.
type Cgroups struct {
	Layout CgroupLayout
	// Unified is the cgroup2 mount point in hybrid mode.
	Unified string
	// UnifiedControllers are the controllers enabled on that mount. crun
	// refuses to run any container while this list is not empty.
	UnifiedControllers []string
}

// DetectCgroups reads the cgroup layout from /proc/self/mountinfo.
func DetectCgroups() (Cgroups, error) {
	mounts, err := mountinfo.GetMounts(func(i *mountinfo.Info) (skip, stop bool) {
		return i.FSType != "cgroup" && i.FSType != "cgroup2", false
	})
	if err != nil {
		return Cgroups{}, fmt.Errorf("cannot read the cgroup mounts: %w", err)
	}
	var v1 bool
	var v2 string
	for _, m := range mounts {
		switch {
		case m.FSType == "cgroup":
			v1 = true
		case m.FSType == "cgroup2" && v2 == "":
			v2 = m.Mountpoint
		}
	}
	switch {
	case v2 != "" && !v1:
		return Cgroups{Layout: CgroupUnified, Unified: v2}, nil
	case v2 == "" && !v1:
		return Cgroups{Layout: CgroupNone}, nil
	case v2 == "":
		return Cgroups{Layout: CgroupLegacy}, nil
	}
	c := Cgroups{Layout: CgroupHybrid, Unified: v2}
	b, err := os.ReadFile(filepath.Join(v2, "cgroup.controllers"))
	if err != nil {
		return c, fmt.Errorf("cannot read the controllers of %s: %w", v2, err)
	}
	c.UnifiedControllers = strings.Fields(string(b))
	return c, nil
}

// NeedsMask reports whether crun would refuse to run containers under this
// layout: hybrid mode with controllers on the cgroup2 hierarchy.
func (c Cgroups) NeedsMask() bool {
	return c.Layout == CgroupHybrid && len(c.UnifiedControllers) > 0
}

// Plan says which namespaces the adaptor process needs for itself.
type Plan struct {
	// UserNS maps the unprivileged caller to root in a user namespace of its
	// own, which lets it unpack images in a chroot and mount inside its own
	// mount namespace; crun then runs in its rootless mode.
	UserNS bool
	// MaskUnified is the cgroup2 mount to cover with an empty tmpfs, in a
	// private mount namespace, so crun accepts a hybrid host; or, with no
	// cgroup filesystem mounted, CgroupRoot, so that crun finds one it
	// accepts there.
	MaskUnified string
	// CgroupNS gives the unprivileged process a cgroup namespace of its
	// own, rooted at the cgroup it starts in, with that namespace's cgroupfs
	// mounted at CgroupMount: crun then creates the calls' cgroups below
	// ocifn's own, which is where a cgroup delegated to the user lets it
	// (PrepareLimits decides whether it is delegated).
	CgroupNS bool
	// CgroupMount is the cgroup2 mount point of a pure cgroup v2 host.
	CgroupMount string
}

// Needed reports whether the plan requires a re-exec at all.
func (p Plan) Needed() bool { return p.UserNS || p.MaskUnified != "" || p.CgroupNS }

// PlanFor decides the namespaces for a process with effective uid euid on a
// host with the given cgroups.
func PlanFor(euid int, c Cgroups) Plan {
	p := Plan{UserNS: euid != 0}
	if c.NeedsMask() {
		p.MaskUnified = c.Unified
	}
	if c.Layout == CgroupNone {
		p.MaskUnified = CgroupRoot
	}
	if p.UserNS && c.Layout == CgroupUnified {
		p.CgroupNS, p.CgroupMount = true, c.Unified
	}
	return p
}

// Inside reports whether this process is the re-executed child.
func Inside() bool {
	_, ok := os.LookupEnv(marker)
	return ok
}

// Reexec runs the current binary with the same arguments in the namespaces
// the plan asks for, forwards termination signals to it, waits for it, and
// returns its exit code. The child must call FinishInside first thing.
func Reexec(p Plan) (int, error) {
	self, err := os.Executable()
	if err != nil {
		return 1, fmt.Errorf("cannot find the ocifn executable to re-run it in its own namespaces: %w", err)
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), marker+"="+p.MaskUnified)
	attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if p.CgroupNS {
		attr.Cloneflags |= syscall.CLONE_NEWCGROUP
		cmd.Env = append(cmd.Env, cgroupMarker+"="+p.CgroupMount)
	}
	if p.UserNS {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
		// An unprivileged process may only write a gid map after denying
		// setgroups in the new namespace.
		attr.GidMappingsEnableSetgroups = false
	}
	cmd.SysProcAttr = attr

	// Pdeathsig fires when the thread that started the child exits; keep
	// this goroutine on its thread for the life of the child.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	sigs := make(chan os.Signal, 4)
	forward := []os.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGQUIT}
	// An ignored SIGHUP (nohup) is left ignored, here and, inherited, in
	// the child: asking for it would undo that, and the child would stop.
	if !signal.Ignored(unix.SIGHUP) {
		forward = append(forward, unix.SIGHUP)
	}
	signal.Notify(sigs, forward...)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 1, fmt.Errorf("cannot start ocifn in its own namespaces (user namespace: %t): %w", p.UserNS, err)
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal()), nil
		}
		return exit.ExitCode(), nil
	}
	if err != nil {
		return 1, err
	}
	return 0, nil
}

// FinishInside completes the setup in the re-executed child: it stops mount
// events from propagating back to the host and masks the cgroup2 mount if
// asked to. Only this process's private mount namespace changes.
func FinishInside() error {
	mask, cgroupfs := os.Getenv(marker), os.Getenv(cgroupMarker)
	reexecParent = os.Getppid()
	// Children (crun) must not think they are re-executed ocifn processes.
	os.Unsetenv(marker)
	os.Unsetenv(cgroupMarker)
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("cannot make the private mount namespace a slave of the host's: %w", err)
	}
	if cgroupfs != "" {
		// The host's cgroupfs shows the host's tree; this namespace's own
		// shows ocifn's cgroup as its root, as in a container.
		// Linux refuses a cgroup2 mount right on top of another (EBUSY),
		// and the inherited one cannot be unmounted here (it is locked to
		// what covers it): an empty tmpfs goes in between.
		flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
		if err := unix.Mount("tmpfs", cgroupfs, "tmpfs", flags, "size=4k,mode=755"); err != nil {
			CgroupMountError = fmt.Sprintf("cannot mount the cgroupfs of ocifn's own cgroup namespace on %s: %v", cgroupfs, err)
		} else if err := unix.Mount("cgroup2", cgroupfs, "cgroup2", flags, ""); err != nil {
			CgroupMountError = fmt.Sprintf("cannot mount the cgroupfs of ocifn's own cgroup namespace on %s: %v", cgroupfs, err)
		}
	}
	if mask == "" {
		return nil
	}
	if err := unix.Mount("tmpfs", mask, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=555"); err != nil {
		if mask == CgroupRoot {
			return fmt.Errorf("cannot mount an empty tmpfs on %s, where no cgroup filesystem is mounted (crun needs one there, or a tmpfs): %w", mask, err)
		}
		return fmt.Errorf("cannot mask the cgroup2 mount %s (needed for crun on a hybrid cgroup host): %w", mask, err)
	}
	return nil
}
