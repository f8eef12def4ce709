package main

import (
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"time"

	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

// isolateSource is the isolation floor's program (isolation/isolate.c says
// what it does and does not do).
//
//go:embed isolation/isolate.c
var isolateSource []byte

// isolationFloor runs a function with the isolation of ocifn's containers
// and nothing of a runtime, in its own closed loop: the kernel's share of
// a container, measured apart from crun's and ocifn's.
type isolationFloor struct {
	exe  string
	args []string
}

// isolationName names the isolation floor's rows; isolationAheadName those
// of the same floor with containers made ahead, as a warm pool makes them.
const (
	isolationName      = "isolation floor (the same namespaces, mounts and seccomp; no runtime, no gRPC)"
	isolationAheadName = "isolation floor, made ahead (the same, each container set up before its call and started on it)"
)

// seccompAnnotation is crun's annotation for a ready-made seccomp program,
// which ocifn puts in every bundle's config (bundle/seccomp.go).
const seccompAnnotation = "run.oci.seccomp_bpf_data"

// newIsolationFloor compiles the program into dir and derives its
// arguments from the config.json of the bundle a running `ocifn serve`
// made under cache, so that both run the same isolation.
func newIsolationFloor(dir, cache, request string) (*isolationFloor, error) {
	configs, _ := filepath.Glob(filepath.Join(cache, "bundle-*", "config.json"))
	if len(configs) != 1 {
		return nil, fmt.Errorf("want one bundle config under %s, found %d", cache, len(configs))
	}
	raw, err := os.ReadFile(configs[0])
	if err != nil {
		return nil, err
	}
	var s rspec.Spec
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", configs[0], err)
	}
	exe, err := compileC(dir, "isolate", isolateSource)
	if err != nil {
		return nil, fmt.Errorf("the isolation floor: %w", err)
	}
	args, err := isolateArgs(&s, dir, request)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", configs[0], err)
	}
	return &isolationFloor{exe: exe, args: args}, nil
}

// isolateArgs translates what isolate.c supports of a bundle config into its
// arguments, and fails on anything it does not, so the floor never runs
// with less isolation than the containers it is compared with.
func isolateArgs(s *rspec.Spec, dir, request string) ([]string, error) {
	if s.Process == nil || s.Root == nil || s.Linux == nil {
		return nil, fmt.Errorf("no process, root or linux section")
	}
	if s.Process.User.UID != 0 || s.Process.User.GID != 0 || len(s.Process.User.AdditionalGids) > 0 {
		return nil, fmt.Errorf("the isolation floor runs functions as the container's root only")
	}
	if c := s.Process.Capabilities; c != nil && len(c.Bounding)+len(c.Effective)+len(c.Permitted)+len(c.Inheritable)+len(c.Ambient) > 0 {
		return nil, fmt.Errorf("the isolation floor drops every capability; the config keeps some")
	}
	if !s.Process.NoNewPrivileges {
		return nil, fmt.Errorf("the isolation floor sets no_new_privs; the config does not")
	}
	if s.Linux.Seccomp != nil && len(s.Linux.Seccomp.Flags) > 0 {
		return nil, fmt.Errorf("seccomp flags %v are not in the isolation floor", s.Linux.Seccomp.Flags)
	}
	if rest, err := untranslated(s); err != nil {
		return nil, err
	} else if rest != "{}" {
		return nil, fmt.Errorf("the isolation floor does not do what the config asks besides: %s", rest)
	}
	want := map[rspec.LinuxNamespaceType]bool{}
	for _, ns := range s.Linux.Namespaces {
		if ns.Path != "" {
			return nil, fmt.Errorf("namespace %s joins %s", ns.Type, ns.Path)
		}
		want[ns.Type] = true
	}
	for _, t := range []rspec.LinuxNamespaceType{rspec.UserNamespace, rspec.PIDNamespace, rspec.MountNamespace, rspec.NetworkNamespace, rspec.IPCNamespace, rspec.UTSNamespace, rspec.CgroupNamespace} {
		if !want[t] {
			return nil, fmt.Errorf("the isolation floor makes a %s namespace; the config does not", t)
		}
		delete(want, t)
	}
	if len(want) > 0 {
		return nil, fmt.Errorf("namespaces the isolation floor does not make: %v", want)
	}

	a := []string{"-r", s.Root.Path, "-i", request, "-w", s.Process.Cwd}
	if s.Root.Readonly {
		a = append(a, "-R")
	}
	if s.Hostname != "" {
		a = append(a, "-h", s.Hostname)
	}
	idMap := func(flag string, m []rspec.LinuxIDMapping) error {
		if len(m) != 1 {
			return fmt.Errorf("want one ID mapping, have %d", len(m))
		}
		a = append(a, flag, fmt.Sprintf("%d:%d:%d", m[0].ContainerID, m[0].HostID, m[0].Size))
		return nil
	}
	if err := idMap("-u", s.Linux.UIDMappings); err != nil {
		return nil, err
	}
	if err := idMap("-g", s.Linux.GIDMappings); err != nil {
		return nil, err
	}
	for _, m := range s.Mounts {
		var flags, data []string
		for _, o := range m.Options {
			switch o {
			case "ro", "nosuid", "nodev", "noexec", "bind", "rbind", "relatime", "strictatime", "noatime":
				flags = append(flags, o)
			default:
				if !strings.Contains(o, "=") && o != "newinstance" {
					return nil, fmt.Errorf("mount %s: option %q is not in the isolation floor", m.Destination, o)
				}
				data = append(data, o)
			}
		}
		f := []string{m.Type, m.Source, m.Destination, strings.Join(flags, ","), strings.Join(data, ",")}
		for _, x := range f {
			if strings.Contains(x, ":") {
				return nil, fmt.Errorf("mount %s: %q has a colon", m.Destination, x)
			}
		}
		a = append(a, "-m", strings.Join(f, ":"))
	}
	for _, p := range s.Linux.MaskedPaths {
		a = append(a, "-M", p)
	}
	for _, l := range s.Process.Rlimits {
		a = append(a, "-l", fmt.Sprintf("%s:%d:%d", l.Type, l.Soft, l.Hard))
	}
	if s.Linux.Seccomp != nil {
		bpf, err := base64.StdEncoding.DecodeString(s.Annotations[seccompAnnotation])
		if err != nil || len(bpf) == 0 {
			return nil, fmt.Errorf("the config has a seccomp profile but no ready-made program in %s", seccompAnnotation)
		}
		path := filepath.Join(dir, "seccomp.bpf")
		if err := os.WriteFile(path, bpf, 0o644); err != nil {
			return nil, err
		}
		a = append(a, "-s", path)
	}
	for _, e := range s.Process.Env {
		a = append(a, "-e", e)
	}
	return append(append(a, "--"), s.Process.Args...), nil
}

// untranslated is the JSON of what is left of s once every field that
// isolateArgs translates (or has checked to be empty) is taken out: "{}"
// for a config the isolation floor runs in full.
func untranslated(s *rspec.Spec) (string, error) {
	raw, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	var r rspec.Spec // a deep copy, to take apart
	if err := json.Unmarshal(raw, &r); err != nil {
		return "", err
	}
	r.Version, r.Hostname, r.Mounts, r.Root = "", "", nil, nil
	if p := r.Process; p != nil {
		p.Args, p.Env, p.Cwd, p.Rlimits, p.NoNewPrivileges, p.User, p.Capabilities = nil, nil, "", nil, false, rspec.User{}, nil
		if reflect.ValueOf(*p).IsZero() {
			r.Process = nil
		}
	}
	if l := r.Linux; l != nil {
		l.Namespaces, l.UIDMappings, l.GIDMappings, l.MaskedPaths, l.Seccomp = nil, nil, nil, nil, nil
		if reflect.ValueOf(*l).IsZero() {
			r.Linux = nil
		}
	}
	delete(r.Annotations, seccompAnnotation)
	if len(r.Annotations) == 0 {
		r.Annotations = nil
	}
	rest, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	if empty, _ := json.Marshal(rspec.Spec{}); string(rest) == string(empty) {
		return "{}", nil // ociVersion is marshalled even when empty
	}
	return string(rest), nil
}

// loop says how the isolation floor's workers call: ahead containers made
// ahead per worker (0: each made on the call's path), rate calls a second
// per worker (0: a closed loop).
type loop struct{ ahead, rate int }

// maxAhead is the most containers isolate.c keeps made ahead per worker
// (its MAX_AHEAD).
const maxAhead = 16

// madeAhead is how many containers per client the made-ahead rows keep:
// the warm server's --warm, which is what its pool keeps for one client,
// within what isolate.c allows.
func madeAhead(warm int) int { return min(max(warm, 1), maxAhead) }

// measure runs the loop from clients workers and reads its figures. Its
// CPU is what the program and the containers it reaped used: the function's
// part of that is the floor's (see cell.split), and the rest is the
// kernel's isolation work, under the runtime's column as crun's is for
// ocifn. The machine's busy time is read a moment after the loop, so that
// the kernel workers have torn down its last namespaces.
func (f *isolationFloor) measure(clients int, d time.Duration, maxCalls int, l loop) (round, error) {
	r, err := f.measureLoop(clients, d, maxCalls, l)
	if err != nil && l.ahead > 0 {
		err = fmt.Errorf("made ahead: %w", err)
	}
	return r, err
}

// mode is the loop l as a mode of a row (see interleave): it measures a
// round until one fails, then leaves that error in *failed and measures
// nothing more, so that the row is left out rather than the run stopped.
func (f *isolationFloor) mode(clients int, d time.Duration, maxCalls int, l loop, failed *error) func() (round, error) {
	return func() (round, error) {
		if *failed != nil {
			return round{}, nil
		}
		r, err := f.measure(clients, d, maxCalls, l)
		*failed = err
		return r, nil
	}
}

func (f *isolationFloor) measureLoop(clients int, d time.Duration, maxCalls int, l loop) (round, error) {
	args := []string{"-c", fmt.Sprint(clients), "-t", fmt.Sprint(d.Seconds()), "-n", fmt.Sprint(maxCalls), "-W", fmt.Sprint(l.ahead), "-p", fmt.Sprint(l.rate)}
	args = append(args, f.args...)
	// A function that hangs must not hang the bench: past the round's
	// time and a margin, the loop's whole process group is killed.
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.exe, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr strings.Builder
	cmd.Stderr = &stderr
	ch0, m0 := childrenCPU(), machineBusy()
	out, err := cmd.Output()
	if err != nil {
		return round{}, fmt.Errorf("isolation floor: %v: %s", err, stderr.String())
	}
	time.Sleep(200 * time.Millisecond)
	r := round{children: childrenCPU() - ch0, machine: machineBusy() - m0}
	// The first line counts; one answered call's latency per line follows.
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var calls int
	if _, err := fmt.Sscanf(lines[0], "calls %d errors %d elapsed %d", &calls, &r.errors, &r.elapsed); err != nil || len(lines) != calls+1 {
		return round{}, fmt.Errorf("isolation floor: cannot read its output (%d lines, first %q): %v", len(lines), lines[0], err)
	}
	for _, l := range lines[1:] {
		ns, err := strconv.ParseInt(l, 10, 64)
		if err != nil {
			return round{}, fmt.Errorf("isolation floor: a latency %q: %v", l, err)
		}
		r.lat = append(r.lat, time.Duration(ns))
	}
	if r.errors > 0 {
		r.firstError = strings.TrimSpace(stderr.String())
	}
	if calls == 0 {
		return r, fmt.Errorf("isolation floor: no call answered: %s", strings.TrimSpace(stderr.String()))
	}
	return r, nil
}
