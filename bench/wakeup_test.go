package main

import (
	"os/exec"
	"runtime"
	"testing"
)

// TestWakeupCosts runs the program that prices a wake-up on another CPU,
// and checks that it reports figures for both placements.
func TestWakeupCosts(t *testing.T) {
	if _, err := exec.LookPath("cc"); err != nil {
		t.Fatalf("the bench compiles C programs with cc (hack/deps.sh installs build-essential): %v", err)
	}
	across, same, err := wakeupCosts(t.TempDir(), 500)
	if runtime.NumCPU() < 2 {
		if err == nil {
			t.Fatal("one CPU, yet a round trip across two was measured")
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]roundTrip{"across two CPUs": across, "on one CPU": same} {
		// Both placements measured, each within a tenth of a second.
		if r.cpu <= 0 || r.wall <= 0 || r.wall > 100000 {
			t.Errorf("a round trip %s: %.2f µs of CPU, %.2f µs of wall time", name, r.cpu, r.wall)
		}
	}
	t.Logf("a round trip across two CPUs %+v, on one %+v (µs)", across, same)
}
