package e2e

import (
	"archive/tar"
	"os"
	"path/filepath"
	"strconv"
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

// TestMountPointsThatAreNotDirectories: every container mounts its own
// /proc, /dev, /sys and /tmp over the image's. A symlink there to a
// directory of the image is mounted on, as crun and runc do; a file, or a
// symlink to nothing, stops serve at its start and build, naming the
// entry, where before serve reported SERVING and failed every call with
// crun's "mount `tmpfs` to `tmp`: Not a directory".
func TestMountPointsThatAreNotDirectories(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		entries func(tw *tar.Writer)
		want    string
	}{
		{"tmp_is_a_file", func(tw *tar.Writer) {
			writeHeader(t, tw, &tar.Header{Name: "tmp"}, "a file")
		}, "the image's /tmp is not a directory but a regular file: every call's container mounts its own /tmp there"},
		{"dev_is_a_symlink_to_nothing", func(tw *tar.Writer) {
			writeHeader(t, tw, &tar.Header{Name: "dev", Typeflag: tar.TypeSymlink, Linkname: "/nowhere", Mode: 0o777}, "")
		}, "the image's /dev is a symlink to /nowhere, which the image does not have"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := hostileImage(t, dir, tc.entries)
			out, err := runOcifn(t, "serve", "--insecure", "--cache-dir", cacheDir(t), "--address", "127.0.0.1:0", "--metrics-address", "", "--tarball", img)
			if err == nil {
				t.Fatalf("serve started:\n%s", out)
			}
			mustContain(t, "serve's error", out, tc.want)
			out, err = runOcifn(t, "build", "--from-oci-tarball", img, "--name", "function-x",
				"--runtime-image-tarball", runtimeImage(t), "-o", filepath.Join(dir, tc.name+".xpkg"))
			if err == nil {
				t.Fatalf("build accepted it:\n%s", out)
			}
			mustContain(t, "build's error", out, tc.want)
		})
	}

	t.Run("tmp_is_a_symlink_to_a_directory", func(t *testing.T) {
		img := hostileImage(t, dir, func(tw *tar.Writer) {
			writeHeader(t, tw, &tar.Header{Name: "var/tmp/", Typeflag: tar.TypeDir, Mode: 0o755}, "")
			writeHeader(t, tw, &tar.Header{Name: "tmp", Typeflag: tar.TypeSymlink, Linkname: "/var/tmp", Mode: 0o777}, "")
		})
		req := filepath.Join(t.TempDir(), "request.json")
		script := `echo written > /tmp/f && jq -c --arg f "$(cat /var/tmp/f)" '{desired: .desired, context: {f: $f}}'`
		if err := os.WriteFile(req, []byte(`{"meta": {"tag": "t"}, "input": {"script": `+strconv.Quote(script)+`}}`), 0o644); err != nil {
			t.Fatal(err)
		}
		r := runIn(t, t.TempDir(), nil, "test", "--cache-dir", cacheDir(t), "-o", "json", img, req)
		if r.exit != 0 {
			t.Fatalf("exit %d, want 0\n%s\n%s", r.exit, r.stdout, r.stderr)
		}
		mustContain(t, "the response", r.stdout, `"f": "written"`)
	})
}
