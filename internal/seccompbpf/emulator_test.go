package seccompbpf

import (
	"encoding/binary"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// seccompData is the kernel's struct seccomp_data, what a filter reads.
type seccompData struct {
	nr, arch uint32
	ip       uint64
	args     [6]uint64
}

func (d seccompData) bytes() []byte {
	b := make([]byte, 0, 64)
	b = binary.NativeEndian.AppendUint32(b, d.nr)
	b = binary.NativeEndian.AppendUint32(b, d.arch)
	b = binary.NativeEndian.AppendUint64(b, d.ip)
	for _, a := range d.args {
		b = binary.NativeEndian.AppendUint64(b, a)
	}
	return b
}

// emulate runs a classic BPF seccomp program on d as the kernel would and
// returns its verdict and the number of instructions it executed. Only the
// instructions seccomp programs of libseccomp and of this package use are
// known; any other is an error, as is a load outside seccomp_data, a jump
// out of the program or running off its end.
func emulate(prog []unix.SockFilter, d seccompData) (ret uint32, steps int, err error) {
	data := d.bytes()
	var acc, x uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		steps++
		jump := func(cond bool) {
			if cond {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		}
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			if in.K%4 != 0 || in.K+4 > uint32(len(data)) {
				return 0, steps, fmt.Errorf("pc %d: load of offset %d", pc, in.K)
			}
			acc = binary.NativeEndian.Uint32(data[in.K:])
		case unix.BPF_LD | unix.BPF_IMM:
			acc = in.K
		case unix.BPF_ALU | unix.BPF_AND | unix.BPF_K:
			acc &= in.K
		case unix.BPF_MISC | unix.BPF_TAX:
			x = acc
		case unix.BPF_MISC | unix.BPF_TXA:
			acc = x
		case unix.BPF_JMP | unix.BPF_JA:
			pc += int(in.K)
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			jump(acc == in.K)
		case unix.BPF_JMP | unix.BPF_JGT | unix.BPF_K:
			jump(acc > in.K)
		case unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			jump(acc >= in.K)
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			jump(acc&in.K != 0)
		case unix.BPF_RET | unix.BPF_K:
			return in.K, steps, nil
		case unix.BPF_RET | unix.BPF_A:
			return acc, steps, nil
		default:
			return 0, steps, fmt.Errorf("pc %d: unknown instruction %#x", pc, in.Code)
		}
	}
	return 0, steps, fmt.Errorf("ran off the end of the program")
}

// decode splits a program as crun's annotation and state file hold it.
func decode(t *testing.T, b []byte) []unix.SockFilter {
	t.Helper()
	if len(b) == 0 || len(b)%8 != 0 {
		t.Fatalf("%d bytes is not a BPF program", len(b))
	}
	prog := make([]unix.SockFilter, len(b)/8)
	for i := range prog {
		in := b[8*i:]
		prog[i] = unix.SockFilter{Code: binary.NativeEndian.Uint16(in), Jt: in[2], Jf: in[3], K: binary.NativeEndian.Uint32(in[4:])}
	}
	return prog
}
