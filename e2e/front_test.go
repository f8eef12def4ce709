package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// httpFront is a running `ocifn serve --api openwhisk|http` process, with
// its stdout and stderr apart: OpenWhisk reads activation logs from both.
type httpFront struct {
	t   *testing.T
	cmd *exec.Cmd
	url string
	// client, when set, reaches the server (a pod in its own network
	// namespace); else http.DefaultClient.
	client         *http.Client
	stdout, stderr *syncBuffer
	exited         chan struct{}
}

var frontServingLine = regexp.MustCompile(`msg=serving address=(\S+) api=`)

// startFront starts ocifn serve with --api api on a free loopback port and
// waits until /healthz answers 200. It is stopped with SIGTERM when the
// test ends and must exit cleanly.
func startFront(t *testing.T, api string, args []string, env ...string) *httpFront {
	t.Helper()
	return runFront(t, append([]string{"serve", "--api", api, "--address", "127.0.0.1:0", "--cache-dir", cacheDir(t)}, args...), env...)
}

// runFront runs ocifn with args, an HTTP front's serve, as startFront
// does.
func runFront(t *testing.T, args []string, env ...string) *httpFront {
	t.Helper()
	f := runFrontUnready(t, args, env...)
	f.awaitServing(t)
	return f
}

// runFrontUnready runs ocifn with args, as runFront does, without waiting
// for it to serve.
func runFrontUnready(t *testing.T, args []string, env ...string) *httpFront {
	t.Helper()
	cmd := exec.Command(ocifnBin, args...)
	cmd.Env = append(os.Environ(), env...)
	f := &httpFront{t: t, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = f.stdout, f.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		close(f.exited)
	}()
	t.Cleanup(f.stop)
	return f
}

// awaitListening waits for f to take connections, before its image is
// unpacked, and returns its address.
func (f *httpFront) awaitListening(t *testing.T) string {
	t.Helper()
	return listeningAddress(t, f.stderr)
}

func (f *httpFront) awaitServing(t *testing.T) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case <-f.exited:
			t.Fatalf("ocifn serve exited before serving: %v\n%s", f.cmd.ProcessState, f.stderr)
		case <-deadline:
			t.Fatalf("ocifn serve did not start serving within 60s:\n%s", f.stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if m := frontServingLine.FindStringSubmatch(f.stderr.String()); m != nil {
			f.url = "http://" + m[1]
			break
		}
	}
	if code, body := f.get(t, "/healthz"); code != http.StatusOK {
		t.Fatalf("GET /healthz: %d %s", code, body)
	}
}

// stop terminates the server and checks that it shut down cleanly.
func (f *httpFront) stop() {
	select {
	case <-f.exited:
		return
	default:
	}
	_ = f.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-f.exited:
		if !f.cmd.ProcessState.Success() {
			f.t.Errorf("ocifn serve did not exit cleanly on SIGTERM: %v\n%s", f.cmd.ProcessState, f.stderr)
		}
	case <-time.After(30 * time.Second):
		_ = f.cmd.Process.Kill()
		f.t.Errorf("ocifn serve did not stop within 30s of SIGTERM\n%s", f.stderr)
	}
}

// do sends a request and returns the status, the headers and the body.
func (f *httpFront) do(t *testing.T, method, path string, body []byte, header http.Header) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, f.url+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	client := f.client
	if client == nil {
		client = http.DefaultClient
	}
	rsp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v\nlog:\n%s", method, path, err, f.stderr)
	}
	defer rsp.Body.Close()
	b, err := io.ReadAll(rsp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return rsp.StatusCode, rsp.Header, b
}

func (f *httpFront) post(t *testing.T, path, body string) (int, string) {
	t.Helper()
	code, _, b := f.do(t, http.MethodPost, path, []byte(body), http.Header{"Content-Type": {"application/json"}})
	return code, string(b)
}

func (f *httpFront) get(t *testing.T, path string) (int, string) {
	t.Helper()
	code, _, b := f.do(t, http.MethodGet, path, nil, nil)
	return code, string(b)
}

// countOf counts the lines of s equal to line.
func countOf(s, line string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		if l == line {
			n++
		}
	}
	return n
}

// startFrontPod builds a package of fnTar with ocifn build --api api and
// runs it the way its platform runs an image: crun, the image's own
// entrypoint with no arguments, the platform's environment variables, and
// HTTP to port 8080 in the pod's network namespace.
func startFrontPod(t *testing.T, api, fnTar string, env ...string) *httpFront {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test starts the pod's container with crun and must run as root (CI does)")
	}
	rt := runtimeImage(t)
	xpkg := filepath.Join(t.TempDir(), "fn.tar")
	out, err := runOcifn(t, "build", "--from-oci-tarball", image(fnTar), "--name", "function-"+api, "--api", api,
		"--runtime-image-tarball", rt, "-o", xpkg)
	if err != nil {
		t.Fatalf("ocifn build --api %s: %v\n%s", api, err, out)
	}
	img, err := tarball.ImageFromPath(xpkg, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.Labels["dev.ocifn.api"] != api || !slices.Contains(cf.Config.Env, "OCIFN_API="+api) {
		t.Errorf("the image config does not record --api %s: labels %v env %v", api, cf.Config.Labels, cf.Config.Env)
	}
	if _, ok := cf.Config.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("the image does not expose 8080/tcp: %v", cf.Config.ExposedPorts)
	}
	rootfs := unpackPackage(t, img)
	cf = cf.DeepCopy()
	cf.Config.Env = append(cf.Config.Env, env...)
	p := startPodProcess(t, rootfs, cf, podSettings{})
	p.waitServing(t)
	mustContain(t, "pod log", p.log.String(), "address=[::]:8080 api="+api)
	dial := dialInNetns(fmt.Sprintf("/proc/%d/ns/net", p.pid(t)))
	f := &httpFront{t: t, url: "http://127.0.0.1:8080", stdout: p.log, stderr: p.log,
		client: &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return dial(ctx, addr) },
		}}}
	if code, body := f.get(t, "/healthz"); code != http.StatusOK {
		t.Fatalf("GET /healthz: %d %s", code, body)
	}
	return f
}
