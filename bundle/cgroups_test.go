package bundle

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ocifn/ocifn/host"
)

// TestDelegatedRoot: calls get cgroups of their own only from a cgroup v2
// tree that is ocifn's own (the root of its cgroup namespace, whose
// cgroupfs lists ocifn), offers memory and pids, and is writable; every
// other case says why not.
func TestDelegatedRoot(t *testing.T) {
	self := strconv.Itoa(os.Getpid())
	// tree makes a fake cgroup at mount/sub.
	tree := func(mount, sub, controllers, procs string, mode os.FileMode) string {
		d := filepath.Join(mount, sub)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, content := range map[string]string{"cgroup.controllers": controllers, "cgroup.procs": procs, "cgroup.subtree_control": "", "cgroup.type": "domain\n"} {
			if err := os.WriteFile(filepath.Join(d, f), []byte(content), mode); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	unified := func(mount string) host.Cgroups { return host.Cgroups{Layout: host.CgroupUnified, Unified: mount} }
	full := t.TempDir()
	tree(full, "", "cpu memory pids io", "1\n"+self+"\n", 0o644)
	notOurs := t.TempDir()
	tree(notOurs, "", "memory pids", "1\n", 0o644)
	noControllers := t.TempDir()
	tree(noControllers, "", "cpu io", self, 0o644)
	// The machine's root cgroup has no cgroup.type.
	machineRoot := t.TempDir()
	tree(machineRoot, "", "cpu memory pids io", self, 0o644)
	if err := os.Remove(filepath.Join(machineRoot, "cgroup.type")); err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name    string
		cg      host.Cgroups
		self    string
		want    string
		wantErr string
	}{
		{name: "delegated_root_of_own_namespace", cg: unified(full), self: "0::/\n", want: full},
		{name: "hybrid_host", cg: host.Cgroups{Layout: host.CgroupHybrid, Unified: "/sys/fs/cgroup/unified"}, self: "0::/\n", wantErr: "hybrid mode"},
		{name: "v1_host", cg: host.Cgroups{Layout: host.CgroupLegacy}, self: "4:memory:/x\n", wantErr: "cgroup v1 only"},
		{name: "no_cgroupfs", cg: host.Cgroups{Layout: host.CgroupNone}, self: "0::/\n", wantErr: "no cgroup filesystem is mounted"},
		{name: "not_the_namespace_root", cg: unified(full), self: "0::/system.slice/ocifn.service\n", wantErr: "not the root of its own cgroup namespace"},
		{name: "the_host_cgroupfs_in_a_cgroup_namespace", cg: unified(notOurs), self: "0::/\n", wantErr: "is not ocifn's cgroup"},
		{name: "controllers_missing", cg: unified(noControllers), self: "0::/\n", wantErr: "memory, pids controller"},
		{name: "the_machine_root_cgroup", cg: unified(machineRoot), self: "0::/\n", wantErr: "the machine's root cgroup"},
	}
	if os.Geteuid() != 0 {
		// Root writes anything; the read-only case needs another user.
		ro := t.TempDir()
		tree(ro, "", "memory pids", self, 0o444)
		cases = append(cases, struct {
			name    string
			cg      host.Cgroups
			self    string
			want    string
			wantErr string
		}{name: "read_only", cg: unified(ro), self: "0::/\n", wantErr: "not writable"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root, why := delegatedRoot(tc.cg, []byte(tc.self))
			if tc.wantErr == "" {
				if why != "" || root != tc.want {
					t.Errorf("got %q, %q; want %q", root, why, tc.want)
				}
				return
			}
			if root != "" || !strings.Contains(why, tc.wantErr) {
				t.Errorf("got %q, %q; want no root and a reason with %q", root, why, tc.wantErr)
			}
		})
	}
}

// TestOOMKilledNamesWhoseLimit: an OOM kill in a call's cgroup is said to
// be at the call's own memory.max only when that cgroup's own limit ran
// out (memory.events oom); a kill for memory that ran out above it says so.
func TestOOMKilledNamesWhoseLimit(t *testing.T) {
	cases := []struct {
		name, events, max string
		want              []string
		not               string
	}{
		{"none", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n", "67108864\n", nil, ""},
		{"at_its_own_limit", "low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\noom_group_kill 0\n", "67108864\n", []string{"killed 1 process(es) of container ocifn-1 at its memory limit of 67108864 bytes"}, "above"},
		{"above_it", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 1\noom_group_kill 0\n", "67108864\n", []string{"killed 1 process(es) of container ocifn-1 below its memory limit of 67108864 bytes", "a cgroup above the call's"}, " at its memory limit"},
		{"above_it_without_a_limit", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 2\noom_group_kill 0\n", "max\n", []string{"killed 2 process(es) of container ocifn-1 with no memory limit of its own", "a cgroup above the call's"}, "max bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, text := range map[string]string{"memory.events": tc.events, "memory.max": tc.max} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got := (&container{id: "ocifn-1", cgroup: dir}).oomKilled()
			if tc.want == nil && got != "" {
				t.Errorf("got %q, want none", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("got %q, want it to say %q", got, w)
				}
			}
			if tc.not != "" && strings.Contains(got, tc.not) {
				t.Errorf("got %q, which says %q", got, tc.not)
			}
		})
	}
}
