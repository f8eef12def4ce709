package scaffold

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	for _, tmpl := range TemplateNames() {
		t.Run(tmpl, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "fn")
			files, err := Write(dir, "function-greeting", tmpl)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{".gitignore", ".dockerignore", "Dockerfile", "Makefile", "README.md", "build.sh", "crossplane.yaml",
				"example/composition.yaml", "example/expected.yaml", "example/functions.yaml", "example/rendered.yaml",
				"example/request.yaml", "example/xr.yaml", Templates[tmpl].FunctionFile}
			for _, w := range want {
				if !contains(files, w) {
					t.Errorf("no %s in %v", w, files)
				}
			}
			for _, f := range files {
				b, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil {
					t.Fatal(err)
				}
				for _, ph := range []string{"__NAME__", "__LANGUAGE__", "__FUNCTION_FILE__", "__BUILD_NEEDS__"} {
					if strings.Contains(string(b), ph) {
						t.Errorf("%s keeps the placeholder %s", f, ph)
					}
				}
			}
			if b, _ := os.ReadFile(filepath.Join(dir, "crossplane.yaml")); !strings.Contains(string(b), "name: function-greeting") {
				t.Errorf("crossplane.yaml does not name the function:\n%s", b)
			}
			if fi, err := os.Stat(filepath.Join(dir, "build.sh")); err != nil || fi.Mode()&0o111 == 0 {
				t.Errorf("build.sh must be executable: %v", err)
			}
			df, _ := os.ReadFile(filepath.Join(dir, "Dockerfile"))
			if !strings.Contains(string(df), "FROM scratch") || !strings.Contains(string(df), Templates[tmpl].FunctionFile) {
				t.Errorf("Dockerfile:\n%s", df)
			}
			// The README names what build.sh needs to stage the pieces the
			// Dockerfile copies, and nothing it does not need.
			readme, _ := os.ReadFile(filepath.Join(dir, "README.md"))
			needs := regexp.MustCompile("`build.sh` needs [^;]*;").FindString(string(readme))
			for piece, need := range map[string]string{"jq": "`jq`", "busybox": "`busybox-static`", "yq": "yq v4"} {
				copied := strings.Contains(string(df), "COPY stage/"+piece+"/ ")
				if copied != strings.Contains(needs, need) {
					t.Errorf("the Dockerfile copies stage/%s: %v, but the README says %q", piece, copied, needs)
				}
			}
			// Its table of files names each file written (the dot files
			// too, which ls does not show), and the git it speaks of is
			// one the author makes: ocifn init makes no repository.
			for _, f := range files {
				if !strings.Contains(string(readme), "| `"+f+"` |") && !strings.HasPrefix(f, "example/") {
					t.Errorf("the README's table of files does not name %s", f)
				}
			}
			if strings.Contains(string(readme), "git diff") && !strings.Contains(string(readme), "git init") {
				t.Errorf("the README says to review with git diff, in a directory ocifn init makes no git repository of, and not to run git init")
			}
		})
	}
}

func TestWriteRefuses(t *testing.T) {
	dir := t.TempDir()
	if _, err := Write(filepath.Join(dir, "a"), "Bad_Name", "jq"); err == nil || !strings.Contains(err.Error(), "DNS label") {
		t.Errorf("bad name: err = %v", err)
	}
	if _, err := Write(filepath.Join(dir, "a"), "fn", "python"); err == nil || !strings.Contains(err.Error(), "want one of jq, sh, yq") {
		t.Errorf("unknown template: err = %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(dir, "fn", "jq"); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("non-empty directory: err = %v", err)
	}
	file := filepath.Join(dir, "x")
	for _, d := range []string{file, filepath.Join(file, "fn")} {
		if _, err := Write(d, "fn", "jq"); err == nil || err.Error() != file+" exists and is not a directory; choose a new directory" {
			t.Errorf("%s: err = %v", d, err)
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
