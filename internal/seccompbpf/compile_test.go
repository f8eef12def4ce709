package seccompbpf

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	rspec "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/ocifn/ocifn/host"
	"github.com/ocifn/ocifn/spec"
)

// TestMain runs the tests where crun can create containers, as ocifn
// itself does: in a mount namespace of their own with a hybrid host's
// cgroup2 mount masked, and in a user namespace when not root.
func TestMain(m *testing.M) {
	if host.Inside() {
		if err := host.FinishInside(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(m.Run())
	}
	if _, err := exec.LookPath("crun"); err == nil {
		if cg, err := host.DetectCgroups(); err == nil {
			if plan := host.PlanFor(os.Geteuid(), cg); plan.Needed() {
				code, err := host.Reexec(plan)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
				}
				os.Exit(code)
			}
		}
	}
	os.Exit(m.Run())
}

// nativeToken is the seccomp_data.arch of the machine's own syscalls,
// which libseccomp puts in every filter.
func nativeToken(t *testing.T) uint32 {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64
	}
	t.Skipf("no syscall tables for %s", runtime.GOARCH)
	return 0
}

// libseccompProgram has crun create (and never start) a container whose
// config holds profile p, and returns the filter crun compiled for it with
// libseccomp, which it leaves in the container's state directory: the
// program ocifn used before this package, the reference for ours.
func libseccompProgram(t *testing.T, p *rspec.LinuxSeccomp) []unix.SockFilter {
	t.Helper()
	crun, err := exec.LookPath("crun")
	if err != nil {
		t.Skip("no crun in PATH (hack/crun.sh builds it into build/crun/bin)")
	}
	dir := t.TempDir()
	// Both the bundle and the state must be reachable from the
	// container's user namespace.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	// crun looks for the executable at create; it never runs.
	if err := os.WriteFile(filepath.Join(rootfs, "x"), []byte("#!/x\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	id := []rspec.LinuxIDMapping{{ContainerID: 0, HostID: uint32(os.Geteuid()), Size: 1}}
	gid := []rspec.LinuxIDMapping{{ContainerID: 0, HostID: uint32(os.Getegid()), Size: 1}}
	cfg := rspec.Spec{
		Version: spec.Version,
		Process: &rspec.Process{Args: []string{"/x"}, Cwd: "/", NoNewPrivileges: true},
		Root:    &rspec.Root{Path: rootfs},
		// crun wants at least one mount.
		Mounts: []rspec.Mount{{Destination: "/dev", Type: "tmpfs", Source: "tmpfs"}},
		Linux: &rspec.Linux{
			// A pid namespace of its own: without one, crun delete
			// --force left the created container's process running,
			// two leaked processes per run of the test.
			Namespaces:  []rspec.LinuxNamespace{{Type: rspec.UserNamespace}, {Type: rspec.MountNamespace}, {Type: rspec.PIDNamespace}},
			UIDMappings: id, GIDMappings: gid,
			Seccomp: p,
		},
	}
	data, err := json.Marshal(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	// crun's output goes to a file: the container's process inherits it
	// and keeps a pipe open until it is deleted.
	crunRun := func(a ...string) error {
		out, err := os.CreateTemp(dir, "out")
		if err != nil {
			return err
		}
		defer out.Close()
		cmd := exec.Command(crun, append([]string{"--cgroup-manager=disabled", "--root=" + state}, a...)...)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			msg, _ := os.ReadFile(out.Name())
			return fmt.Errorf("crun %s: %v: %s", a[0], err, msg)
		}
		return nil
	}
	if err := crunRun("create", "--bundle", dir, "c"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(state, "c", "seccomp.bpf"))
	if err := crunRun("delete", "--force", "c"); err != nil {
		t.Error(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, b)
}

func mustCompile(t *testing.T, p *rspec.LinuxSeccomp, goarch string) []unix.SockFilter {
	t.Helper()
	b, err := Compile(p, goarch)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, b)
}

// cases returns every seccomp_data to compare programs on: each
// architecture token, every syscall number 0..1100 plain and with the x32
// bit, numbers at the edges of the 32-bit range and ARM's private ones,
// and for each a first argument with and without CLONE_NEWUSER, with and
// without high bits (the other arguments and ip set, to catch a program
// that reads the wrong word).
func cases(tokens []uint32) []seccompData {
	var nrs []uint32
	for nr := uint32(0); nr <= 1100; nr++ {
		nrs = append(nrs, nr, 0x40000000|nr)
	}
	for nr := uint32(0xf0000); nr <= 0xf0010; nr++ {
		nrs = append(nrs, nr)
	}
	nrs = append(nrs, 0x3fffffff, 0x7fffffff, 0x80000000, 0xbfffffff, 0xc0000000, 0xc0000038, 0xfffffffe, 0xffffffff)
	const user = unix.CLONE_NEWUSER
	args0 := []uint64{0, user, 0xffffffff, 0xffffffff &^ user, user | unix.CLONE_NEWNS | uint64(unix.SIGCHLD),
		1 << 32, 1<<32 | user, 0xffffffff_00000000, 0xffffffff_00000000 | user, 0xffffffff_ffffffff, 0xffffffff_ffffffff &^ user, user << 32,
		// socket's families: the denied ones, others, and with high bits
		unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_VSOCK, unix.AF_ALG, unix.AF_VSOCK + 1, unix.AF_ALG - 1,
		1<<32 | unix.AF_VSOCK, 0xffffffff_00000000 | unix.AF_ALG, unix.AF_VSOCK << 32}
	var out []seccompData
	for _, tok := range tokens {
		for _, nr := range nrs {
			for _, a0 := range args0 {
				out = append(out, seccompData{nr: nr, arch: tok, ip: 0x7f00_dead_beef,
					args: [6]uint64{a0, user, user, 0xffffffff_ffffffff, user << 32, 0x1234}})
			}
		}
	}
	return out
}

// archNr is a syscall number of one architecture token.
type archNr struct{ arch, nr uint32 }

// newerVerdicts returns the verdict profile p gives each syscall of
// newerSyscalls, by architecture token and number: libseccomp leaves them
// out of its program, where ours must decide them as the profile says.
func newerVerdicts(t *testing.T, p *rspec.LinuxSeccomp) map[archNr]uint32 {
	t.Helper()
	out := map[archNr]uint32{}
	for _, r := range p.Syscalls {
		for _, name := range r.Names {
			nr, ok := newerSyscalls[name]
			if !ok {
				continue
			}
			if len(r.Args) > 0 || r.Action != rspec.ActErrno {
				t.Fatalf("the test expects %s denied without conditions", name)
			}
			for _, a := range p.Architectures {
				n := uint32(nr)
				if a == rspec.ArchX32 {
					n |= x32Bit
				}
				out[archNr{auditArch[a], n}] = retErrno | uint32(*r.ErrnoRet)
			}
		}
	}
	return out
}

// differences runs both programs on every case and describes where their
// verdicts differ (at most a few); newer overrides libseccomp's verdict
// where it has one.
func differences(ref, ours []unix.SockFilter, cs []seccompData, newer map[archNr]uint32) (diffs []string, maxRef, maxOurs int, err error) {
	n := 0
	for _, d := range cs {
		want, sr, err := emulate(ref, d)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("libseccomp's program on %+v: %v", d, err)
		}
		if v, ok := newer[archNr{d.arch, d.nr}]; ok {
			want = v
		}
		got, so, err := emulate(ours, d)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("our program on %+v: %v", d, err)
		}
		maxRef, maxOurs = max(maxRef, sr), max(maxOurs, so)
		if got != want {
			if n++; n <= 10 {
				diffs = append(diffs, fmt.Sprintf("arch %#x nr %#x arg0 %#x: %#x, want %#x", d.arch, d.nr, d.args[0], got, want))
			}
		}
	}
	if n > 10 {
		diffs = append(diffs, fmt.Sprintf("and %d more", n-10))
	}
	return diffs, maxRef, maxOurs, nil
}

// TestSameVerdictsAsLibseccomp compares our program for each default
// profile with the one crun builds with libseccomp, verdict by verdict. A
// profile for the other Go architecture is compiled by crun too (libseccomp
// targets any architecture), with the host's own architecture added, which
// is left out of the comparison.
func TestSameVerdictsAsLibseccomp(t *testing.T) {
	native := nativeToken(t)
	unknown := []uint32{0, 0xffffffff, unix.AUDIT_ARCH_PPC64LE, unix.AUDIT_ARCH_S390X, unix.AUDIT_ARCH_RISCV64,
		unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_AARCH64, unix.AUDIT_ARCH_ARM}
	for _, goarch := range slices.Sorted(maps.Keys(supported)) {
		t.Run(goarch, func(t *testing.T) {
			p := spec.SeccompFor(goarch)
			ref := libseccompProgram(t, p)
			ours := mustCompile(t, p, goarch)
			var tokens []uint32
			for _, tok := range unknown {
				inProfile := slices.ContainsFunc(p.Architectures, func(a rspec.Arch) bool { return auditArch[a] == tok })
				if tok != native || inProfile {
					tokens = append(tokens, tok)
				}
			}
			cs := cases(tokens)
			newer := newerVerdicts(t, p)
			if len(newer) == 0 {
				t.Fatal("no syscall newer than libseccomp in the profile: the test no longer checks them")
			}
			diffs, maxRef, maxOurs, err := differences(ref, ours, cs, newer)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range diffs {
				t.Error(d)
			}
			t.Logf("%d cases; libseccomp: %d instructions, longest path %d; ours: %d instructions, longest path %d",
				len(cs), len(ref), maxRef, len(ours), maxOurs)

			// The comparison must see a broken compiler: profiles that
			// differ from the default by one syscall, one errno, one
			// argument condition.
			mutations := map[string]func(*rspec.LinuxSeccomp){
				"one name fewer": func(p *rspec.LinuxSeccomp) { p.Syscalls[0].Names = p.Syscalls[0].Names[1:] },
				"ENOSYS as EPERM": func(p *rspec.LinuxSeccomp) {
					e := spec.SeccompErrno
					p.Syscalls[1].ErrnoRet = &e
				},
				"other clone flag": func(p *rspec.LinuxSeccomp) {
					p.Syscalls[2].Args = []rspec.LinuxSeccompArg{{Index: 0, Value: unix.CLONE_NEWNS, ValueTwo: unix.CLONE_NEWNS, Op: rspec.OpMaskedEqual}}
				},
			}
			for name, mutate := range mutations {
				m := spec.SeccompFor(goarch)
				mutate(m)
				diffs, _, _, err := differences(ref, mustCompile(t, m, goarch), cs, newer)
				if err != nil {
					t.Fatal(err)
				}
				if len(diffs) == 0 {
					t.Errorf("mutation %q: no difference found", name)
				}
			}
		})
	}
}

// TestSyscallTable checks the generated table against libseccomp's
// resolver, when it is installed (apt-get install seccomp).
func TestSyscallTable(t *testing.T) {
	if _, err := exec.LookPath("scmp_sys_resolver"); err != nil {
		t.Skip("no scmp_sys_resolver (Debian package seccomp)")
	}
	for a, nrs := range syscallNumbers {
		arch := strings.ToLower(strings.TrimPrefix(string(a), "SCMP_ARCH_"))
		for name, nr := range nrs {
			out, err := exec.Command("scmp_sys_resolver", "-a", arch, name).Output()
			if err != nil {
				t.Fatalf("scmp_sys_resolver -a %s %s: %v", arch, name, err)
			}
			if want, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 32); err != nil || int32(want) != nr {
				t.Errorf("%s on %s: table %d, scmp_sys_resolver %s (go generate ./internal/seccompbpf)", name, arch, nr, out)
			}
		}
	}
}

func TestCompile(t *testing.T) {
	for goarch := range supported {
		if _, err := Compile(spec.SeccompFor(goarch), goarch); err != nil {
			t.Errorf("%s: %v", goarch, err)
		}
	}
	for name, c := range map[string]struct {
		goarch string
		edit   func(*rspec.LinuxSeccomp)
	}{
		"other goarch":       {"riscv64", func(*rspec.LinuxSeccomp) {}},
		"arch left out":      {"amd64", func(p *rspec.LinuxSeccomp) { p.Architectures = p.Architectures[:2] }},
		"unknown name":       {"amd64", func(p *rspec.LinuxSeccomp) { p.Syscalls[0].Names = append(p.Syscalls[0].Names, "no_such_call") }},
		"kill action":        {"amd64", func(p *rspec.LinuxSeccomp) { p.Syscalls[0].Action = rspec.ActKillProcess }},
		"default errno":      {"amd64", func(p *rspec.LinuxSeccomp) { p.DefaultAction = rspec.ActErrno }},
		"64-bit mask":        {"amd64", func(p *rspec.LinuxSeccomp) { p.Syscalls[2].Args[0].Value = 1 << 40 }},
		"two rules for one":  {"arm64", func(p *rspec.LinuxSeccomp) { p.Syscalls[1].Names = append(p.Syscalls[1].Names, "ptrace") }},
		"other comparison":   {"arm64", func(p *rspec.LinuxSeccomp) { p.Syscalls[2].Args[0].Op = rspec.OpGreaterThan }},
		"flags":              {"arm64", func(p *rspec.LinuxSeccomp) { p.Flags = []rspec.LinuxSeccompFlag{rspec.LinuxSeccompFlagLog} }},
		"errno without code": {"arm64", func(p *rspec.LinuxSeccomp) { p.Syscalls[0].ErrnoRet = nil }},
	} {
		p := spec.SeccompFor(c.goarch)
		c.edit(p)
		if _, err := Compile(p, c.goarch); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v, want ErrUnsupported", name, err)
		}
	}
}
