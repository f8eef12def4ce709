// Package seccompbpf compiles ocifn's seccomp profile to the classic BPF
// program the kernel runs, without libseccomp.
//
// Why: crun compiles a profile with libseccomp, whose program is a linear
// chain of comparisons, one per syscall number in the profile (180
// instructions for the default denylist on amd64). Loading it is not free:
// when a filter is attached, the kernel runs it for every syscall number
// of the native and compat architecture to find the ones it always allows
// (seccomp_cache_prepare), so a chain that an allowed syscall walks to its
// end is paid for some 900 times per container; and every syscall the
// function makes that the cache does not cover walks it again. The program
// here decides on the same profile the same way, but after the
// architecture check it binary-searches the syscall number: any syscall
// costs about log2(n) comparisons.
//
// Only what ocifn's profile uses is supported (see Compile); anything else
// is an error, and the caller lets crun compile the profile with
// libseccomp as before.
package seccompbpf

//go:generate go run gen.go

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"

	rspec "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The parts of struct seccomp_data the program reads.
const (
	offNr   = 0
	offArch = 4
	// offArgs is args[0]; each argument is 64 bits and the program reads
	// its low 32 bits, which come first on the little-endian machines
	// supported here.
	offArgs = 16
)

// The kernel's verdicts (SECCOMP_RET_*).
const (
	retKillThread = 0 // what libseccomp returns for an architecture not in the filter
	retErrno      = 0x00050000
	retAllow      = 0x7fff0000
)

// auditArch is the architecture token seccomp_data.arch holds for each
// libseccomp architecture. x86_64 and x32 share one: an x32 syscall is an
// x86_64 one with __X32_SYSCALL_BIT (0x40000000) in its number, and
// libseccomp's numbers for x32 carry that bit, so both are searched in one
// table, as libseccomp does.
var auditArch = map[rspec.Arch]uint32{
	rspec.ArchX86_64:  unix.AUDIT_ARCH_X86_64,
	rspec.ArchX32:     unix.AUDIT_ARCH_X86_64,
	rspec.ArchX86:     unix.AUDIT_ARCH_I386,
	rspec.ArchAARCH64: unix.AUDIT_ARCH_AARCH64,
	rspec.ArchARM:     unix.AUDIT_ARCH_ARM,
}

// supported lists the architectures each Go architecture's profile may
// name, those the generated syscall tables cover.
var supported = map[string][]rspec.Arch{
	"amd64": {rspec.ArchX86_64, rspec.ArchX86, rspec.ArchX32},
	"arm64": {rspec.ArchAARCH64, rspec.ArchARM},
}

// ErrUnsupported is wrapped by every error about a profile or an
// architecture this compiler does not handle.
var ErrUnsupported = errors.New("not supported by ocifn's seccomp compiler")

// Compile returns the BPF program (struct sock_filter array, native byte
// order, as crun's run.oci.seccomp_bpf_data annotation takes it) that
// decides every syscall as libseccomp's program for profile p does, on the
// Go architecture goarch.
//
// Supported: default action allow; rules whose action is errno (with an
// explicit errno) or allow, with no argument condition or one
// masked-equal condition whose mask and value fit in 32 bits; the
// architectures of amd64 and arm64. A syscall an architecture lacks is
// left out for that architecture, as libseccomp does.
func Compile(p *rspec.LinuxSeccomp, goarch string) ([]byte, error) {
	prog, err := compile(p, goarch)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		b = binary.NativeEndian.AppendUint16(b, in.Code)
		b = append(b, in.Jt, in.Jf)
		b = binary.NativeEndian.AppendUint32(b, in.K)
	}
	return b, nil
}

// outcome is what a syscall number leads to: a verdict, or a condition on
// one argument that picks the rule's verdict or the default one.
type outcome struct {
	ret  uint32
	cond bool
	arg  uint
	mask uint32
	// values are what the masked argument must equal, any of them (rules
	// of one syscall that differ only in the value, merged); n of them.
	values [maxValues]uint32
	n      int
}

// maxValues is how many rules of one syscall, each on another value of
// the same argument, the compiler merges.
const maxValues = 4

// merge returns o with the value of other added, when both test the same
// argument, under the same mask, for the same verdict.
func (o outcome) merge(other outcome) (outcome, bool) {
	if !o.cond || !other.cond || o.ret != other.ret || o.arg != other.arg || o.mask != other.mask || other.n != 1 {
		return o, false
	}
	v := other.values[0]
	if slices.Contains(o.values[:o.n], v) {
		return o, true
	}
	if o.n == maxValues {
		return o, false
	}
	o.values[o.n] = v
	o.n++
	return o, true
}

// span is a range of syscall numbers with one outcome.
type span struct {
	lo, hi uint32
	out    outcome
}

func unsupported(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, a...))
}

func compile(p *rspec.LinuxSeccomp, goarch string) ([]unix.SockFilter, error) {
	archs, ok := supported[goarch]
	switch {
	case !ok:
		return nil, unsupported("architecture %s", goarch)
	case p == nil:
		return nil, errors.New("no seccomp profile")
	case p.DefaultAction != rspec.ActAllow:
		return nil, unsupported("default action %s", p.DefaultAction)
	case len(p.Flags) > 0 || p.ListenerPath != "" || p.ListenerMetadata != "":
		return nil, unsupported("flags or a listener")
	}
	// libseccomp adds the native architecture to every filter, and checks
	// x86_64 numbers for the x32 bit unless x32 is in the filter too; this
	// compiler does neither, so it wants the full set.
	if !slices.Equal(slices.Sorted(slices.Values(p.Architectures)), slices.Sorted(slices.Values(archs))) {
		return nil, unsupported("architectures %v (want %v)", p.Architectures, archs)
	}
	dflt := outcome{ret: retAllow}
	outs := make([]outcome, len(p.Syscalls))
	for i, r := range p.Syscalls {
		out, err := ruleOutcome(r)
		if err != nil {
			return nil, err
		}
		outs[i] = out
	}

	// The outcome of each syscall number, per architecture token.
	var tokens []uint32
	byNr := map[uint32]map[uint32]outcome{}
	for _, a := range p.Architectures {
		tok := auditArch[a]
		if byNr[tok] == nil {
			byNr[tok] = map[uint32]outcome{}
			tokens = append(tokens, tok)
		}
		for i, r := range p.Syscalls {
			out := outs[i]
			for _, name := range r.Names {
				nr, ok := syscallNumbers[a][name]
				if !ok {
					return nil, unsupported("syscall %q is not in the generated table for %s (go generate ./internal/seccompbpf)", name, a)
				}
				if n, newer := newerSyscalls[name]; newer && nr < 0 {
					nr = n
					if a == rspec.ArchX32 {
						nr |= x32Bit
					}
				}
				if m, ok := multiplexed[a][name]; ok {
					// Filtered twice, as libseccomp does: by its own
					// number, and as socketcall's call number, whatever
					// its arguments (socketcall passes them in memory).
					nr = m.direct
					call := outcome{ret: out.ret, cond: true, mask: math.MaxUint32, n: 1}
					call.values[0] = m.call
					if err := set(byNr[tok], uint32(m.socketcall), call, name, a); err != nil {
						return nil, err
					}
				}
				if nr < 0 {
					continue // none on this architecture
				}
				if err := set(byNr[tok], uint32(nr), out, name, a); err != nil {
					return nil, err
				}
			}
		}
	}

	var a assembler
	a.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArch)
	entry := make([]label, len(tokens))
	for i, tok := range tokens {
		entry[i] = a.newLabel()
		a.jump(unix.BPF_JEQ, tok, entry[i], a.next())
	}
	a.stmt(unix.BPF_RET|unix.BPF_K, retKillThread)
	for i, tok := range tokens {
		a.place(entry[i])
		a.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNr)
		spans := spansOf(byNr[tok], dflt)
		leaves := map[outcome]label{}
		leaf := func(o outcome) label {
			if _, ok := leaves[o]; !ok {
				leaves[o] = a.newLabel()
			}
			return leaves[o]
		}
		a.search(spans, leaf)
		// Where the search ends: argument checks first, then the
		// verdicts, so that every jump goes forward.
		for _, o := range slices.Collect(maps.Keys(leaves)) {
			if o.cond {
				leaf(outcome{ret: o.ret})
				leaf(dflt)
			}
		}
		order := func(x, y outcome) int {
			if x.cond != y.cond {
				if x.cond {
					return -1
				}
				return 1
			}
			return int(leaves[x]) - int(leaves[y])
		}
		for _, o := range slices.SortedFunc(maps.Keys(leaves), order) {
			a.place(leaves[o])
			if !o.cond {
				a.stmt(unix.BPF_RET|unix.BPF_K, o.ret)
				continue
			}
			a.stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArgs+8*uint32(o.arg))
			if o.mask != math.MaxUint32 {
				a.stmt(unix.BPF_ALU|unix.BPF_AND|unix.BPF_K, o.mask)
			}
			for _, v := range o.values[:o.n-1] {
				a.jump(unix.BPF_JEQ, v, leaves[outcome{ret: o.ret}], a.next())
			}
			a.jump(unix.BPF_JEQ, o.values[o.n-1], leaves[outcome{ret: o.ret}], leaves[dflt])
		}
	}
	return a.assemble()
}

// set gives syscall number nr the outcome out, merged with the one an
// earlier rule gave it, if any.
func set(byNr map[uint32]outcome, nr uint32, out outcome, name string, a rspec.Arch) error {
	o := out
	if prev, dup := byNr[nr]; dup && prev != out {
		var ok bool
		if o, ok = prev.merge(out); !ok {
			return unsupported("syscall %q (%d on %s) has two rules that are not the same test of one argument for other values", name, nr, a)
		}
	}
	byNr[nr] = o
	return nil
}

// multiplexed are the syscalls an architecture also reaches through a
// multiplexer: i386's socket is socketcall(SYS_SOCKET, args) as well as,
// since Linux 4.3, a syscall of its own, which libseccomp's table leaves
// as a pseudo-number.
var multiplexed = map[rspec.Arch]map[string]struct {
	direct, socketcall int32
	call               uint32
}{
	rspec.ArchX86: {"socket": {direct: 359, socketcall: 102, call: 1}},
}

// newerSyscalls are the syscalls of the profile that the libseccomp which
// generated syscallNumbers does not know (it resolves them to -1), by
// their number: since Linux 5.1 a new syscall has one number on every
// architecture (x32's with x32Bit). libseccomp, and so crun compiling the
// profile, leaves them out; this compiler does not, for a denied call that
// a newer one does the work of (open_tree_attr, open_tree's) must be
// denied too on the kernels that have it.
var newerSyscalls = map[string]int32{
	"open_tree_attr": 467,
}

// x32Bit is __X32_SYSCALL_BIT, in the number of every x32 syscall.
const x32Bit = 0x40000000

// ruleOutcome returns what a rule's syscalls lead to.
func ruleOutcome(r rspec.LinuxSyscall) (outcome, error) {
	var out outcome
	switch r.Action {
	case rspec.ActAllow:
		out.ret = retAllow
	case rspec.ActErrno:
		if r.ErrnoRet == nil || *r.ErrnoRet > 0xffff {
			return out, unsupported("errno rule without an errno")
		}
		out.ret = retErrno | uint32(*r.ErrnoRet)
	default:
		return out, unsupported("action %s", r.Action)
	}
	switch len(r.Args) {
	case 0:
		return out, nil
	case 1:
	default:
		return out, unsupported("rule for %v with %d argument conditions", r.Names, len(r.Args))
	}
	// OCI's masked-equal: (arg & Value) == ValueTwo. libseccomp compares
	// both halves of the 64-bit argument; with a mask and value that fit
	// in 32 bits the high half always matches (its mask is 0), so the low
	// half decides, on 32- and 64-bit architectures alike.
	c := r.Args[0]
	if c.Op != rspec.OpMaskedEqual || c.Index > 5 || c.Value > math.MaxUint32 || c.ValueTwo > math.MaxUint32 {
		return out, unsupported("argument condition %+v", c)
	}
	out.cond, out.arg, out.mask = true, c.Index, uint32(c.Value)
	out.values[0], out.n = uint32(c.ValueTwo), 1
	return out, nil
}

// spansOf covers every syscall number, 0 to 2^32-1, with spans of one
// outcome each, neighbours different.
func spansOf(byNr map[uint32]outcome, dflt outcome) []span {
	var spans []span
	add := func(lo, hi uint32, o outcome) {
		if n := len(spans); n > 0 && spans[n-1].out == o && spans[n-1].hi+1 == lo {
			spans[n-1].hi = hi
			return
		}
		spans = append(spans, span{lo, hi, o})
	}
	next := uint64(0) // the first number not yet covered
	for _, nr := range slices.Sorted(maps.Keys(byNr)) {
		if uint64(nr) > next {
			add(uint32(next), nr-1, dflt)
		}
		add(nr, nr, byNr[nr])
		next = uint64(nr) + 1
	}
	if next <= math.MaxUint32 {
		add(uint32(next), math.MaxUint32, dflt)
	}
	return spans
}

// search emits a binary search of the accumulator over spans (sorted,
// contiguous, covering every number), jumping to leaf(outcome) of the span
// that holds it: one "jge" per inner node, so len(spans)-1 comparisons in
// all and about log2(len(spans)) on any path. A single number between two
// spans of the same outcome takes one "jeq" instead of two "jge".
func (a *assembler) search(spans []span, leaf func(outcome) label) {
	if len(spans) == 1 {
		a.jump(unix.BPF_JA, 0, leaf(spans[0].out), 0)
		return
	}
	// target is where a branch to s goes: its leaf if s is one span,
	// else its subtree, emitted later.
	var pending []struct {
		l label
		s []span
	}
	target := func(s []span) label {
		if len(s) == 1 {
			return leaf(s[0].out)
		}
		l := a.newLabel()
		pending = append(pending, struct {
			l label
			s []span
		}{l, s})
		return l
	}
	node := func(s []span) {
		if len(s) == 3 && s[0].out == s[2].out && s[1].lo == s[1].hi {
			a.jump(unix.BPF_JEQ, s[1].lo, leaf(s[1].out), leaf(s[0].out))
			return
		}
		m := split(s)
		a.jump(unix.BPF_JGE, s[m].lo, target(s[m:]), target(s[:m]))
	}
	// Depth first, the lower half first: the subtree a node falls
	// through to (jf) is the next one emitted.
	node(spans)
	for len(pending) > 0 {
		p := pending[len(pending)-1]
		pending = pending[:len(pending)-1]
		a.place(p.l)
		node(p.s)
	}
}

// cachedNrs approximates how many syscall numbers the kernel's cache of
// always-allowed syscalls covers per architecture (NR_syscalls, about 460
// on Linux 6): the kernel runs the filter on each when it is attached.
const cachedNrs = 512

// split returns where to divide spans so that both halves weigh about the
// same, a span weighing one plus the numbers below cachedNrs it holds: the
// long runs of allowed syscalls the kernel's cache walks most sit near the
// root, and the tree stays balanced over the rest.
func split(s []span) int {
	weight := func(sp span) uint64 {
		w := uint64(1)
		if sp.lo < cachedNrs {
			w += uint64(min(sp.hi, cachedNrs-1) - sp.lo + 1)
		}
		return w
	}
	var total uint64
	for _, sp := range s {
		total += weight(sp)
	}
	best, bestDiff := 1, uint64(math.MaxUint64)
	var left uint64
	for m := 1; m < len(s); m++ {
		left += weight(s[m-1])
		diff := max(left, total-left) - min(left, total-left)
		if diff < bestDiff {
			best, bestDiff = m, diff
		}
	}
	return best
}
