package bundle

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"runtime"

	rspec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/ocifn/ocifn/internal/seccompbpf"
)

// seccompBPFAnnotation is crun's annotation for a ready-made seccomp
// filter: base64 of the BPF program, loaded instead of compiling the
// config's seccomp profile.
const seccompBPFAnnotation = "run.oci.seccomp_bpf_data"

// compileSeccomp puts in s, through seccompBPFAnnotation, the BPF program
// of its seccomp profile as ocifn's own compiler builds it (package
// seccompbpf): on amd64 and arm64, for the default profile.
//
// crun otherwise compiles the profile with libseccomp for each container,
// about 0.4 ms of CPU per call on the benchmark machine (see
// docs/performance.md, what was tried); and libseccomp's program, a linear
// chain of comparisons, costs the kernel about 0.15 ms more to attach than
// this one, which binary-searches the syscall number and decides every
// syscall the same way (the seccompbpf tests compare the two on every
// syscall number).
// Needing no container, it serves every bundle, with or without a warm
// pool. The profile stays in the config for anyone who reads it.
func compileSeccomp(s *rspec.Spec) {
	if !wantsSeccompBPF(s) {
		return
	}
	bpf, err := seccompbpf.Compile(s.Linux.Seccomp, runtime.GOARCH)
	if err != nil {
		return // another architecture: see precompileSeccomp
	}
	setSeccompBPF(s, bpf)
}

// wantsSeccompBPF says whether s has a seccomp profile and no program for
// it yet.
func wantsSeccompBPF(s *rspec.Spec) bool {
	return s.Linux != nil && s.Linux.Seccomp != nil && s.Annotations[seccompBPFAnnotation] == ""
}

// setSeccompBPF records bpf in s's seccompBPFAnnotation, in a copy of the
// annotations: s may share its map with another spec.
func setSeccompBPF(s *rspec.Spec, bpf []byte) {
	s.Annotations = maps.Clone(s.Annotations)
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[seccompBPFAnnotation] = base64.StdEncoding.EncodeToString(bpf)
}

// precompileSeccomp has crun compile the config's seccomp profile once, and
// hands the result to every later container through seccompBPFAnnotation:
// the fallback where compileSeccomp does not apply.
//
// The program is libseccomp's own output for this very profile, which crun
// leaves in a created container's state directory (seccomp.bpf), so the
// filter is the same. If anything fails, the config is left as it was and
// crun compiles per container as before.
func (b *Bundle) precompileSeccomp() {
	if !wantsSeccompBPF(b.spec) {
		return
	}
	c, err := b.create()
	if err != nil {
		return // the calls will report it
	}
	bpf, err := os.ReadFile(filepath.Join(b.runtime.stateDir, c.id, "seccomp.bpf"))
	c.discard()
	// A BPF program is a whole number of 8-byte instructions.
	if err != nil || len(bpf) == 0 || len(bpf)%8 != 0 {
		return
	}
	s := *b.spec
	setSeccompBPF(&s, bpf)
	data, err := json.MarshalIndent(&s, "", "  ")
	if err != nil {
		return
	}
	tmp := b.config + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		_ = os.Remove(tmp)
		return
	}
	if err := os.Rename(tmp, b.config); err != nil {
		_ = os.Remove(tmp)
		return
	}
	b.spec = &s
}
