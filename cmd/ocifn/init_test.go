package main

import (
	"io"
	"strings"
	"testing"
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
