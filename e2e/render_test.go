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

// TestRenderInputMistakes: inputs that do not go together are refused before
// anything runs, with a message that names what is wrong.
func TestRenderInputMistakes(t *testing.T) {
	root := filepath.Join(repoRoot, "testdata", "render")
	dir := t.TempDir()
	opTemplate := func(kind, spec string) string {
		p := filepath.Join(dir, strings.ToLower(kind)+".yaml")
		text := "apiVersion: ops.crossplane.io/v1alpha1\nkind: " + kind + "\nmetadata:\n  name: nightly\nspec:\n" + spec +
			"  operationTemplate:\n    spec:\n      mode: Pipeline\n      pipeline:\n      - step: one\n        functionRef: {name: function-jq}\n"
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cron := opTemplate("CronOperation", "  schedule: \"0 2 * * *\"\n")
	watch := opTemplate("WatchOperation", "  watch: {apiVersion: v1, kind: ConfigMap}\n")
	misspelt := filepath.Join(dir, "misspelt.yaml")
	if err := os.WriteFile(misspelt, []byte("apiVersion: ops.crossplane.io/v1alpha1\nkind: Operation\nmetadata:\n  name: nightly\nspec:\n  retrylimit: 2\n  pipeline:\n  - step: one\n    functionRef: {name: function-jq}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noTemplate := filepath.Join(dir, "no-template.yaml")
	if err := os.WriteFile(noTemplate, []byte("apiVersion: ops.crossplane.io/v1alpha1\nkind: CronOperation\nmetadata:\n  name: nightly\nspec:\n  schedule: \"0 2 * * *\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"an XR without a Composition", []string{"jq-yq-labelizer/xr.yaml", "jq-yq-labelizer/functions.yaml"}, "with two arguments render runs an Operation"},
		{"an Operation with a Composition", []string{"operation/operation.yaml", "jq-yq-labelizer/composition.yaml", "operation/functions.yaml"}, "render it as OPERATION FUNCTIONS"},
		{"an XRD of another kind", []string{"jq-yq-labelizer/xr.yaml", "jq-yq-labelizer/composition.yaml", "jq-yq-labelizer/functions.yaml", "--xrd=xrd-defaults/xrd.yaml"}, `CompositeResourceDefinition "xdatabases.example.org" defines XDatabase`},
		{"a CronOperation with a Composition", []string{cron, "jq-yq-labelizer/composition.yaml", "operation/functions.yaml"}, "holds CronOperation/nightly: render it as OPERATION FUNCTIONS"},
		{"an Operation with a misspelt field", []string{misspelt, "operation/functions.yaml"}, `Operation "nightly": unknown field "retrylimit" at spec; did you mean "retryLimit"?`},
		{"a CronOperation without a template", []string{noTemplate, "operation/functions.yaml"}, "CronOperation/nightly has no spec.operationTemplate"},
		{"a WatchOperation without the watched resource", []string{watch, "operation/functions.yaml"}, "holds a WatchOperation: give the resource whose change it runs for with --watched-resource FILE"},
		{"a watched resource file of several resources", []string{watch, "operation/functions.yaml", "--watched-resource=required-resources/required.yaml"}, "--watched-resource must hold exactly one resource; required-resources/required.yaml holds 4"},
		// Each names the flags given, not those that were not.
		{"a watched resource with an XR", []string{"jq-yq-labelizer/xr.yaml", "jq-yq-labelizer/composition.yaml", "jq-yq-labelizer/functions.yaml", "--watched-resource=watch-operation/watched.yaml"}, "ocifn: --watched-resource is for an Operation, not a composite resource"},
		{"--include-full-operation with an XR", []string{"jq-yq-labelizer/xr.yaml", "jq-yq-labelizer/composition.yaml", "jq-yq-labelizer/functions.yaml", "--include-full-operation"}, "ocifn: --include-full-operation is for an Operation, not a composite resource"},
		{"both Operation flags with an XR", []string{"jq-yq-labelizer/xr.yaml", "jq-yq-labelizer/composition.yaml", "jq-yq-labelizer/functions.yaml", "-w", "watch-operation/watched.yaml", "--include-full-operation"}, "ocifn: --include-full-operation and --watched-resource are for an Operation, not a composite resource"},
		{"crossplane operation render's -o", []string{"operation/operation.yaml", "operation/functions.yaml", "-o"}, "for crossplane operation render's -o, give --include-full-operation"},
		{"an XR flag with an Operation", []string{"operation/operation.yaml", "operation/functions.yaml", "--xrd=xrd-defaults/xrd.yaml"}, "ocifn: --xrd is for a composite resource, not an Operation"},
		{"two XR flags with an Operation", []string{"operation/operation.yaml", "operation/functions.yaml", "-x", "--observed-resources=observed-passed-on/observed.yaml"}, "ocifn: --observed-resources and --include-full-xr are for a composite resource, not an Operation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runIn(t, root, nil, append([]string{"render"}, tc.args...)...)
			if r.exit == 0 || r.stdout != "" || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want a failure saying %q", r.exit, r.stdout, r.stderr, tc.want)
			}
		})
	}
}
