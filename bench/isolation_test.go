package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

// The isolation floor must never be cheaper because it isolates less:
// isolateArgs refuses whatever isolate.c cannot do.
func TestIsolateArgsRefusesWhatItCannotRun(t *testing.T) {
	good := func() *rspec.Spec {
		return &rspec.Spec{
			Process: &rspec.Process{Args: []string{"/bin/cat"}, Cwd: "/", NoNewPrivileges: true},
			Root:    &rspec.Root{Path: "/rootfs", Readonly: true},
			Mounts: []rspec.Mount{
				{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "ro"}},
				{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nodev", "mode=1777", "size=64m"}},
			},
			Linux: &rspec.Linux{
				Namespaces:  []rspec.LinuxNamespace{{Type: "user"}, {Type: "mount"}, {Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "cgroup"}, {Type: "network"}},
				UIDMappings: []rspec.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}},
				GIDMappings: []rspec.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}},
				MaskedPaths: []string{"/proc/kcore"},
			},
		}
	}
	args, err := isolateArgs(good(), t.TempDir(), "/req")
	if err != nil {
		t.Fatal(err)
	}
	joined := " " + strings.Join(args, " ") + " "
	for _, want := range []string{"-r /rootfs", "-R", "-u 0:100000:65536", "-g 0:100000:65536", "-m proc:proc:/proc:nosuid,ro:",
		"-m tmpfs:tmpfs:/tmp:nodev:mode=1777,size=64m", "-M /proc/kcore", "-- /bin/cat"} {
		if !strings.Contains(joined, " "+want+" ") {
			t.Errorf("args %q lack %q", args, want)
		}
	}

	for name, spoil := range map[string]func(*rspec.Spec){
		"a capability kept": func(s *rspec.Spec) {
			s.Process.Capabilities = &rspec.LinuxCapabilities{Bounding: []string{"CAP_CHOWN"}}
		},
		"no no_new_privs":       func(s *rspec.Spec) { s.Process.NoNewPrivileges = false },
		"a namespace missing":   func(s *rspec.Spec) { s.Linux.Namespaces = s.Linux.Namespaces[1:] },
		"a namespace joined":    func(s *rspec.Spec) { s.Linux.Namespaces[6].Path = "/proc/1/ns/net" },
		"an unknown option":     func(s *rspec.Spec) { s.Mounts[0].Options = append(s.Mounts[0].Options, "rshared") },
		"read-only paths":       func(s *rspec.Spec) { s.Linux.ReadonlyPaths = []string{"/proc/sys"} },
		"cgroup resources":      func(s *rspec.Spec) { s.Linux.Resources = &rspec.LinuxResources{} },
		"a user other than 0":   func(s *rspec.Spec) { s.Process.User.UID = 1000 },
		"seccomp without a BPF": func(s *rspec.Spec) { s.Linux.Seccomp = &rspec.LinuxSeccomp{DefaultAction: "SCMP_ACT_ERRNO"} },
		"two ID mappings":       func(s *rspec.Spec) { s.Linux.UIDMappings = append(s.Linux.UIDMappings, s.Linux.UIDMappings[0]) },
		"a hook":                func(s *rspec.Spec) { s.Hooks = &rspec.Hooks{Poststart: []rspec.Hook{{Path: "/bin/true"}}} },
		"a cgroups path":        func(s *rspec.Spec) { s.Linux.CgroupsPath = "/ocifn/call" },
		"an OOM score":          func(s *rspec.Spec) { n := 500; s.Process.OOMScoreAdj = &n },
		"another annotation":    func(s *rspec.Spec) { s.Annotations = map[string]string{"run.oci.keep_original_groups": "1"} },
		"seccomp flags": func(s *rspec.Spec) {
			s.Linux.Seccomp = &rspec.LinuxSeccomp{Flags: []rspec.LinuxSeccompFlag{"SECCOMP_FILTER_FLAG_LOG"}}
			s.Annotations = map[string]string{seccompAnnotation: "AAAAAAAAAAA="}
		},
	} {
		s := good()
		spoil(s)
		if _, err := isolateArgs(s, t.TempDir(), "/req"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The isolation floor runs a real bundle of `ocifn serve` in the namespaces,
// with the mappings, mounts and restrictions of its containers, and answers.
func TestIsolationFloorIsolates(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the bench and its isolation floor run as root")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(root, "testdata", "build", "trivial.tar")
	if _, err := os.Stat(tarball); err != nil {
		t.Fatalf("%v (make testdata builds it)", err)
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} { // the containers' IDs reach the cache
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	ocifn := filepath.Join(dir, "ocifn")
	build := exec.Command("go", "build", "-o", ocifn, "./cmd/ocifn")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v: %s", err, out)
	}
	cache := filepath.Join(dir, "cache")
	s, err := startServer(ocifn, tarball, cache)
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	request := filepath.Join(root, "testdata", "functions", "trivial", "request.json")
	f, err := newIsolationFloor(dir, cache, request)
	if err != nil {
		t.Fatal(err)
	}
	configs, _ := filepath.Glob(filepath.Join(cache, "bundle-*", "config.json"))
	raw, err := os.ReadFile(configs[0])
	if err != nil {
		t.Fatal(err)
	}
	var spec rspec.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}

	// One call of a probe instead of the function: what it sees.
	out := filepath.Join(dir, "probe.out")
	probe := `cat /proc/self/uid_map; hostname; grep -E '^(NoNewPrivs|Seccomp|CapEff|CapBnd|SigIgn):' /proc/self/status; echo pid $$
for ns in user mnt pid net ipc uts cgroup; do echo "$ns $(readlink /proc/self/ns/$ns)"; done
touch /written 2>/dev/null && echo root writable || echo root read-only
echo tmp $(echo x > /tmp/x && cat /tmp/x)
grep -E '^(proc /proc|sysfs /sys) ' /proc/mounts
for p in ` + strings.Join(spec.Linux.MaskedPaths, " ") + `; do [ -d $p ] && echo "mask $p $(ls -A $p | wc -l)"; [ -e $p ] && ! [ -d $p ] && echo "mask $p $(cat $p | wc -c)"; done
awk '{print "mountpoint", $5}' /proc/self/mountinfo
(ls /proc/1/fd) > /tmp/fds; echo fds $(cat /tmp/fds)
echo age $(awk -v start=$(awk '{print $22}' /proc/$$/stat) '{printf "%d", ($1 * 100 - start) * 10}' /proc/uptime) ms`
	// Made on the call's path, and made ahead: both the same. Two calls a
	// second: the last of three calls made ahead runs in a container made
	// after the first call's answer, about a second before (its process's
	// age, from its clone); made on the call's path, it is new.
	for _, ahead := range []string{"0", "2"} {
		t.Run("ahead="+ahead, func(t *testing.T) {
			probeArgs := append(slices.Clone(f.args[:slices.Index(f.args, "--")]), "-n", "3", "-p", "2", "-W", ahead, "-o", out, "--", "/bin/sh", "-c", probe)
			if b, err := exec.Command(f.exe, probeArgs...).CombinedOutput(); err != nil || !strings.HasPrefix(string(b), "calls 3 errors 0") {
				t.Fatalf("probe: %v: %s", err, b)
			}
			seen, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			got := string(seen)
			checkProbe(t, &spec, got)
			// Nothing of the loop's, or of another container's pipes (the
			// shell's descriptors, listed from a subshell, which makes its
			// own redirections).
			if !strings.Contains(got, "fds 0 1 2\n") {
				t.Errorf("the function has descriptors besides its standard streams:\n%s", got)
			}
			var age int
			if i := strings.Index(got, "age "); i < 0 {
				t.Errorf("the probe's view lacks its age:\n%s", got)
			} else if _, err := fmt.Sscanf(got[i:], "age %d ms", &age); err != nil {
				t.Errorf("the probe's age: %v:\n%s", err, got)
			} else if made := ahead != "0"; made != (age >= 250) {
				t.Errorf("the last call's process was %d ms old when it ran; made ahead: %v", age, made)
			}
		})
	}

	// The loop itself: the function answers every call, made on the call's
	// path or ahead, in a closed loop or paced.
	for _, l := range []loop{{}, {ahead: 2}, {ahead: 2, rate: 40}} {
		rd, err := f.measure(2, 5*time.Second, 20, l)
		if err != nil {
			t.Fatal(err)
		}
		r, cpu := cell{rd}.result(), cell{rd}.split(0)
		if r.calls != 20 || r.errors != 0 || r.p50 <= 0 || r.p99 < r.p50 || r.perSecond <= 0 || cpu.runtime <= 0 {
			t.Errorf("20 calls from 2 workers, %+v: got %+v, CPU %+v", l, r, cpu)
		}
		// Paced, each worker's 10 calls are 9 gaps of 25 ms apart.
		if l.rate > 0 && rd.elapsed < 225*time.Millisecond {
			t.Errorf("20 calls from 2 workers at %d calls/s each took %v; want 225 ms at least", l.rate, rd.elapsed)
		}
	}
}

// checkProbe checks what the probe of TestIsolationFloorIsolates saw in a
// container of the isolation floor against the bundle's config.
func checkProbe(t *testing.T, spec *rspec.Spec, got string) {
	t.Helper()
	m := spec.Linux.UIDMappings[0]
	for _, want := range []string{
		fmt.Sprintf("0 %d %d", m.HostID, m.Size),
		spec.Hostname, "NoNewPrivs:\t1", "Seccomp:\t2", "CapEff:\t0000000000000000", "CapBnd:\t0000000000000000",
		"pid 1", "root read-only", "tmp x",
	} {
		if !strings.Contains(strings.Join(strings.Fields(got), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("the probe's view lacks %q:\n%s", want, got)
		}
	}
	// No standard signal ignored (SIGPIPE above all: the loop ignores it),
	// whatever started the test ignored; the real-time ones that libc
	// reserves (32-34) keep what they inherited, in crun as here, since
	// sigaction refuses them.
	if i := strings.Index(got, "SigIgn:\t"); i < 0 {
		t.Errorf("the probe's view lacks SigIgn:\n%s", got)
	} else if ign, err := strconv.ParseUint(strings.Fields(got[i+len("SigIgn:"):])[0], 16, 64); err != nil || ign&(1<<31-1) != 0 {
		t.Errorf("signals ignored in the probe (SigIgn %x, %v); want none of 1-31:\n%s", ign, err, got)
	}
	for _, fs := range []string{"proc /proc proc ro,", "sysfs /sys sysfs ro,"} {
		if !strings.Contains(got, fs) {
			t.Errorf("the probe's view lacks %q (read-only):\n%s", fs, got)
		}
	}
	masked := 0
	for _, p := range spec.Linux.MaskedPaths {
		if _, err := os.Stat(p); err != nil {
			continue // not on this host, so not in the container either
		}
		masked++
		// Masked: something is mounted over it, and it reads empty.
		if !strings.Contains(got, "mask "+p+" 0\n") || !strings.Contains(got, "mountpoint "+p+"\n") {
			t.Errorf("%s is not masked in the probe's view:\n%s", p, got)
		}
	}
	if masked == 0 {
		t.Errorf("none of the masked paths %v is on this host: the test checks no mask", spec.Linux.MaskedPaths)
	}
	for _, ns := range []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"} {
		host, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(got, ns+" "+ns+":[") || strings.Contains(got, ns+" "+host) {
			t.Errorf("the probe is not in a %s namespace of its own (host %s):\n%s", ns, host, got)
		}
	}

}
