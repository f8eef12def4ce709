package bundle

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheckMountPoints(t *testing.T) {
	for _, tc := range []struct {
		name  string
		entry string // the mount point the case makes; the others are directories
		make  func(root, path string) error
		want  string // "" for no error
	}{
		{"directory", "tmp", func(_, p string) error { return os.Mkdir(p, 0o1777) }, ""},
		{"symlink_to_a_directory_of_the_image", "tmp", func(root, p string) error {
			if err := os.MkdirAll(filepath.Join(root, "var/tmp"), 0o755); err != nil {
				return err
			}
			return os.Symlink("/var/tmp", p)
		}, ""},
		// Resolved inside the image, as crun resolves it.
		{"symlink_to_the_root", "tmp", func(_, p string) error { return os.Symlink("/", p) }, ""},
		{"regular_file", "tmp", func(_, p string) error { return os.WriteFile(p, nil, 0o644) }, "the image's /tmp is not a directory but a regular file: every call's container mounts its own /tmp there"},
		{"symlink_to_a_file", "sys", func(root, p string) error {
			if err := os.WriteFile(filepath.Join(root, "f"), nil, 0o644); err != nil {
				return err
			}
			return os.Symlink("../../f", p)
		}, "the image's /sys is not a directory but a regular file, where its symlink to ../../f leads"},
		{"symlink_to_nothing", "dev", func(_, p string) error { return os.Symlink("/nowhere", p) }, "the image's /dev is a symlink to /nowhere, which the image does not have"},
		{"symlink_loop", "proc", func(_, p string) error { return os.Symlink("/proc", p) }, "cannot resolve the image's /proc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, d := range rootMountPoints {
				if d == tc.entry {
					continue
				}
				if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := tc.make(root, filepath.Join(root, tc.entry)); err != nil {
				t.Fatal(err)
			}
			err := CheckMountPoints(root)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v, want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
