// Package scaffold holds the templates of `ocifn init`: a function directory
// that builds, tests and packages as it is, in jq, yq or shell.
package scaffold

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
)

//go:embed all:templates
var templates embed.FS

// Template is one kind of function a scaffold can hold.
type Template struct {
	// Name is what --template takes.
	Name string
	// Language names the language in the generated files.
	Language string
	// FunctionFile is the file that holds the function.
	FunctionFile string
	// BuildNeeds is what build.sh needs on the build machine to stage the
	// pieces the template's Dockerfile copies, as the README says it.
	BuildNeeds string
}

// Templates are the templates there are, by name.
var Templates = map[string]Template{
	"jq": {Name: "jq", Language: "jq", FunctionFile: "function.jq",
		BuildNeeds: "`jq` installed (the Debian/Ubuntu package)"},
	"yq": {Name: "yq", Language: "yq", FunctionFile: "function.yq",
		BuildNeeds: "Go, to build a static yq v4, unless `YQ` names one"},
	"sh": {Name: "sh", Language: "shell (busybox sh and jq)", FunctionFile: "function.sh",
		BuildNeeds: "`jq` and `busybox-static` installed (Debian/Ubuntu package names)"},
}

// TemplateNames returns the names of the templates, sorted.
func TemplateNames() []string {
	names := make([]string, 0, len(Templates))
	for n := range Templates {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// validName is what a Function's name may be: a DNS label, as it names the
// package and the image too.
var validName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// Write creates the directory dir holding a new function called name, made
// from the template. dir must not exist, or be empty. It returns the files
// written, relative to dir; when it fails, what it wrote is removed.
func Write(dir, name, template string) ([]string, error) {
	t, ok := Templates[template]
	if !ok {
		return nil, fmt.Errorf("unknown template %q; want one of %s", template, strings.Join(TemplateNames(), ", "))
	}
	if !validName.MatchString(name) {
		return nil, fmt.Errorf("%q cannot name a function: use lowercase letters, digits and dashes (a DNS label, such as function-greeting)", name)
	}
	created, err := firstMissing(dir)
	if err != nil {
		return nil, err
	}
	if created == "" {
		if entries, err := os.ReadDir(dir); err != nil {
			return nil, err
		} else if len(entries) > 0 {
			return nil, fmt.Errorf("%s exists and is not empty; choose a new directory", dir)
		}
	}
	written, err := write(dir, name, t)
	if err != nil {
		// A half-written directory is not empty, so a second `ocifn init`
		// after fixing the cause (a full disk, say) would be refused; leave
		// things as they were.
		if created != "" {
			os.RemoveAll(created)
		} else {
			// dir was empty: what is in it now is what was written.
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				os.RemoveAll(filepath.Join(dir, e.Name()))
			}
		}
		return nil, err
	}
	return written, nil
}

// firstMissing returns the outermost directory of dir's path that does not
// exist yet (dir itself, or one of its parents), or "" when dir exists. What
// exists of the path must be directories.
func firstMissing(dir string) (string, error) {
	missing := ""
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			// The system's "not a directory" names neither the path at
			// fault nor that it was there before.
			if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
				return "", fmt.Errorf("%s exists and is not a directory; choose a new directory", d)
			}
			return missing, nil
		} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return "", err
		}
		missing = d
		if parent := filepath.Dir(d); parent == d {
			return missing, nil
		}
	}
}

// write writes the template's files into dir and returns those it wrote.
func write(dir, name string, t Template) ([]string, error) {
	r := strings.NewReplacer("__NAME__", name, "__LANGUAGE__", t.Language, "__FUNCTION_FILE__", t.FunctionFile, "__BUILD_NEEDS__", t.BuildNeeds)

	files := map[string]string{} // relative path -> embedded path
	for _, root := range []string{"templates/common", "templates/" + t.Name} {
		err := fs.WalkDir(templates, root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			files[strings.TrimPrefix(p, root+"/")] = p
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	var written []string
	for _, rel := range sortedKeys(files) {
		data, err := templates.ReadFile(files[rel])
		if err != nil {
			return nil, err
		}
		target := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return nil, err
		}
		mode := os.FileMode(0o644)
		if path.Ext(rel) == ".sh" {
			mode = 0o755
		}
		if err := os.WriteFile(target, []byte(r.Replace(string(data))), mode); err != nil {
			return nil, err
		}
		written = append(written, rel)
	}
	return written, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
