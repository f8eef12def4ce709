// Package e2e runs the real ocifn binary as its own process against real
// crun containers built from the real test images, and calls it over real
// gRPC.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

var (
	// repoRoot is the root of this repository.
	repoRoot string
	// ocifnBin is the ocifn binary built for this test run.
	ocifnBin string
	// images is where hack/testdata.sh writes the test image tarballs.
	images string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	repoRoot = filepath.Dir(wd)
	images = filepath.Join(repoRoot, "testdata", "build")

	// World-readable, so the test that runs ocifn as an unprivileged user
	// can execute it.
	binDir, err := os.MkdirTemp("", "ocifn-e2e-bin-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(binDir)
	if err := os.Chmod(binDir, 0o755); err != nil {
		panic(err)
	}
	ocifnBin = filepath.Join(binDir, "ocifn")
	if err := buildOcifn(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	if err := buildImages(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		return 1
	}
	before := hostDevices()
	code := m.Run()
	// Containers get host device nodes bound into their /dev; nothing any
	// test did may have changed the nodes themselves (their owner, say).
	if after := hostDevices(); after != before {
		fmt.Fprintf(os.Stderr, "e2e: the host's device nodes changed during the tests:\nbefore: %s\nafter:  %s\n", before, after)
		return 1
	}
	return code
}

// Where the tests run without a Go toolchain or buildah (the cgroup v2
// guest of `make test-cgroupv2`), the host builds what TestMain and the
// package tests would build and says where it is:
//
//	OCIFN_E2E_BIN            the ocifn binary under test, instead of go build
//	OCIFN_E2E_PREBUILT=1     the test images are in testdata/build already:
//	                         hack/testdata.sh is not run
//	OCIFN_E2E_RUNTIME_IMAGE  the runtime image (hack/runtime-image.sh) built
//	                         from that binary
//
// OCIFN_E2E_TIME_SCALE (a whole number, default 1) stretches the harness's
// own waits (a server's start, a call, an exit) on a slow machine; the
// emulated guest sets it. Timeouts a test gives ocifn are its own.
const (
	envTimeScale    = "OCIFN_E2E_TIME_SCALE"
	envBin          = "OCIFN_E2E_BIN"
	envPrebuilt     = "OCIFN_E2E_PREBUILT"
	envRuntimeImage = "OCIFN_E2E_RUNTIME_IMAGE"
)

// patient stretches one of the harness's waits by OCIFN_E2E_TIME_SCALE.
func patient(d time.Duration) time.Duration {
	if n, err := strconv.Atoi(os.Getenv(envTimeScale)); err == nil && n > 1 {
		return d * time.Duration(n)
	}
	return d
}

// buildOcifn puts the binary under test at ocifnBin.
func buildOcifn() error {
	if bin := os.Getenv(envBin); bin != "" {
		data, err := os.ReadFile(bin)
		if err != nil {
			return fmt.Errorf("%s: %w", envBin, err)
		}
		return os.WriteFile(ocifnBin, data, 0o755)
	}
	build := exec.Command("go", "build", "-o", ocifnBin, "./cmd/ocifn")
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("cannot build ocifn: %v\n%s", err, out)
	}
	return nil
}

// buildImages builds the test images, unless they are prebuilt.
func buildImages() error {
	if os.Getenv(envPrebuilt) == "1" {
		if _, err := os.Stat(image("labelizer.tar")); err != nil {
			return fmt.Errorf("%s=1 but the test images are missing (run make testdata): %w", envPrebuilt, err)
		}
		return nil
	}
	// The image builder is incremental: a no-op when `make testdata` ran.
	td := exec.Command(filepath.Join(repoRoot, "hack", "testdata.sh"), images)
	td.Stdout, td.Stderr = os.Stderr, os.Stderr
	if err := td.Run(); err != nil {
		return fmt.Errorf("cannot build the test images: %w", err)
	}
	return nil
}

// hostDevices describes the owner and mode of the device nodes every
// container gets from the host.
func hostDevices() string {
	var b strings.Builder
	for _, name := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		var st syscall.Stat_t
		if err := syscall.Stat("/dev/"+name, &st); err != nil {
			fmt.Fprintf(&b, "%s: %v; ", name, err)
			continue
		}
		fmt.Fprintf(&b, "%s %d:%d %o; ", name, st.Uid, st.Gid, st.Mode)
	}
	return b.String()
}

// image returns the path of a test image tarball.
func image(name string) string { return filepath.Join(images, name) }

// syncBuffer is a bytes.Buffer safe for a writer goroutine and readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// server is a running `ocifn serve` process.
type server struct {
	t      *testing.T
	cmd    *exec.Cmd
	addr   string
	conn   *grpc.ClientConn
	stderr *syncBuffer
	exited chan struct{}
	// warm is the server's --warm: how many created containers it keeps
	// besides those of running calls.
	warm int
}

// defaultWarm mirrors the default of ocifn serve --warm.
const defaultWarm = 2

// warmOf returns the --warm value in args.
func warmOf(args []string) int {
	for i, a := range args {
		if a == "--warm" && i+1 < len(args) {
			n, _ := strconv.Atoi(args[i+1])
			return n
		}
	}
	return defaultWarm
}

var (
	// Text and JSON logs.
	servingLine = regexp.MustCompile(`msg=serving address=(\S+)|"msg":"serving","address":"([^"]+)"`)
	metricsLine = regexp.MustCompile(`msg="serving metrics" address=(\S+)|"msg":"serving metrics","address":"([^"]+)"`)
)

// metricsURL returns the URL of the server's Prometheus endpoint.
func (s *server) metricsURL(t *testing.T) string {
	t.Helper()
	m := metricsLine.FindStringSubmatch(s.stderr.String())
	if m == nil {
		t.Fatalf("the server did not log its metrics address:\n%s", s.stderr)
	}
	return "http://" + m[1] + m[2] + "/metrics"
}

// metric is the value of one series of the server's metrics now.
func (s *server) metric(t *testing.T, series string) float64 {
	t.Helper()
	return metricValue(t, scrape(t, s.metricsURL(t)), series)
}

// serverOption adjusts how a server process is started.
type serverOption func(*exec.Cmd)

// asUser runs the server with the given credentials.
func asUser(uid, gid uint32, home string) serverOption {
	return func(c *exec.Cmd) {
		if c.SysProcAttr == nil {
			c.SysProcAttr = &syscall.SysProcAttr{}
		}
		c.SysProcAttr.Credential = &syscall.Credential{Uid: uid, Gid: gid}
		c.Env = append(c.Env, "HOME="+home, "XDG_CACHE_HOME="+filepath.Join(home, ".cache"))
	}
}

// startServer starts `ocifn serve --insecure` on a free loopback port with the
// given extra arguments and waits until it reports SERVING. The process is
// stopped with SIGTERM when the test ends, and must exit cleanly.
func startServer(t *testing.T, args []string, opts ...serverOption) *server {
	t.Helper()
	s := startProcess(t, append([]string{"--insecure"}, args...), opts...)
	deadline := time.After(patient(60 * time.Second))
	for s.addr == "" {
		select {
		case <-s.exited:
			t.Fatalf("ocifn serve exited before serving: %v\n%s", s.cmd.ProcessState, s.stderr)
		case <-deadline:
			t.Fatalf("ocifn serve did not start serving within %s:\n%s", patient(60*time.Second), s.stderr)
		case <-time.After(20 * time.Millisecond):
			if m := servingLine.FindStringSubmatch(s.stderr.String()); m != nil {
				s.addr = m[1] + m[2]
			}
		}
	}
	conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	s.conn = conn
	mustBeServing(t, conn, s.stderr)
	return s
}

// mustBeServing fails unless the standard health service over conn says
// SERVING; log is shown if not.
func mustBeServing(t *testing.T, conn *grpc.ClientConn, log fmt.Stringer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rsp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || rsp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health check: %v %v\nlog:\n%s", rsp.GetStatus(), err, log)
	}
}

// cacheDir returns a new cache directory that the containers' unprivileged
// ids can reach (t.TempDir's parents are private to root).
func cacheDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "ocifn-e2e-cache-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// listeningAt matches the line a server logs once its port takes
// connections, before its image is unpacked.
var listeningAt = regexp.MustCompile(`msg=listening (?:api=\S+ )?address=(\S+)`)

// awaitListening waits for s to take connections, and returns its address.
func (s *server) awaitListening(t *testing.T) string {
	t.Helper()
	return listeningAddress(t, s.stderr)
}

// listeningAddress waits for the server whose log is stderr, gRPC or HTTP
// front, to take connections, and returns its address.
func listeningAddress(t *testing.T, stderr *syncBuffer) string {
	t.Helper()
	var addr string
	eventually(t, 30*time.Second, "listening", func() bool {
		if m := listeningAt.FindStringSubmatch(stderr.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	return addr
}

// startProcess starts `ocifn serve` without waiting for it.
func startProcess(t *testing.T, args []string, opts ...serverOption) *server {
	t.Helper()
	full := append([]string{"serve", "--address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--cache-dir", cacheDir(t)}, args...)
	cmd := exec.Command(ocifnBin, full...)
	cmd.Env = os.Environ()
	for _, o := range opts {
		o(cmd)
	}
	s := &server{t: t, cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{}), warm: warmOf(args)}
	cmd.Stdout, cmd.Stderr = s.stderr, s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(s.stop)
	return s
}

// stop terminates the server and checks that it shut down cleanly.
func (s *server) stop() {
	if s.conn != nil {
		s.conn.Close()
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
		if !s.cmd.ProcessState.Success() {
			s.t.Errorf("ocifn serve did not exit cleanly on SIGTERM: %v\n%s", s.cmd.ProcessState, s.stderr)
		}
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		s.t.Errorf("ocifn serve did not stop within 30s of SIGTERM\n%s", s.stderr)
	}
}

// wait waits for the process to exit by itself and returns its stderr.
func (s *server) wait(t *testing.T) string {
	t.Helper()
	awaitExit(t, s.exited, "ocifn serve", s.stderr)
	return s.stderr.String()
}

// call sends a v1 RunFunction request.
func (s *server) call(t *testing.T, req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
	t.Helper()
	return callOver(t, s.conn, req, s.stderr)
}

// awaitExit waits up to a minute for a process to exit by itself.
func awaitExit(t *testing.T, exited <-chan struct{}, what string, log fmt.Stringer) {
	t.Helper()
	select {
	case <-exited:
	case <-time.After(patient(60 * time.Second)):
		t.Fatalf("%s still running after %s\nlog:\n%s", what, patient(60*time.Second), log)
	}
}

// callOver sends a v1 RunFunction request over conn; log is shown if it
// fails.
func callOver(t *testing.T, conn *grpc.ClientConn, req *fnv1.RunFunctionRequest, log fmt.Stringer) *fnv1.RunFunctionResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patient(60*time.Second))
	defer cancel()
	rsp, err := fnv1.NewFunctionRunnerServiceClient(conn).RunFunction(ctx, req)
	if err != nil {
		t.Fatalf("RunFunction: %v\nlog:\n%s", err, log)
	}
	return rsp
}

// loadRequest reads a RunFunctionRequest in protojson from testdata.
func loadRequest(t *testing.T, function, file string) *fnv1.RunFunctionRequest {
	t.Helper()
	req := &fnv1.RunFunctionRequest{}
	unmarshalFile(t, filepath.Join(repoRoot, "testdata", "functions", function, file), req)
	return req
}

// loadResponse reads an expected RunFunctionResponse from testdata.
func loadResponse(t *testing.T, function, file string) *fnv1.RunFunctionResponse {
	t.Helper()
	rsp := &fnv1.RunFunctionResponse{}
	unmarshalFile(t, filepath.Join(repoRoot, "testdata", "functions", function, file), rsp)
	return rsp
}

func unmarshalFile(t *testing.T, path string, m proto.Message) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := protojson.Unmarshal(data, m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// jsonRequest builds a request from protojson text.
func jsonRequest(t *testing.T, text string) *fnv1.RunFunctionRequest {
	t.Helper()
	req := &fnv1.RunFunctionRequest{}
	if err := protojson.Unmarshal([]byte(text), req); err != nil {
		t.Fatalf("bad test request: %v\n%s", err, text)
	}
	return req
}

// mustContain fails unless s contains every one of subs.
func mustContain(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q:\n%s", what, sub, s)
		}
	}
}

// runOcifn runs ocifn to completion and returns its combined output.
func runOcifn(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, ocifnBin, args...)
	cmd.Env = append(os.Environ(), "TLS_SERVER_CERTS_DIR=")
	out, err := cmd.CombinedOutput()
	return string(out), err
}
