package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ocifn/ocifn/scaffold"
)

// TestInitSaysWhatNameIs: ocifn init without its NAME, or with more than
// one, says what NAME is and shows a command, as the other commands'
// mistakes say what to give, rather than cobra's "accepts 1 arg(s),
// received 0".
func TestInitSaysWhatNameIs(t *testing.T) {
	for _, args := range [][]string{{}, {"function-greeting", "jq"}} {
		cmd := newInitCommand()
		cmd.SetArgs(args)
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		cmd.SetContext(t.Context())
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), "NAME, the new Function's name (a DNS label, such as function-greeting; the directory is ./NAME unless --dir says otherwise): ocifn init function-greeting --template jq") {
			t.Errorf("ocifn init %s: %v, want it to say what NAME is, with an example", strings.Join(args, " "), err)
		}
	}
}

// TestInitHelpNamesEveryFile: the list of files in ocifn init --help names
// each one ocifn init writes at the top of the directory, the dot files
// too, which ls does not show.
func TestInitHelpNamesEveryFile(t *testing.T) {
	long := newInitCommand().Long
	for _, tmpl := range scaffold.TemplateNames() {
		files, err := scaffold.Write(filepath.Join(t.TempDir(), "fn"), "function-greeting", tmpl)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			top, _, _ := strings.Cut(f, "/")
			if top != f {
				top += "/"
			}
			if f == scaffold.Templates[tmpl].FunctionFile {
				// function.jq|.yq|.sh names the three.
				if !strings.Contains(long, "|"+filepath.Ext(f)) && !strings.Contains(long, "  "+f+"|") {
					t.Errorf("ocifn init --help does not name %s (template %s) in its list of files", f, tmpl)
				}
				continue
			}
			if !strings.Contains(long, "\n  "+top+" ") && !strings.Contains(long, "|"+top+" ") && !strings.Contains(long, top+"|") {
				t.Errorf("ocifn init --help does not name %s (template %s) in its list of files", top, tmpl)
			}
		}
	}
}
