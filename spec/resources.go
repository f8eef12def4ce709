package spec

import (
	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

// Limits bound the resources of one call.
type Limits struct {
	// MemoryBytes caps the memory of a call (0: no cap).
	MemoryBytes int64
	// Pids caps the number of processes and threads of a call (0: the
	// default RLIMIT_NPROC).
	Pids int64
	// Cgroups says that the runtime runs each container in a cgroup of its
	// own with the memory and pids controllers: the caps then apply to the
	// call as a whole (linux.resources). Without it they fall back to
	// rlimits, which apply per process (see fallbackRlimits).
	Cgroups bool
}

// resources returns linux.resources for a call, or nil when the limits are
// not enforced through cgroups.
func (l Limits) resources() *rspec.LinuxResources {
	if !l.Cgroups || (l.MemoryBytes <= 0 && l.Pids <= 0) {
		return nil
	}
	r := &rspec.LinuxResources{}
	if l.MemoryBytes > 0 {
		m := l.MemoryBytes
		// Swap equal to the limit means no swap at all: the cap is real.
		r.Memory = &rspec.LinuxMemory{Limit: &m, Swap: &m}
	}
	if l.Pids > 0 {
		p := l.Pids
		r.Pids = &rspec.LinuxPids{Limit: &p}
	}
	return r
}

// fallbackRlimits changes the default rlimits to carry the limits when there
// are no cgroups to enforce them:
//
//   - Pids sets RLIMIT_NPROC. Each call has a user namespace of its own, and
//     the kernel counts RLIMIT_NPROC per user namespace, so a fork bomb
//     exhausts its own call's budget, not the other calls'.
//   - MemoryBytes sets RLIMIT_DATA: the heap and every private writable
//     mapping of one process. Not RLIMIT_AS: Go, Java and others reserve
//     large address ranges they never touch, and would not even start.
//     RLIMIT_DATA is per process: a call that forks N processes may use N
//     times the cap (bounded by RLIMIT_NPROC); files in /tmp and /dev/shm
//     are bounded by the size of those tmpfs mounts instead.
func (l Limits) fallbackRlimits(in []rspec.POSIXRlimit) []rspec.POSIXRlimit {
	out := make([]rspec.POSIXRlimit, 0, len(in)+1)
	for _, r := range in {
		if r.Type == "RLIMIT_NPROC" && l.Pids > 0 {
			// With cgroups, pids.max is the cap, and no RLIMIT_NPROC is
			// set: the kernel checks the rlimit first on every fork, so
			// the default one (1024) would stop a call below a higher
			// --pids-limit, and at an equal one refuse the forks that
			// pids.events should count. The function keeps the server's.
			if l.Cgroups {
				continue
			}
			r.Hard, r.Soft = uint64(l.Pids), uint64(l.Pids)
		}
		out = append(out, r)
	}
	if !l.Cgroups && l.MemoryBytes > 0 {
		out = append(out, rspec.POSIXRlimit{Type: "RLIMIT_DATA", Hard: uint64(l.MemoryBytes), Soft: uint64(l.MemoryBytes)})
	}
	return out
}
