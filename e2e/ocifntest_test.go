package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"
)

// parseYAMLResponse reads what `ocifn test` prints.
func parseYAMLResponse(t *testing.T, out string) *fnv1.RunFunctionResponse {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(out))
	if err != nil {
		t.Fatalf("ocifn test printed no YAML: %v\n%s", err, out)
	}
	rsp := &fnv1.RunFunctionResponse{}
	if err := protojson.Unmarshal(j, rsp); err != nil {
		t.Fatalf("ocifn test printed no RunFunctionResponse: %v\n%s", err, out)
	}
	return rsp
}

// TestOcifnTest runs single calls with `ocifn test`, no server involved.
func TestOcifnTest(t *testing.T) {
	fnDir := func(fn string) string { return filepath.Join(repoRoot, "testdata", "functions", fn) }

	t.Run("request_file_gives_the_expected_response_as_yaml", func(t *testing.T) {
		t.Parallel()
		r := runIn(t, fnDir("labelizer"), nil, "test", "--cache-dir", cacheDir(t), image("labelizer.tar"), "request.json")
		if r.exit != 0 {
			t.Fatalf("exit %d\n%s", r.exit, r.stderr)
		}
		req := loadRequest(t, "labelizer", "request.json")
		want := withTag(loadResponse(t, "labelizer", "expected.json"), req)
		if d := diff(want, parseYAMLResponse(t, r.stdout)); d != "" {
			t.Errorf("response (-want +got):\n%s", d)
		}
		if r.stderr != "" {
			t.Errorf("stderr should be empty for a quiet function:\n%s", r.stderr)
		}
	})

	t.Run("json_output_and_request_on_stdin", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command(ocifnBin, "test", "--cache-dir", cacheDir(t), "-o", "json", image("jq-function.tar"), "-")
		in, err := os.Open(filepath.Join(fnDir("jq-function"), "request.json"))
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		cmd.Stdin = in
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("ocifn test: %v", err)
		}
		rsp := &fnv1.RunFunctionResponse{}
		if err := protojson.Unmarshal(out, rsp); err != nil {
			t.Fatalf("-o json printed no response: %v\n%s", err, out)
		}
		req := loadRequest(t, "jq-function", "request.json")
		if d := diff(withTag(loadResponse(t, "jq-function", "expected.json"), req), rsp); d != "" {
			t.Errorf("response (-want +got):\n%s", d)
		}
	})

	t.Run("request_assembled_from_files", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		write := func(name, content string) {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write("xr.yaml", "apiVersion: example.org/v1\nkind: XApp\nmetadata:\n  name: demo\nspec:\n  size: 3\n")
		write("observed.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo-abc\n  annotations:\n    crossplane.io/composition-resource-name: config\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: creds\n")
		write("desired.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  annotations:\n    crossplane.io/composition-resource-name: config\n")
		write("input.yaml", `apiVersion: ocifn.dev/v1alpha1
kind: Input
filter: |
  {desired: .desired, context: {
    xr: .observed.composite.resource.metadata.name,
    size: .observed.composite.resource.spec.size,
    observed: (.observed.resources | keys),
    desired: (.desired.resources | keys),
    region: .context["example.org/region"]}}
`)
		r := runIn(t, dir, nil, "test", "--cache-dir", cacheDir(t), image("jq-function.tar"),
			"--xr", "xr.yaml", "--observed", "observed.yaml", "--desired", "desired.yaml", "--input", "input.yaml",
			"--context-values", `example.org/region="eu-west-1"`)
		if r.exit != 0 {
			t.Fatalf("exit %d\n%s", r.exit, r.stderr)
		}
		got := parseYAMLResponse(t, r.stdout).GetContext().AsMap()
		want := map[string]any{"xr": "demo", "size": 3.0, "observed": []any{"config", "creds"}, "desired": []any{"config"}, "region": "eu-west-1"}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("what the function saw (-want +got):\n%s", d)
		}
	})

	t.Run("fatal_result_exits_1_and_shows_stderr", func(t *testing.T) {
		t.Parallel()
		r := runIn(t, fnDir("failing"), nil, "test", "--cache-dir", cacheDir(t), image("failing.tar"), "request.json")
		if r.exit != 1 {
			t.Errorf("exit code %d, want 1", r.exit)
		}
		mustContain(t, "stderr", r.stderr,
			"  | boom: the function failed on purpose\n",
			"ocifn: the function returned a Fatal result: the function exited with code 1")
		rsp := parseYAMLResponse(t, r.stdout)
		if n := len(rsp.GetResults()); n != 1 || rsp.GetResults()[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
			t.Errorf("the response on stdout should hold one Fatal result: %v", rsp.GetResults())
		}
	})

	t.Run("expected_response_a_fatal_result_included", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		write := func(name, content string) {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		read := func(name string) string {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		// A request the function must refuse, and one it answers.
		write("refused.request.yaml", "meta: {tag: refused}\ninput:\n  filter: '{results: [{severity: \"SEVERITY_FATAL\", message: \"spec.to must be a string\"}]}'\n")
		write("request.yaml", "meta: {tag: ok}\ninput:\n  filter: '{results: [{severity: \"SEVERITY_NORMAL\", message: \"greeted\"}]}'\n")
		ocifnTest := func(args ...string) ocifnRun {
			return runIn(t, dir, nil, append([]string{"test", "--cache-dir", cacheDir(t), image("jq-function.tar")}, args...)...)
		}

		// Without an expectation, a Fatal result exits 1, as before.
		if r := ocifnTest("refused.request.yaml"); r.exit != 1 {
			t.Errorf("without --expected: exit %d, want 1\n%s", r.exit, r.stderr)
		}
		r := ocifnTest("refused.request.yaml", "--expected", "refused.expected.yaml")
		if r.exit != 1 {
			t.Errorf("an expected file that does not exist: exit %d, want 1", r.exit)
		}
		mustContain(t, "stderr", r.stderr, "cannot read the expected response", "--update records it")

		// Recorded with --update, the Fatal result is what the case
		// expects: the check passes, prints nothing on stdout, and says so.
		r = ocifnTest("refused.request.yaml", "--expected", "refused.expected.yaml", "--update")
		if r.exit != 0 {
			t.Fatalf("--update: exit %d\n%s", r.exit, r.stderr)
		}
		mustContain(t, "stderr", r.stderr, "ocifn: recorded the function's Fatal result in refused.expected.yaml: spec.to must be a string")
		recorded := read("refused.expected.yaml")
		if rsp := parseYAMLResponse(t, recorded); len(rsp.GetResults()) != 1 || rsp.GetResults()[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
			t.Errorf("recorded:\n%s", recorded)
		}
		r = ocifnTest("refused.request.yaml", "--expected", "refused.expected.yaml")
		if r.exit != 0 || r.stdout != "" {
			t.Errorf("the expected Fatal result: exit %d, stdout %q\n%s", r.exit, r.stdout, r.stderr)
		}
		mustContain(t, "stderr", r.stderr, "ocifn: the response matches refused.expected.yaml, its Fatal result included: spec.to must be a string")

		// Another Fatal result than the one expected fails, with a diff.
		write("refused.expected.yaml", "# what the function must say\nresults:\n- {severity: SEVERITY_FATAL, message: spec.to must be a list}\nmeta: {tag: refused}\ndesired: {}\n")
		r = ocifnTest("refused.request.yaml", "--expected", "refused.expected.yaml")
		if r.exit != 1 {
			t.Errorf("another Fatal result: exit %d, want 1\n%s", r.exit, r.stderr)
		}
		mustContain(t, "stderr", r.stderr, "ocifn: the response differs from refused.expected.yaml:\n--- expected\n+++ got\n",
			"\n-- message: spec.to must be a list\n+- message: spec.to must be a string\n")

		// An expected answer is not replaced by a Fatal result: a broken
		// function would overwrite every reviewed response.
		if r := ocifnTest("request.yaml", "--expected", "expected.yaml", "--update"); r.exit != 0 {
			t.Fatalf("--update: exit %d\n%s", r.exit, r.stderr)
		}
		answered := read("expected.yaml")
		r = ocifnTest("refused.request.yaml", "--expected", "expected.yaml", "--update")
		if r.exit != 1 || read("expected.yaml") != answered {
			t.Errorf("a Fatal result over an expected answer: exit %d, expected.yaml now\n%s", r.exit, read("expected.yaml"))
		}
		mustContain(t, "stderr", r.stderr, "expected.yaml expects a response without a Fatal result, and is left as it was")
		r = ocifnTest("refused.request.yaml", "--expected", "expected.yaml")
		if r.exit != 1 || !strings.Contains(r.stderr, "+- message: spec.to must be a string\n+  severity: SEVERITY_FATAL\n") {
			t.Errorf("a Fatal result where an answer is expected: exit %d\n%s", r.exit, r.stderr)
		}
		if r := ocifnTest("request.yaml", "--update"); r.exit == 0 || !strings.Contains(r.stderr, "give --expected FILE") {
			t.Errorf("--update without --expected: exit %d\n%s", r.exit, r.stderr)
		}

		// Nor is another file named by mistake, however the function
		// answers: an XR, a request.
		write("xr.yaml", "apiVersion: example.org/v1\nkind: XGreeting\nmetadata: {name: hello}\nspec: {to: world}\n")
		for _, other := range []string{"xr.yaml", "refused.request.yaml"} {
			before := read(other)
			r = ocifnTest("request.yaml", "--expected", other, "--update")
			if r.exit != 1 || read(other) != before {
				t.Errorf("--update over %s: exit %d, now\n%s", other, r.exit, read(other))
			}
			mustContain(t, "stderr", r.stderr, other+": not a RunFunctionResponse: it looks like a", "--update writes over an expected response only, and leaves it as it is")
		}
		// Nor a stream of several: the composed resources --observed
		// takes.
		write("observed.yaml", "apiVersion: example.org/v1\nkind: Greeting\nmetadata: {name: a}\n---\napiVersion: example.org/v1\nkind: Greeting\nmetadata: {name: b}\n")
		before := read("observed.yaml")
		r = ocifnTest("request.yaml", "--expected", "observed.yaml", "--update")
		if r.exit != 1 || read("observed.yaml") != before {
			t.Errorf("--update over observed.yaml: exit %d, now\n%s", r.exit, read("observed.yaml"))
		}
		mustContain(t, "stderr", r.stderr, "observed.yaml: not a RunFunctionResponse: holds 2 YAML documents; want one RunFunctionResponse, and its document 1 looks like a Kubernetes object (apiVersion example.org/v1, kind Greeting)", "--update writes over an expected response only, and leaves it as it is")
	})

	// A FILE that cannot be read for another reason than its absence is
	// not one --update records: the error does not say it is.
	t.Run("expected_file_that_is_a_directory", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "expected"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, update := range [][]string{nil, {"--update"}} {
			r := runIn(t, dir, nil, append([]string{"test", image("jq-function.tar"), "-", "--expected", "expected"}, update...)...)
			if r.exit != 1 || !strings.Contains(r.stderr, "cannot read the expected response: read expected: is a directory") || strings.Contains(r.stderr, "--update records it") {
				t.Errorf("--expected naming a directory %v: exit %d\n%s", update, r.exit, r.stderr)
			}
		}
	})

	// A Fatal result replaces only an expected Fatal result or a missing
	// file: not a file that holds no response, such as an expected answer
	// with a misspelt field.
	t.Run("update_keeps_a_file_that_holds_no_response_from_a_fatal_result", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "refused.request.yaml"), []byte("meta: {tag: refused}\ninput:\n  filter: '{results: [{severity: \"SEVERITY_FATAL\", message: \"spec.to must be a string\"}]}'\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		const misspelt = "desird: {}\nresults: [{severity: SEVERITY_NORMAL, message: greeted}]\n"
		if err := os.WriteFile(filepath.Join(dir, "expected.yaml"), []byte(misspelt), 0o644); err != nil {
			t.Fatal(err)
		}
		r := runIn(t, dir, nil, "test", "--cache-dir", cacheDir(t), image("jq-function.tar"), "refused.request.yaml", "--expected", "expected.yaml", "--update")
		if r.exit != 1 {
			t.Errorf("a Fatal result over a file that holds no response: exit %d, want 1\n%s", r.exit, r.stderr)
		}
		mustContain(t, "stderr", r.stderr, "expected.yaml holds no response (", `unknown field "desird"`, "and is left as it was")
		if b, err := os.ReadFile(filepath.Join(dir, "expected.yaml")); err != nil || string(b) != misspelt {
			t.Errorf("expected.yaml now (%v):\n%s", err, b)
		}
	})

	// --update writes what a write to FILE would: through a symlink (a
	// golden file kept elsewhere), which stays a link, and into a file
	// that keeps its mode.
	t.Run("update_writes_through_a_symlink_and_keeps_the_mode", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "request.yaml"), []byte("meta: {tag: ok}\ninput:\n  filter: '{results: [{severity: \"SEVERITY_NORMAL\", message: \"greeted\"}]}'\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(dir, "golden"), 0o755); err != nil {
			t.Fatal(err)
		}
		for name, mode := range map[string]os.FileMode{"golden/linked.yaml": 0o644, "private.yaml": 0o600, "readonly.yaml": 0o444} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte("meta: {tag: old}\n"), mode); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("golden/linked.yaml", filepath.Join(dir, "link.yaml")); err != nil {
			t.Fatal(err)
		}
		for _, expected := range []string{"link.yaml", "private.yaml", "readonly.yaml"} {
			if r := runIn(t, dir, nil, "test", "--cache-dir", cacheDir(t), image("jq-function.tar"), "request.yaml", "--expected", expected, "--update"); r.exit != 0 {
				t.Fatalf("--update of %s: exit %d\n%s", expected, r.exit, r.stderr)
			}
		}
		if fi, err := os.Lstat(filepath.Join(dir, "link.yaml")); err != nil {
			t.Fatal(err)
		} else if fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("link.yaml is no longer a symlink but a file of mode %v", fi.Mode())
		}
		for name, mode := range map[string]os.FileMode{"golden/linked.yaml": 0o644, "private.yaml": 0o600, "readonly.yaml": 0o444} {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), "message: greeted") {
				t.Errorf("%s was not updated:\n%s", name, b)
			}
			if fi, err := os.Stat(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			} else if fi.Mode().Perm() != mode {
				t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), mode)
			}
		}
	})

	t.Run("state_printed_instead_of_response_is_explained", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		in := filepath.Join(dir, "input.yaml")
		if err := os.WriteFile(in, []byte("filter: .desired\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		r := runIn(t, fnDir("jq-function"), nil, "test", "--cache-dir", cacheDir(t), image("jq-function.tar"), "request.json", "--input", in)
		if r.exit != 1 {
			t.Errorf("exit code %d, want 1", r.exit)
		}
		mustContain(t, "stderr", r.stderr, `unknown field "composite" at $.composite: the output looks like a State`, `under "desired"`)
	})

	t.Run("mistakes_in_files_are_reported_before_running", func(t *testing.T) {
		t.Parallel()
		r := runIn(t, t.TempDir(), nil, "test", image("jq-function.tar"), "--xr", "missing.yaml")
		if r.exit == 0 || !strings.Contains(r.stderr, "cannot read the composite resource") {
			t.Errorf("exit %d, stderr:\n%s", r.exit, r.stderr)
		}
		r = runIn(t, t.TempDir(), nil, "test", "no-such-file.tar", "--xr", "x.yaml")
		if r.exit == 0 || !strings.Contains(r.stderr, "no-such-file.tar does not exist") {
			t.Errorf("exit %d, stderr:\n%s", r.exit, r.stderr)
		}
	})
}

// TestOutputClosedEarly: `ocifn test` and `ocifn render` whose stdout is
// closed before they have printed everything (`| head`) still remove the
// unpacked image from the cache directory, and fail rather than report
// success.
func TestOutputClosedEarly(t *testing.T) {
	// More than a pipe holds (64 KiB), so that printing it meets the
	// closed pipe.
	filter := `{desired: {resources: ([range(2000)] | map({key: "r\(.)", value: {resource: {apiVersion: "v1", kind: "ConfigMap", metadata: {name: "cm-\(.)"}, data: {a: "abcdefghijklmnopqrstuvwxyz0123456789"}}}}) | from_entries)}}`
	forLocalRuns(t, "jq-function.tar", "filter: '"+filter+"'\n", func(t *testing.T, name string, cmd *exec.Cmd, stderr *bytes.Buffer) {
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
			t.Fatalf("nothing printed: %v\n%s", err, stderr.String())
		}
		out.Close()
		if err := cmd.Wait(); err == nil {
			t.Errorf("ocifn %s exited 0 though its output was cut short", name)
		}
	})
}

// TestInterruptedWhileAFunctionRuns: `ocifn test` and `ocifn render`
// stopped by SIGINT while a function runs say so, naming the signal, not
// "rpc error: … context canceled" of an RPC there is none of, and still
// remove the unpacked image.
func TestInterruptedWhileAFunctionRuns(t *testing.T) {
	forLocalRuns(t, "sh-function.tar", "script: sleep 60\n", func(t *testing.T, name string, cmd *exec.Cmd, stderr *bytes.Buffer) {
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sleeping := func() bool {
			for _, p := range descendants(t, cmd.Process.Pid) {
				if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p)); strings.TrimSpace(string(comm)) == "sleep" {
					return true
				}
			}
			return false
		}
		for deadline := time.Now().Add(patient(30 * time.Second)); !sleeping(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("the function never ran:\n%s", stderr.String())
			}
		}
		_ = cmd.Process.Signal(syscall.SIGINT)
		if err := cmd.Wait(); err == nil {
			t.Errorf("ocifn %s exited 0 though it was interrupted", name)
		}
		if got := stderr.String(); !strings.Contains(got, "stopped while a function ran (interrupt signal received)") || strings.Contains(got, "context canceled") {
			t.Errorf("ocifn %s interrupted, stderr:\n%s\nwant it to say it was stopped by the signal, not a bare context cancellation", name, got)
		}
	})
}

// localRunFiles writes, for one call of the function in tarball with the
// step input input (YAML), the files ocifn test (--input) and ocifn render
// (an Operation of one step, and its Function) take, and returns their
// paths.
func localRunFiles(t *testing.T, tarball, input string) (inputFile, operation, functions string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var step map[string]any
	if err := yaml.Unmarshal([]byte(input), &step); err != nil {
		t.Fatal(err)
	}
	op, err := yaml.Marshal(map[string]any{
		"apiVersion": "ops.crossplane.io/v1alpha1", "kind": "Operation", "metadata": map[string]any{"name": "one-step"},
		"spec": map[string]any{"mode": "Pipeline", "pipeline": []any{map[string]any{
			"step": "one", "functionRef": map[string]any{"name": "function-under-test"}, "input": step}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return write("input.yaml", input), write("operation.yaml", string(op)),
		write("functions.yaml", "apiVersion: pkg.crossplane.io/v1\nkind: Function\nmetadata:\n  name: function-under-test\n  annotations:\n    render.ocifn.dev/tarball: "+image(tarball)+"\n")
}

// forLocalRuns runs check, in parallel subtests, on an ocifn test and an
// ocifn render command (not started) of one call of the function in
// tarball with the step input input (YAML), each with a cache directory of
// its own and its stderr in stderr; then fails the subtest if the command
// left an unpacked image there.
func forLocalRuns(t *testing.T, tarball, input string, check func(t *testing.T, name string, cmd *exec.Cmd, stderr *bytes.Buffer)) {
	t.Helper()
	inputFile, op, fns := localRunFiles(t, tarball, input)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"test", []string{"test", image(tarball), "--input", inputFile}},
		{"render", []string{"render", op, fns}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cache := cacheDir(t)
			cmd := exec.Command(ocifnBin, append(tc.args, "--cache-dir", cache)...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			check(t, tc.name, cmd, &stderr)
			noBundleLeft(t, cache, "ocifn "+tc.name)
		})
	}
}

// noBundleLeft fails the test if what, a local run that has ended, left an
// unpacked image in the cache directory.
func noBundleLeft(t *testing.T, cache, what string) {
	t.Helper()
	if left, _ := filepath.Glob(filepath.Join(cache, "bundle-*")); len(left) != 0 {
		t.Errorf("%s left %v in the cache directory", what, left)
	}
}
