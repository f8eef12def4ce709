package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runMake runs make in dir and fails the test if it fails.
func runMake(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("make", append([]string{"--no-print-directory"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), "TLS_SERVER_CERTS_DIR="), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// TestInit scaffolds a function of every template, builds it with its own
// build script (buildah) and checks it on its own examples with its Makefile:
// `ocifn test` must print example/expected.yaml, `ocifn render`
// example/rendered.yaml. The jq function then goes all the way: it learns to
// refuse bad input, which `make expected` records and `make test` checks,
// then is packaged with `ocifn build`, tested as a package, pushed to a
// registry and run from there by `ocifn test` and `ocifn render`.
func TestInit(t *testing.T) {
	// The static yq that hack/testdata.sh staged, so the yq scaffold does
	// not build its own.
	yq := filepath.Join(images, "cache", "stage", "yq", "bin", "yq")
	env := []string{"OCIFN=" + ocifnBin, "YQ=" + yq, "BUILDER=buildah"}
	for _, tmpl := range []string{"jq", "yq", "sh"} {
		t.Run(tmpl, func(t *testing.T) {
			t.Parallel()
			parent := t.TempDir()
			name := "function-" + tmpl
			if out, err := runOcifnIn(parent, "init", name, "--template", tmpl); err != nil {
				t.Fatalf("ocifn init: %v\n%s", err, out)
			}
			dir := filepath.Join(parent, name)
			out := runMake(t, dir, env, "OCIFN="+ocifnBin, "all")
			mustContain(t, "make output", out, "test: the responses match example/*expected.yaml", "render: the output matches example/rendered.yaml")
			if _, err := runOcifnIn(parent, "init", name); err == nil {
				t.Error("ocifn init into a directory that is not empty should fail")
			}
			if tmpl != "jq" {
				return
			}
			refuses(t, dir, env)

			out = runMake(t, dir, env, "OCIFN="+ocifnBin, "RUNTIME_TARBALL="+runtimeImage(t), "package")
			if _, err := os.Stat(filepath.Join(dir, "function.xpkg")); err != nil {
				t.Fatalf("make package made no function.xpkg: %v\n%s", err, out)
			}
			want, err := os.ReadFile(filepath.Join(dir, "example", "expected.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			r := runIn(t, dir, nil, "test", "--cache-dir", cacheDir(t), "function.xpkg", "example/request.yaml")
			if r.exit != 0 || r.stdout != string(want) {
				t.Errorf("ocifn test function.xpkg: exit %d, stdout differs from example/expected.yaml:\n%s\n%s", r.exit, r.stdout, r.stderr)
			}

			reg := startRegistry(t)
			ref := reg.addr + "/acme/" + name + ":v0.1.0"
			if r := runIn(t, dir, nil, "push", "--insecure-registry", "function.xpkg", ref); r.exit != 0 {
				t.Fatalf("ocifn push: exit %d\n%s", r.exit, r.stderr)
			}
			r = runIn(t, dir, nil, "test", "--cache-dir", cacheDir(t), "--insecure-registry", ref, "example/request.yaml")
			if r.exit != 0 || r.stdout != string(want) {
				t.Errorf("ocifn test %s: exit %d, stdout differs from example/expected.yaml:\n%s\n%s", ref, r.exit, r.stdout, r.stderr)
			}

			// The Function as a cluster would install it: spec.package is
			// the registry reference, with no local annotation.
			fns := filepath.Join(dir, "example", "functions-registry.yaml")
			doc := "apiVersion: pkg.crossplane.io/v1\nkind: Function\nmetadata:\n  name: " + name + "\nspec:\n  package: " + ref + "\n"
			if err := os.WriteFile(fns, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			rendered, err := os.ReadFile(filepath.Join(dir, "example", "rendered.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			r = runIn(t, dir, nil, "render", "--cache-dir", cacheDir(t), "--insecure-registry", "example/xr.yaml", "example/composition.yaml", fns)
			if r.exit != 0 || r.stdout != string(rendered) {
				t.Errorf("ocifn render from the registry: exit %d, stdout differs from example/rendered.yaml:\n%s\n%s", r.exit, r.stdout, r.stderr)
			}
		})
	}
}

// refuses makes the scaffolded jq function in dir refuse an XR whose
// spec.to is a list, adds such a request as a case, and checks that
// `make expected` records the Fatal result, that `make test` passes with
// it and fails once the function answers otherwise.
func refuses(t *testing.T, dir string, env []string) {
	t.Helper()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fn, err := os.ReadFile(filepath.Join(dir, "function.jq"))
	if err != nil {
		t.Fatal(err)
	}
	refusing := func(message string) string {
		return "if (.observed.composite.resource.spec.to | type) == \"array\" then\n" +
			"  {results: [{severity: \"SEVERITY_FATAL\", message: \"" + message + "\"}]}\nelse (\n" + string(fn) + "\n) end\n"
	}
	write("function.jq", refusing("spec.to must be a string"))
	req, err := os.ReadFile(filepath.Join(dir, "example", "request.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	write("example/refused.request.yaml", strings.Replace(string(req), "to: World", "to: [Alice, Bob]", 1))
	expected, err := os.ReadFile(filepath.Join(dir, "example", "expected.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	// A request with no expected response yet: make test says how to
	// record one, not ocifn test's --update, which the Makefile gives.
	cmd := exec.Command("make", "--no-print-directory", "test")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("make test passed with example/refused.request.yaml and no example/refused.expected.yaml:\n%s", b)
	} else {
		mustContain(t, "make test", string(b), "example/refused.request.yaml has no example/refused.expected.yaml yet: run make expected")
	}

	out := runMake(t, dir, env, "expected")
	mustContain(t, "make expected", out, "recorded the function's Fatal result in .build/example/refused.expected.yaml: spec.to must be a string")
	if b, err := os.ReadFile(filepath.Join(dir, "example", "expected.yaml")); err != nil || string(b) != string(expected) {
		t.Errorf("make expected changed example/expected.yaml (%v):\n%s", err, b)
	}
	recorded, err := os.ReadFile(filepath.Join(dir, "example", "refused.expected.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, "example/refused.expected.yaml", string(recorded), "message: spec.to must be a string\n  severity: SEVERITY_FATAL\n")
	out = runMake(t, dir, env, "test")
	mustContain(t, "make test", out, "the response matches example/refused.expected.yaml, its Fatal result included", "test: the responses match example/*expected.yaml")

	// Refused with another message: the case fails, with a diff.
	write("function.jq", refusing("spec.to must not be a list"))
	cmd = exec.Command("make", "--no-print-directory", "test")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("make test passed with another Fatal result than the expected one:\n%s", b)
	}
	mustContain(t, "make test", string(b), "the response differs from example/refused.expected.yaml", "-- message: spec.to must be a string\n+- message: spec.to must not be a list\n")
	write("function.jq", refusing("spec.to must be a string"))
}

// runOcifnIn runs ocifn in dir and returns its combined output.
func runOcifnIn(dir string, args ...string) (string, error) {
	cmd := exec.Command(ocifnBin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestInitLeavesNothingOnFailure fills the disk while `ocifn init` writes:
// the error says why, and what it wrote is removed again, so that the same
// command works once there is room.
func TestInitLeavesNothingOnFailure(t *testing.T) {
	for _, c := range []struct{ name, dir, existing string }{
		{name: "new_directory", dir: "fn"},
		{name: "new_parents", dir: "a/b/fn"},
		{name: "empty_directory", dir: "fn", existing: "fn"},
	} {
		t.Run(c.name, func(t *testing.T) {
			mount, _ := smallDisk(t, 12<<10)
			before := []string{mount, filepath.Join(mount, "cache")}
			if c.existing != "" {
				if err := os.Mkdir(filepath.Join(mount, c.existing), 0o755); err != nil {
					t.Fatal(err)
				}
				before = append(before, filepath.Join(mount, c.existing))
			}
			out, err := runOcifnIn(mount, "init", "function-greeting", "--dir", c.dir)
			if err == nil {
				t.Fatalf("ocifn init on a 12 KiB disk should fail:\n%s", out)
			}
			mustContain(t, "output", out, "no space left on device")
			var after []string
			_ = filepath.WalkDir(mount, func(p string, _ os.DirEntry, _ error) error {
				after = append(after, p)
				return nil
			})
			if strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Errorf("a failed ocifn init changed the disk from\n  %s\nto\n  %s", strings.Join(before, "\n  "), strings.Join(after, "\n  "))
			}
		})
	}
}

// TestInitExpectedKeepsOutputsOnFailure breaks a scaffolded function and
// runs `make expected`: it fails, and the expected outputs are as they were.
func TestInitExpectedKeepsOutputsOnFailure(t *testing.T) {
	parent := t.TempDir()
	if out, err := runOcifnIn(parent, "init", "function-greeting"); err != nil {
		t.Fatalf("ocifn init: %v\n%s", err, out)
	}
	dir := filepath.Join(parent, "function-greeting")
	if err := os.WriteFile(filepath.Join(dir, "function.jq"), []byte("error(\"broken on purpose\")\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A case the function refuses, recorded as such: a broken function
	// changes it neither.
	refused := "results:\n- message: spec.to must be a string\n  severity: SEVERITY_FATAL\n"
	if err := os.WriteFile(filepath.Join(dir, "example", "refused.request.yaml"), []byte("observed: {composite: {resource: {spec: {to: [a, b]}}}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "example", "refused.expected.yaml"), []byte(refused), 0o644); err != nil {
		t.Fatal(err)
	}
	goldens := []string{"example/expected.yaml", "example/refused.expected.yaml", "example/rendered.yaml"}
	want := map[string]string{}
	for _, g := range goldens {
		b, err := os.ReadFile(filepath.Join(dir, g))
		if err != nil {
			t.Fatal(err)
		}
		want[g] = string(b)
	}
	cmd := exec.Command("make", "--no-print-directory", "OCIFN="+ocifnBin, "BUILDER=buildah", "expected")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("make expected with a broken function should fail:\n%s", out)
	}
	mustContain(t, "make output", string(out), "broken on purpose")
	// ocifn names the copy in .build it was given; removing that would
	// change nothing, the next make expected copies it again.
	mustContain(t, "make output", string(out), "if the function must now refuse example/request.yaml, remove example/expected.yaml")
	for _, g := range goldens {
		if b, err := os.ReadFile(filepath.Join(dir, g)); err != nil || string(b) != want[g] {
			t.Errorf("a failed make expected changed %s (%v):\n%s", g, err, b)
		}
	}
}

// TestInitStagesWhatEveryCopyNames builds scaffolds whose Dockerfiles copy
// the staged pieces in the other forms a Dockerfile allows (flags, several
// sources on one line, a continued line, lower case, ADD, the JSON form):
// build.sh stages each piece so named, and the function answers as before.
func TestInitStagesWhatEveryCopyNames(t *testing.T) {
	for _, c := range []struct{ name, copies string }{
		{"flags_and_several_sources", "COPY --chown=0:0 --chmod=755 stage/base/ stage/jq/ /\n"},
		{"continued_line_in_lower_case", "copy stage/base/ \\\n  ./stage/jq/ /\n"},
		{"add_and_json_form", "  ADD stage/base/ /\nCOPY [\"stage/jq/\", \"/\"]\n"},
		// As the builders' parser continues a line: a blank or a CR (a
		// Dockerfile saved on Windows) after the backslash, and comment
		// and empty lines inside, which it skips.
		{"continued_line_with_a_blank_and_a_cr_after_the_backslash", "COPY stage/base/ \\ \r\n  stage/jq/ /\r\n"},
		{"continued_line_over_a_comment_and_an_empty_line", "COPY stage/base/ \\\n# jq too\n\n  stage/jq/ /\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			parent := t.TempDir()
			if out, err := runOcifnIn(parent, "init", "function-greeting"); err != nil {
				t.Fatalf("ocifn init: %v\n%s", err, out)
			}
			dir := filepath.Join(parent, "function-greeting")
			dockerfile := "FROM scratch\n" + c.copies + "COPY function.jq /fn/\n" +
				"ENTRYPOINT [\"/bin/jq\", \"--compact-output\", \"--from-file\", \"/fn/function.jq\"]\n"
			if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
				t.Fatal(err)
			}
			out := runMake(t, dir, []string{"BUILDER=buildah"}, "OCIFN="+ocifnBin, "test")
			mustContain(t, "make test", out, "test: the responses match example/*expected.yaml")
		})
	}
}

// TestInitBuildsFromAnImageOfARegistry changes a scaffold's Dockerfile to
// start FROM an image of a registry (one with busybox and jq, on a local
// registry that the registries configuration marks plain HTTP), as a
// platform team's base image: build.sh pulls it with buildah, as docker
// and podman would, and the function answers as before.
func TestInitBuildsFromAnImageOfARegistry(t *testing.T) {
	reg := startRegistry(t)
	base := reg.addr + "/acme/base:v1"
	if r := runIn(t, t.TempDir(), nil, "push", "--insecure-registry", image("sh-function.tar"), base); r.exit != 0 {
		t.Fatalf("ocifn push: exit %d\n%s", r.exit, r.stderr)
	}
	conf := filepath.Join(t.TempDir(), "registries.conf")
	if err := os.WriteFile(conf, []byte("[[registry]]\nlocation = \""+reg.addr+"\"\ninsecure = true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	if out, err := runOcifnIn(parent, "init", "function-greeting", "--template", "sh"); err != nil {
		t.Fatalf("ocifn init: %v\n%s", err, out)
	}
	dir := filepath.Join(parent, "function-greeting")
	dockerfile := "FROM " + base + "\nCOPY function.sh /fn/\nENV PATH=/bin\nWORKDIR /fn\nENTRYPOINT [\"/bin/sh\", \"/fn/function.sh\"]\n"
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	out := runMake(t, dir, []string{"BUILDER=buildah", "CONTAINERS_REGISTRIES_CONF=" + conf}, "OCIFN="+ocifnBin, "test")
	mustContain(t, "make test", out, "test: the responses match example/*expected.yaml")
}

// TestInitTestRunsEveryCase changes the function so that two cases of
// make test fail: both are run and named, not only the first, so that one
// run shows everything a change broke; a case with no expected response
// yet is named with them.
func TestInitTestRunsEveryCase(t *testing.T) {
	parent := t.TempDir()
	if out, err := runOcifnIn(parent, "init", "function-greeting"); err != nil {
		t.Fatalf("ocifn init: %v\n%s", err, out)
	}
	dir := filepath.Join(parent, "function-greeting")
	copyFile := func(from, to string) {
		b, err := os.ReadFile(filepath.Join(dir, from))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, to), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyFile("example/request.yaml", "example/a.request.yaml")
	copyFile("example/expected.yaml", "example/a.expected.yaml")
	copyFile("example/request.yaml", "example/b.request.yaml")
	copyFile("example/expected.yaml", "example/b.expected.yaml")
	copyFile("example/request.yaml", "example/c.request.yaml")
	fn, err := os.ReadFile(filepath.Join(dir, "function.jq"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "function.jq"), []byte(strings.Replace(string(fn), "composed a greeting for", "greeted", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "--no-print-directory", "OCIFN="+ocifnBin, "BUILDER=buildah", "test")
	cmd.Dir = dir
	b, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("make test passed with a changed function:\n%s", b)
	}
	out := string(b)
	for _, e := range []string{"example/a.expected.yaml", "example/b.expected.yaml", "example/expected.yaml"} {
		mustContain(t, "make test", out, "the response differs from "+e)
	}
	mustContain(t, "make test", out, "example/c.request.yaml has no example/c.expected.yaml yet: run make expected",
		"make test: 4 of 4 cases failed: example/a.request.yaml example/b.request.yaml example/c.request.yaml example/request.yaml")
}
