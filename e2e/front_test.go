package e2e

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// httpFront is a running `ocifn serve --api openwhisk|http` process, with
// its stdout and stderr apart: OpenWhisk reads activation logs from both.
type httpFront struct {
	t              *testing.T
	cmd            *exec.Cmd
	url            string
	stdout, stderr *syncBuffer
	exited         chan struct{}
}

var frontServingLine = regexp.MustCompile(`msg=serving address=(\S+) api=`)

// startFront starts ocifn serve with --api api on a free loopback port and
// waits until /healthz answers 200. It is stopped with SIGTERM when the
// test ends and must exit cleanly.
func startFront(t *testing.T, api string, args []string, env ...string) *httpFront {
	t.Helper()
	full := append([]string{"serve", "--api", api, "--address", "127.0.0.1:0", "--cache-dir", cacheDir(t)}, args...)
	cmd := exec.Command(ocifnBin, full...)
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
	f.awaitServing(t)
	return f
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
	rsp, err := http.DefaultClient.Do(req)
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
