package main

import (
	_ "embed"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// pingpongSource is the program that prices a wake-up on another CPU
// (wakeup/pingpong.c).
//
//go:embed wakeup/pingpong.c
var pingpongSource []byte

// compileC writes src as dir/name.c and compiles it to dir/name.
func compileC(dir, name string, src []byte) (string, error) {
	c := filepath.Join(dir, name+".c")
	exe := filepath.Join(dir, name)
	if err := os.WriteFile(c, src, 0o644); err != nil {
		return "", err
	}
	if out, err := exec.Command("cc", "-O2", "-o", exe, c).CombinedOutput(); err != nil {
		return "", fmt.Errorf("compiling %s: %v: %s", name+".c", err, out)
	}
	return exe, nil
}

// roundTrip is what one round trip between two processes over a socket
// pair costs, in microseconds.
type roundTrip struct{ cpu, wall float64 }

// wakeupCosts measures round trips between two processes on two CPUs the
// bench may use and on one of them: crun and a container's process hand
// over several times while they set it up, which is why crun's set-up runs
// on one CPU (hack/crun-patches/setup-on-one-cpu.patch). The figures say
// how much that saves on this machine.
func wakeupCosts(dir string, rounds int) (across, same roundTrip, err error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return across, same, err
	}
	var cpus []int
	for cpu := 0; cpu < len(set)*64 && len(cpus) < 2; cpu++ {
		if set.IsSet(cpu) {
			cpus = append(cpus, cpu)
		}
	}
	if len(cpus) < 2 {
		return across, same, fmt.Errorf("one CPU only: nothing to wake on another")
	}
	exe, err := compileC(dir, "pingpong", pingpongSource)
	if err != nil {
		return across, same, err
	}
	run := func(a, b int) (roundTrip, error) {
		out, err := exec.Command(exe, strconv.Itoa(rounds), strconv.Itoa(a), strconv.Itoa(b)).Output()
		if err != nil {
			return roundTrip{}, fmt.Errorf("pingpong: %w", err)
		}
		var r roundTrip
		if _, err := fmt.Sscanf(string(out), "%f %f", &r.cpu, &r.wall); err != nil {
			return roundTrip{}, fmt.Errorf("pingpong printed %q: %w", out, err)
		}
		return r, nil
	}
	if across, err = run(cpus[0], cpus[1]); err != nil {
		return across, same, err
	}
	same, err = run(cpus[0], cpus[0])
	return across, same, err
}
