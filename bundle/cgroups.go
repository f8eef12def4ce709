package bundle

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/ocifn/ocifn/host"
	"github.com/ocifn/ocifn/spec"
)

// Per-call limit defaults.
const (
	// DefaultMemoryLimit caps the memory of one call: enough for jq or yq
	// on the largest requests ocifn accepts (64 MiB of JSON).
	DefaultMemoryLimit = 1 << 30
	// DefaultPidsLimit caps the processes and threads of one call.
	DefaultPidsLimit = 1024
)

// cgroupControllers are the controllers a delegated cgroup v2 tree must
// offer for calls to run in cgroups of their own.
var cgroupControllers = []string{"memory", "pids"}

// supervisorCgroup is the leaf cgroup ocifn moves itself into, so that the
// cgroup above it may hand controllers to the calls' cgroups (cgroup v2
// lets only cgroups without processes of their own do that).
const supervisorCgroup = "ocifn"

// cgroupManager is crun's --cgroup-manager for every container of this
// process: "disabled" until PrepareLimits finds a delegated cgroup v2 tree.
// It is process-wide because the host's cgroup layout is.
var cgroupManager atomic.Value

func cgroupManagerFlag() string {
	if m, ok := cgroupManager.Load().(string); ok {
		return "--cgroup-manager=" + m
	}
	return "--cgroup-manager=disabled"
}

// cgroupMount is the cgroup2 mount point the calls' cgroups are read from
// (their memory.events), once PrepareLimits found a delegated tree.
var cgroupMount atomic.Value

// PrepareLimits decides how the per-call caps (0: none) are enforced on this
// host, and prepares the cgroups when it can. With a delegated cgroup v2
// tree every call gets a cgroup of its own from crun (cgroupfs manager)
// with memory.max, memory.swap.max and pids.max. ocifn's cgroup is
// delegated to it when ocifn is at the root of its own cgroup namespace,
// with that namespace's cgroupfs mounted writable at /sys/fs/cgroup, and
// the memory and pids controllers available. That is the case
//
//   - in a container with a private cgroup namespace and a writable
//     cgroupfs, and
//   - for ocifn started unprivileged on a pure cgroup v2 host, in a cgroup
//     its user owns (systemd's Delegate=yes, or a chown by root): ocifn
//     re-executes itself in a cgroup namespace of its own and mounts its
//     cgroupfs (host.Plan.CgroupNS), whose files are then its own.
//
// Otherwise the caps fall back to rlimits (see spec.Limits) and the second
// result says why; the host's cgroups are never changed. Call it once,
// before Create, in ocifn's own namespaces.
func PrepareLimits(memoryBytes, pids int64) (spec.Limits, string) {
	l := spec.Limits{MemoryBytes: memoryBytes, Pids: pids}
	if host.CgroupMountError != "" {
		return l, host.CgroupMountError
	}
	cg, err := host.DetectCgroups()
	// In ocifn's own namespaces on a hybrid host the cgroup2 mount is
	// masked, so its controllers cannot be read: the layout is enough.
	if err != nil && cg.Layout != host.CgroupHybrid {
		return l, err.Error()
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return l, fmt.Sprintf("cannot read /proc/self/cgroup: %v", err)
	}
	root, why := delegatedRoot(cg, self)
	if why != "" {
		return l, why
	}
	if err := takeOver(root); err != nil {
		return l, err.Error()
	}
	cgroupMount.Store(cg.Unified)
	cgroupManager.Store("cgroupfs")
	l.Cgroups = true
	return l, ""
}

// delegatedRoot returns the cgroup v2 directory ocifn may hand out to its
// calls, or why there is none. selfCgroup is /proc/self/cgroup.
func delegatedRoot(cg host.Cgroups, selfCgroup []byte) (string, string) {
	switch cg.Layout {
	case host.CgroupHybrid:
		return "", fmt.Sprintf("the host mounts cgroups in hybrid mode (v1 controllers, cgroup2 at %s): crun cannot use them and ocifn does not change the host's cgroups", cg.Unified)
	case host.CgroupLegacy:
		return "", "the host has cgroup v1 only, which ocifn does not manage"
	case host.CgroupNone:
		return "", fmt.Sprintf("no cgroup filesystem is mounted (ocifn covers %s with an empty tmpfs in its own mount namespace, for crun)", host.CgroupRoot)
	}
	path := ""
	sc := bufio.NewScanner(bytes.NewReader(selfCgroup))
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			path = p
		}
	}
	if path != "/" {
		return "", fmt.Sprintf("ocifn's cgroup %q is not the root of its own cgroup namespace (run it in a container with a private cgroup namespace, or unprivileged in a cgroup delegated to its user)", path)
	}
	dir := cg.Unified
	// In a cgroup namespace whose cgroupfs is the host's, the mount shows
	// the host's tree, not ocifn's cgroup: it must list ocifn.
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return "", fmt.Sprintf("cannot read the processes of ocifn's cgroup %s: %v", dir, err)
	}
	if !slices.Contains(strings.Fields(string(procs)), strconv.Itoa(os.Getpid())) {
		return "", fmt.Sprintf("%s is not ocifn's cgroup (the cgroupfs at %s is not its cgroup namespace's own)", dir, cg.Unified)
	}
	// The machine's own root cgroup, which has no cgroup.type (every other
	// cgroup, a cgroup namespace's root too, has one): ocifn run as root
	// outside any cgroup namespace (no container, no systemd slice) would
	// make its cgroups at the top of the machine's tree.
	if _, err := os.Stat(filepath.Join(dir, "cgroup.type")); errors.Is(err, os.ErrNotExist) {
		return "", fmt.Sprintf("ocifn runs in the machine's root cgroup (%s has no cgroup.type), which it does not change: run it in a container with a private cgroup namespace, or unprivileged in a cgroup delegated to its user", dir)
	}
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return "", fmt.Sprintf("cannot read the controllers of %s: %v", dir, err)
	}
	have := strings.Fields(string(b))
	var missing []string
	for _, c := range cgroupControllers {
		if !slices.Contains(have, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Sprintf("the cgroup at %s does not offer the %s controller(s)", dir, strings.Join(missing, ", "))
	}
	for _, f := range []string{"cgroup.procs", "cgroup.subtree_control"} {
		if err := unix.Access(filepath.Join(dir, f), unix.W_OK); err != nil {
			return "", fmt.Sprintf("the cgroup at %s is not writable (%s: %v): it is mounted read-only or not delegated to ocifn's user", dir, f, err)
		}
	}
	return dir, ""
}

// takeOver moves ocifn (and the ocifn process that re-executed it, if it
// shares the cgroup) into a leaf cgroup and enables the controllers for the
// calls' cgroups. Processes that are not ocifn are never moved: if any is
// left, enabling the controllers fails and the caps fall back to rlimits.
func takeOver(root string) error {
	leaf := filepath.Join(root, supervisorCgroup)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("cannot create the cgroup %s: %w", leaf, err)
	}
	pids := []int{os.Getpid()}
	// The ocifn that re-executed this one into its namespaces waits in the
	// same cgroup.
	if p := host.ReexecParent(); p > 0 {
		pids = append(pids, p)
	}
	// In a pod ocifn is usually pid 1 of its own pid namespace; it is
	// moved like any ocifn process (the host's init is never ocifn).
	for _, pid := range pids {
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("cannot move process %d into the cgroup %s: %w", pid, leaf, err)
		}
	}
	enable := "+" + strings.Join(cgroupControllers, " +")
	if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte(enable), 0); err != nil {
		return fmt.Errorf("cannot enable %s in %s (processes other than ocifn's in that cgroup: %s): %w", enable, root, processesOf(root), err)
	}
	return nil
}

// processesOf lists the processes of a cgroup as "pid (command)".
func processesOf(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var out []string
	for _, pid := range strings.Fields(string(b)) {
		comm, _ := os.ReadFile("/proc/" + pid + "/comm")
		out = append(out, fmt.Sprintf("%s (%s)", pid, strings.TrimSpace(string(comm))))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// removeCallCgroup removes the cgroup crun's cgroupfs manager makes for
// container id, /ID under the root of ocifn's cgroup tree (its configs set
// no cgroupsPath), if it is there and empty. A crun create killed before
// it wrote the container's state (its context ended: the pool stopped, a
// call's deadline passed) leaves it behind, and crun delete, which then
// knows no such container, does not remove it. Called once the failed
// creation's processes are killed and reaped.
func removeCallCgroup(id string) {
	if mount, ok := cgroupMount.Load().(string); ok {
		_ = unix.Rmdir(filepath.Join(mount, id))
	}
}

// cgroupOf returns the cgroup directory of a process, or "" when calls do
// not run in cgroups of their own or it cannot be read.
func cgroupOf(pid int) string {
	mount, ok := cgroupMount.Load().(string)
	if !ok {
		return ""
	}
	var buf [4096]byte // a line per hierarchy on a hybrid host
	b, err := readSmallFile(fmt.Sprintf("/proc/%d/cgroup", pid), buf[:])
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return filepath.Join(mount, p)
		}
	}
	return ""
}

// oomKilled reads the OOM kills of the container's cgroup (memory.events
// counts those of its whole subtree) and describes them, or returns "".
// Its "oom" count says whether its own memory.max was the limit hit: the
// kernel counts an OOM in the cgroup whose limit ran out, and the kill in
// the victim's, so a kill for memory that ran out above it (ocifn's own
// cgroup's memory.max, a container's or a unit's, or the machine's) leaves
// its "oom" at 0.
func (c *container) oomKilled() string {
	if c.cgroup == "" {
		return ""
	}
	var buf [512]byte // six counters
	b, err := readSmallFile(filepath.Join(c.cgroup, "memory.events"), buf[:])
	if err != nil {
		return ""
	}
	kills, ooms := 0, 0
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			kills, _ = strconv.Atoi(strings.TrimSpace(v))
		}
		if v, ok := strings.CutPrefix(line, "oom "); ok {
			ooms, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if kills == 0 {
		return ""
	}
	limit, unlimited := "its memory limit", false
	if m, err := os.ReadFile(filepath.Join(c.cgroup, "memory.max")); err == nil {
		v := strings.TrimSpace(string(m))
		unlimited = v == "max"
		limit = fmt.Sprintf("its memory limit of %s bytes (memory.max, --memory-limit)", v)
	}
	if ooms > 0 {
		return fmt.Sprintf("the kernel's OOM killer killed %d process(es) of container %s at %s", kills, c.id, limit)
	}
	where := "below " + limit
	if unlimited {
		where = "with no memory limit of its own (--memory-limit 0)"
	}
	return fmt.Sprintf("the kernel's OOM killer killed %d process(es) of container %s %s: the memory that ran out was that of a cgroup above the call's (the memory.max of ocifn's own cgroup, or of the container or unit it runs in) or the machine's", kills, c.id, where)
}
