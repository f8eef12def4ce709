package bundle

import (
	"bytes"
	"encoding/base64"
	"runtime"
	"testing"

	rspec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/ocifn/ocifn/internal/seccompbpf"
	"github.com/ocifn/ocifn/spec"
)

func TestCompileSeccomp(t *testing.T) {
	want, err := seccompbpf.Compile(spec.Seccomp(), runtime.GOARCH)
	if err != nil {
		t.Skipf("no seccomp compiler for %s: %v", runtime.GOARCH, err)
	}
	s := &rspec.Spec{Annotations: map[string]string{"a": "b"}, Linux: &rspec.Linux{Seccomp: spec.Seccomp()}}
	orig := s.Annotations
	compileSeccomp(s)
	got, err := base64.StdEncoding.DecodeString(s.Annotations[seccompBPFAnnotation])
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("annotation %q (%v), want the compiled profile", s.Annotations[seccompBPFAnnotation], err)
	}
	if s.Annotations["a"] != "b" || len(orig) != 1 {
		t.Errorf("annotations %v, the original changed to %v", s.Annotations, orig)
	}
	if s.Linux.Seccomp == nil {
		t.Error("the profile must stay in the config")
	}
}
