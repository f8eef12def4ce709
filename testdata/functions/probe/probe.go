// Command probe is a test function that reports, from inside its container,
// what it can and cannot do: the isolation e2e tests compare its report with
// what ocifn promises (see README "Security model").
//
// As a function (no arguments) it reads the request on stdin and prints a
// RunFunctionResponse whose desired is the request's and whose context is the
// report. The request's input may name things of the host to look for:
//
//	input.hostFiles  paths of host files the function must not be able to read
//	input.marker     a string in the command line of a host process it must
//	                 not be able to see
//	input.tmpName    a file to create in /tmp (to show /tmp is per call)
//
// With the argument "syscalls" it prints only the syscall report, as JSON, so
// a test can run the same binary outside any container as a control.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "syscalls" {
		out, _ := json.Marshal(syscalls(false))
		fmt.Println(string(out))
		return
	}
	// Before anything opens a descriptor of its own: what the function
	// was handed.
	fds := openFDs()
	var req map[string]any
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "probe: the request is not JSON:", err)
		os.Exit(1)
	}
	input, _ := req["input"].(map[string]any)
	report := map[string]any{
		"syscalls":    syscalls(os.Getpid() == 1),
		"status":      status(),
		"uid_map":     squeeze("/proc/self/uid_map"),
		"gid_map":     squeeze("/proc/self/gid_map"),
		"interfaces":  interfaces(),
		"root_write":  errnoName(writeFile("/probe-root-write")),
		"bin_write":   errnoName(writeFile("/bin/probe-write")),
		"rlimits":     rlimits(),
		"host_files":  hostFiles(strings_(input["hostFiles"])),
		"processes":   processes(str(input["marker"])),
		"tmp":         tmp(str(input["tmpName"])),
		"etc_shadow":  errnoName(readable("/etc/shadow")),
		"proc_1_root": errnoName(readable("/proc/1/root/etc/hostname")),
		"fds":         fds,
		"sys_rw":      writableMounts("/sys"),
	}
	out, err := json.Marshal(map[string]any{"desired": req["desired"], "context": report})
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
	fmt.Println(string(out))
}

// writableMounts lists, space-separated, the mount points at or below
// under that are mounted read-write (/proc/self/mountinfo).
func writableMounts(under string) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "unreadable: " + errnoName(err)
	}
	var rw []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || (f[4] != under && !strings.HasPrefix(f[4], under+"/")) {
			continue
		}
		for _, opt := range strings.Split(f[5], ",") {
			if opt == "rw" {
				rw = append(rw, f[4])
			}
		}
	}
	return strings.Join(rw, " ")
}

// openFDs lists the process's open descriptors below 1024, space-separated,
// by asking the kernel of each (F_GETFD) rather than reading /proc/self/fd,
// which takes a descriptor of its own.
func openFDs() string {
	var open []string
	for fd := range 1024 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err == nil {
			open = append(open, fmt.Sprint(fd))
		}
	}
	return strings.Join(open, " ")
}

func str(v any) string { s, _ := v.(string); return s }

func strings_(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, e := range l {
		out = append(out, str(e))
	}
	return out
}

// errnoName is "ok" for nil, the errno's name (EPERM, …) for a syscall
// error, and the message otherwise.
func errnoName(err error) string {
	if err == nil {
		return "ok"
	}
	var e unix.Errno
	if errors.As(err, &e) {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
		return fmt.Sprintf("errno %d", int(e))
	}
	return err.Error()
}

func writeFile(p string) error {
	err := os.WriteFile(p, []byte("probe"), 0o644)
	if err == nil {
		os.Remove(p)
	}
	return err
}

func readable(p string) error {
	_, err := os.ReadFile(p)
	return err
}

func squeeze(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "unreadable: " + errnoName(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		lines = append(lines, strings.Join(strings.Fields(l), " "))
	}
	return strings.Join(lines, "\n")
}

// status returns the security fields of /proc/self/status, and the CPUs
// the function may run on.
func status() map[string]string {
	out := map[string]string{}
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		out["error"] = err.Error()
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		switch k {
		case "NoNewPrivs", "Seccomp", "Seccomp_filters", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "Uid", "Gid", "Cpus_allowed_list":
			out[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return out
}

func interfaces() string {
	ifs, err := net.Interfaces()
	if err != nil {
		return "error: " + err.Error()
	}
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

// rlimits tries to raise the hard limits a call runs with.
func rlimits() map[string]string {
	out := map[string]string{}
	for name, res := range map[string]int{"nofile": unix.RLIMIT_NOFILE, "nproc": unix.RLIMIT_NPROC, "data": unix.RLIMIT_DATA} {
		var l unix.Rlimit
		if err := unix.Getrlimit(res, &l); err != nil {
			out[name] = "getrlimit: " + errnoName(err)
			continue
		}
		out[name+"_hard"] = fmt.Sprint(l.Max)
		if l.Max == unix.RLIM_INFINITY {
			out[name+"_raise"] = "already unlimited"
			continue
		}
		raised := unix.Rlimit{Cur: l.Max + 1, Max: l.Max + 1}
		out[name+"_raise"] = errnoName(unix.Setrlimit(res, &raised))
	}
	return out
}

// hostFiles tries every path to each host file that a breakout would use.
func hostFiles(paths []string) map[string]string {
	out := map[string]string{}
	for _, p := range paths {
		for _, via := range []string{p, "/../../../../.." + p, "/proc/1/root" + p, "/proc/self/root/../.." + p, "/proc/self/cwd/../../../.." + p} {
			b, err := os.ReadFile(via)
			if err == nil {
				out[via] = "read: " + string(b)
			} else {
				out[via] = errnoName(err)
			}
		}
	}
	return out
}

// processes reports how many processes the function sees and whether one
// of them has marker in its command line.
func processes(marker string) map[string]any {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	seen := false
	var pids []string
	for _, d := range dirs {
		pids = append(pids, filepath.Base(d))
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err == nil && marker != "" && strings.Contains(string(b), marker) {
			seen = true
		}
	}
	return map[string]any{"count": len(pids), "marker_seen": seen, "self": fmt.Sprint(os.Getpid())}
}

// tmp lists /tmp before creating name in it.
func tmp(name string) map[string]any {
	entries, err := os.ReadDir("/tmp")
	var before []string
	for _, e := range entries {
		before = append(before, e.Name())
	}
	out := map[string]any{"before": before, "read_error": errnoName(err)}
	if name != "" {
		out["write"] = errnoName(os.WriteFile(filepath.Join("/tmp", filepath.Base(name)), []byte(name), 0o600))
	}
	return out
}

// syscalls calls syscalls the seccomp profile denies, with arguments that
// make each one succeed or fail with a distinctive errno when no filter
// is in the way, and reports the result ("ok" or the errno's name). Each
// is harmless where it succeeds, except mount, which is only tried inside
// a container (inContainer: the probe is its pid 1, as every function is):
// run as root on a host it would cover /tmp.
func syscalls(inContainer bool) map[string]string {
	out := map[string]string{}
	call := func(name string, f func() error) { out[name] = errnoName(f()) }

	// keyctl and add_key work for any unprivileged process: without
	// seccomp they succeed.
	call("keyctl", func() error {
		_, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_PROCESS_KEYRING, true)
		return err
	})
	call("add_key", func() error {
		_, err := unix.AddKey("user", "ocifn-probe", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
		return err
	})
	// Without seccomp, a multi-threaded process gets EINVAL for a new user
	// namespace; the filter answers EPERM before the kernel looks.
	call("unshare_user", func() error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		_, _, e := unix.RawSyscall(unix.SYS_UNSHARE, unix.CLONE_NEWUSER, 0, 0)
		return errOf(e)
	})
	// clone3 with no arguments is EINVAL for the kernel; ENOSYS from the
	// filter.
	call("clone3", func() error {
		_, _, e := unix.RawSyscall(unix.SYS_CLONE3, 0, 0, 0)
		return errOf(e)
	})
	// io_uring_setup with one entry succeeds without a filter (unless the
	// kernel disables io_uring).
	call("io_uring_setup", func() error {
		var params [120]byte
		fd, _, e := unix.RawSyscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
		if e == 0 {
			unix.Close(int(fd))
		}
		return errOf(e)
	})
	// A vsock socket works without privilege where the kernel has vsock
	// (a VM's guest), else EAFNOSUPPORT; the filter answers EPERM.
	call("socket_vsock", func() error {
		fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0)
		if err == nil {
			unix.Close(fd)
		}
		return err
	})
	// open_tree of / without OPEN_TREE_CLONE is an O_PATH open for any
	// process; open_tree_attr (Linux 6.15, the same number everywhere)
	// without attributes is the same call, else ENOSYS. The filter
	// answers EPERM to both.
	for name, nr := range map[string]uintptr{"open_tree": 428, "open_tree_attr": 467} {
		call(name, func() error {
			root := []byte("/\x00")
			cwd := unix.AT_FDCWD
			fd, _, e := unix.RawSyscall6(nr, uintptr(cwd), uintptr(unsafe.Pointer(&root[0])), 0, 0, 0, 0)
			if e == 0 {
				unix.Close(int(fd))
			}
			return errOf(e)
		})
	}
	// kcmp of the process with itself works without privilege (where the
	// kernel has it, else ENOSYS).
	call("kcmp", func() error {
		pid := uintptr(os.Getpid())
		_, _, e := unix.RawSyscall6(unix.SYS_KCMP, pid, pid, 0 /* KCMP_FILE */, 0, 0, 0)
		return errOf(e)
	})
	// mbind of one of its own pages to the default policy works without
	// privilege (where the kernel has NUMA, else ENOSYS).
	call("mbind", func() error {
		page, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return err
		}
		defer unix.Munmap(page)
		_, _, e := unix.RawSyscall6(unix.SYS_MBIND, uintptr(unsafe.Pointer(&page[0])), uintptr(len(page)), 0 /* MPOL_DEFAULT */, 0, 0, 0)
		return errOf(e)
	})
	// These fail without privilege anyway; reported for completeness.
	if inContainer {
		call("mount", func() error { return unix.Mount("none", "/tmp", "tmpfs", 0, "") })
	}
	call("perf_event_open", func() error {
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}
		attr.Size = uint32(unsafe.Sizeof(attr))
		fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, 0)
		if err == nil {
			unix.Close(fd)
		}
		return err
	})
	call("bpf", func() error {
		_, _, e := unix.RawSyscall(unix.SYS_BPF, 0, 0, 0)
		return errOf(e)
	})
	return out
}

func errOf(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}
