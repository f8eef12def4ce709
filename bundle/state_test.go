package bundle

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStateDir(t *testing.T) {
	t.Run("made in parent, linked from the bundle, removed with it", func(t *testing.T) {
		bundle, parent := t.TempDir(), t.TempDir()
		link, err := makeStateDir(bundle, parent)
		if err != nil {
			t.Fatal(err)
		}
		target, err := os.Readlink(link)
		if err != nil || filepath.Dir(target) != parent || !strings.HasPrefix(filepath.Base(target), stateDirPrefix) {
			t.Fatalf("state %s: want a symlink to %s/%s*, got %q (%v)", link, parent, stateDirPrefix, target, err)
		}
		if err := os.WriteFile(filepath.Join(link, "status"), nil, 0o600); err != nil {
			t.Fatalf("writing through the link: %v", err)
		}
		if err := removeStateDir(bundle); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(target); !os.IsNotExist(err) {
			t.Errorf("the state directory %s is still there (%v)", target, err)
		}
	})
	for name, parent := range map[string]string{"no parent": "", "unusable parent": "/nonexistent/state"} {
		t.Run(name+": in the bundle", func(t *testing.T) {
			bundle := t.TempDir()
			link, err := makeStateDir(bundle, parent)
			if err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Lstat(link); err != nil || !fi.IsDir() {
				t.Fatalf("state %s: want a directory in the bundle (%v)", link, err)
			}
			if err := removeStateDir(bundle); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("a link to anything else is not followed", func(t *testing.T) {
		bundle, other := t.TempDir(), t.TempDir()
		if err := os.Symlink(other, filepath.Join(bundle, stateLink)); err != nil {
			t.Fatal(err)
		}
		if err := removeStateDir(bundle); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(other); err != nil {
			t.Errorf("removed %s, which is no state directory: %v", other, err)
		}
	})
}
