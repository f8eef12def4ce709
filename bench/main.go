// Command bench measures what a call through ocifn costs, next to the same
// function run directly on the host (the floor), served without isolation
// by a function-sdk-go server that execs it in a chroot (the peer), and
// through `podman run` (what users do today), on the same machine in the
// same run. The servers are loaded by ghz. It prints
// Markdown tables that can be pasted into an issue, with the command line
// that produced them, and ends with issue 12's targets judged from them
// (targets.go). It is a benchmark, not a test: its exit status says
// whether it ran, not whether a target was met.
//
//	go run ./bench -ghz PATH [-peer PATH] [-functions trivial,labelizer] [-clients 1,4,16] [-duration 3s] [-rounds 3]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/containers/storage/pkg/reexec"
)

type config struct {
	ocifn     string
	images    string
	functions []string
	clients   []int
	duration  time.Duration
	maxCalls  int
	rounds    int
	warm      int
	podman    bool
	startup   bool
	bigMB     int
	paced     int
	// pacedDuration is how long the paced cell runs for each mode.
	pacedDuration time.Duration
	ghz           string
	peer          string
	scaleIdle     time.Duration
}

func main() {
	// The floor's rootfs is unpacked the way ocifn unpacks it, by a
	// re-executed copy of this binary.
	if reexec.Init() {
		return
	}
	var c config
	var functions, clients string
	flag.StringVar(&c.ocifn, "ocifn", "bin/ocifn", "the ocifn binary")
	flag.StringVar(&c.images, "images", "testdata/build", "directory of test image tarballs (make testdata)")
	flag.StringVar(&functions, "functions", "trivial,labelizer", "functions to measure, by testdata name")
	flag.StringVar(&clients, "clients", "1,4,16", "concurrent clients")
	flag.DurationVar(&c.duration, "duration", 3*time.Second, "how long each measurement runs")
	flag.IntVar(&c.maxCalls, "max-calls", 2000, "most calls per measurement")
	flag.IntVar(&c.rounds, "rounds", 3, "rounds each measurement is split into, taken in turn with the other modes' so that all see the same phases of the machine")
	flag.IntVar(&c.warm, "warm", 2, "--warm value for the warm ocifn runs (2: serve's default)")
	flag.StringVar(&c.ghz, "ghz", "", "the ghz binary (github.com/bojand/ghz; make bench installs it)")
	flag.StringVar(&c.peer, "peer", "", "the no-isolation peer server binary, bench/peer (empty: not measured)")
	flag.DurationVar(&c.scaleIdle, "scale-idle", 2*time.Second, "also measure memory and the first call after the pool scaled to zero, with this --warm-idle (0: off)")
	flag.BoolVar(&c.podman, "podman", true, "also measure podman run --rm -i (skipped if podman is missing)")
	flag.BoolVar(&c.startup, "startup", true, "also measure startup time")
	flag.IntVar(&c.bigMB, "big-mb", 100, "size of the large image for the startup measurement, in MB")
	flag.IntVar(&c.paced, "paced", 20, "also measure one client making this many calls per second (0: off)")
	flag.DurationVar(&c.pacedDuration, "paced-duration", 9*time.Second, "how long the paced measurement runs for each mode, in -rounds rounds (at 20 calls/s, 9s gives about 180 calls: the median of 60 moved by 0.1 ms from run to run)")
	flag.Parse()
	c.functions = strings.Split(functions, ",")
	if c.rounds < 1 {
		fatalf("-rounds %d: want at least 1", c.rounds)
	}
	if c.paced > 0 && c.pacedDuration < time.Duration(c.rounds)*time.Second/time.Duration(c.paced) {
		fatalf("-paced-duration %s: too short for a call in each of %d rounds at %d calls/s", c.pacedDuration, c.rounds, c.paced)
	}
	for _, s := range strings.Split(clients, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			fatalf("-clients %q: want positive integers", clients)
		}
		c.clients = append(c.clients, n)
	}
	if err := run(context.Background(), c); err != nil {
		fatalf("%v", err)
	}
}

func fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", a...)
	os.Exit(1)
}

func run(ctx context.Context, c config) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("run as root: the floor runs each function in a chroot")
	}
	work, err := os.MkdirTemp("", "ocifn-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	// Container ids are unprivileged: they must reach the cache below.
	if err := os.Chmod(work, 0o711); err != nil {
		return err
	}
	ocifn, err := filepath.Abs(c.ocifn)
	if err != nil {
		return err
	}
	c.ocifn = ocifn

	fmt.Printf("# ocifn benchmark\n\n`%s`\n\n", strings.Join(os.Args, " "))
	fmt.Printf("%s, %d CPUs, %s; %s; each cell: %s or %d calls (the paced cells %s), in %d rounds taken in turn with the other modes of its row.\n\n", hostDescription(), runtime.NumCPU(), crunVersion(), time.Now().UTC().Format(time.RFC3339), c.duration, c.maxCalls, c.pacedDuration, c.rounds)

	// What a wake-up on another CPU costs here, next to one on the same CPU.
	if across, same, err := wakeupCosts(work, 10000); err != nil {
		fmt.Printf("Wake-ups: not measured (%v).\n\n", err)
	} else {
		fmt.Printf("Wake-ups: a round trip between two processes over a socket pair costs %.1f µs of CPU (%.1f µs of wall time) across two CPUs, %.1f µs (%.1f µs) on one (`bench/wakeup/pingpong.c`, 10,000 round trips each); crun's set-up runs on one CPU for that reason (`hack/crun-patches/setup-on-one-cpu.patch`).\n\n",
			across.cpu, across.wall, same.cpu, same.wall)
	}

	var pod *podman
	if c.podman {
		if pod, err = newPodman(filepath.Join(work, "podman")); err != nil {
			fmt.Printf("podman: skipped (%v)\n\n", err)
		}
	}
	g, err := findGhz(c.ghz, "")
	if err != nil {
		return err
	}
	got := map[string]*measured{}
	for i, fn := range c.functions {
		if i > 0 {
			c.scaleIdle = 0 // once is enough
		}
		m, err := benchFunction(ctx, c, work, fn, pod, g)
		if err != nil {
			return fmt.Errorf("%s: %w", fn, err)
		}
		got[fn] = m
	}
	var startup float64
	if c.startup {
		if startup, err = benchStartup(ctx, c, work); err != nil {
			return err
		}
	}
	printTargets(got, targetOptions{cpus: runtime.NumCPU(), bigMB: c.bigMB, startup: startup})
	return nil
}

func hostDescription() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return runtime.GOOS
	}
	return "Linux " + strings.TrimSpace(string(b))
}
