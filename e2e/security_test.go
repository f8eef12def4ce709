package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// probeRequest asks the probe function to look for the given host files
// and host process marker, and to create tmpName in /tmp.
func probeRequest(t *testing.T, tag string, hostFiles []string, marker, tmpName string) *fnv1.RunFunctionRequest {
	t.Helper()
	in, err := json.Marshal(map[string]any{"hostFiles": hostFiles, "marker": marker, "tmpName": tmpName})
	if err != nil {
		t.Fatal(err)
	}
	return jsonRequest(t, fmt.Sprintf(`{"meta": {"tag": %q}, "desired": {"resources": {"a": {"resource": {"kind": "A"}}}}, "input": %s}`, tag, in))
}

// probeReport calls the probe and returns its report as JSON-decoded maps.
func probeReport(t *testing.T, s *server, req *fnv1.RunFunctionRequest) map[string]any {
	t.Helper()
	rsp := s.call(t, req)
	if len(rsp.GetResults()) != 0 {
		t.Fatalf("probe failed: %v\n%s", rsp.GetResults(), s.stderr)
	}
	return rsp.GetContext().AsMap()
}

func sub(m map[string]any, key string) map[string]any {
	v, _ := m[key].(map[string]any)
	return v
}

// TestIsolationFromInside checks from inside a function (the probe image, a
// static Go program) every isolation claim of the README's security model:
// no host file or process in reach, loopback only, a read-only root, a /tmp
// of its own, an unprivileged uid map, no_new_privs, no capabilities,
// rlimits it cannot raise, and a seccomp filter that refuses what it denies
// (the same probe run on the host, outside any filter, is the control).
func TestIsolationFromInside(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test checks the root mode and must run as root (CI does)")
	}
	cache := cacheDir(t)
	s := startServer(t, []string{"--tarball", image("probe.tar"), "--cache-dir", cache})

	// Host things the function must not reach: a file beside the unpacked
	// image, one in /tmp, /etc/shadow, and a process with a marker.
	marker := fmt.Sprintf("ocifn-probe-marker-%d", os.Getpid())
	beside := filepath.Join(cache, "host-secret")
	inTmp := filepath.Join(os.TempDir(), marker+"-secret")
	for _, p := range []string{beside, inTmp} {
		if err := os.WriteFile(p, []byte("host secret"), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
	}
	sleeper := exec.Command("/bin/sh", "-c", "sleep 300; : "+marker)
	// Its own process group, so that the cleanup kills the sleep too.
	sleeper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-sleeper.Process.Pid, syscall.SIGKILL); _ = sleeper.Wait() })

	got := probeReport(t, s, probeRequest(t, "probe-1", []string{beside, inTmp, "/etc/shadow"}, marker, "call-1"))

	for via, res := range sub(got, "host_files") {
		if res != "ENOENT" {
			t.Errorf("host file through %s: %v, want ENOENT", via, res)
		}
	}
	if got["etc_shadow"] != "ENOENT" || got["proc_1_root"] == "ok" {
		t.Errorf("etc_shadow %v, proc_1_root %v: want the image's own files only", got["etc_shadow"], got["proc_1_root"])
	}
	procs := sub(got, "processes")
	if procs["marker_seen"] != false || procs["count"] != 1.0 || procs["self"] != "1" {
		t.Errorf("processes: %v, want only itself, as pid 1", procs)
	}
	if got["interfaces"] != "lo" {
		t.Errorf("interfaces %v, want lo only", got["interfaces"])
	}
	if got["root_write"] != "EROFS" || got["bin_write"] != "EROFS" {
		t.Errorf("writes to / and /bin: %v, %v, want EROFS", got["root_write"], got["bin_write"])
	}
	if tmp := sub(got, "tmp"); tmp["before"] != nil || tmp["write"] != "ok" {
		t.Errorf("/tmp: %v, want empty and writable", tmp)
	}
	// Nothing of crun's or ocifn's stays open in the function: not the
	// exec fifo its container waited on (hack/crun-patches), not a pipe of
	// another container's.
	if got["fds"] != "0 1 2" {
		t.Errorf("open descriptors %v, want 0 1 2 only", got["fds"])
	}
	for _, m := range []string{"uid_map", "gid_map"} {
		f := strings.Fields(got[m].(string))
		if len(f) != 3 || f[0] != "0" || f[1] != "100000" || f[2] != "65536" {
			t.Errorf("%s %q, want container ids 0-65535 on host ids 100000-165535 only", m, got[m])
		}
	}
	st := sub(got, "status")
	for k, v := range map[string]string{
		"NoNewPrivs": "1", "Seccomp": "2",
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
	} {
		if st[k] != v {
			t.Errorf("/proc/self/status %s: %v, want %s", k, st[k], v)
		}
	}
	// crun's set-up runs on one CPU (hack/crun-patches/setup-on-one-cpu.patch,
	// with the fork server); the function gets back every CPU the server
	// may use.
	mustContain(t, "server log", s.stderr.String(), "crun=fork-server")
	if cpus := statusField(servingPID(t, s), "Cpus_allowed_list"); cpus == "" {
		t.Fatal("no Cpus_allowed_list in the server's /proc/PID/status")
	} else if st["Cpus_allowed_list"] != cpus {
		t.Errorf("the function may run on CPUs %v, want %s as the server", st["Cpus_allowed_list"], cpus)
	} else if !strings.ContainsAny(cpus, ",-") {
		t.Logf("the server may run on CPU %s alone: crun's set-up was not pinned, so this checks nothing of it", cpus)
	}
	rl := sub(got, "rlimits")
	for _, k := range []string{"nofile_raise", "nproc_raise", "data_raise"} {
		if rl[k] != "EPERM" {
			t.Errorf("raising %s: %v, want EPERM", k, rl[k])
		}
	}
	if rl["data_hard"] != strconv.Itoa(1<<30) || rl["nproc_hard"] != "1024" {
		t.Errorf("rlimits %v, want RLIMIT_DATA = --memory-limit (1Gi) and RLIMIT_NPROC = --pids-limit (1024)", rl)
	}

	// Seccomp: inside, the denied syscalls fail with the profile's errno;
	// the same program on the host, outside any filter, gets something
	// else for each, so the errno is the filter's doing.
	want := map[string]string{"keyctl": "EPERM", "add_key": "EPERM", "unshare_user": "EPERM", "clone3": "ENOSYS", "io_uring_setup": "ENOSYS", "socket_vsock": "EPERM", "kcmp": "EPERM", "mbind": "EPERM", "open_tree": "EPERM", "open_tree_attr": "EPERM"}
	inside := sub(got, "syscalls")
	out, err := exec.Command(filepath.Join(images, "cache", "stage", "probe", "bin", "probe"), "syscalls").Output()
	if err != nil {
		t.Fatalf("the probe outside a container: %v", err)
	}
	var outside map[string]string
	if err := json.Unmarshal(out, &outside); err != nil {
		t.Fatal(err)
	}
	for sc, errno := range want {
		if inside[sc] != errno {
			t.Errorf("%s inside: %v, want %s", sc, inside[sc], errno)
		}
		if outside[sc] == errno {
			t.Errorf("%s outside the container also gives %s: the test cannot tell the filter from the kernel", sc, errno)
		}
	}
	// The probe tries mount only as pid 1, which a function is.
	if m, ok := inside["mount"]; !ok || m == "ok" {
		t.Errorf("mount inside: %q (tried: %v), want refused", m, ok)
	}
	t.Logf("syscalls inside %v, outside %v", inside, outside)

	// A second call sees a fresh /tmp: not the first call's file.
	again := probeReport(t, s, probeRequest(t, "probe-2", nil, "", "call-2"))
	if tmp := sub(again, "tmp"); tmp["before"] != nil {
		t.Errorf("second call's /tmp holds %v", tmp["before"])
	}
}

// TestHostNetworkOnlyWhenAsked: --network host shows the host's
// interfaces, and nothing else of the isolation changes.
func TestHostNetworkOnlyWhenAsked(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("probe.tar"), "--network", "host"})
	got := probeReport(t, s, probeRequest(t, "probe-net", nil, "", ""))
	if ifs, _ := got["interfaces"].(string); ifs == "lo" || !strings.Contains(ifs, "lo") {
		t.Errorf("interfaces with --network host: %q, want the host's", ifs)
	}
	if st := sub(got, "status"); st["Seccomp"] != "2" || st["CapEff"] != "0000000000000000" {
		t.Errorf("status with --network host: %v", st)
	}
	// The host's /sys is bound read-only with every mount below it (its
	// cgroup trees), not its top alone.
	if rw, _ := got["sys_rw"].(string); rw != "" {
		t.Errorf("read-write under /sys with --network host: %q, want none", rw)
	}
}

// TestServerEnvironmentStaysOutOfFunctions starts the server with the
// variables that crun takes from its environment as orders for the
// container, as systemd or podman set them for a socket-activated or
// notifying service (LISTEN_FDS, NOTIFY_SOCKET) or an operator might
// (RUN_OCI_SECCOMP_RECEIVER): the function still gets its three streams
// and no other descriptor, and none of those variables.
func TestServerEnvironmentStaysOutOfFunctions(t *testing.T) {
	dir := t.TempDir()
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "notify"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	env := withEnv("LISTEN_FDS=2", "LISTEN_FDNAMES=a:b", "NOTIFY_SOCKET="+filepath.Join(dir, "notify"),
		"RUN_OCI_SECCOMP_RECEIVER="+filepath.Join(dir, "no-receiver"))

	t.Run("descriptors", func(t *testing.T) {
		s := startServer(t, []string{"--tarball", image("probe.tar")}, env)
		got := probeReport(t, s, probeRequest(t, "probe-env", nil, "", ""))
		if got["fds"] != "0 1 2" {
			t.Errorf("open descriptors %v, want 0 1 2 only", got["fds"])
		}
	})
	t.Run("variables", func(t *testing.T) {
		s := startServer(t, []string{"--tarball", image("sh-function.tar")}, env)
		rsp := s.call(t, shRequest(t, "env", `env | sort | jq -R -s '{desired: {}, context: {env: .}}'`))
		if len(rsp.GetResults()) != 0 {
			t.Fatalf("the call failed: %v\n%s", rsp.GetResults(), s.stderr)
		}
		got := rsp.GetContext().AsMap()["env"].(string)
		for _, name := range []string{"LISTEN_", "NOTIFY_SOCKET", "RUN_OCI_"} {
			if strings.Contains(got, name) {
				t.Errorf("the function's environment has %s of the server's:\n%s", name, got)
			}
		}
	})
}

// hostileImage writes a docker-archive of the sh-function image with one
// more layer holding the given tar entries, and returns its path.
func hostileImage(t *testing.T, dir string, entries func(tw *tar.Writer)) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries(tw)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return writeImage(t, dir, layer)
}

func writeImage(t *testing.T, dir string, layers ...v1.Layer) string {
	t.Helper()
	base, err := tarball.ImageFromPath(image("sh-function.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(base, layers...)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(dir, "hostile-*.tar")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	ref, _ := name.ParseReference("example.org/hostile:v1")
	if err := tarball.WriteToFile(f.Name(), ref, img); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

func writeHeader(t *testing.T, tw *tar.Writer, h *tar.Header, body string) {
	t.Helper()
	h.Size = int64(len(body))
	if h.Typeflag == 0 {
		h.Typeflag = tar.TypeReg
	}
	if h.Mode == 0 {
		h.Mode = 0o644
	}
	if err := tw.WriteHeader(h); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(body)); err != nil {
		t.Fatal(err)
	}
}

// hostSnapshot records what a breakout from unpacking would change: a
// marker directory around the cache directory, and host files.
type hostSnapshot map[string]string

func snapshotHost(t *testing.T, dirs ...string) hostSnapshot {
	t.Helper()
	s := hostSnapshot{}
	for _, d := range dirs {
		_ = filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return nil
			}
			if strings.Contains(p, "/bundle-") {
				// The unpacked image itself: removed at exit, checked below.
				return nil
			}
			st := fi.Sys().(*syscall.Stat_t)
			entry := fmt.Sprintf("%v %d:%d %d", fi.Mode(), st.Uid, st.Gid, fi.Size())
			if fi.Mode().IsRegular() {
				b, _ := os.ReadFile(p)
				entry += " " + string(b)
			}
			s[p] = entry
			return nil
		})
	}
	for _, f := range []string{"/etc/passwd", "/etc/shadow", "/etc/group", "/etc/hostname"} {
		b, _ := os.ReadFile(f)
		fi, _ := os.Stat(f)
		if fi != nil {
			s[f] = fmt.Sprintf("%v %s", fi.Mode(), b)
		}
	}
	return s
}

func (a hostSnapshot) diff(b hostSnapshot) []string {
	var d []string
	for k, v := range b {
		if w, ok := a[k]; !ok {
			d = append(d, "new: "+k)
		} else if w != v {
			d = append(d, "changed: "+k)
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			d = append(d, "removed: "+k)
		}
	}
	return d
}

// TestHostileImageTarballs feeds hostile images to the real `ocifn serve`:
// each is refused at startup with an error that names the entry or the
// limit, or neutralised, and nothing around the cache directory nor the
// host's files changes.
func TestHostileImageTarballs(t *testing.T) {
	dir := t.TempDir()
	up := strings.Repeat("../", 10)
	marker := fmt.Sprintf("ocifn-hostile-%d", os.Getpid())

	// 256 MiB of zeros in about a megabyte of gzip.
	bomb := func() string { return gzipImage(t, dir, "bomb", 256<<20) }

	file := func(name string, data []byte) func() string {
		return func() string {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
			return p
		}
	}
	good, err := os.ReadFile(image("sh-function.tar"))
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name    string
		tarball func() string
		args    []string
		wantErr []string // empty: serves, and the function sees the neutralised entries
		check   string   // script for sh-function run when it serves; must print a response
	}{
		{name: "empty_file", tarball: file("empty.tar", nil), wantErr: []string{"empty.tar", "the file is empty"}},
		{name: "not_a_tar", tarball: file("text.tar", []byte("#!/bin/sh\necho this is not an image\n")), wantErr: []string{"text.tar", "not a tar archive"}},
		{name: "truncated_tarball", tarball: file("truncated.tar", good[:len(good)/2]), wantErr: []string{"truncated.tar", "the archive is truncated"}},
		{
			name: "whiteout_of_the_parent_directory",
			tarball: func() string {
				return hostileImage(t, dir, func(tw *tar.Writer) { writeHeader(t, tw, &tar.Header{Name: "fn/.wh..."}, "") })
			},
			wantErr: []string{"layer 5/5", `entry "fn/.wh..."`, "a whiteout must name an entry of its own directory"},
		},
		{
			name: "hard_link_to_a_host_file",
			tarball: func() string {
				return hostileImage(t, dir, func(tw *tar.Writer) {
					writeHeader(t, tw, &tar.Header{Name: "pw", Typeflag: tar.TypeLink, Linkname: up + "etc/shadow"}, "")
				})
			},
			wantErr: []string{"layer 5/5", "/etc/shadow", "no such file or directory"},
		},
		{
			name:    "layer_inflating_past_max_rootfs_bytes",
			tarball: bomb,
			args:    []string{"--max-rootfs-bytes", "64Mi"},
			wantErr: []string{"layer 5/5", "larger than the limit of 67108864 uncompressed bytes", "--max-rootfs-bytes"},
		},
		{
			// docker save | gzip: decompressed to the cache directory
			// before it is read, within the same limit.
			name:    "gzipped_tarball_past_max_rootfs_bytes",
			tarball: file("gzipped.tar.gz", gzipped(t, good)),
			args:    []string{"--max-rootfs-bytes", "1Mi"},
			wantErr: []string{"decompresses to more than 1048576 bytes", "--max-rootfs-bytes"},
		},
		{
			name: "escapes_setuid_devices_and_fifos_are_neutralised",
			tarball: func() string {
				return hostileImage(t, dir, func(tw *tar.Writer) {
					writeHeader(t, tw, &tar.Header{Name: "../../../" + marker}, "escaped")
					writeHeader(t, tw, &tar.Header{Name: "/etc/" + marker}, "absolute")
					writeHeader(t, tw, &tar.Header{Name: "evil", Typeflag: tar.TypeSymlink, Linkname: "/"}, "")
					writeHeader(t, tw, &tar.Header{Name: "evil/tmp/" + marker}, "through a symlink")
					writeHeader(t, tw, &tar.Header{Name: "bin/suid", Mode: 0o4755}, "#!/bin/sh\n")
					writeHeader(t, tw, &tar.Header{Name: "kmem", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 2}, "")
					writeHeader(t, tw, &tar.Header{Name: "fifo", Typeflag: tar.TypeFifo}, "")
				})
			},
			check: `ls -la /bin/suid /kmem /fifo /` + marker + ` /etc/` + marker + ` /tmp/` + marker + ` >&2; stat -c '%a' /bin/suid >&2; jq -c '{desired: .desired}'`,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cache := cacheDir(t)
			// A marker directory around the cache directory, and host files.
			around := filepath.Dir(cache)
			sentinel := filepath.Join(around, marker+"-sentinel")
			if err := os.WriteFile(sentinel, []byte("keep"), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(sentinel) })
			watched := []string{cache, "/tmp/" + marker, "/" + marker, "/etc/" + marker, sentinel}
			before := snapshotHost(t, watched...)

			args := append([]string{"--tarball", tc.tarball(), "--cache-dir", cache}, tc.args...)
			if len(tc.wantErr) > 0 {
				start := time.Now()
				s := startProcess(t, append([]string{"--insecure"}, args...))
				log := s.wait(t)
				if s.cmd.ProcessState.Success() {
					t.Fatalf("ocifn serve started on a hostile image:\n%s", log)
				}
				mustContain(t, "startup error", log, tc.wantErr...)
				t.Logf("refused in %s: %s", time.Since(start).Round(time.Millisecond), lastLine(log))
			} else {
				s := startServer(t, args)
				rsp := s.call(t, shRequest(t, "t-"+tc.name, tc.check))
				if len(rsp.GetResults()) != 0 {
					t.Fatalf("results %v\n%s", rsp.GetResults(), s.stderr)
				}
				// The call's log lines may still be in the pipe from the
				// server.
				eventually(t, 5*time.Second, "the call logged", func() bool {
					return strings.Contains(s.stderr.String(), "msg=call tag=t-"+tc.name)
				})
				log := s.stderr.String()
				// Inside: the escapes landed in the rootfs or nowhere, the
				// setuid bit is gone, no device node, no fifo.
				mustContain(t, "function stderr", log, "line=755")
				for _, absent := range []string{"/kmem", "/fifo"} {
					mustContain(t, "function stderr", log, absent+": No such file or directory")
				}
				s.stop()
			}
			after := snapshotHost(t, watched...)
			if d := before.diff(after); len(d) != 0 {
				t.Errorf("the host changed: %v", d)
			}
			for _, p := range []string{"/" + marker, "/etc/" + marker, "/tmp/" + marker} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was created on the host", p)
				}
			}
			if left, _ := filepath.Glob(filepath.Join(cache, "bundle-*")); len(left) != 0 {
				t.Errorf("left in the cache directory: %v", left)
			}
		})
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// gzipped is data compressed with gzip, as docker save | gzip writes it.
func gzipped(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
