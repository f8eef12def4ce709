package bundle

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
)

// seccompBPFAnnotation is crun's annotation for a ready-made seccomp
// filter: base64 of the BPF program, loaded instead of compiling the
// config's seccomp profile.
const seccompBPFAnnotation = "run.oci.seccomp_bpf_data"

// precompileSeccomp has crun compile the config's seccomp profile once, and
// hands the result to every later container through seccompBPFAnnotation.
//
// crun otherwise compiles the profile with libseccomp for each container,
// about 0.4 ms of CPU per call on the benchmark machine (see README,
// Performance). The program is libseccomp's own output for this very
// profile, which crun leaves in a created container's state directory
// (seccomp.bpf), so the filter is the same; the profile stays in the config
// for anyone who reads it. If anything fails, the config is left as it was
// and crun compiles per container as before.
func (b *Bundle) precompileSeccomp() {
	if b.spec.Linux == nil || b.spec.Linux.Seccomp == nil || b.spec.Annotations[seccompBPFAnnotation] != "" {
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
	s.Annotations = maps.Clone(s.Annotations)
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[seccompBPFAnnotation] = base64.StdEncoding.EncodeToString(bpf)
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
