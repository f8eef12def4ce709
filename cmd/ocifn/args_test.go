package main

import (
	"io"
	"strings"
	"testing"
)

// TestArgumentMistakesSayWhatToGive: a command given too few or too many
// arguments says what they are and shows a command that gives them, where
// cobra's "accepts between 1 and 2 arg(s), received 0" said neither.
func TestArgumentMistakesSayWhatToGive(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"test"}, []string{"ocifn test takes IMAGE", "got none", "ocifn test function.tar example/request.yaml"}},
		{[]string{"test", "a", "b", "c"}, []string{"REQUEST, a RunFunctionRequest file; got 3 (a b c)"}},
		{[]string{"inspect"}, []string{"ocifn inspect takes one PACKAGE", "ocifn inspect function.xpkg"}},
		{[]string{"inspect", "a.xpkg", "b.xpkg"}, []string{"got 2 (a.xpkg b.xpkg)"}},
		{[]string{"push", "function.xpkg"}, []string{"REGISTRY/REPOSITORY:TAG, where to push it; got 1 (function.xpkg)", "ocifn push function.xpkg registry.example.com/"}},
		{[]string{"render", "xr.yaml"}, []string{"XR COMPOSITION FUNCTIONS, or OPERATION FUNCTIONS", "got 1 (xr.yaml)", "ocifn render xr.yaml composition.yaml functions.yaml"}},
	} {
		root := newRootCommand()
		root.SetArgs(c.args)
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		root.SetContext(t.Context())
		err := root.Execute()
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("ocifn %s: %v, want it to say %q", strings.Join(c.args, " "), err, w)
			}
		}
	}
}
