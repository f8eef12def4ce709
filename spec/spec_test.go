package spec

import (
	"slices"
	"strings"
	"testing"

	imgspec "github.com/opencontainers/image-spec/specs-go/v1"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

var rangeMap = []rspec.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}

func baseOptions() Options {
	return Options{Rootfs: "/cache/rootfs", UIDMappings: rangeMap, GIDMappings: rangeMap}
}

func TestGenerate(t *testing.T) {
	img := imgspec.ImageConfig{
		Entrypoint: []string{"/bin/sh", "-c"},
		Cmd:        []string{"exec jq ."},
		Env:        []string{"LABEL=x"},
		WorkingDir: "/work",
	}
	s, err := Generate(img, User{UID: 1000, GID: 1000, AdditionalGids: []uint32{10, 70000}, Home: "/home/fn"}, baseOptions())
	if err != nil {
		t.Fatal(err)
	}
	p := s.Process
	if got, want := p.Args, []string{"/bin/sh", "-c", "exec jq ."}; !slices.Equal(got, want) {
		t.Errorf("args: got %q, want %q", got, want)
	}
	if got, want := p.Env, []string{"LABEL=x", "PATH=" + DefaultPath, "HOME=/home/fn"}; !slices.Equal(got, want) {
		t.Errorf("env: got %q, want %q", got, want)
	}
	if p.Cwd != "/work" {
		t.Errorf("cwd: got %q", p.Cwd)
	}
	if p.User.UID != 1000 || p.User.GID != 1000 {
		t.Errorf("user: got %+v", p.User)
	}
	if !slices.Equal(p.User.AdditionalGids, []uint32{10}) {
		t.Errorf("unmapped supplementary group kept: %v", p.User.AdditionalGids)
	}
	if !p.NoNewPrivileges {
		t.Error("noNewPrivileges not set")
	}
	if len(p.Capabilities.Bounding)+len(p.Capabilities.Effective)+len(p.Capabilities.Permitted) != 0 {
		t.Errorf("capabilities: got %+v, want none", p.Capabilities)
	}
	if !s.Root.Readonly || s.Root.Path != "/cache/rootfs" {
		t.Errorf("root: got %+v", s.Root)
	}
	var types []string
	for _, ns := range s.Linux.Namespaces {
		types = append(types, string(ns.Type))
	}
	for _, want := range []string{"user", "mount", "pid", "ipc", "uts", "network", "cgroup"} {
		if !slices.Contains(types, want) {
			t.Errorf("namespace %s missing from %v", want, types)
		}
	}
	var tmp, proc *rspec.Mount
	for i := range s.Mounts {
		switch s.Mounts[i].Destination {
		case "/tmp":
			tmp = &s.Mounts[i]
		case "/proc":
			proc = &s.Mounts[i]
		}
		// Empty files cost kernel memory that no size bounds.
		if s.Mounts[i].Type == "tmpfs" && !slices.Contains(s.Mounts[i].Options, "nr_inodes="+TmpInodes) {
			t.Errorf("%s: options %q, want its inodes bounded", s.Mounts[i].Destination, s.Mounts[i].Options)
		}
	}
	// Read-only as a whole: that covers /proc/sys and the other knobs
	// engines make read-only one by one (the read-only paths are the tmpfs
	// /dev's devices, TestGenerateDevicesReadOnly).
	if proc == nil || !slices.Contains(proc.Options, "ro") || slices.ContainsFunc(s.Linux.ReadonlyPaths, func(p string) bool { return strings.HasPrefix(p, "/proc") }) {
		t.Errorf("/proc: got %+v and read-only paths %q, want /proc read-only as a whole", proc, s.Linux.ReadonlyPaths)
	}
	if tmp == nil || tmp.Type != "tmpfs" || !slices.Contains(tmp.Options, "size="+DefaultTmpSize) {
		t.Errorf("/tmp: got %+v, want a bounded tmpfs", tmp)
	}
}

// TestGenerateDevicesReadOnly: crun binds the host's devices into its tmpfs
// /dev writable, where a touch would set the host's nodes' times; they are
// made read-only. A prepared /dev is read-only already, devices and all.
func TestGenerateDevicesReadOnly(t *testing.T) {
	devices := []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}
	for _, c := range []struct {
		dev  string
		want []string
	}{{"", devices}, {"/cache/dev", nil}} {
		o := baseOptions()
		o.Dev = c.dev
		s, err := Generate(imgspec.ImageConfig{Cmd: []string{"cat"}}, User{}, o)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(s.Linux.ReadonlyPaths, c.want) {
			t.Errorf("dev %q: read-only paths %q, want %q", c.dev, s.Linux.ReadonlyPaths, c.want)
		}
	}
}

func TestGenerateRlimitsClampedToHost(t *testing.T) {
	o := baseOptions()
	o.HostRlimits = map[string]uint64{"RLIMIT_NOFILE": 1000, "RLIMIT_NPROC": 1 << 20}
	s, err := Generate(imgspec.ImageConfig{Cmd: []string{"cat"}}, User{}, o)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]rspec.POSIXRlimit{}
	for _, l := range s.Process.Rlimits {
		got[l.Type] = l
	}
	if l := got["RLIMIT_NOFILE"]; l.Hard != 1000 || l.Soft != 1000 {
		t.Errorf("nofile: got %+v, want clamped to 1000", l)
	}
	if l := got["RLIMIT_NPROC"]; l.Hard != 1024 {
		t.Errorf("nproc: got %+v, want the default 1024", l)
	}
}

func TestGenerateDev(t *testing.T) {
	dev := func(o Options) rspec.Mount {
		t.Helper()
		s, err := Generate(imgspec.ImageConfig{Cmd: []string{"cat"}}, User{}, o)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range s.Mounts {
			if m.Destination == "/dev" {
				return m
			}
		}
		t.Fatal("no /dev mount")
		return rspec.Mount{}
	}
	if m := dev(baseOptions()); m.Type != "tmpfs" {
		t.Errorf("without Dev: got %+v, want crun's tmpfs", m)
	}
	o := baseOptions()
	o.Dev = "/cache/dev"
	m := dev(o)
	// A bind mount is what tells crun that /dev needs no device of its
	// own; recursive, for devices bind mounted there.
	if m.Source != "/cache/dev" || !slices.Contains(m.Options, "rbind") || !slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "noexec") {
		t.Errorf("with Dev: got %+v, want a read-only, noexec, recursive bind mount of /cache/dev", m)
	}
}

func TestGenerateHostNetwork(t *testing.T) {
	o := baseOptions()
	o.Network = NetworkHost
	s, err := Generate(imgspec.ImageConfig{Cmd: []string{"cat"}}, User{}, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == rspec.NetworkNamespace {
			t.Error("host network must not create a network namespace")
		}
	}
}

func TestGenerateErrors(t *testing.T) {
	single := []rspec.LinuxIDMapping{{ContainerID: 0, HostID: 1000, Size: 1}}
	cases := []struct {
		name string
		img  imgspec.ImageConfig
		user User
		opts Options
		want string
	}{
		{"no_command", imgspec.ImageConfig{}, User{}, baseOptions(), "neither Entrypoint nor Cmd"},
		{"no_rootfs", imgspec.ImageConfig{Cmd: []string{"x"}}, User{}, Options{UIDMappings: rangeMap, GIDMappings: rangeMap}, "root filesystem"},
		{"no_mappings", imgspec.ImageConfig{Cmd: []string{"x"}}, User{}, Options{Rootfs: "/r"}, "user namespace"},
		{"user_not_mapped", imgspec.ImageConfig{Cmd: []string{"x"}}, User{UID: 1000}, Options{Rootfs: "/r", UIDMappings: single, GIDMappings: single}, "user id 1000 is not mapped"},
		{"user_past_the_range", imgspec.ImageConfig{Cmd: []string{"x"}}, User{UID: 70000}, baseOptions(), "user id 70000 is not mapped into the container (mappings [{0 100000 65536}]): give ocifn --id-map-size 70001 or more"},
		{"group_past_the_range", imgspec.ImageConfig{Cmd: []string{"x"}}, User{GID: 65536}, baseOptions(), "group id 65536 is not mapped into the container (mappings [{0 100000 65536}]): give ocifn --id-map-size 65537 or more"},
		{"bad_network", imgspec.ImageConfig{Cmd: []string{"x"}}, User{}, Options{Rootfs: "/r", UIDMappings: rangeMap, GIDMappings: rangeMap, Network: "bridge"}, `unknown network mode "bridge"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Generate(tc.img, tc.user, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestGenerateArgs(t *testing.T) {
	cases := []struct {
		name            string
		entrypoint, cmd []string
		want            []string
	}{
		{"cmd_only", nil, []string{"/bin/sh", "-c", "jq ."}, []string{"/bin/sh", "-c", "jq ."}},
		{"entrypoint_only", []string{"/bin/jq", "."}, nil, []string{"/bin/jq", "."}},
		{"entrypoint_then_cmd", []string{"/bin/jq"}, []string{"-c", "."}, []string{"/bin/jq", "-c", "."}},
		{"empty_entrypoint_array", []string{}, []string{"/bin/cat"}, []string{"/bin/cat"}},
		// Dockerfile's ENTRYPOINT [""]: Docker and containerd run CMD alone.
		{"entrypoint_of_one_empty_string_is_none", []string{""}, []string{"/bin/cat"}, []string{"/bin/cat"}},
		{"empty_string_among_others_is_kept", []string{"/bin/echo", ""}, []string{"x"}, []string{"/bin/echo", "", "x"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Generate(imgspec.ImageConfig{Entrypoint: tc.entrypoint, Cmd: tc.cmd}, User{}, baseOptions())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(s.Process.Args, tc.want) {
				t.Errorf("args: got %q, want %q", s.Process.Args, tc.want)
			}
		})
	}
	// ENTRYPOINT [""] without CMD leaves nothing to run.
	if _, err := Generate(imgspec.ImageConfig{Entrypoint: []string{""}}, User{}, baseOptions()); err == nil || !strings.Contains(err.Error(), "neither Entrypoint nor Cmd") {
		t.Errorf("an entrypoint of one empty string and no cmd: got error %v, want no program to run", err)
	}
}
