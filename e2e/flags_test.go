package e2e

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ocifn/ocifn/oci"
)

// TestServeRefusesFlagsThatCannotWork: a flag value that would leave the
// server unable to do what it was asked (every call failing, or a flag
// with no effect) stops the startup with an error naming the flag, rather
// than a server that starts and then fails or ignores it.
func TestServeRefusesFlagsThatCannotWork(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  []string
		want []string
	}{
		// crun cannot write such a map: the server served, and every call
		// got a Fatal result "writing file /proc/PID/gid_map: Invalid
		// argument".
		{"id_map_past_the_last_id", []string{"--id-map-start", "4294967295"}, nil, []string{"--id-map-start", "--id-map-size"}},
		{"id_map_of_no_ids", []string{"--id-map-size", "0"}, nil, []string{"--id-map-size"}},
		// Root in the function would be root on the host.
		{"id_map_from_host_root", []string{"--id-map-start", "0"}, nil, []string{"--id-map-start", "root"}},
		// The HTTP fronts' calls are not RunFunctionRequests: the mode
		// was ignored.
		{"io_with_the_http_front", []string{"--api", "http", "--io", "krm"}, nil, []string{"--io krm", "--api http", "CGI"}},
		{"io_with_the_openwhisk_front", []string{"--api", "openwhisk", "--io", "json"}, nil, []string{"--io json", "--api openwhisk"}},
		// Profiles are served on the metrics address, off here (the
		// harness passes --metrics-address "") and by default on the
		// HTTP fronts: --profiling did nothing.
		// The cache was off: --cache-ttl was ignored.
		{"cache_off_with_a_ttl", []string{"--cache=false", "--cache-ttl", "1m"}, nil, []string{"--cache=false", "--cache-ttl 1m0s"}},
		{"profiling_without_metrics", []string{"--profiling"}, nil, []string{"--profiling", "--metrics-address"}},
		// 512 bytes, the unit left out: every call ended "exited with
		// code 139 (stderr was empty)".
		{"memory_limit_without_a_unit", []string{"--memory-limit", "512"}, nil, []string{"--memory-limit 512", "without a unit", "512Mi"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--insecure", "--address", "127.0.0.1:0", "--metrics-address", "", "--cache-dir", cacheDir(t), "--tarball", image("labelizer.tar")}, tc.args...)
			out, err := runWithin(t, tc.env, args...)
			if strings.Contains(out, "msg=serving ") {
				t.Errorf("the server reported serving:\n%s", out)
			}
			if err == nil {
				t.Fatalf("ocifn %s exited 0:\n%s", strings.Join(args, " "), out)
			}
			mustContain(t, "output", out, tc.want...)
		})
	}
}

// TestIOFromTheEnvironmentWithAnHTTPFront: a package built before ocifn
// build refused --io with --api http carries OCIFN_IO: it is served, and
// the log says the mode is ignored, whatever the mode, one this ocifn
// does not know included: the front never reads it.
func TestIOFromTheEnvironmentWithAnHTTPFront(t *testing.T) {
	for _, mode := range []string{"functionio", "yaml"} {
		t.Run(mode, func(t *testing.T) {
			f := startCGI(t, nil, "OCIFN_IO="+mode)
			mustContain(t, "log", f.stderr.String(), "OCIFN_IO in the environment is ignored", "--api http")
		})
	}
}

// TestBuildRefusesIOForHTTPFronts: ocifn build --io records an I/O mode
// that ocifn serve --api http or openwhisk cannot use.
func TestBuildRefusesIOForHTTPFronts(t *testing.T) {
	pkg := filepath.Join(t.TempDir(), "fn.tar")
	out, err := runWithin(t, nil, "build", "--from-oci-tarball", image("cgi.tar"), "--name", "fn", "--api", "http", "--io", "krm",
		"--runtime-image-tarball", runtimeImage(t), "-o", pkg)
	if err == nil {
		t.Fatalf("ocifn build --api http --io krm wrote a package:\n%s", out)
	}
	mustContain(t, "output", out, "--io krm", "--api http")
	if _, err := os.Stat(pkg); err == nil {
		t.Errorf("%s was written", pkg)
	}
}

// runWithin runs ocifn with env added and returns its combined output; it
// fails the test if ocifn is still running after 20 s (a server that
// started instead of refusing its flags).
func runWithin(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patient(20*time.Second))
	defer cancel()
	cmd := exec.CommandContext(ctx, ocifnBin, args...)
	cmd.Env = append(append(os.Environ(), "TLS_SERVER_CERTS_DIR="), env...)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("ocifn %s still ran after %s, killed:\n%s", strings.Join(args, " "), patient(20*time.Second), out)
	}
	return string(out), err
}

// TestRelativeCacheDir: --cache-dir may be relative to the working
// directory, as any path on a command line. Run as root, ocifn walked up
// from it to / to check the containers' ids could reach it, and
// filepath.Dir of a relative path ends at ".", never "/": it spun at
// 100% CPU for ever.
func TestRelativeCacheDir(t *testing.T) {
	wd := cacheDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), patient(30*time.Second))
	defer cancel()
	cmd := exec.CommandContext(ctx, ocifnBin, "test", "--cache-dir", "cache", image("labelizer.tar"),
		filepath.Join(repoRoot, "testdata", "functions", "labelizer", "request.json"))
	cmd.Dir = wd
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("ocifn test --cache-dir cache still ran after %s, killed:\n%s", patient(30*time.Second), out)
	}
	if err != nil {
		t.Fatalf("ocifn test --cache-dir cache: %v\n%s", err, out)
	}
	mustContain(t, "output", string(out), "ocifn.dev/labelized")
	if left, _ := filepath.Glob(filepath.Join(wd, "cache", "bundle-*")); len(left) > 0 {
		t.Errorf("the cache directory still holds %v", left)
	}
}

// TestStartupWarningsOnce: each warning of the startup is logged once,
// also where ocifn re-executes itself in namespaces of its own (as root on
// a hybrid cgroup host, and whenever it is started unprivileged): the
// process that re-executes logged them too.
func TestStartupWarningsOnce(t *testing.T) {
	f := startCGI(t, []string{"--warm", "3", "--tls-server-certs-dir", t.TempDir()}, "OCIFN_IO=krm")
	for _, w := range []string{"--tls-server-certs-dir (or TLS_SERVER_CERTS_DIR) applies", "OCIFN_IO in the environment is ignored", "--warm does not apply"} {
		if n := len(regexp.MustCompile(regexp.QuoteMeta(w)).FindAllString(f.stderr.String(), -1)); n != 1 {
			t.Errorf("%q logged %d times, want once:\n%s", w, n, f.stderr)
		}
	}
}

// TestHTTPFrontListensOnThePlatformsPort: Kubeless tells its runtimes the
// port to listen on in FUNC_PORT (the function's port, 8080 unless
// deployed with another), Knative in PORT (the container port); without
// --address, --api http listens there, as their runtimes do.
func TestHTTPFrontListensOnThePlatformsPort(t *testing.T) {
	for _, env := range []string{"FUNC_PORT", "PORT"} {
		t.Run(env, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			port := strconv.Itoa(lis.Addr().(*net.TCPAddr).Port)
			lis.Close()
			f := runFront(t, []string{"serve", "--api", "http", "--tarball", image("cgi.tar"), "--cache-dir", cacheDir(t)}, env+"="+port)
			if !strings.HasSuffix(f.url, ":"+port) {
				t.Fatalf("%s=%s: the front serves on %s\n%s", env, port, f.url, f.stderr)
			}
		})
	}
	out, err := runWithin(t, []string{"FUNC_PORT=http"}, "serve", "--api", "http", "--tarball", image("cgi.tar"), "--cache-dir", cacheDir(t))
	if err == nil {
		t.Fatalf("FUNC_PORT=http was taken:\n%s", out)
	}
	mustContain(t, "output", out, "FUNC_PORT")

	// A port of the environment that cannot be listened on is named as
	// the variable's, not as --address, which was not given.
	busy, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := strconv.Itoa(busy.Addr().(*net.TCPAddr).Port)
	out, err = runWithin(t, []string{"PORT=" + port}, "serve", "--api", "http", "--tarball", image("cgi.tar"), "--cache-dir", cacheDir(t))
	if err == nil {
		t.Fatalf("PORT=%s, a port in use, was taken:\n%s", port, out)
	}
	mustContain(t, "output", out, ":"+port+" (the port in PORT)")
}

// TestTwoHTTPServersOnOneCacheDir: servers that share the directory of
// the asynchronous invocations (a function's replicas on one volume; here
// one --cache-dir) each answer the others' invocations: 202 while the call
// runs on another server, then its result. A second server there once
// refused to start, so that a poll reaching a replica other than the one
// that took the invocation answered 404. A server killed mid-call is gone:
// the other answers its invocation as cut off, 500, while its own calls
// keep running; after both restart, every result is still there.
func TestTwoHTTPServersOnOneCacheDir(t *testing.T) {
	cache := cacheDir(t)
	first := startCGI(t, []string{"--cache-dir", cache})
	second := startCGI(t, []string{"--cache-dir", cache})

	loc := first.asyncStart(t, http.MethodGet, "/sleep?2")
	if code, body := second.get(t, loc); code != http.StatusAccepted {
		t.Errorf("GET %s on the second server while the call runs on the first: %d %q, want 202", loc, code, body)
	}
	if code, body := second.asyncResult(t, loc); code != http.StatusOK || body != "slept 2\n" {
		t.Errorf("the first server's result on the second: %d %q, want 200", code, body)
	}
	back := second.asyncStart(t, http.MethodGet, "/status")
	if code, body := first.asyncResult(t, back); code != 418 || body != `{"tea": true}` {
		t.Errorf("the second server's result on the first: %d %q, want 418", code, body)
	}

	// The first is killed while it runs a call, the second while it runs
	// one of its own.
	cut := first.asyncStart(t, http.MethodGet, "/sleep?30")
	alive := second.asyncStart(t, http.MethodGet, "/sleep?3")
	_ = first.cmd.Process.Kill()
	<-first.exited
	code, body := second.asyncResult(t, cut)
	if code != http.StatusInternalServerError {
		t.Errorf("the killed server's invocation on the other: %d %q, want 500", code, body)
	}
	mustContain(t, "the cut-off call's result", body, "the ocifn server running it stopped")
	if code, body := second.asyncResult(t, alive); code != http.StatusOK || body != "slept 3\n" {
		t.Errorf("the surviving server's own invocation: %d %q, want 200", code, body)
	}

	second.stop()
	again := []*httpFront{startCGI(t, []string{"--cache-dir", cache}), startCGI(t, []string{"--cache-dir", cache})}
	for i, f := range again {
		for _, c := range []struct {
			loc  string
			code int
			body string
		}{{loc, http.StatusOK, "slept 2\n"}, {back, 418, `{"tea": true}`}, {alive, http.StatusOK, "slept 3\n"}, {cut, http.StatusInternalServerError, ""}} {
			code, body := f.get(t, c.loc)
			if code != c.code || (c.body != "" && body != c.body) {
				t.Errorf("GET %s on restarted server %d: %d %q, want %d %q", c.loc, i, code, body, c.code, c.body)
			}
		}
	}
}

// TestServeErrorsSayWhatWasGiven: a refused startup names the value it
// was given, where it came from, and advice that fits it.
func TestServeErrorsSayWhatWasGiven(t *testing.T) {
	cases := []struct {
		name      string
		args      []string
		env       []string
		want, not []string
	}{
		// The HTTP fronts set --warm to 0 before it was checked: -1 was
		// accepted without a word, where the gRPC front refuses it.
		{"negative_warm_with_the_http_front", []string{"--api", "http", "--warm", "-1"}, nil, []string{"--warm -1", "must not be negative"}, nil},
		{"negative_warm_with_the_openwhisk_front", []string{"--api", "openwhisk", "--warm", "-1"}, nil, []string{"--warm -1", "must not be negative"}, nil},
		// The HTTP fronts ignore the gRPC front's flags with a warning,
		// but not a value no front could take; the refusal said nothing
		// of the front, where the README said they were ignored.
		{"negative_cache_ttl_with_the_http_front", []string{"--api", "http", "--cache-ttl", "-1s"}, nil, []string{"--cache-ttl -1s", "--api http ignores this flag of the gRPC front, but not a value no front could take"}, nil},
		{"zero_max_recv_msg_size_with_the_openwhisk_front", []string{"--api", "openwhisk", "--max-recv-msg-size", "0"}, nil, []string{"--max-recv-msg-size 0: must be positive", "--api openwhisk ignores this flag of the gRPC front"}, nil},
		{"zero_max_recv_msg_size_with_the_crossplane_front", []string{"--max-recv-msg-size", "0"}, nil, []string{"--max-recv-msg-size 0: must be positive"}, []string{"ignores"}},
		// A path was said to need crun on PATH.
		{"runtime_path_not_there", []string{"--runtime", "/nonexistent/crun"}, nil, []string{"/nonexistent/crun", "--runtime"}, []string{"on PATH"}},
		// "pass one" of two things of which the user passed only one.
		{"insecure_with_the_certs_dir_from_the_environment", nil, []string{"TLS_SERVER_CERTS_DIR=/etc/certs"}, []string{"--insecure", "TLS_SERVER_CERTS_DIR=/etc/certs", "environment"}, []string{"pass one"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--insecure", "--address", "127.0.0.1:0", "--metrics-address", "", "--cache-dir", cacheDir(t), "--tarball", image("labelizer.tar")}, tc.args...)
			out, err := runWithin(t, tc.env, args...)
			if err == nil {
				t.Fatalf("ocifn %s exited 0:\n%s", strings.Join(args, " "), out)
			}
			mustContain(t, "output", out, tc.want...)
			for _, s := range tc.not {
				if strings.Contains(out, s) {
					t.Errorf("the output says %q:\n%s", s, out)
				}
			}
		})
	}
}

// TestFatalErrorIsAJSONLogRecord: with --log-format json, the error ocifn
// exits with is a JSON record like every other line of its log, whether
// it stops at its flags or once it serves in its own namespaces. It was a
// plain "ocifn: ..." line, which a collector parsing the log as JSON
// drops or mangles.
func TestFatalErrorIsAJSONLogRecord(t *testing.T) {
	notAnImage := filepath.Join(t.TempDir(), "function.tar")
	if err := os.WriteFile(notAnImage, []byte("not a tarball\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"flag", []string{"--tarball", image("labelizer.tar"), "--max-concurrency", "0"}, "--max-concurrency 0"},
		{"image", []string{"--tarball", notAnImage}, notAnImage},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--insecure", "--log-format", "json", "--address", "127.0.0.1:0", "--metrics-address", "", "--cache-dir", cacheDir(t)}, tc.args...)
			out, err := runWithin(t, nil, args...)
			if err == nil {
				t.Fatalf("ocifn %s exited 0:\n%s", strings.Join(args, " "), out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			for _, l := range lines {
				var rec map[string]any
				if err := json.Unmarshal([]byte(l), &rec); err != nil {
					t.Errorf("a line of the log is not JSON (%v): %s", err, l)
				}
			}
			var last struct{ Level, Error string }
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
				t.Fatalf("the last line is not JSON: %v\n%s", err, out)
			}
			if last.Level != "ERROR" || !strings.Contains(last.Error, tc.want) {
				t.Errorf("the last record is %+v, want level ERROR and an error naming %q:\n%s", last, tc.want, out)
			}
		})
	}
}

// TestHTTPFrontIgnoresTheImagesIOMode: an I/O mode is how a Crossplane
// request reaches the function; the HTTP fronts neither use the one an
// image records (label dev.ocifn.io) nor say they do, and one this ocifn
// does not know does not stop them.
func TestHTTPFrontIgnoresTheImagesIOMode(t *testing.T) {
	labeled := labeledImage(t, "cgi.tar", map[string]string{oci.LabelIO: "yaml-of-the-future"})
	f := startFront(t, "http", []string{"--tarball", labeled})
	if code, body := f.get(t, "/plain"); code != http.StatusOK || body != "no header block, just a body\n" {
		t.Errorf("status %d, body %q", code, body)
	}
	if log := f.stderr.String(); strings.Contains(log, " io=") {
		t.Errorf("the HTTP front's log names an I/O mode:\n%s", log)
	}
}
