package spec

import (
	"slices"
	"testing"

	imgspec "github.com/opencontainers/image-spec/specs-go/v1"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

func TestGenerateSeccomp(t *testing.T) {
	s, err := Generate(imgspec.ImageConfig{Cmd: []string{"cat"}}, User{}, baseOptions())
	if err != nil {
		t.Fatal(err)
	}
	sc := s.Linux.Seccomp
	if sc == nil || sc.DefaultAction != rspec.ActAllow {
		t.Fatalf("seccomp: %+v, want the default denylist profile", sc)
	}
	errnoOf := map[string]uint{}
	for _, r := range sc.Syscalls {
		if r.Action != rspec.ActErrno || r.ErrnoRet == nil {
			t.Errorf("rule %v: want SCMP_ACT_ERRNO with an errno", r.Names)
			continue
		}
		if len(r.Args) > 0 {
			continue
		}
		for _, n := range r.Names {
			errnoOf[n] = *r.ErrnoRet
		}
	}
	for _, n := range []string{"keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "mount", "umount2", "pivot_root",
		"init_module", "finit_module", "delete_module", "clock_settime", "settimeofday", "adjtimex", "kexec_load", "reboot", "swapon", "swapoff", "ptrace"} {
		if errnoOf[n] != SeccompErrno {
			t.Errorf("%s: errno %d, want EPERM", n, errnoOf[n])
		}
	}
	for _, n := range []string{"clone3", "io_uring_setup"} {
		if errnoOf[n] != SeccompENOSYS {
			t.Errorf("%s: errno %d, want ENOSYS", n, errnoOf[n])
		}
	}
	if got := SeccompFor("amd64").Architectures; !slices.Equal(got, []rspec.Arch{rspec.ArchX86_64, rspec.ArchX86, rspec.ArchX32}) {
		t.Errorf("amd64 architectures %v: every ABI the CPU runs must be filtered", got)
	}
}

func TestGenerateLimits(t *testing.T) {
	rl := func(s *rspec.Spec, typ string) *rspec.POSIXRlimit {
		for i := range s.Process.Rlimits {
			if s.Process.Rlimits[i].Type == typ {
				return &s.Process.Rlimits[i]
			}
		}
		return nil
	}
	o := baseOptions()
	o.Limits = Limits{MemoryBytes: 256 << 20, Pids: 64}
	s, err := Generate(imgspec.ImageConfig{Cmd: []string{"cat"}}, User{}, o)
	if err != nil {
		t.Fatal(err)
	}
	if s.Linux.Resources != nil {
		t.Errorf("resources without cgroups: %+v", s.Linux.Resources)
	}
	if d := rl(s, "RLIMIT_DATA"); d == nil || d.Hard != 256<<20 {
		t.Errorf("RLIMIT_DATA %+v, want the memory limit", d)
	}
	if p := rl(s, "RLIMIT_NPROC"); p == nil || p.Hard != 64 {
		t.Errorf("RLIMIT_NPROC %+v, want the pids limit", p)
	}

	o.Limits.Cgroups = true
	s, err = Generate(imgspec.ImageConfig{Cmd: []string{"cat"}}, User{}, o)
	if err != nil {
		t.Fatal(err)
	}
	r := s.Linux.Resources
	if r == nil || r.Memory == nil || *r.Memory.Limit != 256<<20 || *r.Memory.Swap != 256<<20 || r.Pids == nil || *r.Pids.Limit != 64 {
		t.Errorf("resources with cgroups: %+v", r)
	}
	if d := rl(s, "RLIMIT_DATA"); d != nil {
		t.Errorf("RLIMIT_DATA %+v with cgroups: the cgroup limit is the better one", d)
	}
	// pids.max is the cap: RLIMIT_NPROC, checked before it on every fork,
	// must not stop the call first, below a --pids-limit over 1024 or at
	// it (pids.events would not count the refused forks).
	for _, pids := range []int64{64, 1024, 4096} {
		o.Limits.Pids = pids
		s, err = Generate(imgspec.ImageConfig{Cmd: []string{"cat"}}, User{}, o)
		if err != nil {
			t.Fatal(err)
		}
		if p := rl(s, "RLIMIT_NPROC"); p != nil && p.Soft <= uint64(pids) {
			t.Errorf("RLIMIT_NPROC %+v with cgroups and pids.max %d: the rlimit refuses forks first", p, pids)
		}
	}
}

// TestRuns: a machine runs its own architecture's programs and those of
// the other ABI its CPU runs, which the seccomp profile admits, and no
// other's.
func TestRuns(t *testing.T) {
	for _, tc := range []struct {
		machine, image string
		runs           bool
	}{
		{"amd64", "amd64", true},
		{"amd64", "386", true},
		{"arm64", "arm", true},
		{"arm64", "arm64", true},
		{"amd64", "arm64", false},
		{"arm64", "amd64", false},
		{"arm64", "386", false},
		{"386", "amd64", false},
		{"amd64", "s390x", false},
		{"s390x", "s390x", true},
	} {
		if got := Runs(tc.machine, tc.image); got != tc.runs {
			t.Errorf("Runs(%s, %s) = %v, want %v", tc.machine, tc.image, got, tc.runs)
		}
	}
}
