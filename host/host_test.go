package host

import (
	"os"
	"testing"
)

func TestPlanFor(t *testing.T) {
	hybrid := Cgroups{Layout: CgroupHybrid, Unified: "/sys/fs/cgroup/unified", UnifiedControllers: []string{"hugetlb"}}
	hybridEmpty := Cgroups{Layout: CgroupHybrid, Unified: "/sys/fs/cgroup/unified"}
	unified := Cgroups{Layout: CgroupUnified, Unified: "/sys/fs/cgroup"}
	cases := []struct {
		name string
		euid int
		cg   Cgroups
		want Plan
	}{
		{"root_on_pure_v2_needs_nothing", 0, unified, Plan{}},
		{"root_on_hybrid_masks_cgroup2", 0, hybrid, Plan{MaskUnified: "/sys/fs/cgroup/unified"}},
		{"root_on_hybrid_without_controllers_needs_nothing", 0, hybridEmpty, Plan{}},
		{"user_on_pure_v2_gets_a_user_and_a_cgroup_namespace", 1000, unified, Plan{UserNS: true, CgroupNS: true, CgroupMount: "/sys/fs/cgroup"}},
		{"user_on_hybrid_gets_both", 1000, hybrid, Plan{UserNS: true, MaskUnified: "/sys/fs/cgroup/unified"}},
		{"root_without_cgroupfs_mounts_a_tmpfs_for_crun", 0, Cgroups{Layout: CgroupNone}, Plan{MaskUnified: "/sys/fs/cgroup"}},
		{"user_without_cgroupfs_mounts_a_tmpfs_for_crun", 1000, Cgroups{Layout: CgroupNone}, Plan{UserNS: true, MaskUnified: "/sys/fs/cgroup"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := PlanFor(tc.euid, tc.cg)
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if got.Needed() != (tc.want != Plan{}) {
				t.Errorf("Needed() = %t for %+v", got.Needed(), got)
			}
		})
	}
}

// TestDetectCgroupsOnThisHost checks the detection against the machine the
// tests run on, whose layout PLATFORM.md records: hybrid, with hugetlb on
// the cgroup2 mount. Elsewhere it checks that detection works at all.
func TestDetectCgroupsOnThisHost(t *testing.T) {
	cg, err := DetectCgroups()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.controllers"); err == nil {
		if cg.Layout != CgroupHybrid || cg.Unified != "/sys/fs/cgroup/unified" {
			t.Errorf("got %+v, want hybrid with cgroup2 at /sys/fs/cgroup/unified", cg)
		}
		return
	}
	if cg.Layout == "" {
		t.Errorf("no layout detected: %+v", cg)
	}
}
