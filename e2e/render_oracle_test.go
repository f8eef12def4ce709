package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/ocifn/ocifn/pipeline"
)

// The oracle is the real crossplane CLI (v2.5.0) with its v2 render engine
// (crossplane v2.3.4), built from the Go module proxy by hack/crossplane.sh
// into build/crossplane/, once per test run (kept between runs).
var (
	oracleOnce              sync.Once
	oracleCLI, oracleEngine string
	oracleErr               error
	oracleBuildOutput       []byte
)

func crossplaneOracle(t *testing.T) (cli, engine string) {
	t.Helper()
	oracleOnce.Do(func() {
		dir := filepath.Join(repoRoot, "build", "crossplane")
		cmd := exec.Command(filepath.Join(repoRoot, "hack", "crossplane.sh"))
		cmd.Env = append(os.Environ(), "OUT="+dir)
		oracleBuildOutput, oracleErr = cmd.CombinedOutput()
		oracleCLI, oracleEngine = filepath.Join(dir, "crossplane"), filepath.Join(dir, "crossplane-engine")
	})
	if oracleErr != nil {
		t.Fatalf("cannot build the crossplane CLI (hack/crossplane.sh): %v\n%s", oracleErr, oracleBuildOutput)
	}
	return oracleCLI, oracleEngine
}

// renderCase is one render both tools run: a directory of testdata/render
// or examples/.
type renderCase struct {
	dir string
	// operation is set for an Operation (operation.yaml) instead of an XR
	// and a Composition.
	operation bool
	args      []string
}

func renderCases(t *testing.T) []renderCase {
	t.Helper()
	var cases []renderCase
	for _, pattern := range []string{"testdata/render/*/functions.yaml", "examples/*/functions.yaml"} {
		files, err := filepath.Glob(filepath.Join(repoRoot, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			dir := filepath.Dir(f)
			c := renderCase{dir: dir}
			if _, err := os.Stat(filepath.Join(dir, "operation.yaml")); err == nil {
				c.operation = true
			}
			if b, err := os.ReadFile(filepath.Join(dir, "args")); err == nil {
				c.args = strings.Fields(string(b))
			}
			if strings.Contains(dir, "examples") {
				// As the examples' READMEs and TestExamples run them.
				c.args = append(c.args, "-r")
				if _, err := os.Stat(filepath.Join(dir, "observed.yaml")); err == nil {
					c.args = append(c.args, "--observed-resources=observed.yaml")
				}
			}
			cases = append(cases, c)
		}
	}
	if len(cases) < 10 {
		t.Fatalf("found only %d render cases", len(cases))
	}
	return cases
}

// TestRenderMatchesCrossplane renders every pipeline of testdata/render and
// examples/ with `ocifn render` and with the crossplane CLI, both calling
// the same functions served by `ocifn serve --insecure` through the
// Development runtime annotation, and compares what they print byte for
// byte. A pipeline that fails must fail in both, with nothing on stdout.
func TestRenderMatchesCrossplane(t *testing.T) {
	cli, engine := crossplaneOracle(t)
	cases := renderCases(t)
	targets := serveImages(t, cases)
	for _, c := range cases {
		name := filepath.Base(filepath.Dir(c.dir)) + "/" + filepath.Base(c.dir)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fns := developmentFunctions(t, c.dir, targets)
			inputs := []string{"xr.yaml", "composition.yaml", fns}
			xpCmd := []string{"composition", "render"}
			if c.operation {
				inputs = []string{"operation.yaml", fns}
				xpCmd = []string{"operation", "render"}
			}
			want := runProgram(t, c.dir, cli, nil, append(append(append(xpCmd, inputs...), c.args...), "--crossplane-binary="+engine)...)
			got := runIn(t, c.dir, nil, append(append([]string{"render"}, inputs...), c.args...)...)
			if want.exit != got.exit {
				t.Fatalf("crossplane exited %d, ocifn %d\ncrossplane stderr:\n%s\nocifn stderr:\n%s", want.exit, got.exit, want.stderr, got.stderr)
			}
			if got.exit != 0 {
				t.Logf("both failed: crossplane with exit code %d:\n%s\nocifn with exit code %d:\n%s", want.exit, want.stderr, got.exit, got.stderr)
			}
			// Only a pipeline meant to fail (its golden exit code is not
			// 0) may fail here.
			if _, err := os.Stat(filepath.Join(c.dir, "expected.exit")); got.exit != 0 && err != nil {
				t.Fatalf("both failed, crossplane with:\n%s\nocifn with:\n%s", want.stderr, got.stderr)
			}
			if d := cmp.Diff(normalizeOracle(want.stdout, c.operation), got.stdout); d != "" {
				t.Errorf("ocifn render prints something else than crossplane render (-crossplane +ocifn):\n%s\ncrossplane stderr:\n%s", d, want.stderr)
			}
		})
	}
}

// functionImages returns the Functions of dir/functions.yaml (the
// documents and their parsed form) and, by Function name, the image each
// runs when it is a local tarball that exists.
func functionImages(t *testing.T, dir string) ([]pipeline.Document, map[string]string) {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(dir, "functions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The placeholders of testdata/render (see its README): ${IMAGES} is
	// the test image directory, ${TARGET} the address of the image the
	// serve file names.
	text = bytes.ReplaceAll(text, []byte("${IMAGES}"), []byte(images))
	docs, err := pipeline.ParseDocuments(text, filepath.Join(dir, "functions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	fns, err := pipeline.ParseFunctions(docs)
	if err != nil {
		t.Fatal(err)
	}
	imgs := map[string]string{}
	for _, f := range fns {
		rt, err := f.Runtime()
		switch {
		case err != nil:
		case rt.Kind == pipeline.RuntimeTarget && rt.Location == "${TARGET}":
			served, err := os.ReadFile(filepath.Join(dir, "serve"))
			if err != nil {
				t.Fatalf("%s: a Function at ${TARGET} needs a serve file: %v", dir, err)
			}
			imgs[f.Name] = image(strings.TrimSpace(string(served)) + ".tar")
		case rt.Kind == pipeline.RuntimeTarball:
			if _, err := os.Stat(rt.Location); err == nil {
				abs, err := filepath.Abs(rt.Location)
				if err != nil {
					t.Fatal(err)
				}
				imgs[f.Name] = abs
			}
		}
	}
	return docs, imgs
}

// serveImages starts one `ocifn serve --insecure` per image the cases use,
// all at once, and returns their addresses by image. They stop when the
// test ends.
func serveImages(t *testing.T, cases []renderCase) map[string]string {
	t.Helper()
	servers := map[string]*server{}
	for _, c := range cases {
		_, imgs := functionImages(t, c.dir)
		for _, img := range imgs {
			if servers[img] == nil {
				servers[img] = startProcess(t, []string{"--insecure", "--tarball", img})
			}
		}
	}
	addrs := map[string]string{}
	deadline := time.After(2 * time.Minute)
	for img, s := range servers {
		for s.addr == "" {
			select {
			case <-s.exited:
				t.Fatalf("ocifn serve of %s exited before serving: %v\n%s", img, s.cmd.ProcessState, s.stderr)
			case <-deadline:
				t.Fatalf("ocifn serve of %s did not start serving:\n%s", img, s.stderr)
			case <-time.After(20 * time.Millisecond):
				if m := servingLine.FindStringSubmatch(s.stderr.String()); m != nil {
					s.addr = m[1] + m[2]
				}
			}
		}
		addrs[img] = s.addr
	}
	return addrs
}

// developmentFunctions writes a copy of dir/functions.yaml in which every
// Function is called at a development target: the `ocifn serve` of the
// image it names (a Function without one, which the pipeline does not use,
// gets an address nothing listens on).
func developmentFunctions(t *testing.T, dir string, targets map[string]string) string {
	t.Helper()
	docs, imgs := functionImages(t, dir)
	var out bytes.Buffer
	for _, d := range docs {
		o := d.Object
		target := "127.0.0.1:1"
		if img, ok := imgs[o.Name()]; ok {
			target = targets[img]
		}
		md, _ := o["metadata"].(map[string]any)
		md["annotations"] = map[string]any{
			pipeline.AnnotationRuntime:           "Development",
			pipeline.AnnotationDevelopmentTarget: target,
		}
		b, err := yaml.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		out.WriteString("---\n")
		out.Write(b)
	}
	path := filepath.Join(t.TempDir(), "functions.yaml")
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

var (
	conditionTimeLine = regexp.MustCompile(`(?m)^(\s*- lastTransitionTime: |\s*lastTransitionTime: )"[^"]*"$`)
	notReadyResult    = regexp.MustCompile(`(?m)^message: Composed resource ".*" is not yet ready$`)
)

// normalizeOracle takes out of crossplane's output what is not the same
// from one run to the next, the two differences the README lists as
// deliberate: the real condition times crossplane operation render prints
// (ocifn prints the fixed time, as composition render does), and the order
// of the "not yet ready" results (random in Crossplane, by name in ocifn).
func normalizeOracle(out string, operation bool) string {
	if operation {
		out = conditionTimeLine.ReplaceAllString(out, `${1}"2024-01-01T00:00:00Z"`)
	}
	docs := strings.SplitAfter(out, "\n---\n")
	for i := 0; i < len(docs); {
		j := i
		for j < len(docs) && notReadyResult.MatchString(docs[j]) {
			j++
		}
		if j > i {
			run := docs[i:j]
			// The last document has no separator after it.
			last := !strings.HasSuffix(run[len(run)-1], "\n---\n")
			for k := range run {
				run[k] = strings.TrimSuffix(run[k], "---\n")
			}
			sort.Strings(run)
			for k := range run {
				if k < len(run)-1 || !last {
					run[k] += "---\n"
				}
			}
			i = j
			continue
		}
		i++
	}
	return strings.Join(docs, "")
}
