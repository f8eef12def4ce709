package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBinaryLeavesOutKubernetesTypes: the ocifn binary, the serving
// process's too, links none of Kubernetes' API type packages. Each brings
// its package tree, and the pages of it every process maps: meta/v1,
// imported once for render's reading of an Operation's metadata, took the
// serving process's idle PSS from 26.8 to 28.3-28.6 MB (the idle target is
// under 30 MB with the warm containers), for render alone.
func TestBinaryLeavesOutKubernetesTypes(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "k8s.io/api/") || strings.HasPrefix(p, "k8s.io/apimachinery/pkg/apis/") || strings.HasPrefix(p, "k8s.io/client-go/") {
			t.Errorf("ocifn links %s", p)
		}
	}
}
