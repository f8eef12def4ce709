package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"golang.org/x/sys/unix"
)

// smallDisk mounts a tmpfs of size bytes for the test, unmounted when it
// ends, and returns a cache directory in it that containers can reach.
func smallDisk(t *testing.T, size int64) (mount, cache string) {
	t.Helper()
	mount = cacheDir(t)
	if err := unix.Mount("tmpfs", mount, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		t.Fatalf("cannot mount a tmpfs on %s: %v", mount, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mount, unix.MNT_DETACH); err != nil {
			t.Errorf("cannot unmount %s: %v", mount, err)
		}
	})
	cache = filepath.Join(mount, "cache")
	if err := os.Mkdir(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	return mount, cache
}

// freeBytes is what the file system of dir has free.
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * st.Bsize
}

// gzipImage writes the sh-function image with one more, gzipped, layer of
// one file, name, of size zeros: a few kilobytes in the tarball per
// megabyte unpacked.
func gzipImage(t *testing.T, dir, name string, size int64) string {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeroReader{}, size); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	zw.Close()
	data := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return writeImage(t, dir, l)
}

// TestCacheDiskFullDuringUnpack: a cache directory on a disk too small for
// the image. When the layers alone are larger than the free space, serve
// refuses before unpacking; when a compressed layer unpacks past it, serve
// stops at ENOSPC. Either way it exits with an error naming the space the
// image needs and the space there was, and leaves the disk empty.
func TestCacheDiskFullDuringUnpack(t *testing.T) {
	cases := []struct {
		name    string
		disk    int64
		tarball func(t *testing.T) string
		want    []string
	}{
		{
			// sh-function's layers are about 6 MiB.
			name:    "layers_larger_than_the_free_space",
			disk:    2 << 20,
			tarball: func(*testing.T) string { return image("sh-function.tar") },
			want:    []string{"not enough space: the image needs at least", "bytes unpacked (the size of its layers)", "bytes are free"},
		},
		{
			name:    "a_layer_unpacks_past_the_free_space",
			disk:    16 << 20,
			tarball: func(t *testing.T) string { return gzipImage(t, t.TempDir(), "zeros", 32<<20) },
			want:    []string{"layer 5/5", "out of space with", "bytes of the layers read", "the image needs at least", "bytes were free", "no space left on device"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mount, cache := smallDisk(t, tc.disk)
			s := startProcess(t, []string{"--insecure", "--tarball", tc.tarball(t), "--cache-dir", cache})
			log := s.wait(t)
			if s.cmd.ProcessState.Success() {
				t.Fatalf("ocifn serve started on a full disk:\n%s", log)
			}
			mustContain(t, "startup error", log, tc.want...)
			t.Logf("refused: %s", lastLine(log))
			if left, _ := os.ReadDir(cache); len(left) != 0 {
				t.Errorf("left in the cache directory: %v", left)
			}
			// An empty directory may hold a page.
			if free := freeBytes(t, mount); free < tc.disk-64<<10 {
				t.Errorf("%d bytes of %d free after exit", free, tc.disk)
			}
		})
	}
}

// TestCacheDiskFullDuringACall: the disks ocifn writes to while serving
// fill up. A full cache disk does not stop calls: crun's state directory
// is on its own tmpfs (--state-dir). When that one fills, the call that
// meets it gets a Fatal result naming the runtime's error; the server keeps
// serving, once space is back calls work again, and nothing is left.
func TestCacheDiskFullDuringACall(t *testing.T) {
	mount, cache := smallDisk(t, 64<<20)
	stateMount, state := smallDisk(t, 1<<20)
	tmp := t.TempDir()
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--state-dir", state, "--warm", "0"}, privateTmp(tmp))
	s.call(t, shRequest(t, "before", okScript))

	okCall := func(tag string) {
		t.Helper()
		rsp := s.call(t, shRequest(t, tag, okScript))
		if len(rsp.GetResults()) != 0 || rsp.GetDesired().GetResources()["a"] == nil {
			t.Errorf("call %s: %v", tag, rsp)
		}
	}
	cacheFiller := fill(t, mount)
	okCall("cache-disk-full")
	if err := os.Remove(cacheFiller); err != nil {
		t.Fatal(err)
	}

	stateFiller := fill(t, stateMount)
	req := shRequest(t, "full", okScript)
	rsp := s.call(t, req)
	wantFatal(t, req, rsp, "could not be run", "crun create")
	if rs := rsp.GetResults(); len(rs) == 1 {
		t.Logf("with the state disk full: %s", rs[0].GetMessage())
		if !strings.Contains(strings.ToLower(rs[0].GetMessage()), "no space left on device") {
			t.Errorf("the Fatal result does not say the disk is full: %s", rs[0].GetMessage())
		}
	}
	if err := os.Remove(stateFiller); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		okCall(fmt.Sprintf("after-%d", i))
	}
	assertNoLeaks(t, s, cache, tmp)
	if left, _ := filepath.Glob(filepath.Join(state, "*", "*")); len(left) != 0 {
		t.Errorf("container state left: %v", left)
	}
}

// fill writes a file in the file system mounted at mount until no block is
// left, and returns its path.
func fill(t *testing.T, mount string) string {
	t.Helper()
	filler := filepath.Join(mount, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(f, zeroReader{})
	f.Close()
	if err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("filling %s: %v", mount, err)
	}
	return filler
}

// faultyRuntime writes a wrapper of crun for --runtime that does what the
// file "next" in the returned directory says, once, for the next `crun
// create`: "segv" dies of SIGSEGV before crun runs; "kill" runs crun,
// which creates the container, then dies of SIGKILL before reporting.
// Otherwise it is crun.
func faultyRuntime(t *testing.T) (wrapper, control string) {
	t.Helper()
	crun, err := exec.LookPath("crun")
	if err != nil {
		t.Fatal(err)
	}
	control = t.TempDir()
	wrapper = filepath.Join(control, "crun-faulty")
	script := fmt.Sprintf(`#!/bin/sh
next=%[1]s/next
case " $* " in
*" create "*)
	fault=$(cat "$next" 2>/dev/null); rm -f "$next"
	case $fault in
	segv) kill -SEGV $$ ;;
	kill) %[2]s "$@"; kill -KILL $$ ;;
	esac ;;
esac
exec %[2]s "$@"
`, control, crun)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return wrapper, control
}

// TestRuntimeDiesMidCall: crun dies while it creates a call's container,
// of a crash or of SIGKILL after the container exists. That call gets a
// Fatal result naming the runtime's failure, the half-made container is
// removed, and the next call works.
func TestRuntimeDiesMidCall(t *testing.T) {
	wrapper, control := faultyRuntime(t)
	cache, tmp := cacheDir(t), t.TempDir()
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache, "--warm", "0", "--runtime", wrapper}, privateTmp(tmp))
	for _, fault := range []struct{ name, want string }{
		{"segv", "signal: segmentation fault"},
		{"kill", "signal: killed"},
	} {
		t.Run(fault.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(control, "next"), []byte(fault.name), 0o644); err != nil {
				t.Fatal(err)
			}
			req := shRequest(t, "fault-"+fault.name, okScript)
			wantFatal(t, req, s.call(t, req), "the function could not be run: crun create", fault.want)
			eventually(t, 5*time.Second, "no container state left", func() bool { return len(containerStates(t, cache)) == 0 })
			rsp := s.call(t, shRequest(t, "next-"+fault.name, okScript))
			if len(rsp.GetResults()) != 0 || rsp.GetDesired().GetResources()["a"] == nil {
				t.Errorf("the call after the fault: %v", rsp)
			}
		})
	}
	assertNoLeaks(t, s, cache, tmp)
	if s.cmd.ProcessState != nil {
		t.Errorf("the server exited: %v", s.cmd.ProcessState)
	}
}

// TestKilledDuringUnpack: ocifn serve gets SIGKILL while it unpacks a
// large layer. A restart on the same cache directory removes the
// half-written bundle (Sweep: its lock died with its process), says so,
// and serves; nothing of the killed run is left.
func TestKilledDuringUnpack(t *testing.T) {
	cache, tmp := cacheDir(t), t.TempDir()
	big := gzipImage(t, t.TempDir(), "zeros", 512<<20)
	s := startProcess(t, []string{"--insecure", "--tarball", big, "--cache-dir", cache})
	// The extracting child is storage-applyLayer DEST, DEST in the cache
	// directory; once it has written something, kill ocifn.
	eventually(t, 60*time.Second, "the image being unpacked", func() bool {
		for _, pid := range processesWith(t, cache) {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if !strings.HasPrefix(string(cmdline), "storage-applyLayer") {
				continue
			}
			zeros := filepath.Join(strings.Split(string(cmdline), "\x00")[1], "zeros")
			if fi, err := os.Stat(zeros); err == nil && fi.Size() > 0 {
				return true
			}
		}
		return false
	})
	if err := s.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	awaitExit(t, s.exited, "ocifn serve after SIGKILL", s.stderr)
	eventually(t, 10*time.Second, "no process of the killed run left", func() bool { return len(processesWith(t, cache)) == 0 })
	left, _ := filepath.Glob(filepath.Join(cache, "bundle-*"))
	if len(left) != 1 {
		t.Fatalf("after SIGKILL the cache directory holds %v, want one half-written bundle", left)
	}
	var size int64
	_ = filepath.Walk(left[0], func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			size += fi.Size()
		}
		return nil
	})
	t.Logf("half-written: %s, %d bytes", left[0], size)

	s2 := startServer(t, []string{"--tarball", image("sh-function.tar"), "--cache-dir", cache}, privateTmp(tmp))
	mustContain(t, "restart log", s2.stderr.String(), "removed what an earlier run left in the cache directory", filepath.Base(left[0]))
	if _, err := os.Stat(left[0]); err == nil {
		t.Errorf("%s is still there after the restart", left[0])
	}
	s2.call(t, shRequest(t, "after-restart", okScript))
	assertNoLeaks(t, s2, cache, tmp)
}

// TestTerminatedDuringUnpack: SIGTERM while the image is still being
// unpacked stops the server as it does once serving: it exits 0, says it
// stopped, and leaves nothing in the cache directory. A pod deleted while
// it starts is not a failed pod.
func TestTerminatedDuringUnpack(t *testing.T) {
	big := gzipImage(t, t.TempDir(), "zeros", 256<<20)
	for _, api := range []string{"crossplane", "http"} {
		t.Run(api, func(t *testing.T) {
			cache := cacheDir(t)
			s := startProcess(t, []string{"--insecure", "--api", api, "--address", "127.0.0.1:0", "--tarball", big, "--cache-dir", cache})
			eventually(t, 60*time.Second, "the image being unpacked", func() bool {
				for _, pid := range processesWith(t, cache) {
					cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
					if strings.HasPrefix(string(cmdline), "storage-applyLayer") {
						return true
					}
				}
				return false
			})
			if err := s.cmd.Process.Signal(unix.SIGTERM); err != nil {
				t.Fatal(err)
			}
			log := s.wait(t)
			if !s.cmd.ProcessState.Success() {
				t.Errorf("SIGTERM during the unpack: %v, want exit 0\n%s", s.cmd.ProcessState, log)
			}
			mustContain(t, "log", log, "stopped")
			// The HTTP fronts' results of asynchronous invocations are
			// kept for the next start.
			if left, _ := filepath.Glob(filepath.Join(cache, "bundle-*")); len(left) > 0 {
				t.Errorf("the cache directory still holds %v", left)
			}
		})
	}
}

// TestHTTPCallsWaitingForTheUnpack: a call that came to an HTTP front
// while its image was being unpacked waits for it; if the server stops
// instead (SIGTERM, or an image that cannot be unpacked), the call is
// answered 503 saying it did not run, as calls are while the server
// drains, rather than left with a connection closed without an answer.
// (OpenWhisk's invoker sends /init as soon as the port takes connections.)
func TestHTTPCallsWaitingForTheUnpack(t *testing.T) {
	big := gzipImage(t, t.TempDir(), "zeros", 512<<20)
	for _, tc := range []struct {
		name string
		args []string
		stop bool
	}{
		{"sigterm", nil, true},
		{"unpack_fails", []string{"--max-rootfs-bytes", "256Mi"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := cacheDir(t)
			s := startProcess(t, append([]string{"--api", "http", "--address", "127.0.0.1:0", "--tarball", big, "--cache-dir", cache}, tc.args...))
			addr := s.awaitListening(t)
			type answer struct {
				code        int
				contentType string
				body        string
				err         error
			}
			answered := make(chan answer, 1)
			go func() {
				rsp, err := http.Get("http://" + addr + "/call")
				if err != nil {
					answered <- answer{err: err}
					return
				}
				defer rsp.Body.Close()
				b, _ := io.ReadAll(rsp.Body)
				answered <- answer{code: rsp.StatusCode, contentType: rsp.Header.Get("Content-Type"), body: string(b)}
			}()
			if tc.stop {
				// The call is in before the signal.
				awaitWaitingForImage(t, addr)
				if err := s.cmd.Process.Signal(unix.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			var a answer
			select {
			case a = <-answered:
			case <-time.After(patient(60 * time.Second)):
				t.Fatalf("no answer to the call within %s\n%s", patient(60*time.Second), s.stderr)
			}
			s.wait(t)
			if a.err != nil || a.code != http.StatusServiceUnavailable || !strings.Contains(a.body, "did not run") {
				t.Errorf("the waiting call got %d %q, %v; want 503 saying it did not run\n%s", a.code, a.body, a.err, s.stderr)
			}
			// In plain text, as every other error of the CGI front.
			if !strings.HasPrefix(a.contentType, "text/plain") || strings.HasPrefix(a.body, "{") {
				t.Errorf("the waiting call's answer is %s %q, want plain text as the front's other errors", a.contentType, a.body)
			}
			// Its line carries an event id, as every CGI call's does.
			if !regexp.MustCompile(`msg=call tag=[0-9a-f]{32} front=http outcome=error method=GET path=/call status=503 `).MatchString(s.stderr.String()) {
				t.Errorf("the waiting call's line has no event id as its tag:\n%s", s.stderr)
			}
		})
	}
}

// awaitWaitingForImage waits until the HTTP front at addr, still
// unpacking its image, has a call waiting for it
// (ocifn_calls_waiting_for_image): the call is past the port, which a
// signal closes, and will be answered.
func awaitWaitingForImage(t *testing.T, addr string) {
	t.Helper()
	eventually(t, 30*time.Second, "a call waiting for the image", func() bool {
		return metricValue(t, scrape(t, "http://"+addr+"/metrics"), "ocifn_calls_waiting_for_image") == 1
	})
}

// TestOpenWhiskRunWaitingForTheUnpack: an activation that came while the
// image was being unpacked and is answered 503 because the server
// stopped first ends with the sentinels on stdout and on stderr, after
// its log line, as every answer to /run does: OpenWhisk's invoker waits
// for them to collect the activation's logs.
func TestOpenWhiskRunWaitingForTheUnpack(t *testing.T) {
	big := gzipImage(t, t.TempDir(), "zeros", 512<<20)
	// ocifn's stdout apart from its stderr, as the invoker reads them.
	f := runFrontUnready(t, []string{"serve", "--api", "openwhisk", "--address", "127.0.0.1:0", "--cache-dir", cacheDir(t), "--tarball", big})
	addr := f.awaitListening(t)
	answered := make(chan int, 1)
	go func() {
		rsp, err := http.Post("http://"+addr+"/run", "application/json", strings.NewReader(`{"value": {}, "activation_id": "a1"}`))
		if err != nil {
			answered <- 0
			return
		}
		rsp.Body.Close()
		answered <- rsp.StatusCode
	}()
	// The activation is in before the signal.
	awaitWaitingForImage(t, addr)
	if err := f.cmd.Process.Signal(unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-answered:
		if code != http.StatusServiceUnavailable {
			t.Errorf("the waiting activation: %d, want 503", code)
		}
	case <-time.After(patient(60 * time.Second)):
		t.Fatalf("no answer to the activation within %s\n%s", patient(60*time.Second), f.stderr)
	}
	awaitExit(t, f.exited, "ocifn serve", f.stderr)
	log := f.stderr.String()
	if got := countOf(f.stdout.String(), owSentinel); got != 1 {
		t.Errorf("stdout holds %d sentinels, want 1:\n%s", got, f.stdout)
	}
	line := strings.Index(log, "path=/run status=503")
	end := strings.LastIndex(log, owSentinel)
	if line < 0 || end < line || countOf(log, owSentinel) != 1 {
		t.Errorf("stderr does not hold the activation's line, then one sentinel:\n%s", log)
	}
}

// TestContainerNotMadeWithinTheTimeout: a call whose container crun has
// not made when --timeout passes (a stuck crun, here a wrapper that never
// runs it) gets a Fatal result saying that the function did not run, with
// crun's failure, not that the function ran longer than the limit, which
// would send its author after the wrong thing.
func TestContainerNotMadeWithinTheTimeout(t *testing.T) {
	wrapper := filepath.Join(t.TempDir(), "crun-stuck")
	crun, err := exec.LookPath("crun")
	if err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\ncase \" $* \" in *\" create \"*) exec sleep 30 ;; esac\nexec %s \"$@\"\n", crun)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, []string{"--tarball", image("sh-function.tar"), "--warm", "0", "--runtime", wrapper, "--timeout", "1s"})
	req := shRequest(t, "t-not-made", okScript)
	rsp := s.call(t, req)
	wantFatal(t, req, rsp, "did not start within the limit of 1s", "crun create")
	if rs := rsp.GetResults(); len(rs) == 1 && strings.Contains(rs[0].GetMessage(), "ran longer") {
		t.Errorf("the Fatal result blames the function, which never ran: %s", rs[0].GetMessage())
	}
	// The call's line is logged a moment after its answer.
	eventually(t, 5*time.Second, "the call logged with outcome=timeout", func() bool { return strings.Contains(s.stderr.String(), "outcome=timeout") })
	// The crun create killed is told of once.
	if lines := stuckLines(s.stderr.String()); len(lines) != 1 || !strings.Contains(lines[0], "command=create container=ocifn-") {
		t.Errorf("want one line for the stuck crun create, got %q\n%s", lines, s.stderr)
	}

	// The HTTP front says the same, with Kubeless' status of a timeout.
	f := startCGI(t, []string{"--runtime", wrapper, "--timeout", "1s"})
	code, body := f.get(t, "/")
	if code != http.StatusRequestTimeout || !strings.Contains(body, "did not start within the limit of 1s") || !strings.Contains(body, "crun create") {
		t.Errorf("the HTTP front: %d %q, want 408 saying that the function did not start, and why", code, body)
	}
}
