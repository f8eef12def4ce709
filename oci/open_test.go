package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"
)

// The layers every format test unpacks: whiteouts of a file and of a
// directory's content applied across layers, a hard link and a symlink.
func whiteoutLayers(t testing.TB) [][]byte {
	l1 := makeTar(t,
		entDir("a/"), entFile("a/file1", "one"), entFile("a/file2", "two"),
		entDir("d/"), entFile("d/x", "x"), entFile("d/y", "y"),
		entFile("f", "data"), entHardlink("h", "f"), entSymlink("s", "f"),
		entDir("bin/"), entFile("bin/tool", "#!/bin/sh\n"),
	)
	l2 := makeTar(t,
		entFile("a/.wh.file1", ""),
		entDir("d/"), entFile("d/.wh..wh..opq", ""), entFile("d/z", "zed"),
	)
	return [][]byte{l1, l2}
}

func checkWhiteoutRootfs(t *testing.T, root string) {
	t.Helper()
	assertAbsent(t, filepath.Join(root, "a/file1"))
	assertAbsent(t, filepath.Join(root, "a/.wh.file1"))
	if got := readFileT(t, filepath.Join(root, "a/file2")); got != "two" {
		t.Errorf("a/file2 = %q, want %q", got, "two")
	}
	assertAbsent(t, filepath.Join(root, "d/x"))
	assertAbsent(t, filepath.Join(root, "d/y"))
	assertAbsent(t, filepath.Join(root, "d/.wh..wh..opq"))
	if got := readFileT(t, filepath.Join(root, "d/z")); got != "zed" {
		t.Errorf("d/z = %q, want %q", got, "zed")
	}
	if f, h := statT(t, filepath.Join(root, "f")), statT(t, filepath.Join(root, "h")); f.Ino != h.Ino {
		t.Errorf("h is not a hard link of f: inodes %d and %d", h.Ino, f.Ino)
	}
	if target, err := os.Readlink(filepath.Join(root, "s")); err != nil || target != "f" {
		t.Errorf("s -> %q (%v), want symlink to %q", target, err, "f")
	}
	for _, mp := range MountPoints() {
		fi, err := os.Lstat(filepath.Join(root, mp))
		if err != nil || !fi.IsDir() {
			t.Errorf("mount point %s missing: %v", mp, err)
			continue
		}
		want := os.FileMode(0o755) | os.ModeDir
		if mp == "tmp" {
			want = 0o777 | os.ModeDir | os.ModeSticky
		}
		if fi.Mode() != want {
			t.Errorf("mount point %s has mode %v, want %v", mp, fi.Mode(), want)
		}
	}
}

func TestOpenAndUnpackFormats(t *testing.T) {
	layers := whiteoutLayers(t)
	cases := map[string]func(t *testing.T, dir string) string{
		"docker_save_legacy_plain": func(t *testing.T, dir string) string {
			return writeArchive(t, dir, dockerLegacyFiles(t, tagged{[]string{"foo:latest"}, newImage(t, gzipLayer, layers...)}), false)
		},
		"docker_save_legacy_gzip": func(t *testing.T, dir string) string {
			return writeArchive(t, dir, dockerLegacyFiles(t, tagged{[]string{"foo:latest"}, newImage(t, gzipLayer, layers...)}), true)
		},
		"docker_save_layer_through_symlink": func(t *testing.T, dir string) string {
			files := dockerLegacyFiles(t, tagged{[]string{"foo:latest"}, newImage(t, gzipLayer, layers...)})
			for i, f := range files {
				if strings.HasSuffix(f.name, "/layer.tar") {
					// As buildah and podman write it: <id>/layer.tar -> ../<hex>.tar
					files = append(files, afile{name: sha256Hex(f.data) + ".tar", data: f.data})
					files[i] = afile{name: f.name, link: "../" + sha256Hex(f.data) + ".tar"}
				}
			}
			return writeArchive(t, dir, files, false)
		},
		"docker_save_25_with_oci_layout_inside": func(t *testing.T, dir string) string {
			return writeArchive(t, dir, docker25Files(t, "foo:latest", newImage(t, gzipLayer, layers...)), false)
		},
		"docker_save_ggcr_tarball_write_gzip_layers": func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "ggcr.tar")
			if err := tarball.WriteToFile(p, name.MustParseReference("foo:latest"), newImage(t, gzipLayer, layers...)); err != nil {
				t.Fatal(err)
			}
			return p
		},
		"oci_archive_plain": func(t *testing.T, dir string) string {
			return writeArchive(t, dir, ociFiles(t, ociIndex(tagged{nil, newImage(t, gzipLayer, layers...)})), false)
		},
		"oci_archive_gzip": func(t *testing.T, dir string) string {
			return writeArchive(t, dir, ociFiles(t, ociIndex(tagged{[]string{"foo"}, newImage(t, gzipLayer, layers...)})), true)
		},
		"oci_archive_zstd_layers": func(t *testing.T, dir string) string {
			return writeArchive(t, dir, ociFiles(t, ociIndex(tagged{nil, newImage(t, zstdLayer, layers...)})), false)
		},
		"oci_archive_uncompressed_layers": func(t *testing.T, dir string) string {
			return writeArchive(t, dir, ociFiles(t, ociIndex(tagged{nil, newImage(t, plainLayer, layers...)})), false)
		},
		"oci_archive_top_level_platforms_pick_linux_GOARCH": func(t *testing.T, dir string) string {
			ii := mutate.AppendManifests(empty.Index,
				mutate.IndexAddendum{Add: newImageFor(t, otherArch(), gzipLayer, makeTar(t, entFile("a/file1", "wrong platform"))),
					Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: otherArch()}}},
				mutate.IndexAddendum{Add: newImage(t, gzipLayer, layers...),
					Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
			)
			return writeArchive(t, dir, ociFiles(t, ii), false)
		},
		"oci_archive_nested_index_picks_linux_GOARCH": func(t *testing.T, dir string) string {
			other := otherArch()
			wrong := newImageFor(t, other, gzipLayer, makeTar(t, entFile("a/file1", "wrong platform")))
			inner := mutate.AppendManifests(empty.Index,
				mutate.IndexAddendum{Add: wrong, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: other}}},
				mutate.IndexAddendum{Add: newImage(t, gzipLayer, layers...), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
			)
			outer := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: inner,
				Descriptor: v1.Descriptor{Annotations: map[string]string{annotationRefName: "foo:latest"}}})
			return writeArchive(t, dir, ociFiles(t, outer), false)
		},
	}
	for name, build := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			img, err := Open(build(t, dir), WithScratchDir(t.TempDir()))
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer img.Close()
			if img.ConfigFile() == nil || len(img.ConfigFile().RootFS.DiffIDs) != 2 {
				t.Fatalf("config: %+v", img.ConfigFile())
			}
			if img.Digest().Hex == "" {
				t.Error("empty manifest digest")
			}
			if got, err := img.Image().Digest(); err != nil || got != img.Digest() {
				t.Errorf("v1.Image digest %v (%v), Image.Digest %v", got, err, img.Digest())
			}
			root := filepath.Join(dir, "rootfs")
			if err := Unpack(context.Background(), img.Image(), root); err != nil {
				t.Fatalf("Unpack: %v", err)
			}
			checkWhiteoutRootfs(t, root)
		})
	}
}

// otherArch is an architecture that is not this one.
func otherArch() string {
	if runtime.GOARCH == "arm64" {
		return "amd64"
	}
	return "arm64"
}

func TestOpenGzipUsesScratchDirAndLeavesNothing(t *testing.T) {
	scratch := t.TempDir()
	p := writeArchive(t, t.TempDir(), dockerLegacyFiles(t, tagged{[]string{"foo"}, newImage(t, gzipLayer, makeTar(t, entFile("x", "x")))}), true)
	img, err := Open(p, WithScratchDir(scratch))
	if err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(scratch); len(ents) != 0 {
		t.Errorf("scratch dir holds %d entries, want none (the file is unlinked)", len(ents))
	}
	if err := img.Close(); err != nil {
		t.Fatal(err)
	}
	if err := img.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestOpenSelectsByName(t *testing.T) {
	one := newImage(t, gzipLayer, makeTar(t, entFile("which", "foo")))
	two := newImage(t, gzipLayer, makeTar(t, entFile("which", "bar")))
	archives := map[string]func(t *testing.T, dir string) string{
		"docker_save": func(t *testing.T, dir string) string {
			return writeArchive(t, dir, dockerLegacyFiles(t,
				tagged{[]string{"foo:latest"}, one},
				tagged{[]string{"localhost/bar:v1", "quay.io/acme/bar:v1"}, two}), false)
		},
		"oci_archive": func(t *testing.T, dir string) string {
			return writeArchive(t, dir, ociFiles(t, ociIndex(
				tagged{[]string{"docker.io/library/foo:latest"}, one},
				tagged{[]string{"localhost/bar:v1"}, two})), false)
		},
	}
	cases := []struct {
		name      string
		want      string
		which     string // content of /which, "" for an error
		errSubstr []string
	}{
		{name: "no_name_lists_all", errSubstr: []string{"holds 2 images", "foo:latest", "localhost/bar:v1"}},
		{name: "short_name", want: "foo", which: "foo"},
		{name: "name_with_tag", want: "foo:latest", which: "foo"},
		{name: "docker_hub_full_name", want: "docker.io/library/foo:latest", which: "foo"},
		{name: "index_docker_io_name", want: "index.docker.io/library/foo", which: "foo"},
		{name: "localhost_name", want: "localhost/foo:latest", which: "foo"},
		{name: "short_name_of_localhost_image", want: "bar:v1", which: "bar"},
		{name: "wrong_tag", want: "bar:v2", errSubstr: []string{`no image named "bar:v2"`, "localhost/bar:v1"}},
		{name: "other_registry", want: "quay.io/foo", errSubstr: []string{`no image named "quay.io/foo"`}},
		{name: "unknown_name", want: "baz", errSubstr: []string{`no image named "baz"`, "foo:latest"}},
	}
	for aname, build := range archives {
		p := build(t, t.TempDir())
		for _, tc := range cases {
			t.Run(aname+"/"+tc.name, func(t *testing.T) {
				var opts []OpenOption
				if tc.want != "" {
					opts = append(opts, WithImageName(tc.want))
				}
				img, err := Open(p, opts...)
				if tc.which == "" {
					if err == nil {
						img.Close()
						t.Fatal("Open succeeded, want an error")
					}
					for _, s := range tc.errSubstr {
						if !strings.Contains(errText(err, p), s) {
							t.Errorf("error %q does not mention %q", err, s)
						}
					}
					return
				}
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				defer img.Close()
				if img.Name() == "" {
					t.Error("Name() is empty")
				}
				if got := whichOf(t, img); got != tc.which {
					t.Errorf("selected image %q, want %q", got, tc.which)
				}
			})
		}
	}
}

// TestOpenSelectsAnImageOfTwoNamesByDigest: an image tagged twice in one
// OCI layout (skopeo copy to oci:DIR:latest, then to oci:DIR:v1) is an
// entry per name, of one manifest; its digest chooses it, as a name does,
// rather than two entries of no platform to pick one of.
func TestOpenSelectsAnImageOfTwoNamesByDigest(t *testing.T) {
	one := newImage(t, gzipLayer, makeTar(t, entFile("which", "foo")))
	two := newImage(t, gzipLayer, makeTar(t, entFile("which", "bar")))
	d, err := two.Digest()
	if err != nil {
		t.Fatal(err)
	}
	p := writeArchive(t, t.TempDir(), ociFiles(t, ociIndex(tagged{[]string{"one:latest"}, one}, tagged{[]string{"two:latest"}, two}, tagged{[]string{"two:v1"}, two})), false)
	img, err := Open(p, WithImageName(d.String()))
	if err != nil {
		t.Fatalf("Open with the digest of the image tagged twice: %v", err)
	}
	defer img.Close()
	if got := whichOf(t, img); got != "bar" {
		t.Errorf("selected image %q, want %q", got, "bar")
	}
}

// TestOpenSelectsAnUnnamedImageByDigest: of several unnamed images (skopeo
// copy into one OCI layout without a tag, docker save by image ID), the
// error lists each by a digest, and that digest chooses it: no name can.
func TestOpenSelectsAnUnnamedImageByDigest(t *testing.T) {
	one := newImage(t, gzipLayer, makeTar(t, entFile("which", "foo")))
	two := newImage(t, gzipLayer, makeTar(t, entFile("which", "bar")))
	digestOf := func(f func() (v1.Hash, error)) string {
		h, err := f()
		if err != nil {
			t.Fatal(err)
		}
		return h.String()
	}
	for _, tc := range []struct {
		name   string
		files  []afile
		digest string // selects two
	}{
		{"oci_archive", ociFiles(t, ociIndex(tagged{nil, one}, tagged{nil, two})), digestOf(two.Digest)},
		{"docker_save", dockerLegacyFiles(t, tagged{nil, one}, tagged{nil, two}), digestOf(two.ConfigName)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeArchive(t, t.TempDir(), tc.files, false)
			_, err := Open(p)
			if err == nil || !strings.Contains(err.Error(), tc.digest) || !strings.Contains(err.Error(), "an unnamed one by its digest") {
				t.Fatalf("Open without a name: %v, want the images listed by digest and how to choose one", err)
			}
			img, err := Open(p, WithImageName(tc.digest))
			if err != nil {
				t.Fatalf("Open with the digest the error lists: %v", err)
			}
			defer img.Close()
			if got := whichOf(t, img); got != "bar" {
				t.Errorf("selected image %q, want %q", got, "bar")
			}
		})
	}
}

func TestOpenSingleImageName(t *testing.T) {
	img := newImage(t, gzipLayer, makeTar(t, entFile("x", "x")))
	p := writeArchive(t, t.TempDir(), dockerLegacyFiles(t, tagged{[]string{"localhost/foo:latest"}, img}), false)
	unnamed := writeArchive(t, t.TempDir(), ociFiles(t, ociIndex(tagged{nil, img})), false)
	cases := []struct {
		name, path, want, wantName, errSubstr string
	}{
		{name: "no_name_needed", path: p, wantName: "localhost/foo:latest"},
		{name: "right_name", path: p, want: "foo", wantName: "localhost/foo:latest"},
		{name: "wrong_name_lists_present", path: p, want: "bar", errSubstr: `no image named "bar" in the archive; it holds: "localhost/foo:latest"`},
		{name: "unnamed_image_without_name", path: unnamed, wantName: ""},
		{name: "unnamed_image_with_any_name", path: unnamed, want: "foo", wantName: ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var opts []OpenOption
			if tc.want != "" {
				opts = append(opts, WithImageName(tc.want))
			}
			img, err := Open(tc.path, opts...)
			if tc.errSubstr != "" {
				if err == nil || !strings.Contains(errText(err, tc.path), tc.errSubstr) {
					t.Fatalf("error %v, want one containing %q", err, tc.errSubstr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer img.Close()
			if img.Name() != tc.wantName {
				t.Errorf("Name() = %q, want %q", img.Name(), tc.wantName)
			}
		})
	}
}

// TestOpenRejects covers archives that must fail to open, each with an
// error that says what is wrong and where.
func TestOpenRejects(t *testing.T) {
	img := newImage(t, gzipLayer, makeTar(t, entFile("x", "x")), makeTar(t, entFile("y", "y")))
	docker := func(t *testing.T) []afile { return dockerLegacyFiles(t, tagged{[]string{"foo"}, img}) }
	oci := func(t *testing.T) []afile { return ociFiles(t, ociIndex(tagged{nil, img})) }
	cfgName, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	layer0, _ := layers[0].Digest()
	manifestDigest, _ := img.Digest()

	cases := []struct {
		name      string
		archive   func(t *testing.T, dir string) string
		errSubstr []string
	}{
		{
			name:      "empty_file",
			archive:   func(t *testing.T, dir string) string { return writeRawFile(t, dir, nil) },
			errSubstr: []string{"cannot read image tarball", "the file is empty"},
		},
		{
			// bash's <(...): its size is 0, and it was said to be empty.
			name: "a_pipe",
			archive: func(t *testing.T, dir string) string {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { r.Close(); w.Close() })
				return fmt.Sprintf("/proc/self/fd/%d", r.Fd())
			},
			errSubstr: []string{"cannot read image tarball", "it is a pipe, not a regular file"},
		},
		{
			// Opening it would block until a writer comes.
			name: "a_fifo_without_a_writer",
			archive: func(t *testing.T, dir string) string {
				p := filepath.Join(dir, "fifo")
				if err := unix.Mkfifo(p, 0o600); err != nil {
					t.Fatal(err)
				}
				return p
			},
			errSubstr: []string{"it is a pipe, not a regular file"},
		},
		{
			name:      "a_directory",
			archive:   func(t *testing.T, dir string) string { return dir },
			errSubstr: []string{"it is a directory, not a regular file"},
		},
		{
			name: "not_a_tar",
			archive: func(t *testing.T, dir string) string {
				return writeRawFile(t, dir, []byte(strings.Repeat("this is not a tarball\n", 100)))
			},
			errSubstr: []string{"not a tar archive"},
		},
		{
			name:      "short_text_file",
			archive:   func(t *testing.T, dir string) string { return writeRawFile(t, dir, []byte("hello\n")) },
			errSubstr: []string{"not a tar archive"},
		},
		{
			name: "gzip_of_garbage",
			archive: func(t *testing.T, dir string) string {
				return writeRawFile(t, dir, gzipBytes(t, []byte("not a tar at all")))
			},
			errSubstr: []string{"not a tar archive"},
		},
		{
			name: "truncated_tarball",
			archive: func(t *testing.T, dir string) string {
				return truncateFile(t, writeArchive(t, dir, docker(t), false), 0.6, 0)
			},
			errSubstr: []string{"truncated"},
		},
		{
			name: "truncated_inside_a_block",
			archive: func(t *testing.T, dir string) string {
				return truncateFile(t, writeArchive(t, dir, docker(t), false), 0.5, 100)
			},
			errSubstr: []string{"truncated"},
		},
		{
			name: "truncated_gzip_tarball",
			archive: func(t *testing.T, dir string) string {
				return truncateFile(t, writeArchive(t, dir, docker(t), true), 0.6, 0)
			},
			errSubstr: []string{"cannot decompress (gzip)", "unexpected EOF"},
		},
		{
			name: "tar_of_something_else",
			archive: func(t *testing.T, dir string) string {
				return writeArchive(t, dir, []afile{{name: "README", data: []byte("hi")}}, false)
			},
			errSubstr: []string{"neither manifest.json", "nor index.json"},
		},
		{
			name: "docker_missing_layer",
			archive: func(t *testing.T, dir string) string {
				files := docker(t)
				for _, f := range files {
					if strings.HasSuffix(f.name, "/layer.tar") {
						return writeArchive(t, dir, removeFile(t, files, f.name), false)
					}
				}
				t.Fatal("no layer.tar")
				return ""
			},
			errSubstr: []string{`manifest.json names layer "`, `/layer.tar" which is not in the archive`},
		},
		{
			name: "docker_missing_config",
			archive: func(t *testing.T, dir string) string {
				return writeArchive(t, dir, removeFile(t, docker(t), cfgName.Hex+".json"), false)
			},
			errSubstr: []string{`manifest.json names config "` + cfgName.Hex + `.json" which is not in the archive`},
		},
		{
			name: "docker_config_digest_mismatch",
			archive: func(t *testing.T, dir string) string {
				files := docker(t)
				cfg := findFile(t, files, cfgName.Hex+".json").data
				tampered := strings.Replace(string(cfg), `"linux"`, `"LINUX"`, 1)
				return writeArchive(t, dir, replaceFile(t, files, cfgName.Hex+".json", []byte(tampered)), false)
			},
			errSubstr: []string{`config "` + cfgName.Hex + `.json": digest mismatch: expected ` + cfgName.String()},
		},
		{
			name: "docker_config_invalid_json",
			archive: func(t *testing.T, dir string) string {
				files := docker(t)
				bad := []byte(`{"rootfs": [`)
				files = replaceFile(t, files, cfgName.Hex+".json", bad)
				return writeArchive(t, dir, renameConfig(t, files, cfgName.Hex+".json", sha256Hex(bad)+".json"), false)
			},
			errSubstr: []string{"cannot parse config"},
		},
		{
			name: "docker_config_name_without_digest",
			archive: func(t *testing.T, dir string) string {
				return writeArchive(t, dir, renameConfig(t, docker(t), cfgName.Hex+".json", "config.json"), false)
			},
			errSubstr: []string{`config "config.json", whose name does not carry its digest`},
		},
		{
			name: "docker_layer_count_differs_from_diff_ids",
			archive: func(t *testing.T, dir string) string {
				files := docker(t)
				var m []dockerEntry
				mf := findFile(t, files, "manifest.json")
				if err := json.Unmarshal(mf.data, &m); err != nil {
					t.Fatal(err)
				}
				m[0].Layers = m[0].Layers[:1]
				return writeArchive(t, dir, replaceFile(t, files, "manifest.json", marshalT(t, m)), false)
			},
			errSubstr: []string{"the image has 1 layer(s) but its config lists 2 rootfs.diff_ids"},
		},
		{
			name: "docker_manifest_json_invalid",
			archive: func(t *testing.T, dir string) string {
				return writeArchive(t, dir, replaceFile(t, docker(t), "manifest.json", []byte("{")), false)
			},
			errSubstr: []string{"cannot parse manifest.json"},
		},
		{
			name: "oci_missing_layer_blob",
			archive: func(t *testing.T, dir string) string {
				return writeArchive(t, dir, removeFile(t, oci(t), "blobs/sha256/"+layer0.Hex), false)
			},
			errSubstr: []string{"manifest " + manifestDigest.String() + " names layer " + layer0.String() + " which is not in the archive"},
		},
		{
			name: "oci_missing_config",
			archive: func(t *testing.T, dir string) string {
				return writeArchive(t, dir, removeFile(t, oci(t), "blobs/sha256/"+cfgName.Hex), false)
			},
			errSubstr: []string{"names config " + cfgName.String() + " which is not in the archive"},
		},
		{
			name: "oci_config_digest_mismatch",
			archive: func(t *testing.T, dir string) string {
				files := oci(t)
				cfg := findFile(t, files, "blobs/sha256/"+cfgName.Hex).data
				tampered := []byte(strings.Replace(string(cfg), `"linux"`, `"LINUX"`, 1))
				return writeArchive(t, dir, replaceFile(t, files, "blobs/sha256/"+cfgName.Hex, tampered), false)
			},
			errSubstr: []string{"config " + cfgName.String() + ": digest mismatch: expected " + cfgName.String()},
		},
		{
			name: "oci_layer_size_mismatch",
			archive: func(t *testing.T, dir string) string {
				files := oci(t)
				b := findFile(t, files, "blobs/sha256/"+layer0.Hex).data
				return writeArchive(t, dir, replaceFile(t, files, "blobs/sha256/"+layer0.Hex, append(b, 0)), false)
			},
			errSubstr: []string{"layer " + layer0.String() + ": size mismatch"},
		},
		{
			name: "oci_manifest_digest_mismatch",
			archive: func(t *testing.T, dir string) string {
				files := oci(t)
				b := findFile(t, files, "blobs/sha256/"+manifestDigest.Hex).data
				tampered := []byte(strings.Replace(string(b), `"schemaVersion": 2`, `"schemaVersion":02`, 1))
				tampered = []byte(strings.Replace(string(tampered), `"schemaVersion":2`, `"schemaVersion":3`, 1))
				return writeArchive(t, dir, replaceFile(t, files, "blobs/sha256/"+manifestDigest.Hex, tampered), false)
			},
			errSubstr: []string{"manifest " + manifestDigest.String() + ": digest mismatch"},
		},
		{
			name: "oci_index_json_invalid",
			archive: func(t *testing.T, dir string) string {
				return writeArchive(t, dir, replaceFile(t, oci(t), "index.json", []byte(`{"manifests": 1}`)), false)
			},
			errSubstr: []string{"cannot parse image index index.json"},
		},
		{
			name: "oci_index_without_manifests",
			archive: func(t *testing.T, dir string) string {
				return writeArchive(t, dir, replaceFile(t, oci(t), "index.json", []byte(`{"schemaVersion":2,"manifests":[]}`)), false)
			},
			errSubstr: []string{"index.json lists no manifests"},
		},
		{
			name: "oci_only_other_platform",
			archive: func(t *testing.T, dir string) string {
				inner := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img,
					Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "windows", Architecture: runtime.GOARCH}}})
				return writeArchive(t, dir, ociFiles(t, mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: inner})), false)
			},
			errSubstr: []string{"has no manifest for linux/" + runtime.GOARCH, "windows/" + runtime.GOARCH},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := tc.archive(t, dir)
			img, err := Open(p, WithScratchDir(t.TempDir()))
			if err == nil {
				img.Close()
				t.Fatal("Open succeeded, want an error")
			}
			t.Logf("error: %v", err)
			if !strings.HasPrefix(err.Error(), `cannot read image tarball "`+p+`": `) {
				t.Errorf("error %q does not say which tarball", err)
			}
			for _, s := range tc.errSubstr {
				if !strings.Contains(errText(err, p), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func writeRawFile(t testing.TB, dir string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, "image.tar")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// truncate cuts the file at p to frac of its size plus extra bytes.
func truncateFile(t testing.TB, p string, frac float64, extra int64) string {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, int64(float64(fi.Size())*frac)+extra); err != nil {
		t.Fatal(err)
	}
	return p
}

// renameConfig renames the config file of a docker-save archive and
// points manifest.json at the new name.
func renameConfig(t testing.TB, files []afile, from, to string) []afile {
	t.Helper()
	for i := range files {
		if files[i].name == from {
			files[i].name = to
		}
	}
	var m []dockerEntry
	if err := json.Unmarshal(findFile(t, files, "manifest.json").data, &m); err != nil {
		t.Fatal(err)
	}
	m[0].Config = to
	return replaceFile(t, files, "manifest.json", marshalT(t, m))
}

// TestBuildahImages reads what buildah, the tool users build function
// images with here, writes: docker-archive and oci-archive.
func TestBuildahImages(t *testing.T) {
	buildah, err := exec.LookPath("buildah")
	if err != nil {
		t.Skip("buildah not installed")
	}
	dir := t.TempDir()
	ctxDir := filepath.Join(dir, "context")
	if err := os.MkdirAll(filepath.Join(ctxDir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for p, c := range map[string]string{
		"Dockerfile": "FROM scratch\nCOPY hello /hello\nCOPY sub /sub\nCMD [\"/hello\"]\n",
		"hello":      "hi\n",
		"sub/x":      "x\n",
	} {
		if err := os.WriteFile(filepath.Join(ctxDir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	store := []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "runroot"), "--storage-driver", "vfs"}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(buildah, append(store, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("buildah %v: %v\n%s", args, err, out)
		}
	}
	run("bud", "--isolation", "chroot", "-t", "fn", ctxDir)
	run("push", "fn", "docker-archive:"+filepath.Join(dir, "docker.tar")+":fn:latest")
	run("push", "fn", "oci-archive:"+filepath.Join(dir, "oci.tar"))
	for _, f := range []string{"docker.tar", "oci.tar"} {
		t.Run(f, func(t *testing.T) {
			img, err := Open(filepath.Join(dir, f), WithImageName("fn"))
			if err != nil {
				t.Fatal(err)
			}
			defer img.Close()
			if got := img.ConfigFile().Config.Cmd; len(got) != 1 || got[0] != "/hello" {
				t.Errorf("Cmd = %q", got)
			}
			root := filepath.Join(t.TempDir(), "rootfs")
			if err := Unpack(context.Background(), img.Image(), root); err != nil {
				t.Fatal(err)
			}
			if got := readFileT(t, filepath.Join(root, "sub/x")); got != "x\n" {
				t.Errorf("sub/x = %q", got)
			}
		})
	}
}

// TestSkopeoConvertedArchive checks a real tool's OCI archive: skopeo
// converts a docker-save tarball made here into an oci-archive.
func TestSkopeoConvertedArchive(t *testing.T) {
	skopeo, err := exec.LookPath("skopeo")
	if err != nil {
		t.Skip("skopeo not installed")
	}
	dir := t.TempDir()
	src := writeArchive(t, dir, dockerLegacyFiles(t, tagged{[]string{"foo:latest"}, newImage(t, gzipLayer, whiteoutLayers(t)...)}), false)
	for _, tc := range []struct{ name, dest string }{
		{"oci_archive", "oci-archive:" + filepath.Join(dir, "oci.tar") + ":foo:latest"},
		{"docker_archive", "docker-archive:" + filepath.Join(dir, "docker.tar") + ":localhost/foo:latest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exec.Command(skopeo, "--insecure-policy", "copy", "docker-archive:"+src, tc.dest).CombinedOutput()
			if err != nil {
				t.Fatalf("skopeo copy: %v\n%s", err, out)
			}
			p := strings.SplitN(strings.TrimPrefix(tc.dest, strings.SplitN(tc.dest, ":", 2)[0]+":"), ":", 2)[0]
			img, err := Open(p, WithImageName("foo"))
			if err != nil {
				t.Fatal(err)
			}
			defer img.Close()
			root := filepath.Join(t.TempDir(), "rootfs")
			if err := Unpack(context.Background(), img.Image(), root); err != nil {
				t.Fatal(err)
			}
			checkWhiteoutRootfs(t, root)
		})
	}
}

// FuzzOpen feeds Open arbitrary files: it must fail cleanly, never panic,
// and an image it accepts is what its archive says it is: the config and
// manifest it serves have the digests the image is known by, and each
// layer's stored bytes are as many as its descriptor says.
func FuzzOpen(f *testing.F) {
	img := newImage(f, gzipLayer, makeTar(f, entFile("x", "x")))
	for _, files := range [][]afile{
		dockerLegacyFiles(f, tagged{[]string{"foo"}, img}),
		ociFiles(f, ociIndex(tagged{[]string{"foo"}, img})),
	} {
		b, err := os.ReadFile(writeArchive(f, f.TempDir(), files, false))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(gzipBytes(f, b))
	}
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "fuzz.tar")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		img, err := Open(p, WithScratchDir(t.TempDir()), WithImageName("foo"))
		if err != nil {
			return
		}
		defer img.Close()
		if img.ConfigFile() == nil {
			t.Fatal("Open accepted an image without a config")
		}
		m, err := img.Image().Manifest()
		if err != nil {
			t.Fatalf("Open accepted an image whose manifest cannot be read: %v", err)
		}
		rawCfg, err := img.Image().RawConfigFile()
		if err != nil {
			t.Fatalf("Open accepted an image whose config cannot be read: %v", err)
		}
		if h, _, _ := v1.SHA256(bytes.NewReader(rawCfg)); h != m.Config.Digest {
			t.Fatalf("the config served has digest %s, the manifest says %s", h, m.Config.Digest)
		}
		rawManifest, err := img.Image().RawManifest()
		if err != nil {
			t.Fatalf("Open accepted an image whose manifest cannot be read: %v", err)
		}
		if h, _, _ := v1.SHA256(bytes.NewReader(rawManifest)); h != img.Digest() {
			t.Fatalf("the manifest served has digest %s, the image is known as %s", h, img.Digest())
		}
		layers, err := img.Image().Layers()
		if err != nil {
			return
		}
		for _, l := range layers {
			size, err := l.Size()
			if err != nil {
				continue
			}
			// Compressed is unverified by design (Unpack checks the
			// digest as it reads), but a blob of another size than
			// its descriptor's is refused by Open.
			rc, err := l.Compressed()
			if err != nil {
				continue
			}
			n, err := io.Copy(io.Discard, rc)
			_ = rc.Close()
			if err == nil && n != size {
				t.Fatalf("a layer of %d bytes, its descriptor says %d", n, size)
			}
		}
	})
}

func TestNameMatches(t *testing.T) {
	cases := []struct {
		want, have string
		match      bool
	}{
		{"foo", "foo", true},
		{"foo", "foo:latest", true},
		{"foo", "docker.io/library/foo:latest", true},
		{"foo", "index.docker.io/library/foo:latest", true},
		{"foo", "localhost/foo:latest", true},
		{"foo:latest", "localhost/foo", true},
		{"localhost/foo", "docker.io/library/foo:latest", true},
		{"acme/foo:v1", "localhost/acme/foo:v1", true},
		{"foo:v1", "foo:latest", false},
		{"foo", "quay.io/foo:latest", false},
		{"quay.io/foo", "quay.io/foo:latest", true},
		{"localhost:5000/foo", "localhost:5000/foo:latest", true},
		{"localhost:5000/foo", "localhost/foo:latest", false},
		{"foo", "foobar", false},
		{"foo", "acme/foo", false},
		{"NOT A NAME", "foo", false},
	}
	for _, tc := range cases {
		if got := nameMatches(tc.want, tc.have); got != tc.match {
			t.Errorf("nameMatches(%q, %q) = %v, want %v", tc.want, tc.have, got, tc.match)
		}
	}
}

// TestOpenPicksTheOtherABI: an index with no image for this machine's
// architecture gives the one for the other ABI its CPU runs (linux/386 on
// amd64, linux/arm on arm64), as build packages such an image; one for an
// architecture the CPU does not run is still refused.
func TestOpenPicksTheOtherABI(t *testing.T) {
	abi := map[string]string{"amd64": "386", "arm64": "arm"}[runtime.GOARCH]
	if abi == "" {
		t.Skipf("%s runs no other ABI", runtime.GOARCH)
	}
	layer := makeTar(t, entFile("a/file1", "x"))
	index := func(archs ...string) string {
		var adds []mutate.IndexAddendum
		for _, a := range archs {
			adds = append(adds, mutate.IndexAddendum{Add: newImageFor(t, a, gzipLayer, layer),
				Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: a}}})
		}
		return writeArchive(t, t.TempDir(), ociFiles(t, mutate.AppendManifests(empty.Index, adds...)), false)
	}
	img, err := Open(index("s390x", abi), WithScratchDir(t.TempDir()))
	if err != nil {
		t.Fatalf("an index of linux/s390x and linux/%s: %v", abi, err)
	}
	defer img.Close()
	if got := img.ConfigFile().Architecture; got != abi {
		t.Errorf("picked %s, want %s", got, abi)
	}
	if _, err := Open(index("s390x", otherArch()), WithScratchDir(t.TempDir())); err == nil || !strings.Contains(err.Error(), "linux/"+runtime.GOARCH) {
		t.Errorf("an index of architectures this CPU does not run: %v, want refused naming linux/%s", err, runtime.GOARCH)
	}
}

// whichOf unpacks the image Open chose and returns its file "which", the
// test images' name for themselves.
func whichOf(t *testing.T, img *Image) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	if err := Unpack(context.Background(), img.Image(), root); err != nil {
		t.Fatal(err)
	}
	return readFileT(t, filepath.Join(root, "which"))
}
