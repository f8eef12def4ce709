package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ocifn/ocifn/oci"
)

// TestIOModeMismatch: a function that prints another I/O mode's answer in
// json mode gets a Fatal result that names the mode it likely needs.
func TestIOModeMismatch(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--warm", "0"})
	cases := []struct {
		name, script string
		want         []string
	}{
		{"resource_list_names_krm", `printf 'apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n'`,
			[]string{"a KRM ResourceList", "--io krm"}},
		{"function_io_names_functionio", `printf 'desired:\n  resources:\n  - name: a\n    resource: {apiVersion: v1, kind: ConfigMap}\nresults:\n- severity: Normal\n  message: hi\n'`,
			[]string{"a FunctionIO document", "--io functionio"}},
		{"yaml_response_says_print_json", `printf 'desired:\n  resources:\n    a:\n      resource: {kind: A}\n'`,
			[]string{"a RunFunctionResponse in YAML", "print it as JSON"}},
		{"json_resource_list_names_krm", `echo '{"apiVersion": "config.kubernetes.io/v1", "kind": "ResourceList", "items": []}'`,
			[]string{"a KRM ResourceList", "--io krm"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			input, err := structpb.NewStruct(map[string]any{"script": tc.script})
			if err != nil {
				t.Fatal(err)
			}
			req := &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: tc.name}, Input: input}
			rsp := s.call(t, req)
			rs := rsp.GetResults()
			if len(rs) != 1 || rs[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL {
				t.Fatalf("results %v, want one Fatal", rs)
			}
			mustContain(t, "the Fatal result", rs[0].GetMessage(), tc.want...)
		})
	}
}

// TestIOModeFromImage: the mode an image records (label dev.ocifn.io) is
// the one ocifn serve uses, --io overrides it, and an unknown mode on the
// command line, in the environment or in the image stops serve with an
// error that names it.
func TestIOModeFromImage(t *testing.T) {
	labeled := labeledImage(t, "passthrough.tar", map[string]string{oci.LabelIO: "yaml-of-the-future"})

	out, err := runOcifn(t, "serve", "--insecure", "--cache-dir", cacheDir(t), "--address", "127.0.0.1:0", "--metrics-address", "", "--tarball", labeled)
	if err == nil {
		t.Fatalf("serve started with an unknown recorded mode:\n%s", out)
	}
	mustContain(t, "serve's error", out, `unknown I/O mode "yaml-of-the-future"`, "label dev.ocifn.io", "--io")

	// --io overrides what the image records.
	s := startServer(t, []string{"--tarball", labeled, "--io", "json", "--warm", "0"})
	mustContain(t, "serve's log", s.stderr.String(), "io=json")
	rsp := s.call(t, &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "t"}})
	if len(rsp.GetResults()) != 0 {
		t.Errorf("results %v", rsp.GetResults())
	}

	for _, args := range [][]string{
		{"serve", "--insecure", "--io", "yaml", "--tarball", image("echo.tar")},
		{"test", "--io", "yaml", image("echo.tar"), filepath.Join(repoRoot, "testdata", "functions", "echo", "request.json")},
		{"render", "--io", "yaml", filepath.Join(repoRoot, "examples", "buckets", "xr.yaml"), filepath.Join(repoRoot, "examples", "buckets", "composition.yaml"), filepath.Join(repoRoot, "examples", "buckets", "functions.yaml")},
	} {
		out, err := runOcifn(t, args...)
		if err == nil {
			t.Fatalf("%s accepted --io yaml:\n%s", args[0], out)
		}
		mustContain(t, args[0]+"'s error", out, `--io: unknown I/O mode "yaml"; valid modes are functionio, json, krm`)
	}
	// An explicit --io json renders the example as without it.
	ex := filepath.Join(repoRoot, "examples", "buckets")
	out, err = runOcifn(t, "render", "--io", "json", "--cache-dir", cacheDir(t), filepath.Join(ex, "xr.yaml"), filepath.Join(ex, "composition.yaml"), filepath.Join(ex, "functions.yaml"))
	if err != nil {
		t.Fatalf("render --io json: %v\n%s", err, out)
	}
	mustContain(t, "render's output", out, "kind: XBucketSet")
	t.Setenv(oci.EnvIO, "yaml")
	out, err = runOcifn(t, "serve", "--insecure", "--tarball", image("echo.tar"))
	if err == nil || !strings.Contains(out, `unknown I/O mode "yaml"`) {
		t.Fatalf("serve with %s=yaml: %v\n%s", oci.EnvIO, err, out)
	}
}

// labeledImage writes a copy of a test image whose config has labels as
// its only labels, and returns its path.
func labeledImage(t *testing.T, name string, labels map[string]string) string {
	t.Helper()
	return configuredImage(t, name, func(c *v1.Config) { c.Labels = labels })
}

// configuredImage writes a copy of a test image whose config change has
// changed, and returns its path.
func configuredImage(t *testing.T, name string, change func(*v1.Config)) string {
	t.Helper()
	img, err := tarball.ImageFromPath(image(name), nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	change(&cf.Config)
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	changed := filepath.Join(t.TempDir(), "changed-"+name)
	if err := tarball.WriteToFile(changed, nil, img); err != nil {
		t.Fatal(err)
	}
	return changed
}

// TestBuildRefusesUnknownIOMode: an unknown --io is refused before
// anything is built. (What a known one records: TestBuildMetadata.)
func TestBuildRefusesUnknownIOMode(t *testing.T) {
	dir := t.TempDir()
	out, err := runOcifn(t, "build", "--from-oci-tarball", image("echo.tar"), "--name", "function-echo",
		"--runtime-image-tarball", runtimeImage(t), "-o", filepath.Join(dir, "bad.xpkg"), "--io", "yaml")
	if err == nil {
		t.Fatalf("build accepted --io yaml:\n%s", out)
	}
	mustContain(t, "build's error", out, `--io: unknown I/O mode "yaml"`)
	if _, err := os.Stat(filepath.Join(dir, "bad.xpkg")); err == nil {
		t.Error("a package was written")
	}
}

// TestBuildRefusesWhatServeWould: a function image with no program to run,
// one whose user or group its own /etc/passwd or /etc/group does not
// have, or one that records an I/O mode this ocifn does not know, is refused by
// build, naming why, rather than packaged to crash-loop in the cluster.
func TestBuildRefusesWhatServeWould(t *testing.T) {
	base, err := tarball.ImageFromPath(image("echo.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := base.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		change func(c *v1.Config)
		want   string
	}{
		{"no_entrypoint_nor_cmd", func(c *v1.Config) { c.Entrypoint, c.Cmd = nil, nil }, "has neither Entrypoint nor Cmd"},
		{"empty_entrypoint_and_no_cmd", func(c *v1.Config) { c.Entrypoint, c.Cmd = []string{""}, nil }, "has neither Entrypoint nor Cmd"},
		{"user_not_in_its_passwd", func(c *v1.Config) { c.User = "app" }, `cannot resolve the image's user "app" against its /etc/passwd and /etc/group: unable to find user app`},
		{"group_not_in_its_group_file", func(c *v1.Config) { c.User = "65534:staff" }, `cannot resolve the image's user "65534:staff" against its /etc/passwd and /etc/group: unable to find group staff`},
		{"unknown_io_mode", func(c *v1.Config) { c.Labels = map[string]string{oci.LabelIO: "krmx"} }, "records an I/O mode this ocifn does not know"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := *cfg.Config.DeepCopy()
			tc.change(&c)
			img, err := mutate.Config(base, c)
			if err != nil {
				t.Fatal(err)
			}
			in := filepath.Join(dir, tc.name+".tar")
			ref, _ := name.ParseReference("example.org/" + strings.ReplaceAll(tc.name, "_", "-") + ":v1")
			if err := tarball.WriteToFile(in, ref, img); err != nil {
				t.Fatal(err)
			}
			out, err := runOcifn(t, "build", "--from-oci-tarball", in, "--name", "function-x",
				"--runtime-image-tarball", runtimeImage(t), "-o", filepath.Join(dir, tc.name+".xpkg"))
			if err == nil {
				t.Fatalf("build accepted it:\n%s", out)
			}
			mustContain(t, "build's error", out, tc.want)
			if _, err := os.Stat(filepath.Join(dir, tc.name+".xpkg")); err == nil {
				t.Error("a package was written")
			}
		})
	}
}
