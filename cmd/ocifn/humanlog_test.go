package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"

	"github.com/ocifn/ocifn/adaptor"
)

// stderrRunner stands in for a container: it writes stderr lines and prints
// a valid response. The test is about how the author commands show what the
// adaptor logs, not about running functions.
type stderrRunner struct{ stderr string }

func (r stderrRunner) Run(_ context.Context, _ io.Reader, stdout, stderr io.Writer) (adaptor.Exit, error) {
	io.WriteString(stderr, r.stderr)
	io.WriteString(stdout, `{"desired": {}}`)
	return adaptor.Exit{}, nil
}

func TestHumanLoggerShowsFunctionStderrAsPlainLines(t *testing.T) {
	var buf bytes.Buffer
	log := newHumanLogger(&buf, false)
	fn := adaptor.NewFunction(stderrRunner{stderr: "first line\nsecond line\nno newline"}, adaptor.WithLogger(log))
	if _, err := fn.Run(context.Background(), &fnv1.RunFunctionRequest{Meta: &fnv1.RequestMeta{Tag: "abc"}}); err != nil {
		t.Fatal(err)
	}
	want := "  | first line\n  | second line\n  | no newline\n"
	if buf.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", buf.String(), want)
	}

	buf.Reset()
	setLogLabel(log, "step-1")
	log.Info("progress is hidden unless verbose")
	log.Warn("something odd", "tag", "abc", "path", "/a b")
	if _, err := fn.Run(context.Background(), &fnv1.RunFunctionRequest{}); err != nil {
		t.Fatal(err)
	}
	got := buf.String()
	if !strings.HasPrefix(got, "ocifn: warning: something odd path=\"/a b\"\n  step-1 | first line\n") {
		t.Errorf("got:\n%s", got)
	}
	if strings.Contains(got, "hidden") || strings.Contains(got, "abc") {
		t.Errorf("info records and tags must not show without verbose:\n%s", got)
	}
}
