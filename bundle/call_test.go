package bundle

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

func TestMergeEnv(t *testing.T) {
	base := []string{"PATH=/bin", "HOME=/", "A=1"}
	got := mergeEnv(base, []string{"A=2", "B=3", "EMPTY="})
	if want := []string{"PATH=/bin", "HOME=/", "A=2", "B=3", "EMPTY="}; !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if base[2] != "A=1" {
		t.Error("mergeEnv changed its base")
	}
	if got := mergeEnv(base, nil); !reflect.DeepEqual(got, base) {
		t.Errorf("no extra: %q", got)
	}
}

func TestCallCustom(t *testing.T) {
	for _, tc := range []struct {
		c    Call
		want bool
	}{
		{Call{}, false},
		{Call{Args: []string{}}, true},
		{Call{Env: []string{"A=1"}}, true},
		{Call{Cwd: "/action"}, true},
		{Call{Mounts: []Mount{{Source: "/x", Destination: "/y"}}}, true},
	} {
		if got := tc.c.custom(); got != tc.want {
			t.Errorf("%+v: custom %v, want %v", tc.c, got, tc.want)
		}
	}
}

// TestCallConfigMakesItsDirectories: a call's working directory and mount
// points are made in the root filesystem before its container is, so that
// crun never makes them from inside a container; resolved inside it (a
// link in the image cannot send them outside); a relative one is refused.
func TestCallConfigMakesItsDirectories(t *testing.T) {
	rootfs, outside := t.TempDir(), t.TempDir()
	if err := os.Symlink(outside, filepath.Join(rootfs, "escape")); err != nil {
		t.Fatal(err)
	}
	b := &Bundle{rootfs: rootfs, spec: &rspec.Spec{Process: &rspec.Process{Args: []string{"/fn"}}},
		runtime: &Runtime{stateDir: t.TempDir()}}
	path, err := b.writeCallConfig(&Call{Cwd: "/work/dir", Mounts: []Mount{{Source: outside, Destination: "/action/files"}}})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s rspec.Spec
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	if s.Process.Cwd != "/work/dir" {
		t.Errorf("cwd %q, want /work/dir", s.Process.Cwd)
	}
	for _, dir := range []string{"work/dir", "action/files"} {
		if fi, err := os.Lstat(filepath.Join(rootfs, dir)); err != nil || !fi.IsDir() {
			t.Errorf("%s not made in the root filesystem: %v", dir, err)
		}
	}
	_, _ = b.writeCallConfig(&Call{Cwd: "/escape/work"}) // refused or made inside
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("made outside the root filesystem through a link: %v", entries)
	}
	if _, err := b.writeCallConfig(&Call{Cwd: "work"}); err == nil || !strings.Contains(err.Error(), "must be absolute") {
		t.Errorf("a relative working directory: %v, want it refused", err)
	}
}
