package bundle

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ocifn/ocifn/host"
)

// TestDelegatedRoot: calls get cgroups of their own only from a cgroup v2
// tree that is ocifn's own, offers memory and pids, and is writable; every
// other case says why not.
func TestDelegatedRoot(t *testing.T) {
	tree := func(controllers string, mode os.FileMode) string {
		d := t.TempDir()
		for _, f := range []string{"cgroup.controllers", "cgroup.procs", "cgroup.subtree_control"} {
			if err := os.WriteFile(filepath.Join(d, f), []byte(controllers), mode); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	full := tree("cpu memory pids io", 0o644)
	cases := []struct {
		name    string
		cg      host.Cgroups
		self    string
		wantErr string
	}{
		{name: "delegated_root_of_own_namespace", cg: host.Cgroups{Layout: host.CgroupUnified, Unified: full}, self: "0::/\n"},
		{name: "hybrid_host", cg: host.Cgroups{Layout: host.CgroupHybrid, Unified: "/sys/fs/cgroup/unified"}, self: "0::/\n", wantErr: "hybrid mode"},
		{name: "v1_host", cg: host.Cgroups{Layout: host.CgroupLegacy}, self: "4:memory:/x\n", wantErr: "cgroup v1 only"},
		{name: "not_the_namespace_root", cg: host.Cgroups{Layout: host.CgroupUnified, Unified: full}, self: "0::/system.slice/ocifn.service\n", wantErr: "not the root of its own cgroup namespace"},
		{name: "controllers_missing", cg: host.Cgroups{Layout: host.CgroupUnified, Unified: tree("cpu io", 0o644)}, self: "0::/\n", wantErr: "memory, pids controller"},
	}
	if os.Geteuid() != 0 {
		// Root writes anything; the read-only case needs another user.
		cases = append(cases, struct {
			name    string
			cg      host.Cgroups
			self    string
			wantErr string
		}{name: "read_only", cg: host.Cgroups{Layout: host.CgroupUnified, Unified: tree("memory pids", 0o444)}, self: "0::/\n", wantErr: "not writable"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root, why := delegatedRoot(tc.cg, []byte(tc.self))
			if tc.wantErr == "" {
				if why != "" || root != tc.cg.Unified {
					t.Errorf("got %q, %q; want %q", root, why, tc.cg.Unified)
				}
				return
			}
			if root != "" || !strings.Contains(why, tc.wantErr) {
				t.Errorf("got %q, %q; want no root and a reason with %q", root, why, tc.wantErr)
			}
		})
	}
}
