package seccompbpf

import (
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// label names an instruction to jump to, placed later.
type label int

// assembler collects instructions whose jumps name labels, and resolves
// them to the relative offsets of classic BPF, where jumps only go
// forward, at most 255 instructions for a conditional one.
type assembler struct {
	prog   []unix.SockFilter
	at     []int // the instruction of each label, -1 until placed
	jumpTo []struct {
		pc     int
		jt, jf label
	}
}

func (a *assembler) newLabel() label {
	a.at = append(a.at, -1)
	return label(len(a.at) - 1)
}

// next returns a label placed on the next instruction emitted.
func (a *assembler) next() label {
	l := a.newLabel()
	a.at[l] = len(a.prog) + 1
	return l
}

func (a *assembler) place(l label) { a.at[l] = len(a.prog) }

func (a *assembler) stmt(code uint16, k uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: code, K: k})
}

// jump emits a conditional jump (BPF_JMP|op|BPF_K) comparing the
// accumulator with k, or with op BPF_JA an unconditional jump to jt.
func (a *assembler) jump(op uint16, k uint32, jt, jf label) {
	a.jumpTo = append(a.jumpTo, struct {
		pc     int
		jt, jf label
	}{len(a.prog), jt, jf})
	a.stmt(unix.BPF_JMP|op|unix.BPF_K, k)
}

func (a *assembler) assemble() ([]unix.SockFilter, error) {
	if len(a.prog) > unix.BPF_MAXINSNS {
		return nil, unsupported("program of %d instructions", len(a.prog))
	}
	off := func(pc int, l label) (int, error) {
		if a.at[l] <= pc {
			return 0, fmt.Errorf("seccompbpf: jump from %d to label %d at %d", pc, l, a.at[l])
		}
		return a.at[l] - pc - 1, nil
	}
	for _, j := range a.jumpTo {
		in := &a.prog[j.pc]
		t, err := off(j.pc, j.jt)
		if err != nil {
			return nil, err
		}
		if in.Code == unix.BPF_JMP|unix.BPF_JA|unix.BPF_K {
			in.K = uint32(t)
			continue
		}
		f, err := off(j.pc, j.jf)
		if err != nil {
			return nil, err
		}
		if t > math.MaxUint8 || f > math.MaxUint8 {
			return nil, unsupported("jump of more than 255 instructions")
		}
		in.Jt, in.Jf = uint8(t), uint8(f)
	}
	return a.prog, nil
}
