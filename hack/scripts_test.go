// Package hack_test runs the scripts of hack/ in scratch directories, on
// what a fresh machine meets: no caches, a network that fails.
package hack_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// A download that fails (a flaky network, a version the proxy lacks) is
// reported by go in the JSON of `go mod download -json`, on stdout: the
// script must show it, not exit 1 without a word, as `make test` did.
func TestCrossplaneSaysWhyADownloadFailed(t *testing.T) {
	cmd := exec.Command("./crossplane.sh")
	cmd.Env = append(os.Environ(), "OUT="+t.TempDir(), "GOPROXY=off", "CROSSPLANE_CLI_VERSION=v2.99.0")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("hack/crossplane.sh succeeded without its module:\n%s", out)
	}
	for _, want := range []string{
		"module lookup disabled by GOPROXY=off",
		"crossplane.sh: cannot download github.com/crossplane/cli/v2@v2.99.0",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("hack/crossplane.sh (%v) did not say %q; it said:\n%s", err, want, out)
		}
	}
}
