package e2e

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// update rewrites golden files instead of comparing with them:
//
//	go test ./e2e -run 'TestRenderGolden|TestExamples' -update
var update = flag.Bool("update", false, "rewrite the golden files (expected.yaml, expected.stderr, expected.exit) from what ocifn prints now")

// ocifnRun is one finished ocifn process.
type ocifnRun struct {
	stdout, stderr string
	exit           int
}

// runIn runs ocifn in dir with args and waits for it.
func runIn(t *testing.T, dir string, env []string, args ...string) ocifnRun {
	t.Helper()
	return runProgram(t, dir, ocifnBin, append(append(os.Environ(), "TLS_SERVER_CERTS_DIR="), env...), args...)
}

// runProgram runs bin in dir with args and env (nil: this process's) and
// waits for it, at most two minutes. Only a program that could not run
// fails t: an exit code is part of the result.
func runProgram(t *testing.T, dir, bin string, env []string, args ...string) ocifnRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return ocifnRun{stdout.String(), stderr.String(), exit.ExitCode()}
	case err != nil:
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, stderr.String())
	}
	return ocifnRun{stdout.String(), stderr.String(), 0}
}

// checkGolden compares a run with dir/expected.yaml (stdout),
// dir/expected.stderr (stderr; missing means empty) and dir/expected.exit
// (missing means 0), or rewrites them with -update.
func checkGolden(t *testing.T, dir string, r ocifnRun) {
	t.Helper()
	files := []struct {
		name, got string
	}{
		{"expected.yaml", r.stdout},
		{"expected.stderr", r.stderr},
		{"expected.exit", exitText(r.exit)},
	}
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		if *update {
			if f.got == "" && f.name != "expected.yaml" {
				_ = os.Remove(path)
				continue
			}
			if err := os.WriteFile(path, []byte(f.got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if d := cmp.Diff(string(want), f.got); d != "" {
			t.Errorf("%s differs (-want +got; go test ./e2e -update rewrites it):\n%s", path, d)
		}
	}
}

func exitText(code int) string {
	if code == 0 {
		return ""
	}
	return strconv.Itoa(code) + "\n"
}
