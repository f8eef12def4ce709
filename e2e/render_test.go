package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRenderGolden runs `ocifn render` on every pipeline in
// testdata/render/ (an XR and a Composition, or an Operation) and compares
// what it prints with the golden files there. TestRenderMatchesCrossplane
// checks the same pipelines against the crossplane CLI.
func TestRenderGolden(t *testing.T) {
	root := filepath.Join(repoRoot, "testdata", "render")
	dirs, err := filepath.Glob(filepath.Join(root, "*", "functions.yaml"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no render cases in %s: %v", root, err)
	}
	for _, c := range dirs {
		dir := filepath.Dir(c)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			fns := "functions.yaml"
			if served, err := os.ReadFile(filepath.Join(dir, "serve")); err == nil {
				s := startServer(t, []string{"--tarball", image(strings.TrimSpace(string(served)) + ".tar")})
				fns = withPlaceholders(t, filepath.Join(dir, fns), map[string]string{"${TARGET}": s.addr, "${IMAGES}": images})
			}
			args := []string{"render", "--cache-dir", cacheDir(t), "xr.yaml", "composition.yaml", fns}
			if _, err := os.Stat(filepath.Join(dir, "operation.yaml")); err == nil {
				args = []string{"render", "--cache-dir", cacheDir(t), "operation.yaml", fns}
			}
			if extra, err := os.ReadFile(filepath.Join(dir, "args")); err == nil {
				args = append(args, strings.Fields(string(extra))...)
			}
			checkGolden(t, dir, runIn(t, dir, nil, args...))
		})
	}
}

// withPlaceholders writes a copy of a file with placeholders replaced and
// returns its path.
func withPlaceholders(t *testing.T, path string, values map[string]string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for k, v := range values {
		s = strings.ReplaceAll(s, k, v)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(out, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}
