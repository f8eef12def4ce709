package bundle

import (
	"reflect"
	"testing"
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
