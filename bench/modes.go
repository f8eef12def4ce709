package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ocifn/ocifn/oci"
)

// caller makes one call; worker is the index of the client making it.
type caller func(ctx context.Context, worker int) error

// floor runs the image's entrypoint directly on the host: the unpacked
// rootfs as a chroot, a plain fork/exec, the request on stdin. No
// namespaces, no runtime: the cost of the program itself.
type floor struct {
	rootfs string
	args   []string
	env    []string
	dir    string
	input  []byte
}

func newFloor(ctx context.Context, tarball, dir string, input []byte) (*floor, error) {
	img, err := oci.Open(tarball)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	rootfs := filepath.Join(dir, "rootfs")
	if err := oci.Unpack(ctx, img.Image(), rootfs); err != nil {
		return nil, err
	}
	cfg := img.ConfigFile().Config
	f := &floor{rootfs: rootfs, args: append(append([]string{}, cfg.Entrypoint...), cfg.Cmd...), env: cfg.Env, dir: cfg.WorkingDir, input: input}
	if f.dir == "" {
		f.dir = "/"
	}
	if len(f.env) == 0 {
		f.env = []string{"PATH=/bin:/usr/bin"}
	}
	return f, nil
}

func (f *floor) call(ctx context.Context, _ int) error {
	cmd := exec.CommandContext(ctx, f.args[0], f.args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: f.rootfs}
	cmd.Dir, cmd.Env = f.dir, f.env
	return runWithInput(cmd, f.input)
}

// runWithInput runs cmd with input on stdin and wants some output.
func runWithInput(cmd *exec.Cmd, input []byte) error {
	cmd.Stdin = bytes.NewReader(input)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v: %s", err, errb.String())
	}
	if out.Len() == 0 {
		return fmt.Errorf("no output")
	}
	return nil
}

// server is a running `ocifn serve` (or the peer), loaded by ghz at
// addrConn.
type server struct {
	cmd      *exec.Cmd
	addrConn string
	// metrics is the URL of its Prometheus metrics ("" for the peer).
	metrics string
	stderr  *bytes.Buffer
	started time.Duration
}

var (
	servingLine = regexp.MustCompile(`msg=serving address=(\S+)`)
	metricsLine = regexp.MustCompile(`msg="serving metrics" address=(\S+)`)
)

// startServer starts ocifn serve and waits until it serves; it returns how
// long that took.
func startServer(ocifn, tarball, cache string, extra ...string) (*server, error) {
	// Each server runs its own copy of the binary: servers running at the
	// same time would otherwise share the binary's pages, and PSS would
	// give each only a part of them, making every server look smaller than
	// it is alone.
	own := cache + ".ocifn"
	if err := copyExecutable(ocifn, own); err != nil {
		return nil, err
	}
	ocifn = own
	// Metrics on, as by default: the bench reads the functions' CPU there.
	args := append([]string{"serve", "--insecure", "--tarball", tarball, "--address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--cache=false", "--cache-dir", cache}, extra...)
	cmd := exec.Command(ocifn, args...)
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = pw
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pw.Close()
	s := &server{cmd: cmd, stderr: &bytes.Buffer{}}
	sc := bufio.NewScanner(pr)
	addr := ""
	for sc.Scan() {
		line := sc.Text()
		s.stderr.WriteString(line + "\n")
		if m := metricsLine.FindStringSubmatch(line); m != nil {
			s.metrics = "http://" + m[1] + "/metrics"
		}
		if m := servingLine.FindStringSubmatch(line); m != nil {
			addr = m[1]
			break
		}
	}
	s.started = time.Since(t0)
	if addr == "" {
		_ = cmd.Wait()
		return nil, fmt.Errorf("ocifn serve did not start:\n%s", s.stderr)
	}
	// Keep draining the log so the server never blocks on it.
	go func() {
		for sc.Scan() {
		}
	}()
	s.addrConn = addr
	return s, nil
}

// pid returns the pid of the process that runs the calls: ocifn re-executes
// itself in its own namespaces where the host needs it, from whichever of
// its threads, and the parent then has that one child running the same
// binary (its other children are warm containers).
func (s *server) pid() int {
	pid := s.cmd.Process.Pid
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	for _, child := range childrenOf(pid) {
		if e, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", child)); e == exe {
			return child
		}
	}
	return pid
}

// childrenOf lists the children of pid.
func childrenOf(pid int) []int {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, c := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(c); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// procTicks returns utime+stime and cutime+cstime of a process.
func procTicks(pid int) (own, children time.Duration) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	v := func(i int) time.Duration {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(n) * time.Second / 100 // USER_HZ
	}
	return v(11) + v(12), v(13) + v(14)
}

// machineBusy is the CPU time all CPUs have spent busy since boot, from
// /proc/stat: user, nice, system, irq and softirq (guest time is part of
// user; idle, iowait and the time a hypervisor stole are not counted).
func machineBusy() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7} {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}

// metricsClient reads a server's metrics; a server that hangs fails the
// read instead of the bench.
var metricsClient = &http.Client{Timeout: 5 * time.Second}

// functionCPU returns what the server counted of its functions' CPU so
// far (ocifn_function_cpu_seconds_total), and whether it counts it.
func (s *server) functionCPU() (time.Duration, bool) {
	if s.metrics == "" {
		return 0, false
	}
	rsp, err := metricsClient.Get(s.metrics)
	if err != nil {
		return 0, false
	}
	defer rsp.Body.Close()
	sc := bufio.NewScanner(rsp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "ocifn_function_cpu_seconds_total "); ok {
			secs, err := strconv.ParseFloat(v, 64)
			return time.Duration(secs * float64(time.Second)), err == nil
		}
	}
	return 0, false
}

// cpuSplit returns the CPU time of the server's own processes (the serving
// process, and the parent that waits for it) and that of the serving
// process's reaped children, with everything its fork server (a resident
// crun) used: that crun's forks, which it reaps itself, create containers.
func (s *server) cpuSplit() (own, children time.Duration) {
	serving := s.pid()
	own, children = procTicks(serving)
	if parent := s.cmd.Process.Pid; parent != serving {
		o, _ := procTicks(parent) // its only child, the serving process, is alive
		own += o
	}
	for _, pid := range forkServers(serving) {
		o, c := procTicks(pid)
		children += o + c
	}
	return own, children
}

// forkServers returns the serving process's fork server, a resident crun
// (bundle/forkserver.go): its child in its own pid namespace with the
// server's flag. Containers show the same command line until they run the
// function (they are forks of it), but each has a pid namespace of its
// own; a crun executed for `crun delete` has another command line.
func forkServers(serving int) []int {
	own, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", serving))
	if err != nil {
		return nil
	}
	var out []int
	for _, c := range childrenOf(serving) {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", c))
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c))
		if err == nil && ns == own && slices.Contains(strings.Split(string(cmdline), "\x00"), "--ocifn-fork-server") {
			out = append(out, c)
		}
	}
	return out
}

// memory is what a server holds: the serving process's resident and peak
// resident memory, the proportional set size of the server's own processes
// (the re-executed child, the parent that waits for it, and the resident
// crun that forks per container; PSS counts the pages they share once), and
// that of its other children now: the warm containers waiting for a call.
type memory struct {
	rss, peak, pss int64
	childPss       int64
	children       int
}

func (s *server) memory() memory {
	var m memory
	serving := s.pid()
	m.rss, m.peak = procStatus(serving)
	forks := forkServers(serving)
	for _, pid := range append(uniq(s.cmd.Process.Pid, serving), forks...) {
		m.pss += procPss(pid)
	}
	for _, c := range childrenOf(serving) {
		if !slices.Contains(forks, c) {
			m.childPss += procPss(c)
			m.children++
		}
	}
	return m
}

func uniq(a, b int) []int {
	if a == b {
		return []int{a}
	}
	return []int{a, b}
}

// procStatus reads VmRSS and VmHWM of a process.
func procStatus(pid int) (rss, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = v << 10
		case "VmHWM:":
			hwm = v << 10
		}
	}
	return rss, hwm
}

// procPss reads the proportional set size of a process.
func procPss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "Pss:" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v << 10
		}
	}
	return 0
}

func (s *server) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
}

// podman runs each call as `podman run --rm -i` with the flags that work on
// these machines (see PLATFORM.md).
type podman struct {
	base  []string
	image string
	input []byte
}

func newPodman(dir string) (*podman, error) {
	if _, err := exec.LookPath("podman"); err != nil {
		return nil, fmt.Errorf("podman not found: apt-get install podman runc")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return nil, fmt.Errorf("runc not found: apt-get install runc")
	}
	return &podman{base: []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"), "--storage-driver", "vfs", "--cgroup-manager", "cgroupfs", "--runtime", "runc"}}, nil
}

func (p *podman) load(tarball string, input []byte) (*podman, error) {
	out, err := exec.Command("podman", append(p.base, "load", "-q", "-i", tarball)...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("podman load: %v\n%s", err, out)
	}
	// "Loaded image: NAME" or "Loaded image(s): NAME".
	s := strings.TrimSpace(string(out))
	name := s[strings.LastIndex(s, " ")+1:]
	return &podman{base: p.base, image: name, input: input}, nil
}

func (p *podman) call(ctx context.Context, _ int) error {
	args := append(append([]string{}, p.base...), "run", "--rm", "-i", "--network", "none",
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", p.image)
	return runWithInput(exec.CommandContext(ctx, "podman", args...), p.input)
}

// copyExecutable copies the executable src to dst.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
