// Package hack_test runs the scripts of hack/ in scratch directories, on
// what a fresh machine meets: no caches, a network that fails.
package hack_test

import (
	"os"
	"os/exec"
	"path/filepath"
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

// hack/crun.sh and hack/cgroupv2/build.sh fetch Debian bookworm's packages
// from the mirror host_mirror names. On Ubuntu, which the README's fresh
// machine may be, the host's first source is Ubuntu's archive, which has no
// bookworm: `make run` failed there at crun's sources.
func TestHostMirrorIsDebiansOnly(t *testing.T) {
	for _, tc := range []struct {
		name, osRelease, sources, want string
	}{
		{"Debian 12", "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\n",
			"Types: deb\nURIs: http://mirror.example.org/debian\nSuites: bookworm bookworm-updates\nComponents: main\n",
			"http://mirror.example.org/debian"},
		{"Ubuntu 24.04", "PRETTY_NAME=\"Ubuntu 24.04 LTS\"\nID=ubuntu\nID_LIKE=debian\n",
			"Types: deb\nURIs: http://archive.ubuntu.com/ubuntu/\nSuites: noble noble-updates\nComponents: main universe\n",
			""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "etc/apt/sources.list.d"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "etc/os-release"), []byte(tc.osRelease), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(root, "etc/apt/sources.list.d/host.sources"), []byte(tc.sources), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command("bash", "-euo", "pipefail", "-c", `. ./lib.sh; host_mirror "$1"`, "bash", root).CombinedOutput()
			if err != nil {
				t.Fatalf("host_mirror: %v\n%s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != tc.want {
				t.Errorf("host_mirror = %q, want %q", got, tc.want)
			}
		})
	}
}
