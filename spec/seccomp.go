package spec

import (
	"runtime"
	"slices"

	rspec "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The default seccomp profile is a denylist: every syscall is allowed except
// the ones below, which fail with an errno instead of running.
//
// Why a denylist and not an allowlist (Docker's profile): a function is any
// image — jq, yq, a shell, Python, Node, a JVM, a static Go binary — and an
// allowlist that misses a syscall a runtime needs (new ones appear every
// kernel release; crun 1.8.1 links libseccomp 2.5.4, whose tables stop at
// Linux 6.0) breaks that runtime in ways its author cannot diagnose. What an
// allowlist would add is small here: the process already holds no
// capability in any user namespace but its own, has noNewPrivileges, a
// read-only root and no network. The syscalls that remain dangerous under
// those conditions are the ones that reach kernel code an unprivileged
// process may still use — keyrings, eBPF, perf events, userfaultfd,
// io_uring — and the ones that create a new user namespace, in which the
// process would hold every capability again (mount, netfilter, …: where
// most container escapes of recent years started). Those are denied. The
// privileged ones (mount, modules, clock, reboot, swap, …) fail without a
// capability anyway; they are denied too, so that a kernel bug in a
// capability check is not enough.
//
// Denied syscalls fail with EPERM, which every libc and language runtime
// treats as "not allowed here". Two fail with ENOSYS instead, because their
// callers fall back to an older syscall only on ENOSYS: clone3 (glibc
// retries with clone, whose flags the filter can inspect; clone3 passes
// them in memory, where seccomp cannot look) and io_uring (libuv and
// others fall back to thread pools).
var (
	// deniedSyscalls fail with EPERM.
	deniedSyscalls = []string{
		// kernel keyrings: not namespaced, a source of exploits
		"add_key", "keyctl", "request_key",
		// eBPF and perf events: large attack surface, tracing of others
		"bpf", "perf_event_open",
		// userfaultfd: used to win the races of kernel exploits
		"userfaultfd",
		// mounts, old and new API
		"mount", "umount", "umount2", "pivot_root", "chroot",
		"fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr",
		// open_tree and mount_setattr in one (Linux 6.15): without
		// attributes it is open_tree. Newer than crun 1.8.1's libseccomp,
		// which ignores the name with a warning; ocifn's compiler
		// (internal/seccompbpf) knows its number.
		"open_tree_attr",
		// kernel modules
		"init_module", "finit_module", "delete_module", "create_module",
		// clocks
		"clock_settime", "clock_adjtime", "settimeofday", "adjtimex", "stime",
		// the machine itself
		"kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff",
		"acct", "quotactl", "quotactl_fd", "syslog", "vhangup",
		"iopl", "ioperm", "lookup_dcookie", "nfsservctl", "uselib", "ustat", "sysfs", "_sysctl",
		// other processes and namespaces: a function has no business
		// debugging or entering anything
		"ptrace", "process_vm_readv", "process_vm_writev", "setns",
		"kcmp", "pidfd_getfd", "process_madvise",
		// file handles bypass path checks (the "shocker" escape)
		"open_by_handle_at", "name_to_handle_at",
		"fanotify_init",
		// memory placement on NUMA nodes, and moving pages between them,
		// another process's too: Docker's profile allows these only with
		// CAP_SYS_NICE, which a function never has (reading the policy,
		// get_mempolicy, stays allowed)
		"mbind", "set_mempolicy", "migrate_pages", "move_pages",
	}
	// enosysSyscalls fail with ENOSYS, so that callers fall back.
	enosysSyscalls = []string{"clone3", "io_uring_setup", "io_uring_enter", "io_uring_register"}
	// newUserNSSyscalls are denied with EPERM only when their flags ask for
	// a new user namespace (first argument on the architectures below).
	newUserNSSyscalls = []string{"unshare", "clone"}
	// deniedSocketFamilies are the address families socket refuses with
	// EPERM: vsock, which network namespaces do not isolate (with the
	// network off, a function could still bind a port of the machine's
	// vsock and reach the hypervisor's side of a VM), and the kernel's
	// crypto API (AF_ALG), a source of exploits that Docker's profile
	// denies too. i386's socketcall passes the family in memory, where the
	// filter cannot look.
	deniedSocketFamilies = []uint64{unix.AF_VSOCK, unix.AF_ALG}
)

// SeccompErrno is the errno a denied syscall fails with, and SeccompENOSYS
// the one the fallback-friendly ones fail with.
const (
	SeccompErrno  = uint(unix.EPERM)
	SeccompENOSYS = uint(unix.ENOSYS)
)

// Seccomp returns the default seccomp profile of every function container
// for the architecture ocifn runs on.
func Seccomp() *rspec.LinuxSeccomp {
	return SeccompFor(runtime.GOARCH)
}

// SeccompFor returns the default profile for the Go architecture goarch
// (its syscall tables are generated for amd64 and arm64, see
// internal/seccompbpf).
func SeccompFor(goarch string) *rspec.LinuxSeccomp {
	eperm, enosys := SeccompErrno, SeccompENOSYS
	s := &rspec.LinuxSeccomp{
		DefaultAction: rspec.ActAllow,
		// Every ABI the CPU can run: a denylist that covered only the
		// native one would let a 32-bit syscall through. Syscalls of an
		// architecture not listed kill the process.
		Architectures: architectures(goarch),
		Syscalls: []rspec.LinuxSyscall{
			{Names: deniedSyscalls, Action: rspec.ActErrno, ErrnoRet: &eperm},
			{Names: enosysSyscalls, Action: rspec.ActErrno, ErrnoRet: &enosys},
		},
	}
	// s390x passes clone's flags second; unshare alone is filtered there.
	names := newUserNSSyscalls
	if goarch == "s390x" {
		names = []string{"unshare"}
	}
	s.Syscalls = append(s.Syscalls, rspec.LinuxSyscall{
		Names: names, Action: rspec.ActErrno, ErrnoRet: &eperm,
		Args: []rspec.LinuxSeccompArg{{Index: 0, Value: unix.CLONE_NEWUSER, ValueTwo: unix.CLONE_NEWUSER, Op: rspec.OpMaskedEqual}},
	})
	// The family is an int: its 32 bits alone are compared, as the
	// kernel reads them.
	for _, family := range deniedSocketFamilies {
		s.Syscalls = append(s.Syscalls, rspec.LinuxSyscall{
			Names: []string{"socket"}, Action: rspec.ActErrno, ErrnoRet: &eperm,
			Args: []rspec.LinuxSeccompArg{{Index: 0, Value: 0xffffffff, ValueTwo: family, Op: rspec.OpMaskedEqual}},
		})
	}
	return s
}

// Runs reports whether a machine of the Go architecture goarch runs the
// programs of an image built for arch (a Go architecture name, as image
// configs give it): its own, or another ABI its CPU runs (386 on amd64, arm
// on arm64), which the seccomp profile covers for that reason.
func Runs(goarch, arch string) bool {
	own := architectures(arch)
	return arch == goarch || (len(own) > 0 && slices.Contains(architectures(goarch), own[0]))
}

func architectures(goarch string) []rspec.Arch {
	switch goarch {
	case "amd64":
		return []rspec.Arch{rspec.ArchX86_64, rspec.ArchX86, rspec.ArchX32}
	case "arm64":
		return []rspec.Arch{rspec.ArchAARCH64, rspec.ArchARM}
	case "386":
		return []rspec.Arch{rspec.ArchX86}
	case "arm":
		return []rspec.Arch{rspec.ArchARM}
	case "ppc64le":
		return []rspec.Arch{rspec.ArchPPC64LE}
	case "riscv64":
		return []rspec.Arch{rspec.ArchRISCV64}
	}
	// Unknown: the native architecture only.
	return nil
}
