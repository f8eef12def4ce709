// Package spec derives the OCI runtime configuration that every call's
// container runs with, from an image config and the operator's options.
//
// It is pure: nothing here reads or writes the disk, so the whole policy
// (namespaces, id maps, mounts, rlimits, capabilities) can be read and tested
// in one place.
package spec

import (
	"errors"
	"fmt"
	"strings"

	imgspec "github.com/opencontainers/image-spec/specs-go/v1"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

// DefaultPath is the PATH a process gets when its image sets none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// DefaultTmpSize bounds the private /tmp of each call.
const DefaultTmpSize = "64m"

// TmpInodes bounds the files and directories of each call's tmpfs mounts
// (/tmp, /dev/shm, and /dev when it is one): one per 4 KiB page of their
// 64 MiB, so that small files fill a mount's size and its inodes together.
// tmpfs's own default is half the host's RAM in pages (3 million on a
// 24 GiB host), and an inode's kernel memory, about 1 KiB with its dentry,
// counts neither in the mount's size nor, without cgroups, in any limit
// of the call: 200,000 empty files in a /tmp that was 0% full held 200 MB
// until the call ended.
const TmpInodes = "16k"

// Version is the runtime-spec version written into configs. crun 1.8
// (Debian 12) rejects versions newer than the 1.0 series it implements, and
// nothing here needs a later one.
const Version = "1.0.2"

// DefaultHostname is the hostname every function sees.
const DefaultHostname = "ocifn"

// Network modes.
const (
	// NetworkNone gives each call its own network namespace with only loopback.
	NetworkNone = "none"
	// NetworkHost shares the host's network namespace.
	NetworkHost = "host"
)

// Rlimits every call gets, before clamping to the host's hard limits.
// Asking for more than the host allows makes crun fail with EPERM, so
// Generate lowers each one to the host's hard limit.
var defaultRlimits = []rspec.POSIXRlimit{
	{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 4096},
	{Type: "RLIMIT_NPROC", Hard: 1024, Soft: 1024},
	{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
}

// maskedPaths hide kernel interfaces that leak host information or allow
// attacks on the host. The list follows the runtime-spec defaults used by
// container engines.
//
// Those engines also make /proc/bus, /proc/fs, /proc/irq, /proc/sys and
// /proc/sysrq-trigger read-only, each with a bind mount of its own and a
// remount: fifteen mount calls per container. Here the whole of /proc is
// mounted read-only instead, which covers them in one: a function reads
// /proc but has no business writing to it (docs/performance.md, what was
// tried).
var maskedPaths = []string{
	"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
	"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
	"/proc/sched_debug", "/proc/scsi", "/proc/interrupts",
	"/sys/firmware", "/sys/devices/virtual/powercap",
}

// Capabilities is the capability set of a function's process: none. A
// function reads JSON and writes JSON; it needs no privilege, not even inside
// its own user namespace.
var Capabilities = []string{}

// User is the identity a function's process runs as, resolved from the
// image's User against the image's own /etc/passwd and /etc/group.
type User struct {
	UID, GID       uint32
	AdditionalGids []uint32
	Home           string
}

// Options are the operator's decisions that apply to every container.
type Options struct {
	// Rootfs is the path of the shared, read-only root filesystem.
	Rootfs string
	// UIDMappings and GIDMappings map container ids to ids of the runtime's
	// user namespace. They must not be empty: every function runs in its own
	// user namespace.
	UIDMappings, GIDMappings []rspec.LinuxIDMapping
	// Network is NetworkNone (default) or NetworkHost.
	Network string
	// TmpSize bounds the private /tmp of each call (tmpfs size option).
	TmpSize string
	// HostRlimits are the hard limits of the host process, by rlimit type.
	// Every rlimit of the container is clamped to them.
	HostRlimits map[string]uint64
	// Limits bound each call's memory and processes.
	Limits Limits
	// Dev, when set, is a host directory that already holds what a
	// container's /dev must (device nodes, the standard symlinks and the
	// mount points below it): it is bind mounted read-only as /dev. Empty:
	// /dev is a fresh tmpfs that crun fills with bind mounts of the host's
	// devices, which costs each container many more mounts.
	Dev string
}

// Errors returned by Generate.
var (
	errNoCommand  = errors.New("the image config has neither Entrypoint nor Cmd: there is no program to run")
	errNoMappings = errors.New("uid and gid mappings are required: functions always run in their own user namespace")
	errNoRootfs   = errors.New("the root filesystem path is required")
)

// Generate returns the runtime config for one function container.
func Generate(img imgspec.ImageConfig, user User, o Options) (*rspec.Spec, error) {
	if o.Rootfs == "" {
		return nil, errNoRootfs
	}
	if len(o.UIDMappings) == 0 || len(o.GIDMappings) == 0 {
		return nil, errNoMappings
	}
	args := Args(img)
	if len(args) == 0 {
		return nil, errNoCommand
	}
	if !mapped(user.UID, o.UIDMappings) {
		return nil, fmt.Errorf("the image's user id %d is not mapped into the container (mappings %v): give ocifn --id-map-size %d or more", user.UID, o.UIDMappings, uint64(user.UID)+1)
	}
	if !mapped(user.GID, o.GIDMappings) {
		return nil, fmt.Errorf("the image's group id %d is not mapped into the container (mappings %v): give ocifn --id-map-size %d or more", user.GID, o.GIDMappings, uint64(user.GID)+1)
	}
	network := o.Network
	if network == "" {
		network = NetworkNone
	}
	if network != NetworkNone && network != NetworkHost {
		return nil, fmt.Errorf("unknown network mode %q: want %q or %q", network, NetworkNone, NetworkHost)
	}
	tmpSize := o.TmpSize
	if tmpSize == "" {
		tmpSize = DefaultTmpSize
	}
	cwd := img.WorkingDir
	if cwd == "" {
		cwd = "/"
	}

	s := &rspec.Spec{
		Version:  Version,
		Hostname: DefaultHostname,
		Root:     &rspec.Root{Path: o.Rootfs, Readonly: true},
		Process: &rspec.Process{
			Args: args,
			Env:  environment(img.Env, user),
			Cwd:  cwd,
			User: rspec.User{
				UID:            user.UID,
				GID:            user.GID,
				AdditionalGids: mappedGids(user.AdditionalGids, o.GIDMappings),
			},
			Capabilities: &rspec.LinuxCapabilities{
				Bounding:  Capabilities,
				Effective: Capabilities,
				Permitted: Capabilities,
			},
			NoNewPrivileges: true,
			Rlimits:         rlimits(o.Limits.fallbackRlimits(defaultRlimits), o.HostRlimits),
		},
		Mounts: mounts(network, tmpSize, o.Dev),
		Linux: &rspec.Linux{
			UIDMappings:   o.UIDMappings,
			GIDMappings:   o.GIDMappings,
			Namespaces:    namespaces(network),
			MaskedPaths:   maskedPaths,
			ReadonlyPaths: readonlyPaths(o.Dev),
			Seccomp:       Seccomp(),
			Resources:     o.Limits.resources(),
		},
	}
	return s, nil
}

// Args returns the program an image runs: its Entrypoint, then its Cmd.
// An Entrypoint of one empty string is none, as Docker and containerd read
// it: a Dockerfile's ENTRYPOINT [""] takes away the base image's so that
// its CMD runs, and crun would otherwise try to execute "".
func Args(img imgspec.ImageConfig) []string {
	entrypoint := img.Entrypoint
	if len(entrypoint) == 1 && entrypoint[0] == "" {
		entrypoint = nil
	}
	return append(append([]string{}, entrypoint...), img.Cmd...)
}

// environment returns the image's Env with PATH and HOME filled in when the
// image leaves them out, as container engines do.
func environment(env []string, user User) []string {
	out := append([]string{}, env...)
	if !hasVar(env, "PATH") {
		out = append(out, "PATH="+DefaultPath)
	}
	if !hasVar(env, "HOME") {
		home := user.Home
		if home == "" {
			home = "/"
		}
		out = append(out, "HOME="+home)
	}
	return out
}

func hasVar(env []string, name string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			return true
		}
	}
	return false
}

// rlimits clamps the rlimits to the host's hard limits.
func rlimits(in []rspec.POSIXRlimit, host map[string]uint64) []rspec.POSIXRlimit {
	out := make([]rspec.POSIXRlimit, 0, len(in))
	for _, l := range in {
		if max, ok := host[l.Type]; ok {
			l.Hard = min(l.Hard, max)
			l.Soft = min(l.Soft, max)
		}
		out = append(out, l)
	}
	return out
}

func namespaces(network string) []rspec.LinuxNamespace {
	ns := []rspec.LinuxNamespace{
		{Type: rspec.UserNamespace},
		{Type: rspec.MountNamespace},
		{Type: rspec.PIDNamespace},
		{Type: rspec.IPCNamespace},
		{Type: rspec.UTSNamespace},
		{Type: rspec.CgroupNamespace},
	}
	if network == NetworkNone {
		ns = append(ns, rspec.LinuxNamespace{Type: rspec.NetworkNamespace})
	}
	return ns
}

func mounts(network, tmpSize, devDir string) []rspec.Mount {
	dev := rspec.Mount{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k", "nr_inodes=" + TmpInodes}}
	if devDir != "" {
		// A bind mount on /dev also tells crun not to create any device:
		// the directory has them all, as nodes or as bind mounts of the
		// host's, which "rbind" carries along.
		dev = rspec.Mount{Destination: "/dev", Type: "bind", Source: devDir, Options: []string{"rbind", "ro", "nosuid", "noexec"}}
	}
	m := []rspec.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		dev,
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k", "nr_inodes=" + TmpInodes}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		// Each call's /tmp is a fresh tmpfs in the call's own mount
		// namespace: nothing written there survives the call or is seen by
		// another one, and the host has nothing to clean up.
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", "size=" + tmpSize, "nr_inodes=" + TmpInodes}},
	}
	if network == NetworkNone {
		// A fresh sysfs is only allowed in a network namespace the
		// container owns.
		m = append(m, rspec.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}})
	} else {
		// The host's: read-only all the way down (rro), for "ro" would
		// leave its submounts (the cgroup trees, where an unprivileged
		// ocifn's own cgroup is writable by its uid) as they are.
		m = append(m, rspec.Mount{Destination: "/sys", Type: "none", Source: "/sys", Options: []string{"rbind", "nosuid", "noexec", "nodev", "rro"}})
	}
	return m
}

func mapped(id uint32, m []rspec.LinuxIDMapping) bool {
	for _, r := range m {
		if id >= r.ContainerID && id-r.ContainerID < r.Size {
			return true
		}
	}
	return false
}

// mappedGids drops supplementary groups that do not exist in the container's
// user namespace; setgroups would fail on them.
func mappedGids(gids []uint32, m []rspec.LinuxIDMapping) []uint32 {
	var out []uint32
	for _, g := range gids {
		if mapped(g, m) {
			out = append(out, g)
		}
	}
	return out
}

// readonlyPaths are the paths made read-only after every mount: with no
// prepared /dev (devDir empty), the devices crun binds from the host into
// its tmpfs /dev. crun makes those bind mounts writable, and through one a
// function's `touch /dev/null` set the times of the host's /dev/null (its
// owner and mode it cannot change, not owning the node); a device still
// reads and writes on a read-only mount. A prepared /dev is read-only with
// its devices (bundle's makeDev).
func readonlyPaths(devDir string) []string {
	if devDir != "" {
		return nil
	}
	return []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}
}
