package e2e

import (
	"os"
	"path/filepath"
	"testing"
)

// TestExamples renders every example in examples/ the way its README says,
// with the images `make testdata` built from the examples' Dockerfiles, and
// compares the output with the example's expected.yaml.
func TestExamples(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join(repoRoot, "examples", "*", "composition.yaml"))
	if err != nil || len(dirs) < 3 {
		t.Fatalf("want at least three examples, found %d: %v", len(dirs), err)
	}
	for _, c := range dirs {
		dir := filepath.Dir(c)
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			for _, f := range []string{"README.md", "xr.yaml", "functions.yaml"} {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("the example lacks %s", f)
				}
			}
			args := []string{"render", "--cache-dir", cacheDir(t), "-r", "xr.yaml", "composition.yaml", "functions.yaml"}
			if _, err := os.Stat(filepath.Join(dir, "observed.yaml")); err == nil {
				args = append(args, "--observed-resources=observed.yaml")
			}
			checkGolden(t, dir, runIn(t, dir, nil, args...))
		})
	}
}
