package e2e

import (
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// runImage runs one call of image with `ocifn test` and returns what it
// printed and its exit code.
func runImage(t *testing.T, image string) ocifnRun {
	t.Helper()
	req := filepath.Join(t.TempDir(), "request.json")
	if err := os.WriteFile(req, []byte(`{"meta": {"tag": "t"}, "desired": {"composite": {"resource": {"kind": "X"}}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return runIn(t, t.TempDir(), nil, "test", "--cache-dir", cacheDir(t), "-o", "json", image, req)
}

// TestEmptyEntrypointRunsCmd: a Dockerfile's ENTRYPOINT [""] takes the
// base image's entrypoint away, and Docker and containerd then run CMD
// alone; ocifn does too, rather than ask crun to execute "".
func TestEmptyEntrypointRunsCmd(t *testing.T) {
	img := configuredImage(t, "passthrough.tar", func(c *v1.Config) {
		c.Entrypoint, c.Cmd = []string{""}, c.Entrypoint
	})
	r := runImage(t, img)
	if r.exit != 0 {
		t.Fatalf("exit %d, want 0\n%s\n%s", r.exit, r.stdout, r.stderr)
	}
	mustContain(t, "the response", r.stdout, `"kind": "X"`)
}
