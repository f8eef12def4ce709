// Package bundle owns the on-disk runtime bundle of a function image: the
// root filesystem, unpacked once and shared read-only by every call, the
// runtime config written once, and the life of each call's container under
// crun.
package bundle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containers/storage/pkg/idtools"
	securejoin "github.com/cyphar/filepath-securejoin"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/moby/sys/user"
	imgspec "github.com/opencontainers/image-spec/specs-go/v1"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/ocifn/ocifn/oci"
	"github.com/ocifn/ocifn/spec"
)

// IDMode says how container ids map to the ids of the namespace ocifn runs in.
type IDMode string

// ID modes.
const (
	// IDRange maps container ids 0..Size-1 to an unprivileged range of host
	// ids. Used when ocifn runs as real root.
	IDRange IDMode = "range"
	// IDSingle maps the image's user to ocifn's own id, and nothing else.
	// Used when ocifn runs unprivileged.
	IDSingle IDMode = "single"
)

// Options configure a bundle.
type Options struct {
	// Mode selects the id mapping.
	Mode IDMode
	// RangeStart and RangeSize give the host id range of IDRange mode.
	RangeStart, RangeSize uint32
	// Network is spec.NetworkNone or spec.NetworkHost.
	Network string
	// StateDir is where crun's state directory for the bundle's
	// containers is made, best a tmpfs (see makeStateDir; empty: in the
	// bundle).
	StateDir string
	// MaxRootfsBytes caps the unpacked size of the image (0: no cap).
	MaxRootfsBytes int64
	// Limits cap each call's memory and processes (see PrepareLimits).
	Limits spec.Limits
	// Warm is how many containers to keep created ahead of calls at
	// least (0: no pool at all).
	Warm int
	// WarmMax is the most the pool grows to when calls overlap (see
	// PoolOptions; raised to Warm).
	WarmMax int
	// WarmIdle lets the pool shrink to no container after that long
	// without a call (0: never).
	WarmIdle time.Duration
	// OnIdle, if set, is called each time the pool lets every container
	// go after WarmIdle without a call.
	OnIdle func()
	// OnRefill, if set, hears when the warm pool's creations start
	// failing (the first error) and when they succeed again (nil).
	OnRefill func(error)
	// Warn, if set, hears of each image entry neutralised rather than
	// refused while unpacking (see oci.Warning).
	Warn func(oci.Warning)
	// OnStuck, if set, hears of each runtime command killed at its
	// deadline, once per container.
	OnStuck func(Stuck)
	// OwnMountNamespace says that ocifn runs in a mount namespace of its
	// own, where it may bind mount the host's devices for its containers'
	// /dev when it may not make device nodes (see makeDev).
	OwnMountNamespace bool
}

// Bundle is an image unpacked and configured, ready to run calls.
type Bundle struct {
	dir     string
	rootfs  string
	config  string
	spec    *rspec.Spec
	runtime *Runtime
	// lock is held for the life of the bundle; a bundle directory whose
	// lock is free was left by a process that died (see Sweep).
	lock *os.File
	// pending counts container deletions still running.
	pending sync.WaitGroup
	// pool holds containers created ahead of calls; nil when off.
	pool *warmPool
	// misses counts calls that found no warm container.
	misses atomic.Uint64
	// functionCPU sums, in nanoseconds, the CPU time the containers'
	// processes used from their start to their end (FunctionCPU).
	functionCPU atomic.Int64
	// dev is what Dev reports; devDir the directory containers get as
	// their /dev (zero: crun's tmpfs).
	dev    string
	devDir devDir
}

// lockFile is the name of the lock file in a bundle directory.
const lockFile = "lock"

// Create unpacks img into a new directory under parent and writes the
// runtime config every call will use. The caller must Close the bundle.
func Create(ctx context.Context, rt *Runtime, img v1.Image, parent string, o Options) (b *Bundle, err error) {
	// A relative parent (--cache-dir cache) is made absolute: the walk up
	// to / in checkReachable would never reach / from "." and spin, and
	// the bundle's paths are handed to crun, whose working directory is
	// not ours.
	if parent, err = filepath.Abs(parent); err != nil {
		return nil, fmt.Errorf("cannot find the cache directory: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("cannot read the image config: %w", err)
	}
	// crun hands each container's process to us once it has created it;
	// as subreaper we can wait for it and read its exit status.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("cannot become the subreaper of function processes: %w", err)
	}
	if err := os.MkdirAll(parent, 0o711); err != nil {
		return nil, fmt.Errorf("cannot create the cache directory %s: %w", parent, err)
	}
	dir, lock, err := newLockedDir(parent)
	if err != nil {
		return nil, err
	}
	var dev devDir
	defer func() {
		if err != nil {
			_ = dev.unmount()
			_ = removeDir(dir)
			lock.Close()
		}
	}()
	// Container ids other than root must be able to reach the rootfs
	// through this directory.
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, fmt.Errorf("cannot set the mode of %s: %w", dir, err)
	}
	// Each bundle keeps its containers' state to itself, so removing the
	// bundle removes every trace of its calls.
	state, err := makeStateDir(dir, o.StateDir)
	if err != nil {
		return nil, err
	}
	b = &Bundle{
		dir:     dir,
		rootfs:  filepath.Join(dir, "rootfs"),
		config:  filepath.Join(dir, "config.json"),
		runtime: &Runtime{path: rt.path, version: rt.version, stateDir: state, sealed: rt.sealed, fork: rt.fork, stuck: &stuckNotes{on: o.OnStuck}},
		lock:    lock,
	}
	// The runtime's fork server lives while bundles use it.
	rt.fork.hold()
	defer func() {
		if err != nil {
			rt.fork.let()
		}
	}()

	if o.Mode == IDRange {
		if err := checkReachable(dir, o.RangeStart, o.RangeSize); err != nil {
			return nil, err
		}
	}

	var unpack []oci.UnpackOption
	if o.MaxRootfsBytes > 0 {
		unpack = append(unpack, oci.WithMaxBytes(o.MaxRootfsBytes))
	}
	if o.Warn != nil {
		unpack = append(unpack, oci.WithWarnings(o.Warn))
	}
	switch o.Mode {
	case IDRange:
		m := []idtools.IDMap{{ContainerID: 0, HostID: int(o.RangeStart), Size: int(o.RangeSize)}}
		unpack = append(unpack, oci.WithIDMappings(m, m))
	case IDSingle:
		unpack = append(unpack, oci.WithoutChown())
	default:
		return nil, fmt.Errorf("unknown id mode %q", o.Mode)
	}
	if err := oci.Unpack(ctx, img, b.rootfs, unpack...); err != nil {
		return nil, err
	}

	if err := CheckMountPoints(b.rootfs); err != nil {
		return nil, err
	}
	ic := imageConfig(cf.Config)
	u, err := ResolveUser(b.rootfs, ic.User)
	if err != nil {
		return nil, err
	}
	uids, gids := mappings(o, u)
	hostLimits, err := hardLimits()
	if err != nil {
		return nil, err
	}
	if dev, err = makeDev(dir, o.OwnMountNamespace); err != nil {
		return nil, err
	}
	options := spec.Options{
		Rootfs:      b.rootfs,
		UIDMappings: uids,
		GIDMappings: gids,
		Network:     o.Network,
		HostRlimits: hostLimits,
		Limits:      o.Limits,
		Dev:         dev.path,
	}
	s, err := b.writeConfig(ic, u, options)
	if err != nil {
		return nil, err
	}
	switch {
	case dev.path == "":
		b.dev = "tmpfs"
	case !dev.bound:
		b.dev = "prepared"
	default:
		b.dev = "prepared, devices bind mounted"
		if why := b.checkDevicesCarried(); why != nil {
			if err = dev.remove(); err != nil {
				return nil, err
			}
			dev = devDir{}
			options.Dev = ""
			if s, err = b.writeConfig(ic, u, options); err != nil {
				return nil, err
			}
			b.dev = "tmpfs (" + why.Error() + ")"
		}
	}
	b.devDir = dev
	b.spec = s
	if o.Warm > 0 {
		// A server: where compileSeccomp could not, having crun compile
		// seccomp once pays from the second call.
		b.precompileSeccomp()
		b.startPool(PoolOptions{Min: o.Warm, Max: o.WarmMax, Idle: o.WarmIdle, OnIdle: o.OnIdle, OnRefill: o.OnRefill})
	}
	return b, nil
}

// writeConfig derives the runtime config from the image config and writes
// it as the bundle's config.json.
func (b *Bundle) writeConfig(ic imgspec.ImageConfig, u spec.User, o spec.Options) (*rspec.Spec, error) {
	s, err := spec.Generate(ic, u, o)
	if err != nil {
		return nil, fmt.Errorf("cannot derive the runtime config from the image config: %w", err)
	}
	compileSeccomp(s)
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("cannot encode the runtime config: %w", err)
	}
	if err := os.WriteFile(b.config, data, 0o644); err != nil {
		return nil, fmt.Errorf("cannot write the runtime config: %w", err)
	}
	return s, nil
}

// Spec returns the runtime config every call runs with.
func (b *Bundle) Spec() *rspec.Spec { return b.spec }

// Dev says what a container's /dev is: "prepared" (a directory of device
// nodes made once for the bundle), "prepared, devices bind mounted" (the
// same, with the host's devices bind mounted in ocifn's own mount
// namespace) or "tmpfs" (crun's, made for each container), then why the
// prepared one could not be used, when it was tried.
func (b *Bundle) Dev() string { return b.dev }

// Close removes the bundle and every container of it from disk. Calls
// must have finished.
func (b *Bundle) Close() error {
	b.stopPool()
	b.pending.Wait()
	devErr := b.devDir.unmount()
	err := remove(b.dir, b.runtime)
	b.lock.Close()
	// The last bundle of its runtime stops the fork server, and waits for
	// it: ocifn leaves no process behind (in its cgroup, say).
	b.runtime.fork.let()
	return errors.Join(devErr, err)
}

// checkReachable makes sure the container's ids, which are not root on the
// host, can walk down to the bundle: crun sets up the root filesystem from
// inside the container's user namespace, and a 0700 directory on the way
// makes every call fail with "permission denied".
func checkReachable(dir string, start, size uint32) error {
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		var st unix.Stat_t
		if err := unix.Stat(d, &st); err != nil {
			return fmt.Errorf("cannot check %s: %w", d, err)
		}
		owned := st.Uid >= start && st.Uid-start < size
		if st.Mode&0o001 == 0 && !owned {
			return fmt.Errorf("the cache directory is not reachable by the containers' ids (host ids %d-%d): %s has mode %04o; choose a --cache-dir whose parent directories are searchable by others (chmod o+x), such as /var/cache/ocifn", start, start+size-1, d, st.Mode&0o7777)
		}
		if d == "/" {
			return nil
		}
	}
}

// imageConfig converts go-containerregistry's image config to the
// image-spec type the spec package takes.
func imageConfig(c v1.Config) imgspec.ImageConfig {
	return imgspec.ImageConfig{
		User:       c.User,
		Env:        c.Env,
		Entrypoint: c.Entrypoint,
		Cmd:        c.Cmd,
		WorkingDir: c.WorkingDir,
	}
}

// mappings returns the container's id maps for the chosen mode. In single
// mode the image's own user and group are the ones that exist, so an image
// that runs as a non-root user keeps doing so.
func mappings(o Options, u spec.User) (uids, gids []rspec.LinuxIDMapping) {
	if o.Mode == IDRange {
		m := []rspec.LinuxIDMapping{{ContainerID: 0, HostID: o.RangeStart, Size: o.RangeSize}}
		return m, m
	}
	return []rspec.LinuxIDMapping{{ContainerID: u.UID, HostID: uint32(os.Geteuid()), Size: 1}},
		[]rspec.LinuxIDMapping{{ContainerID: u.GID, HostID: uint32(os.Getegid()), Size: 1}}
}

// ResolveUser turns the image's User ("", "uid", "uid:gid", "name",
// "name:group") into the ids a function runs as, using the image's own
// /etc/passwd and /etc/group in the unpacked rootfs. Both are opened inside
// the rootfs: a symlink in the image must not make us read a host file.
func ResolveUser(rootfs, userSpec string) (spec.User, error) {
	passwd, err := readInRoot(rootfs, "/etc/passwd")
	if err != nil {
		return spec.User{}, err
	}
	group, err := readInRoot(rootfs, "/etc/group")
	if err != nil {
		return spec.User{}, err
	}
	eu, err := user.GetExecUser(userSpec, &user.ExecUser{Home: "/"}, bytes.NewReader(passwd), bytes.NewReader(group))
	if err != nil {
		return spec.User{}, fmt.Errorf("cannot resolve the image's user %q against its /etc/passwd and /etc/group: %w", userSpec, err)
	}
	u := spec.User{UID: uint32(eu.Uid), GID: uint32(eu.Gid), Home: eu.Home}
	for _, g := range eu.Sgids {
		if g != eu.Gid {
			u.AdditionalGids = append(u.AdditionalGids, uint32(g))
		}
	}
	return u, nil
}

// rootMountPoints are the entries at the top of the image that every
// container mounts over (see spec.Generate).
var rootMountPoints = []string{"proc", "dev", "sys", "tmp"}

// CheckMountPoints makes sure that each entry of the image that every
// container mounts over (/proc, /dev, /sys, /tmp) is a directory, or a
// symlink to one in the image. crun resolves such a symlink inside the
// root filesystem and mounts on its target; a file there, or a symlink to
// nothing, would let the server start and then fail every call with
// crun's "openat2 `dev`: No such file or directory" or "mount `tmpfs` to
// `tmp`: Not a directory".
func CheckMountPoints(rootfs string) error {
	for _, name := range rootMountPoints {
		f, err := securejoin.OpenInRoot(rootfs, name)
		if errors.Is(err, os.ErrNotExist) {
			target, _ := os.Readlink(filepath.Join(rootfs, name))
			return fmt.Errorf("the image's /%s is a symlink to %s, which the image does not have: every call's container mounts its own /%s there", name, target, name)
		}
		if err != nil {
			return fmt.Errorf("cannot resolve the image's /%s, where every call's container mounts its own: %w", name, err)
		}
		fi, err := f.Stat()
		f.Close()
		if err != nil {
			return fmt.Errorf("cannot resolve the image's /%s, where every call's container mounts its own: %w", name, err)
		}
		if !fi.IsDir() {
			what := "a regular file"
			if !fi.Mode().IsRegular() {
				what = "of type " + fi.Mode().Type().String()
			}
			if target, err := os.Readlink(filepath.Join(rootfs, name)); err == nil {
				what += ", where its symlink to " + target + " leads"
			}
			return fmt.Errorf("the image's /%s is not a directory but %s: every call's container mounts its own /%s there", name, what, name)
		}
	}
	return nil
}

// readInRoot reads a small file of the image, resolving the name inside
// root. A missing file reads as empty: images often have no /etc/group.
func readInRoot(root, name string) ([]byte, error) {
	f, err := securejoin.OpenInRoot(root, name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cannot open %s in the image: %w", name, err)
	}
	defer f.Close()
	// OpenInRoot gives an O_PATH handle; reopen it for reading.
	r, err := securejoin.Reopen(f, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("cannot open %s in the image: %w", name, err)
	}
	defer r.Close()
	return io.ReadAll(io.LimitReader(r, 1<<20))
}

// hardLimits reads the hard rlimits of this process that the spec clamps to.
func hardLimits() (map[string]uint64, error) {
	out := map[string]uint64{}
	for name, res := range map[string]int{"RLIMIT_NOFILE": unix.RLIMIT_NOFILE, "RLIMIT_NPROC": unix.RLIMIT_NPROC, "RLIMIT_CORE": unix.RLIMIT_CORE, "RLIMIT_DATA": unix.RLIMIT_DATA} {
		var l unix.Rlimit
		if err := unix.Getrlimit(res, &l); err != nil {
			return nil, fmt.Errorf("cannot read the host's %s: %w", strings.ToLower(name), err)
		}
		out[name] = l.Max
	}
	return out, nil
}

// mkdirInRootfs makes dir, the call's working directory or a mount point
// (what), in the image's root filesystem, resolved inside it, before the
// container exists: crun would otherwise create it in the shared root
// filesystem from inside a container.
func (b *Bundle) mkdirInRootfs(dir, what string) error {
	if err := securejoin.MkdirAll(b.rootfs, dir, 0o755); err != nil {
		return fmt.Errorf("cannot create the %s %s in the image: %w", what, dir, err)
	}
	return nil
}

// writeCallConfig writes the runtime config of one call: the bundle's, with
// the call's arguments, environment, working directory and mounts. It
// returns the file's path; the caller removes it once the container exists.
func (b *Bundle) writeCallConfig(call *Call) (string, error) {
	data, err := json.Marshal(b.spec)
	if err != nil {
		return "", fmt.Errorf("cannot copy the runtime config: %w", err)
	}
	var s rspec.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return "", fmt.Errorf("cannot copy the runtime config: %w", err)
	}
	if call.Args != nil {
		if len(call.Args) == 0 {
			return "", errors.New("a call's process arguments must not be empty")
		}
		s.Process.Args = call.Args
	}
	s.Process.Env = mergeEnv(s.Process.Env, call.Env)
	if call.Cwd != "" {
		if !filepath.IsAbs(call.Cwd) {
			return "", fmt.Errorf("working directory %s: the path must be absolute", call.Cwd)
		}
		// A mount's destination is made with the mounts below.
		if !slices.ContainsFunc(call.Mounts, func(m Mount) bool { return filepath.Clean(m.Destination) == filepath.Clean(call.Cwd) }) {
			if err := b.mkdirInRootfs(call.Cwd, "working directory"); err != nil {
				return "", err
			}
		}
		s.Process.Cwd = call.Cwd
	}
	for _, m := range call.Mounts {
		if !filepath.IsAbs(m.Destination) || !filepath.IsAbs(m.Source) {
			return "", fmt.Errorf("mount %s on %s: both paths must be absolute", m.Source, m.Destination)
		}
		if err := b.mkdirInRootfs(m.Destination, "mount point"); err != nil {
			return "", err
		}
		s.Mounts = append(s.Mounts, rspec.Mount{
			Destination: m.Destination, Type: "bind", Source: m.Source,
			Options: []string{"rbind", "ro", "nosuid", "nodev"},
		})
	}
	out, err := json.Marshal(&s)
	if err != nil {
		return "", fmt.Errorf("cannot encode a call's runtime config: %w", err)
	}
	id, err := containerID()
	if err != nil {
		return "", err
	}
	path := filepath.Join(b.runtime.stateDir, id+".json")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		return "", fmt.Errorf("cannot write a call's runtime config: %w", err)
	}
	return path, nil
}

// mergeEnv returns base with extra added; a name in both takes extra's value.
func mergeEnv(base, extra []string) []string {
	if len(extra) == 0 {
		return base
	}
	index := map[string]int{}
	out := append([]string(nil), base...)
	for i, kv := range out {
		name, _, _ := strings.Cut(kv, "=")
		index[name] = i
	}
	for _, kv := range extra {
		name, _, _ := strings.Cut(kv, "=")
		if i, ok := index[name]; ok {
			out[i] = kv
			continue
		}
		index[name] = len(out)
		out = append(out, kv)
	}
	return out
}

// ScratchDir returns a directory for a front's files that live as long as
// the bundle (OpenWhisk's action code, say): removed with the bundle, and
// swept with it when a killed process left it. Container ids can reach
// what it holds when it is searchable by others.
func (b *Bundle) ScratchDir() (string, error) {
	d := filepath.Join(b.dir, "scratch")
	if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("cannot create the scratch directory %s: %w", d, err)
	}
	// The umask must not take away the containers' access.
	if err := os.Chmod(d, 0o755); err != nil {
		return "", fmt.Errorf("cannot set the mode of %s: %w", d, err)
	}
	return d, nil
}
