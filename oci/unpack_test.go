package oci

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containers/storage/pkg/idtools"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// sandbox is a temp dir holding the rootfs and, beside it, files a
// breakout would change. Names that an escape would create at the host's
// / carry a per-run marker so the test can look for them.
type sandbox struct {
	parent, dest, marker string
	before               map[string]snapEntry
	passwd               snapEntry
}

func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	parent := t.TempDir()
	s := &sandbox{parent: parent, dest: filepath.Join(parent, "rootfs"), marker: fmt.Sprintf("ocifn-escape-%d", os.Getpid())}
	if err := os.WriteFile(filepath.Join(parent, "sibling.txt"), []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(parent, "outside"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(parent, "outside", "secret"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(s.dest, 0o755); err != nil {
		t.Fatal(err)
	}
	s.before = snapshotTree(t, parent, s.dest)
	s.passwd = fileSnapshot(t, "/etc/passwd")
	return s
}

// assertContained fails if anything outside the rootfs changed.
func (s *sandbox) assertContained(t *testing.T) {
	t.Helper()
	after := snapshotTree(t, s.parent, s.dest)
	if !reflect.DeepEqual(s.before, after) {
		for p, e := range after {
			if b, ok := s.before[p]; !ok {
				t.Errorf("new entry outside the rootfs: %s", p)
			} else if b != e {
				t.Errorf("changed outside the rootfs: %s: %+v -> %+v", p, b, e)
			}
		}
		for p := range s.before {
			if _, ok := after[p]; !ok {
				t.Errorf("removed outside the rootfs: %s", p)
			}
		}
	}
	if got := fileSnapshot(t, "/etc/passwd"); got != s.passwd {
		t.Errorf("/etc/passwd changed: %+v -> %+v", s.passwd, got)
	}
	for _, p := range []string{"/" + s.marker, "/etc/" + s.marker, "/tmp/" + s.marker} {
		assertAbsent(t, p)
	}
}

func unpackLayers(t *testing.T, dest string, layers [][]byte, opts ...UnpackOption) error {
	t.Helper()
	return Unpack(context.Background(), newImage(t, gzipLayer, layers...), dest, opts...)
}

func TestUnpackHostileLayers(t *testing.T) {
	up := strings.Repeat("../", 12)
	cases := []struct {
		name    string
		layers  func(s *sandbox) [][]byte
		wantErr string // "" for success
		check   func(t *testing.T, s *sandbox)
	}{
		{
			name: "dotdot_entry_stays_inside",
			layers: func(s *sandbox) [][]byte {
				return [][]byte{makeTar(t, entFile("../sibling.txt", "overwritten"), entFile(up+s.marker, "escaped"))}
			},
			check: func(t *testing.T, s *sandbox) {
				if got := readFileT(t, filepath.Join(s.dest, "sibling.txt")); got != "overwritten" {
					t.Errorf("../sibling.txt landed as %q inside the rootfs, want it confined there", got)
				}
			},
		},
		{
			name: "absolute_name_stays_inside",
			layers: func(s *sandbox) [][]byte {
				return [][]byte{makeTar(t, entFile("/"+s.marker, "abs"), entFile("/etc/"+s.marker, "abs"))}
			},
			check: func(t *testing.T, s *sandbox) {
				if got := readFileT(t, filepath.Join(s.dest, s.marker)); got != "abs" {
					t.Errorf("absolute entry = %q inside the rootfs", got)
				}
			},
		},
		{
			name: "symlink_to_root_then_write_through_it_same_layer",
			layers: func(s *sandbox) [][]byte {
				return [][]byte{makeTar(t, entSymlink("evil", "/"), entFile("evil/"+s.marker, "through"))}
			},
			check: func(t *testing.T, s *sandbox) {
				if got := readFileT(t, filepath.Join(s.dest, s.marker)); got != "through" {
					t.Errorf("write through evil -> / = %q, want it inside the rootfs", got)
				}
			},
		},
		{
			name: "symlink_to_root_then_write_through_it_next_layer",
			layers: func(s *sandbox) [][]byte {
				return [][]byte{
					makeTar(t, entSymlink("evil", "/"), entSymlink("up", up+"outside")),
					makeTar(t, entFile("evil/"+s.marker, "through"), entFile("up/secret", "stolen"), entFile("up/"+s.marker, "x")),
				}
			},
			// up resolves inside the pivoted root, where there is no /outside.
			wantErr: "open /up/secret: no such file or directory",
		},
		{
			name: "symlink_parent_dir_then_write",
			layers: func(s *sandbox) [][]byte {
				return [][]byte{
					makeTar(t, entSymlink("etc", "/etc")),
					makeTar(t, entFile("etc/"+s.marker, "x"), entFile("etc/passwd", "root::0:0::/:/bin/sh\n")),
				}
			},
			// etc -> /etc is a loop inside the rootfs: the write fails rather than reach the host.
			wantErr: "too many levels of symbolic links",
		},
		{
			name: "hardlink_to_etc_passwd",
			layers: func(s *sandbox) [][]byte {
				return [][]byte{makeTar(t, entHardlink("pw", "/etc/passwd"))}
			},
			// Inside the pivoted root /etc/passwd is the rootfs's own, which does not exist.
			wantErr: "no such file or directory",
		},
		{
			name: "hardlink_dotdot_target",
			layers: func(s *sandbox) [][]byte {
				return [][]byte{makeTar(t, entFile("etc/passwd", "image passwd"), entHardlink("pw", up+"etc/passwd"))}
			},
			check: func(t *testing.T, s *sandbox) {
				if a, b := statT(t, filepath.Join(s.dest, "pw")), statT(t, filepath.Join(s.dest, "etc/passwd")); a.Ino != b.Ino {
					t.Error("pw should be a hard link of the image's own etc/passwd")
				}
			},
		},
		{
			name: "hardlink_through_symlink_to_outside",
			layers: func(s *sandbox) [][]byte {
				return [][]byte{
					makeTar(t, entSymlink("out", up+"outside")),
					makeTar(t, entHardlink("stolen", "out/secret")),
				}
			},
			wantErr: "no such file or directory",
		},
		{
			name: "device_nodes_are_skipped",
			layers: func(s *sandbox) [][]byte {
				return [][]byte{makeTar(t, entDir("dev/"), entDevice("dev/null", tar.TypeChar, 1, 3), entDevice("dev/sda", tar.TypeBlock, 8, 0), entDevice("kmem", tar.TypeChar, 1, 2), entFile("ok", "ok"))}
			},
			check: func(t *testing.T, s *sandbox) {
				assertAbsent(t, filepath.Join(s.dest, "dev/null"))
				assertAbsent(t, filepath.Join(s.dest, "dev/sda"))
				assertAbsent(t, filepath.Join(s.dest, "kmem"))
				if got := readFileT(t, filepath.Join(s.dest, "ok")); got != "ok" {
					t.Errorf("ok = %q", got)
				}
			},
		},
		{
			name: "mount_points_that_are_symlinks_are_not_followed",
			layers: func(s *sandbox) [][]byte {
				return [][]byte{makeTar(t, entSymlink("tmp", up+"outside"), entSymlink("proc", "/"), entSymlink("etc", "/etc"), entFile("sys", "a file"))}
			},
			check: func(t *testing.T, s *sandbox) {
				for name, target := range map[string]string{"tmp": up + "outside", "proc": "/", "etc": "/etc"} {
					if got, err := os.Readlink(filepath.Join(s.dest, name)); err != nil || got != target {
						t.Errorf("%s -> %q (%v), want the image's symlink to %q kept", name, got, err, target)
					}
				}
				if fi, err := os.Lstat(filepath.Join(s.dest, "dev")); err != nil || !fi.IsDir() {
					t.Errorf("dev mount point missing: %v", err)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newSandbox(t)
			rootBefore := fileSnapshot(t, "/")
			err := unpackLayers(t, s.dest, tc.layers(s))
			if err != nil {
				t.Logf("error: %v", err)
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Unpack: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(errText(err, s.dest), tc.wantErr)):
				t.Errorf("Unpack error = %v, want one containing %q", err, tc.wantErr)
			}
			s.assertContained(t)
			if got := fileSnapshot(t, "/"); got.mode != rootBefore.mode || got.uid != rootBefore.uid {
				t.Errorf("host / changed: %+v -> %+v", rootBefore, got)
			}
			if err == nil && tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

func TestUnpackOwnership(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to chown")
	}
	// opt/implied/ has no entry of its own: the directories a layer implies
	// belong to the container's root, as the rootfs does.
	layer := makeTar(t, entDir("home/"), entFileOwned("home/root-file", 0, 0), entFileOwned("home/user-file", 1000, 1001), entFileOwned("opt/implied/file", 0, 0))
	shift := []idtools.IDMap{{ContainerID: 0, HostID: 100000, Size: 65536}}
	cases := []struct {
		name          string
		opts          []UnpackOption
		layer         []byte
		wantRoot      [2]uint32
		wantUser      [2]uint32
		wantMountRoot [2]uint32
		wantErr       string
	}{
		{name: "ids_as_in_the_image", wantRoot: [2]uint32{0, 0}, wantUser: [2]uint32{1000, 1001}, wantMountRoot: [2]uint32{0, 0}},
		{name: "id_mappings_shift_ownership", opts: []UnpackOption{WithIDMappings(shift, shift)},
			wantRoot: [2]uint32{100000, 100000}, wantUser: [2]uint32{101000, 101001}, wantMountRoot: [2]uint32{100000, 100000}},
		{name: "without_chown_keeps_the_unpacking_user", opts: []UnpackOption{WithoutChown()},
			wantRoot: [2]uint32{0, 0}, wantUser: [2]uint32{0, 0}, wantMountRoot: [2]uint32{0, 0}},
		// The error names the entry, its id and the flag that maps it.
		{name: "id_outside_the_mapping_fails", opts: []UnpackOption{WithIDMappings(shift, shift)},
			layer: makeTar(t, entFileOwned("big", 70000, 0)), wantErr: `entry "big": owned by uid 70000, which the container ids mapped (0-65535) do not hold: give ocifn --id-map-size 70001 or more`},
		{name: "group_outside_the_mapping_fails", opts: []UnpackOption{WithIDMappings(shift, shift)},
			layer: makeTar(t, entFileOwned("grouped", 0, 65536)), wantErr: `entry "grouped": owned by gid 65536`},
		{name: "mapping_without_root_fails", opts: []UnpackOption{WithIDMappings([]idtools.IDMap{{ContainerID: 1, HostID: 100000, Size: 10}}, shift)},
			wantErr: errMappingsNoRoot},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "rootfs")
			l := tc.layer
			if l == nil {
				l = layer
			}
			err := unpackLayers(t, dest, [][]byte{l}, tc.opts...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(errText(err, dest), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			owner := func(p string) [2]uint32 { st := statT(t, filepath.Join(dest, p)); return [2]uint32{st.Uid, st.Gid} }
			if got := owner("home/root-file"); got != tc.wantRoot {
				t.Errorf("root-file owned by %v, want %v", got, tc.wantRoot)
			}
			if got := owner("home/user-file"); got != tc.wantUser {
				t.Errorf("user-file owned by %v, want %v", got, tc.wantUser)
			}
			for _, mp := range append([]string{".", "opt", "opt/implied"}, MountPoints()...) {
				if got := owner(mp); got != tc.wantMountRoot {
					t.Errorf("%s owned by %v, want %v", mp, got, tc.wantMountRoot)
				}
			}
		})
	}
}

func TestUnpackLayerVerification(t *testing.T) {
	content := makeTar(t, entFile("a", strings.Repeat("a", 4096)), entFile("b", "b"))
	img := newImage(t, plainLayer, content)
	layers, _ := img.Layers()
	digest, _ := layers[0].Digest()
	gzImg := newImage(t, gzipLayer, content)
	gzLayers, _ := gzImg.Layers()
	gzDigest, _ := gzLayers[0].Digest()
	gzBlob, _ := gzLayers[0].Compressed()
	gzTampered, _ := io.ReadAll(gzBlob)
	gzTampered[len(gzTampered)/2] ^= 0x01

	// Same size, one byte of file content changed: the tar still parses.
	tampered := []byte(string(content))
	i := strings.Index(string(tampered), "aaaa")
	tampered[i] = 'X'

	cases := []struct {
		name      string
		archive   func(t *testing.T, dir string) string
		errSubstr []string
	}{
		{
			name: "oci_gzip_layer_blob_differs_from_its_digest",
			archive: func(t *testing.T, dir string) string {
				files := ociFiles(t, ociIndex(tagged{nil, gzImg}))
				return writeArchive(t, dir, replaceFile(t, files, "blobs/sha256/"+gzDigest.Hex, gzTampered), false)
			},
			errSubstr: []string{"layer 1/1 (" + gzDigest.String() + ")", "compressed digest mismatch: expected " + gzDigest.String() + ", got sha256:" + sha256Hex(gzTampered)},
		},
		{
			name: "oci_uncompressed_layer_differs_from_its_digest",
			archive: func(t *testing.T, dir string) string {
				files := ociFiles(t, ociIndex(tagged{nil, img}))
				return writeArchive(t, dir, replaceFile(t, files, "blobs/sha256/"+digest.Hex, tampered), false)
			},
			errSubstr: []string{"layer 1/1 (" + digest.String() + ")", "diff_id mismatch: expected " + digest.String() + ", got sha256:" + sha256Hex(tampered)},
		},
		{
			name: "docker_layer_differs_from_diff_id",
			archive: func(t *testing.T, dir string) string {
				files := dockerLegacyFiles(t, tagged{[]string{"foo"}, img})
				for _, f := range files {
					if strings.HasSuffix(f.name, "/layer.tar") {
						files = replaceFile(t, files, f.name, tampered)
					}
				}
				return writeArchive(t, dir, files, false)
			},
			errSubstr: []string{"diff_id mismatch: expected " + digest.String() + ", got sha256:" + sha256Hex(tampered)},
		},
		{
			name: "docker_gzip_layer_corrupted",
			archive: func(t *testing.T, dir string) string {
				gz := gzipBytes(t, content)
				img := newImage(t, gzipLayer, content)
				files := dockerLegacyFiles(t, tagged{[]string{"foo"}, img})
				bad := append([]byte(nil), gz...)
				bad[len(bad)/2] ^= 0xff
				for _, f := range files {
					if strings.HasSuffix(f.name, "/layer.tar") {
						files = replaceFile(t, files, f.name, bad)
					}
				}
				return writeArchive(t, dir, files, false)
			},
			errSubstr: []string{"layer 1/1", "gzip"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			img, err := Open(tc.archive(t, dir))
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer img.Close()
			dest := filepath.Join(dir, "rootfs")
			err = Unpack(context.Background(), img.Image(), dest)
			if err == nil {
				t.Fatal("Unpack succeeded, want an error")
			}
			t.Logf("error: %v", err)
			if !strings.HasPrefix(err.Error(), `cannot unpack image into "`+dest+`": `) {
				t.Errorf("error %q does not say where", err)
			}
			for _, s := range tc.errSubstr {
				if !strings.Contains(errText(err, dest), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestUnpackLimitsAndCancel(t *testing.T) {
	big := makeTar(t, entFile("big", strings.Repeat("x", 1<<20)))
	small := makeTar(t, entFile("small", "s"))
	t.Run("max_bytes_exceeded", func(t *testing.T) {
		err := unpackLayers(t, filepath.Join(t.TempDir(), "rootfs"), [][]byte{small, big}, WithMaxBytes(256<<10))
		if err == nil || !strings.Contains(err.Error(), "larger than the limit of 262144 uncompressed bytes") || !strings.Contains(err.Error(), "layer 2/2") {
			t.Fatalf("error %v, want the limit named for layer 2", err)
		}
		// The caller names its own setting of the limit.
		if !errors.Is(err, ErrTooLarge) {
			t.Errorf("error %v is not ErrTooLarge", err)
		}
	})
	t.Run("max_bytes_not_exceeded", func(t *testing.T) {
		if err := unpackLayers(t, filepath.Join(t.TempDir(), "rootfs"), [][]byte{small, big}, WithMaxBytes(2<<20)); err != nil {
			t.Fatal(err)
		}
	})
	// Empty entries: 512 bytes each in the layer, a block each on disk.
	var dirs []tentry
	for i := range 2000 {
		dirs = append(dirs, entDir(fmt.Sprintf("d%04d/", i)))
	}
	many := makeTar(t, dirs...)
	t.Run("max_bytes_counts_a_block_per_entry", func(t *testing.T) {
		limit := int64(2 * len(many)) // twice the layer, a quarter of the disk
		err := unpackLayers(t, filepath.Join(t.TempDir(), "rootfs"), [][]byte{many}, WithMaxBytes(limit))
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("larger than the limit of %d uncompressed bytes", limit)) {
			t.Fatalf("2000 empty directories in %d bytes of layer, limit %d: %v, want the limit named", len(many), limit, err)
		}
		if err := unpackLayers(t, filepath.Join(t.TempDir(), "rootfs"), [][]byte{many}, WithMaxBytes(2000*diskBlock+int64(len(many)))); err != nil {
			t.Errorf("with a block per entry allowed: %v", err)
		}
	})
	t.Run("max_bytes_counts_the_directories_a_layer_implies", func(t *testing.T) {
		// 20 files 201 directories deep, none of them listed: a few KB of
		// layer, 4,020 directories on disk.
		var deep []tentry
		for i := range 20 {
			deep = append(deep, entFile(fmt.Sprintf("x%d/%sf", i, strings.Repeat("a/", 200)), "f"))
		}
		layer := makeTar(t, deep...)
		limit := int64(4 * len(layer)) // the files, a block each, fit in it
		if err := unpackLayers(t, filepath.Join(t.TempDir(), "rootfs"), [][]byte{layer}, WithMaxBytes(limit+20*201*diskBlock)); err != nil {
			t.Fatalf("with a block per implied directory allowed: %v", err)
		}
		err := unpackLayers(t, filepath.Join(t.TempDir(), "rootfs"), [][]byte{layer}, WithMaxBytes(limit))
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("larger than the limit of %d uncompressed bytes", limit)) {
			t.Fatalf("4,020 implied directories in %d bytes of layer, limit %d: %v, want the limit named", len(layer), limit, err)
		}
	})
	t.Run("cancelled_context", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := Unpack(ctx, newImage(t, gzipLayer, small), filepath.Join(t.TempDir(), "rootfs"))
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error %v, want context.Canceled", err)
		}
	})
	t.Run("layer_count_differs_from_diff_ids", func(t *testing.T) {
		err := Unpack(context.Background(), &dropLayer{newImage(t, gzipLayer, small, small)}, filepath.Join(t.TempDir(), "rootfs"))
		if err == nil || !strings.Contains(err.Error(), "the image has 1 layer(s) but its config lists 2 rootfs.diff_ids") {
			t.Fatalf("error %v", err)
		}
	})
}

// dropLayer is an image whose Layers() lost one layer.
type dropLayer struct{ v1.Image }

func (d *dropLayer) Layers() ([]v1.Layer, error) {
	ls, err := d.Image.Layers()
	if err != nil {
		return nil, err
	}
	return ls[1:], nil
}
