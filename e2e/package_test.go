package e2e

import (
	"archive/tar"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"sigs.k8s.io/yaml"

	"github.com/ocifn/ocifn/host"
)

// The pod the package runs in: Crossplane's defaults for a Function's
// Deployment (runAsUser/runAsGroup 2000, runAsNonRoot, privileged false,
// allowPrivilegeEscalation false) plus what the README's
// DeploymentRuntimeConfig adds (hostUsers: false, procMount: Unmasked,
// seccompProfile Unconfined).
const (
	podUID        = 2000
	podHostIDBase = 400000 // hostUsers: false maps the pod's 0..65535 here
	podIDs        = 65536
	tlsDir        = "/tls/server" // where Crossplane mounts the server secret
)

var (
	runtimeOnce sync.Once
	runtimeTar  string
	runtimeErr  error
)

// runtimeImage builds the runtime image with hack/runtime-image.sh (what
// `make image` runs) from the ocifn binary under test, once per run.
func runtimeImage(t *testing.T) string {
	t.Helper()
	runtimeOnce.Do(func() {
		if tar := os.Getenv(envRuntimeImage); tar != "" {
			runtimeTar = tar
			return
		}
		// Next to the test images (ignored by git), replaced on each run.
		runtimeTar = filepath.Join(images, "ocifn-runtime-e2e.tar")
		cmd := exec.Command(filepath.Join(repoRoot, "hack", "runtime-image.sh"), runtimeTar)
		cmd.Env = append(os.Environ(), "OCIFN_BIN="+ocifnBin)
		if out, err := cmd.CombinedOutput(); err != nil {
			runtimeErr = fmt.Errorf("hack/runtime-image.sh: %v\n%s", err, out)
		}
	})
	if runtimeErr != nil {
		t.Fatal(runtimeErr)
	}
	return runtimeTar
}

// registry is a running Debian docker-registry (distribution) on loopback.
type registry struct {
	addr string
	log  *syncBuffer
}

func startRegistry(t *testing.T) *registry {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		t.Fatalf("docker-registry (Debian package docker-registry; hack/deps.sh installs it): %v", err)
	}
	dir := t.TempDir()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n", filepath.Join(dir, "data"), addr)
	cfgPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &registry{addr: addr, log: &syncBuffer{}}
	cmd := exec.Command(bin, "serve", cfgPath)
	cmd.Stdout, cmd.Stderr = r.log, r.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		rsp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			rsp.Body.Close()
			if rsp.StatusCode == http.StatusOK {
				return r
			}
		}
		select {
		case <-exited:
			t.Fatalf("docker-registry exited:\n%s", r.log)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker-registry did not answer on %s: %v\n%s", addr, err, r.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

var pushedRef = regexp.MustCompile(`(?m)^(\S+@sha256:[0-9a-f]{64})$`)

// TestPackageBuildPushRunAsPod builds a Function package from a test
// function with the real binary, pushes it to a real registry, pulls it
// back, checks what Crossplane reads from it, and runs it the way a
// Kubernetes node runs the Function's pod: its filesystem as the container
// root, its own entrypoint, TLS material mounted as Crossplane mounts it,
// and the pod security settings the README documents. The function then
// answers a real mTLS gRPC call from nested rootless containers.
func TestPackageBuildPushRunAsPod(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test starts the pod's container with crun and must run as root (CI does)")
	}
	rt := runtimeImage(t)
	work := t.TempDir()
	xpkg := filepath.Join(work, "labelizer.xpkg")
	out, err := runOcifn(t, "build", "--from-oci-tarball", image("labelizer.tgz"), "--name", "function-labelizer",
		"--runtime-image-tarball", rt, "-o", xpkg)
	if err != nil {
		t.Fatalf("ocifn build: %v\n%s", err, out)
	}
	mustContain(t, "build output", out, "built "+xpkg, "Function function-labelizer")

	reg := startRegistry(t)
	ref := reg.addr + "/functions/labelizer:v0.1.0"
	out, err = runOcifn(t, "push", "--insecure-registry", xpkg, ref)
	if err != nil {
		t.Fatalf("ocifn push: %v\n%s\nregistry log:\n%s", err, out, reg.log)
	}
	m := pushedRef.FindStringSubmatch(out)
	if m == nil || !strings.HasPrefix(m[1], reg.addr+"/functions/labelizer@") {
		t.Fatalf("ocifn push did not print the reference by digest:\n%s", out)
	}

	// Pull back by tag, as Crossplane's package manager does.
	tag, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(tag)
	if err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(m[1], "@"+digest.String()) {
		t.Errorf("push printed %s, the tag resolves to %s", m[1], digest)
	}
	checkPackageLayer(t, img)

	out, err = runOcifn(t, "inspect", "--insecure-registry", "-o", "json", ref)
	if err != nil {
		t.Fatalf("ocifn inspect: %v\n%s", err, out)
	}
	var info struct {
		Digest   string
		Metadata struct{ Function struct{ Name string } }
		Runtime  struct{ OcifnVersion, CrunVersion string }
		Function struct {
			Entrypoint, Cmd []string
			WorkingDir      string
		}
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("inspect -o json: %v\n%s", err, out)
	}
	if info.Digest != digest.String() || info.Metadata.Function.Name != "function-labelizer" ||
		info.Runtime.OcifnVersion != "dev" || !strings.HasPrefix(info.Runtime.CrunVersion, "1.") ||
		strings.Join(info.Function.Cmd, " ") != "/fn/labelizer.sh" || info.Function.WorkingDir != "/fn" {
		t.Errorf("inspect: %+v", info)
	}

	rootfs := unpackPackage(t, img)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}

	t.Run("pod_with_documented_settings_serves_calls", func(t *testing.T) {
		p := startPod(t, rootfs, cf, podSettings{})
		req := loadRequest(t, "labelizer", "request.json")
		want := withTag(loadResponse(t, "labelizer", "expected.json"), req)
		if d := diff(want, p.call(t, req)); d != "" {
			t.Errorf("response (-want +got):\n%s\npod log:\n%s", d, p.log)
		}
		mustContain(t, "pod log", p.log.String(), "id_mode=single", "tls=true")
		// /sys/fs/cgroup is read-only, as runtimes mount it for an
		// unprivileged container, and the pod's cgroup is not its user's:
		// no delegated cgroup, said once, rlimits instead.
		checkPodFallback(t, p.log.String())
		// The settings are the ones in force: what the kernel says of the
		// pod's process.
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.pid(t)))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t0",
			fmt.Sprintf("Uid:\t%[1]d\t%[1]d\t%[1]d\t%[1]d", podHostIDBase+podUID)} {
			if !strings.Contains(string(status), want) {
				t.Errorf("the pod's process does not have %q:\n%s", want, status)
			}
		}
	})

	// Each setting the README calls necessary, taken away alone.
	t.Run("without_procMount_Unmasked_calls_fail", func(t *testing.T) {
		p := startPod(t, rootfs, cf, podSettings{maskProc: true})
		rsp := p.call(t, loadRequest(t, "labelizer", "request.json"))
		if len(rsp.GetResults()) != 1 || rsp.GetResults()[0].GetSeverity() != fnv1.Severity_SEVERITY_FATAL ||
			!strings.Contains(rsp.GetResults()[0].GetMessage(), "mount `proc`") {
			t.Errorf("want a Fatal result naming the /proc mount, got %v", rsp.GetResults())
		}
	})
	t.Run("with_RuntimeDefault_seccomp_ocifn_cannot_start", func(t *testing.T) {
		p := startPodProcess(t, rootfs, cf, podSettings{seccompRuntimeDefault: true})
		log := p.wait(t)
		mustContain(t, "pod log", log, "cannot start ocifn in its own namespaces", "operation not permitted")
	})
}

// checkPackageLayer checks the layer Crossplane reads: annotated
// io.crossplane.xpkg: base, holding only package.yaml with one Function.
func checkPackageLayer(t *testing.T, img v1.Image) {
	t.Helper()
	mf, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var base []int
	for i, l := range mf.Layers {
		if l.Annotations["io.crossplane.xpkg"] == "base" {
			base = append(base, i)
		}
	}
	if len(base) != 1 || base[0] != len(mf.Layers)-1 {
		t.Fatalf("layers annotated io.crossplane.xpkg: base: %v of %d, want exactly the last", base, len(mf.Layers))
	}
	l, err := img.LayerByDigest(mf.Layers[base[0]].Digest)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var files []string
	var pkg []byte
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, h.Name)
		if h.Name == "package.yaml" {
			if pkg, err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(files) != 1 || files[0] != "package.yaml" {
		t.Fatalf("the base layer holds %v, want only package.yaml", files)
	}
	var fn struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	text := strings.TrimPrefix(string(pkg), "---\n")
	if err := yaml.Unmarshal([]byte(text), &fn); err != nil {
		t.Fatalf("package.yaml: %v\n%s", err, pkg)
	}
	if fn.APIVersion != "meta.pkg.crossplane.io/v1" || fn.Kind != "Function" || fn.Metadata.Name != "function-labelizer" {
		t.Errorf("package.yaml: %+v\n%s", fn, pkg)
	}
}

// unpackPackage flattens the package image into a root filesystem, as a
// node's snapshotter would, owned by the pod's ids (hostUsers: false).
func unpackPackage(t *testing.T, img v1.Image) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ocifn-e2e-pod-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The pod's ids are unprivileged on the host and must reach the root.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	cmd := exec.Command("tar", "-x", "-p", "--numeric-owner", "-C", rootfs)
	cmd.Stdin = rc
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, out)
	}
	err = filepath.Walk(rootfs, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		return os.Lchown(p, int(st.Uid)+podHostIDBase, int(st.Gid)+podHostIDBase)
	})
	if err != nil {
		t.Fatal(err)
	}
	return rootfs
}

// podSettings are departures from the documented pod settings.
type podSettings struct {
	// maskProc is procMount: Default: /proc paths masked and read-only.
	maskProc bool
	// seccompRuntimeDefault applies the namespace rules of the container
	// runtimes' default seccomp profile.
	seccompRuntimeDefault bool
}

// pod is the Function's container, run by crun as a node would run it.
type pod struct {
	id, state string
	log       *syncBuffer
	cmd       *exec.Cmd
	exited    chan struct{}
	conn      *grpc.ClientConn
}

var podServing = regexp.MustCompile(`msg=serving address=\S+`)

// waitServing waits, at most a minute, until the pod logs that it serves.
func (p *pod) waitServing(t *testing.T) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for !podServing.MatchString(p.log.String()) {
		select {
		case <-p.exited:
			t.Fatalf("the pod exited before serving:\n%s", p.log)
		case <-deadline:
			t.Fatalf("the pod did not serve within 60s:\n%s", p.log)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startPod starts the pod and connects to it over mTLS once it serves.
func startPod(t *testing.T, rootfs string, cf *v1.ConfigFile, s podSettings) *pod {
	t.Helper()
	p := startPodProcess(t, rootfs, cf, s)
	p.waitServing(t)
	pid := p.pid(t)
	creds := credentials.NewTLS(p.clientTLS(t))
	conn, err := grpc.NewClient("passthrough:///127.0.0.1:9443",
		grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(dialInNetns(fmt.Sprintf("/proc/%d/ns/net", pid))))
	if err != nil {
		t.Fatal(err)
	}
	p.conn = conn
	mustBeServing(t, conn, p.log)
	return p
}

// startPodProcess writes the TLS material and the runtime config and
// starts crun, without waiting.
func startPodProcess(t *testing.T, rootfs string, cf *v1.ConfigFile, s podSettings) *pod {
	t.Helper()
	bundle := filepath.Dir(rootfs)
	id := fmt.Sprintf("ocifn-e2e-pod-%d", time.Now().UnixNano())
	p := &pod{id: id, state: filepath.Join(bundle, "state-"+id), log: &syncBuffer{}, exited: make(chan struct{})}
	certs := filepath.Join(bundle, "tls-"+id)
	writeTLS(t, certs)
	spec := podSpec(rootfs, certs, cf, s)
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}

	// crun 1.8 refuses a hybrid cgroup host (PLATFORM.md); the pod's crun
	// runs in a private mount namespace without the cgroup2 mount, which
	// leaves the host as it is.
	script := `exec crun --cgroup-manager=disabled --root "$1" run --bundle "$2" "$3"`
	cg, err := host.DetectCgroups()
	if err != nil {
		t.Fatal(err)
	}
	if cg.NeedsMask() {
		script = `umount -l "$4" && ` + script
	}
	p.cmd = exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", p.state, bundle, id, cg.Unified)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	// A pipe, not /dev/null: crun hands the container its standard streams
	// and chowns them to the container's user, which for the host's
	// /dev/null would change the host (exec's default for a nil Stdin).
	p.cmd.Stdin = strings.NewReader("")
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// podSpec is the runtime config a Kubernetes node (containerd) gives the
// Function's container with the documented pod settings.
func podSpec(rootfs, certs string, cf *v1.ConfigFile, s podSettings) *rspec.Spec {
	env := append(append([]string{}, cf.Config.Env...), "HOSTNAME=function-labelizer", "TLS_SERVER_CERTS_DIR="+tlsDir)
	wd := cf.Config.WorkingDir
	if wd == "" {
		wd = "/"
	}
	spec := &rspec.Spec{
		Version:  "1.0.2",
		Hostname: "function-labelizer",
		Root:     &rspec.Root{Path: rootfs},
		Process: &rspec.Process{
			// The image's own entrypoint, no arguments: as Crossplane runs it.
			Args: append(append([]string{}, cf.Config.Entrypoint...), cf.Config.Cmd...),
			Env:  env,
			Cwd:  wd,
			// runAsUser/runAsGroup 2000 (Crossplane's default);
			// capabilities: drop: [ALL].
			User:         rspec.User{UID: podUID, GID: podUID},
			Capabilities: &rspec.LinuxCapabilities{},
			// allowPrivilegeEscalation: false.
			NoNewPrivileges: true,
			Rlimits:         []rspec.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 4096}},
		},
		Mounts: []rspec.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
			// The TLS server secret, read-only, as Crossplane mounts it.
			{Destination: tlsDir, Type: "bind", Source: certs, Options: []string{"rbind", "ro"}},
		},
		Linux: &rspec.Linux{
			// hostUsers: false: the pod has a user namespace of its own.
			UIDMappings: []rspec.LinuxIDMapping{{ContainerID: 0, HostID: podHostIDBase, Size: podIDs}},
			GIDMappings: []rspec.LinuxIDMapping{{ContainerID: 0, HostID: podHostIDBase, Size: podIDs}},
			Namespaces: []rspec.LinuxNamespace{
				{Type: rspec.PIDNamespace}, {Type: rspec.IPCNamespace}, {Type: rspec.UTSNamespace},
				{Type: rspec.MountNamespace}, {Type: rspec.NetworkNamespace}, {Type: rspec.CgroupNamespace},
				{Type: rspec.UserNamespace},
			},
		},
	}
	if s.maskProc {
		// procMount: Default, what the runtime masks and makes read-only.
		spec.Linux.MaskedPaths = []string{"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
			"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap"}
		spec.Linux.ReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	}
	if s.seccompRuntimeDefault {
		spec.Linux.Seccomp = runtimeDefaultNamespaceRules()
	}
	return spec
}

// runtimeDefaultNamespaceRules are the rules of containerd's and Docker's
// default seccomp profile (RuntimeDefault) that concern namespaces: for a
// process without CAP_SYS_ADMIN, clone may not create namespaces, unshare,
// setns and mount are refused, and clone3 reports ENOSYS so that callers
// fall back to clone. Everything else is allowed here.
func runtimeDefaultNamespaceRules() *rspec.LinuxSeccomp {
	eperm, enosys := uint(unix.EPERM), uint(unix.ENOSYS)
	nsFlags := uint64(unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP)
	s := &rspec.LinuxSeccomp{
		DefaultAction: rspec.ActAllow,
		Architectures: []rspec.Arch{rspec.ArchX86_64, rspec.ArchX86, rspec.ArchX32, rspec.ArchAARCH64},
		Syscalls: []rspec.LinuxSyscall{
			{Names: []string{"unshare", "setns", "mount", "umount2", "pivot_root"}, Action: rspec.ActErrno, ErrnoRet: &eperm},
			{Names: []string{"clone3"}, Action: rspec.ActErrno, ErrnoRet: &enosys},
		},
	}
	for bit := uint64(1); bit != 0; bit <<= 1 {
		if nsFlags&bit != 0 {
			s.Syscalls = append(s.Syscalls, rspec.LinuxSyscall{
				Names: []string{"clone"}, Action: rspec.ActErrno, ErrnoRet: &eperm,
				Args: []rspec.LinuxSeccompArg{{Index: 0, Value: bit, ValueTwo: bit, Op: rspec.OpMaskedEqual}},
			})
		}
	}
	return s
}

// pid is the pod's init process on the host.
func (p *pod) pid(t *testing.T) int {
	t.Helper()
	out, err := exec.Command("crun", "--root", p.state, "state", p.id).Output()
	if err != nil {
		t.Fatalf("crun state: %v\n%s", err, p.log)
	}
	var st rspec.State
	if err := json.Unmarshal(out, &st); err != nil || st.Pid == 0 {
		t.Fatalf("crun state: %v %s", err, out)
	}
	return st.Pid
}

// wait waits for the pod to exit by itself and returns its log.
func (p *pod) wait(t *testing.T) string {
	t.Helper()
	awaitExit(t, p.exited, "the pod", p.log)
	return p.log.String()
}

// call sends a v1 RunFunction request over the pod's mTLS connection.
func (p *pod) call(t *testing.T, req *fnv1.RunFunctionRequest) *fnv1.RunFunctionResponse {
	t.Helper()
	return callOver(t, p.conn, req, p.log)
}

// stop sends SIGTERM to the pod, as the kubelet does, and removes it.
func (p *pod) stop(t *testing.T) {
	if p.conn != nil {
		p.conn.Close()
	}
	select {
	case <-p.exited:
	default:
		_ = exec.Command("crun", "--root", p.state, "kill", p.id, "TERM").Run()
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			t.Errorf("the pod did not stop within 30s of SIGTERM:\n%s", p.log)
			_ = exec.Command("crun", "--root", p.state, "kill", p.id, "KILL").Run()
			<-p.exited
		}
	}
	_ = exec.Command("crun", "--root", p.state, "delete", "--force", p.id).Run()
	_ = os.RemoveAll(p.state)
}

// dialInNetns dials from inside the network namespace at nsPath (the pod's):
// the socket is created by a thread that entered the namespace, and stays
// in it.
func dialInNetns(nsPath string) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			orig, err := os.Open("/proc/thread-self/ns/net")
			if err != nil {
				runtime.UnlockOSThread()
				ch <- result{nil, err}
				return
			}
			defer orig.Close()
			target, err := os.Open(nsPath)
			if err != nil {
				runtime.UnlockOSThread()
				ch <- result{nil, err}
				return
			}
			defer target.Close()
			if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
				runtime.UnlockOSThread()
				ch <- result{nil, fmt.Errorf("setns %s: %w", nsPath, err)}
				return
			}
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", addr)
			// A thread that cannot go back stays locked and ends with
			// this goroutine.
			if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread()
			}
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

// tlsMaterial is the CA and client certificate of one pod's TLS.
var tlsMaterial sync.Map // certs dir -> *tls.Config

// writeTLS writes what Crossplane puts in the Function's server secret:
// tls.crt, tls.key and ca.crt, and keeps a client configuration with a
// client certificate of the same CA, as Crossplane's own.
func writeTLS(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ocifn-e2e-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(cn string, serial int64, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, *ecdsa.PrivateKey) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: ips, DNSNames: []string{cn},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	srvDER, srvKey := leaf("function-labelizer", 2, x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1)})
	cliDER, cliKey := leaf("crossplane", 3, x509.ExtKeyUsageClientAuth, nil)
	pemOf := func(typ string, der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}) }
	keyPEM := func(k *ecdsa.PrivateKey) []byte {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return pemOf("PRIVATE KEY", der)
	}
	// Secret volumes are world-readable (defaultMode 0644) and owned by the
	// pod's root.
	for n, b := range map[string][]byte{"tls.crt": pemOf("CERTIFICATE", srvDER), "tls.key": keyPEM(srvKey), "ca.crt": pemOf("CERTIFICATE", caDER)} {
		p := filepath.Join(dir, n)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, podHostIDBase, podHostIDBase); err != nil {
			t.Fatal(err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	cert, err := tls.X509KeyPair(pemOf("CERTIFICATE", cliDER), keyPEM(cliKey))
	if err != nil {
		t.Fatal(err)
	}
	tlsMaterial.Store(dir, &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12})
}

// clientTLS is the client side of the pod's TLS material.
func (p *pod) clientTLS(t *testing.T) *tls.Config {
	t.Helper()
	c, ok := tlsMaterial.Load(filepath.Join(filepath.Dir(p.state), "tls-"+p.id))
	if !ok {
		t.Fatal("no TLS material for the pod")
	}
	return c.(*tls.Config).Clone()
}

// TestBuildAsUnprivilegedUser builds a package as a user without any
// privilege: the layers are unpacked for the check inside a user namespace
// ocifn makes for itself, and the package belongs to the user.
func TestBuildAsUnprivilegedUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test creates a user and must run as root (CI does)")
	}
	rt := runtimeImage(t)
	u, home, _ := userHome(t, map[string]string{image("labelizer.oci.tar"): "function.tar", rt: "runtime.tar"})
	uid, _ := strconv.Atoi(u.Uid)
	xpkg := filepath.Join(home, "function.xpkg")
	out, err := buildAsUser(u, home, xpkg)
	if err != nil {
		t.Fatalf("ocifn build as %s: %v\n%s", u.Username, err, out)
	}
	fi, err := os.Stat(xpkg)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); int(st.Uid) != uid {
		t.Errorf("the package belongs to uid %d, want the user's %d", st.Uid, uid)
	}
	// The OCI archive was normalized to a docker-save tarball inside; the
	// package still serves the same function.
	text, err := runOcifn(t, "inspect", xpkg)
	if err != nil {
		t.Fatalf("ocifn inspect: %v\n%s", err, text)
	}
	mustContain(t, "inspect", text, "Function:     function-labelizer", `cmd         ["/fn/labelizer.sh"]`, "workdir     /fn")
	// The digest build prints is the one inspect and serve report, the
	// embedded tarball's; the OCI archive's own manifest is named beside it.
	m := regexp.MustCompile(`function image \S+ \((sha256:[0-9a-f]{64}); the tarball given has manifest (sha256:[0-9a-f]{64})\)`).FindStringSubmatch(string(out))
	if m == nil || m[1] == m[2] {
		t.Fatalf("build does not print the served digest beside the OCI archive's:\n%s", out)
	}
	mustContain(t, "inspect", text, "digest      "+m[1])
	s := startServer(t, []string{"--tarball", xpkg})
	req := loadRequest(t, "labelizer", "request.json")
	if d := diff(withTag(loadResponse(t, "labelizer", "expected.json"), req), s.call(t, req)); d != "" {
		t.Errorf("serving the package file (-want +got):\n%s", d)
	}
	mustContain(t, "server log", s.stderr.String(), "digest="+m[1])
}

// buildAsUser runs ocifn build as user u, in its home, of the function
// image home/function.tar on home/runtime.tar, into xpkg.
func buildAsUser(u *user.User, home, xpkg string) ([]byte, error) {
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	cmd := exec.Command(ocifnBin, "build", "--from-oci-tarball", filepath.Join(home, "function.tar"), "--name", "function-labelizer",
		"--runtime-image-tarball", filepath.Join(home, "runtime.tar"), "-o", xpkg)
	cmd.Dir = home
	cmd.Env = append(os.Environ(), "HOME="+home, "TMPDIR="+home)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	return cmd.CombinedOutput()
}

// TestBuildRefusesUnwritableOutput: a user who cannot write to the
// package's directory is told so before the function image is read and
// unpacked (it is corrupt here, which would be reported instead).
func TestBuildRefusesUnwritableOutput(t *testing.T) {
	rt := runtimeImage(t)
	lab, err := os.ReadFile(image("labelizer.tar"))
	if err != nil {
		t.Fatal(err)
	}
	lab[len(lab)/2] ^= 0xff
	corrupt := filepath.Join(t.TempDir(), "corrupt.tar")
	if err := os.WriteFile(corrupt, lab, 0o644); err != nil {
		t.Fatal(err)
	}
	u, home, _ := userHome(t, map[string]string{corrupt: "function.tar", rt: "runtime.tar"})
	rootOwned := filepath.Join(home, "root-owned")
	if err := os.Mkdir(rootOwned, 0o755); err != nil {
		t.Fatal(err)
	}
	xpkg := filepath.Join(rootOwned, "function.xpkg")
	out, err := buildAsUser(u, home, xpkg)
	if err == nil {
		t.Fatalf("ocifn build into a directory the user cannot write succeeded:\n%s", out)
	}
	mustContain(t, "ocifn build output", string(out), "cannot write the package to "+xpkg, "permission denied")
}

// TestBuildRefuses checks that bad metadata and bad images are refused with
// a message that names the problem, and that nothing is written.
func TestBuildRefuses(t *testing.T) {
	rt := runtimeImage(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fn := "apiVersion: meta.pkg.crossplane.io/v1\nkind: Function\nmetadata:\n  name: function-a\n"
	lab, err := os.ReadFile(image("labelizer.tar"))
	if err != nil {
		t.Fatal(err)
	}
	truncated := write("truncated.tar", string(lab[:len(lab)/2]))
	// A layer whose bytes do not match its digest: flip a byte in the
	// middle of the largest layer.
	corrupt := append([]byte{}, lab...)
	corrupt[len(corrupt)/2] ^= 0xff
	corruptPath := write("corrupt.tar", string(corrupt))
	existingDir := filepath.Join(dir, "existing")
	if err := os.Mkdir(existingDir, 0o755); err != nil {
		t.Fatal(err)
	}

	cases := map[string]struct {
		args []string
		want []string
	}{
		"two_functions": {
			args: []string{"--package-file", write("two.yaml", fn+"---\n"+strings.Replace(fn, "function-a", "function-b", 1))},
			want: []string{"document 2 (Function function-b", "exactly one Function"},
		},
		"a_deployment": {
			args: []string{"--package-file", write("deploy.yaml", fn+"---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n")},
			want: []string{"document 2 (Deployment web, apps/v1) cannot be in a Function package"},
		},
		"no_function": {
			args: []string{"--package-file", write("none.yaml", "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: x.example.org\n")},
			want: []string{"no Function object"},
		},
		"bad_yaml": {
			args: []string{"--package-file", write("bad.yaml", fn+"---\nkind: [\n")},
			want: []string{"document 2 is not a valid YAML object"},
		},
		"bad_name": {
			args: []string{"--name", "Not_A_Name"},
			want: []string{`function name "Not_A_Name"`},
		},
		"truncated_image": {
			args: []string{"--name", "function-a", "--from-oci-tarball", truncated},
			want: []string{"truncated"},
		},
		"corrupt_layer": {
			args: []string{"--name", "function-a", "--from-oci-tarball", corruptPath},
			want: []string{"mismatch"},
		},
		"not_a_runtime_image": {
			args: []string{"--name", "function-a", "--runtime-image-tarball", image("trivial.tar")},
			want: []string{"is not an ocifn runtime image", "dev.ocifn.version"},
		},
		"no_runtime_image": {
			args: []string{"--name", "function-a", "--runtime-image-tarball", filepath.Join(dir, "missing.tar")},
			want: []string{"cannot read the runtime image tarball", "missing.tar"},
		},
		"bad_runtime_reference": {
			// Refused before the (corrupt) function image is unpacked.
			args: []string{"--name", "function-a", "--from-oci-tarball", corruptPath, "--runtime-image", "127.0.0.1:5000/ocifn/Runtime:v1"},
			want: []string{"--runtime-image", "repository can only contain the characters"},
		},
		"output_is_a_directory": {
			args: []string{"--name", "function-a", "-o", existingDir},
			want: []string{"is a directory", "function-a.xpkg"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(dir, name+".xpkg")
			args := append([]string{"build", "-o", out}, tc.args...)
			if !slices.Contains(tc.args, "--runtime-image") && !slices.Contains(tc.args, "--runtime-image-tarball") {
				args = append(args, "--runtime-image-tarball", rt)
			}
			if !slices.Contains(tc.args, "--from-oci-tarball") {
				args = append(args, "--from-oci-tarball", image("labelizer.tar"))
			}
			got, err := runOcifn(t, args...)
			if err == nil {
				t.Fatalf("ocifn build succeeded:\n%s", got)
			}
			mustContain(t, "ocifn build output", got, tc.want...)
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s was written (%v)", out, err)
			}
		})
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// TestBuildWithRuntimeImageFromRegistry builds a package on a runtime image
// pulled from a registry (--runtime-image), as a user who pushed the runtime
// once would, and runs the function out of it.
func TestBuildWithRuntimeImageFromRegistry(t *testing.T) {
	rt := runtimeImage(t)
	reg := startRegistry(t)
	runtimeRef := reg.addr + "/ocifn/runtime:e2e"
	if out, err := runOcifn(t, "push", "--insecure-registry", rt, runtimeRef); err != nil {
		t.Fatalf("ocifn push of the runtime image: %v\n%s\nregistry log:\n%s", err, out, reg.log)
	}
	xpkg := filepath.Join(t.TempDir(), "labelizer.xpkg")
	out, err := runOcifn(t, "build", "--from-oci-tarball", image("labelizer.tar"), "--name", "function-labelizer",
		"--runtime-image", runtimeRef, "--insecure-registry", "-o", xpkg)
	if err != nil {
		t.Fatalf("ocifn build --runtime-image: %v\n%s", err, out)
	}
	out, err = runOcifn(t, "inspect", "-o", "json", xpkg)
	if err != nil {
		t.Fatalf("ocifn inspect: %v\n%s", err, out)
	}
	var info struct {
		Runtime struct{ OcifnVersion, CrunVersion string }
	}
	if err := json.Unmarshal([]byte(out), &info); err != nil || info.Runtime.OcifnVersion == "" || !strings.HasPrefix(info.Runtime.CrunVersion, "1.") {
		t.Errorf("the package does not carry the pulled runtime: %+v %v\n%s", info, err, out)
	}
	out, err = runOcifn(t, "test", "-o", "json", "--cache-dir", cacheDir(t), xpkg, filepath.Join(repoRoot, "testdata/functions/labelizer/request.json"))
	if err != nil {
		t.Fatalf("ocifn test on the package: %v\n%s", err, out)
	}
	mustContain(t, "ocifn test output", out, "ocifn.dev/labelized", "labelized 2 resources")
}

// builtDigest is the package digest in ocifn build's last line.
var builtDigest = regexp.MustCompile(`package (sha256:[0-9a-f]{64})`)

// TestPackageDigestIsThePushedOne checks that the digest build prints and
// inspect shows for a package file is the one the package has in the
// registry once pushed, by ocifn push or crossplane xpkg push: the digest a
// Function's spec.package pins. Pushing annotates the metadata layer, which
// a docker-save file cannot hold, and so changes the manifest.
func TestPackageDigestIsThePushedOne(t *testing.T) {
	rt := runtimeImage(t)
	xpkg := filepath.Join(t.TempDir(), "labelizer.xpkg")
	out, err := runOcifn(t, "build", "--from-oci-tarball", image("labelizer.tar"), "--name", "function-labelizer",
		"--runtime-image-tarball", rt, "-o", xpkg)
	if err != nil {
		t.Fatalf("ocifn build: %v\n%s", err, out)
	}
	m := builtDigest.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ocifn build printed no package digest:\n%s", out)
	}
	built := m[1]
	out, err = runOcifn(t, "inspect", "-o", "json", xpkg)
	if err != nil {
		t.Fatalf("ocifn inspect: %v\n%s", err, out)
	}
	var info struct{ Digest string }
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		t.Fatalf("ocifn inspect -o json: %v\n%s", err, out)
	}

	reg := startRegistry(t)
	out, err = runOcifn(t, "push", "--insecure-registry", xpkg, reg.addr+"/functions/labelizer:v0.1.0")
	if err != nil {
		t.Fatalf("ocifn push: %v\n%s", err, out)
	}
	p := pushedRef.FindStringSubmatch(out)
	if p == nil {
		t.Fatalf("ocifn push did not print the reference by digest:\n%s", out)
	}
	pushed := p[1][strings.LastIndex(p[1], "@")+1:]

	// crossplane xpkg push writes the same manifest.
	xp := filepath.Join(repoRoot, "build", "crossplane", "crossplane")
	if _, err := os.Stat(xp); err == nil {
		cmd := exec.Command(xp, "xpkg", "push", "-f", xpkg, reg.addr+"/functions/labelizer-xp:v0.1.0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("crossplane xpkg push: %v\n%s", err, out)
		}
		ref, err := name.ParseReference(reg.addr+"/functions/labelizer-xp:v0.1.0", name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		img, err := remote.Image(ref)
		if err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		if d.String() != pushed {
			t.Errorf("crossplane xpkg push gave %s, ocifn push %s", d, pushed)
		}
	}
	if built != pushed || info.Digest != pushed {
		t.Errorf("the package file's digest is not the pushed one: build printed %s, inspect shows %s, the registry has %s", built, info.Digest, pushed)
	}
}

// TestPushToATagAndItsDigest: a reference that names a tag and the
// package's digest (REPOSITORY:TAG@sha256:…) pushes the package under the
// tag, the digest checked; go-containerregistry reads it as the digest
// alone, and the tag was not written, exit status 0 and all.
func TestPushToATagAndItsDigest(t *testing.T) {
	reg := startRegistry(t)
	pkg := image("labelizer.tar") // push takes any image
	out, err := runOcifn(t, "push", pkg, reg.addr+"/functions/first:v1")
	if err != nil {
		t.Fatalf("ocifn push: %v\n%s", err, out)
	}
	p := pushedRef.FindStringSubmatch(out)
	if p == nil {
		t.Fatalf("ocifn push did not print the reference by digest:\n%s", out)
	}
	digest := p[1][strings.LastIndex(p[1], "@")+1:]
	out, err = runOcifn(t, "push", pkg, reg.addr+"/functions/pinned:v0.1.0@"+digest)
	if err != nil {
		t.Fatalf("ocifn push to a tag and its digest: %v\n%s", err, out)
	}
	mustContain(t, "ocifn push's output", out, reg.addr+"/functions/pinned@"+digest)
	ref, err := name.ParseReference(reg.addr+"/functions/pinned:v0.1.0", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(ref)
	if err != nil {
		t.Fatalf("the tag named with the digest was not pushed: %v", err)
	}
	if desc.Digest.String() != digest {
		t.Errorf("the tag names %s, want %s", desc.Digest, digest)
	}
	// Another digest is still refused, before anything is uploaded.
	wrong := "sha256:" + strings.Repeat("0", 64)
	out, err = runOcifn(t, "push", pkg, reg.addr+"/functions/wrong:v0.1.0@"+wrong)
	if err == nil {
		t.Fatalf("ocifn push to a tag and another digest succeeded:\n%s", out)
	}
	mustContain(t, "ocifn push's error", out, wrong, digest)
}

// TestPackageOfAPackageIsRefused: crossplane xpkg build with an ocifn
// package as its runtime image makes a package with two layers marked
// io.crossplane.xpkg: base (the ocifn package's and its own), which
// Crossplane refuses to install ("multiple annotated base layers"). ocifn
// inspect described it from the first, as a good package, and ocifn push
// pushed it; both refuse it, naming the two layers.
func TestPackageOfAPackageIsRefused(t *testing.T) {
	cli, _ := crossplaneOracle(t)
	rt := runtimeImage(t)
	work := t.TempDir()
	pkg := filepath.Join(work, "labelizer.xpkg")
	if out, err := runOcifn(t, "build", "--from-oci-tarball", image("labelizer.tar"), "--name", "function-labelizer",
		"--runtime-image-tarball", rt, "-o", pkg); err != nil {
		t.Fatalf("ocifn build: %v\n%s", err, out)
	}
	root := filepath.Join(work, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	meta := "apiVersion: meta.pkg.crossplane.io/v1\nkind: Function\nmetadata:\n  name: function-wrapped\n"
	if err := os.WriteFile(filepath.Join(root, "crossplane.yaml"), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
	wrapped := filepath.Join(work, "wrapped.xpkg")
	if out, err := exec.Command(cli, "xpkg", "build", "--package-root", root, "--embed-runtime-image-tarball", pkg, "-o", wrapped).CombinedOutput(); err != nil {
		t.Fatalf("crossplane xpkg build: %v\n%s", err, out)
	}
	out, err := runOcifn(t, "inspect", wrapped)
	if err == nil {
		t.Fatalf("ocifn inspect of a package with two base layers succeeded:\n%s", out)
	}
	mustContain(t, "ocifn inspect's error", out, "layers 3 and 4 are both marked io.crossplane.xpkg: base", "multiple annotated base layers")
	reg := startRegistry(t)
	out, err = runOcifn(t, "push", wrapped, reg.addr+"/functions/wrapped:v1")
	if err == nil {
		t.Fatalf("ocifn push of a package with two base layers succeeded:\n%s", out)
	}
	mustContain(t, "ocifn push's error", out, "layers 3 and 4 are both marked io.crossplane.xpkg: base")
	rsp, err := http.Get("http://" + reg.addr + "/v2/functions/wrapped/tags/list")
	if err != nil {
		t.Fatal(err)
	}
	rsp.Body.Close()
	if rsp.StatusCode != http.StatusNotFound {
		t.Errorf("the registry has the refused package: tags/list %s", rsp.Status)
	}
}

// TestInspectPackageWithoutOcifn: a package crossplane xpkg build made of
// an image with no ocifn runtime is said to have none, not described as
// run by "ocifn unknown ... built by ocifn unknown"; one made of the ocifn
// runtime image is said not to be built by ocifn build.
func TestInspectPackageWithoutOcifn(t *testing.T) {
	cli, _ := crossplaneOracle(t)
	work := t.TempDir()
	root := filepath.Join(work, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	meta := "apiVersion: meta.pkg.crossplane.io/v1\nkind: Function\nmetadata:\n  name: function-plain\n"
	if err := os.WriteFile(filepath.Join(root, "crossplane.yaml"), []byte(meta), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		runtime string
		want    []string
	}{
		{image("passthrough.tar"), []string{"Runtime:      not ocifn (the package image has no dev.ocifn.version label", "built by    not ocifn build (no dev.ocifn.build.version label)", "Function image: none"}},
		{runtimeImage(t), []string{"Runtime:      ocifn ", "built by    not ocifn build (no dev.ocifn.build.version label)", "Function image: none"}},
	} {
		pkg := filepath.Join(work, "plain.xpkg")
		if out, err := exec.Command(cli, "xpkg", "build", "--package-root", root, "--embed-runtime-image-tarball", c.runtime, "-o", pkg).CombinedOutput(); err != nil {
			t.Fatalf("crossplane xpkg build: %v\n%s", err, out)
		}
		out, err := runOcifn(t, "inspect", pkg)
		if err != nil {
			t.Fatalf("ocifn inspect: %v\n%s", err, out)
		}
		mustContain(t, "ocifn inspect of a package of "+filepath.Base(c.runtime), out, c.want...)
		if strings.Contains(out, "ocifn unknown") {
			t.Errorf("ocifn inspect of a package of %s says ocifn unknown:\n%s", filepath.Base(c.runtime), out)
		}
	}
}

// TestCrossplaneCLIReadsPackageYAML checks packages ocifn builds with the
// real crossplane CLI's reader of package.yaml (xpkg get-crds, as resource
// validate reads a Function extension): it takes the metadata layer as a
// YAML stream in the raw tar and drops its last document as the tar's
// padding, so package.yaml must end with a separator, as crossplane xpkg
// build writes it, and the Function must come first. Without the
// separator, the CLI dropped a Function's last CRD, and panicked on a
// package with no CRD; a CRD first was taken for the Function.
func TestCrossplaneCLIReadsPackageYAML(t *testing.T) {
	cli, _ := crossplaneOracle(t)
	rt := runtimeImage(t)
	reg := startRegistry(t)
	work := t.TempDir()
	const crd = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: inputs.fn.example.org
spec:
  group: fn.example.org
  names: {kind: Input, listKind: InputList, plural: inputs, singular: input}
  scope: Namespaced
  versions:
  - name: v1beta1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {greeting: {type: string}}}
`
	for _, tc := range []struct {
		name, meta string
		crds       []string // files get-crds must write
	}{
		{"no crd", "", nil},
		{"one crd", "---\n" + crd, []string{"fn.example.org/v1beta1/input.yaml"}},
		// The CLI takes the first document for the Function.
		{"crd first", crd + "---\n", []string{"fn.example.org/v1beta1/input.yaml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(work, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			meta := filepath.Join(dir, "crossplane.yaml")
			fn := "apiVersion: meta.pkg.crossplane.io/v1\nkind: Function\nmetadata:\n  name: function-labelizer\n"
			stream := fn + tc.meta
			if strings.HasSuffix(tc.meta, "---\n") {
				stream = tc.meta + fn
			}
			if err := os.WriteFile(meta, []byte(stream), 0o644); err != nil {
				t.Fatal(err)
			}
			xpkg := filepath.Join(dir, "function.xpkg")
			if out, err := runOcifn(t, "build", "--from-oci-tarball", image("labelizer.tar"), "--package-file", meta,
				"--runtime-image-tarball", rt, "-o", xpkg); err != nil {
				t.Fatalf("ocifn build: %v\n%s", err, out)
			}
			ref := reg.addr + "/functions/" + filepath.Base(dir) + ":v0.1.0"
			if out, err := runOcifn(t, "push", "--insecure-registry", xpkg, ref); err != nil {
				t.Fatalf("ocifn push: %v\n%s", err, out)
			}
			ext := filepath.Join(dir, "function.yaml")
			if err := os.WriteFile(ext, []byte("apiVersion: pkg.crossplane.io/v1\nkind: Function\nmetadata:\n  name: function-labelizer\nspec:\n  package: "+ref+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			crds := filepath.Join(dir, "crds")
			cmd := exec.Command(cli, "xpkg", "get-crds", ext, "--cache-dir", filepath.Join(dir, "cache"), "--output-dir", crds)
			cmd.Env = append(os.Environ(), "HOME="+dir)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("crossplane xpkg get-crds: %v\n%s", err, out)
			}
			var got []string
			_ = filepath.WalkDir(crds, func(p string, d os.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(crds, p)
					got = append(got, rel)
				}
				return nil
			})
			if !slices.Equal(got, tc.crds) {
				t.Errorf("crossplane xpkg get-crds wrote %q, want %q:\n%s", got, tc.crds, out)
			}
		})
	}
}

// TestBuildRefusesAnotherPlatformsFunction: a function image for another
// platform than the runtime's (arm64 on an amd64 runtime, say) would fail
// every call of the package with "Exec format error"; build refuses it,
// naming both platforms.
func TestBuildRefusesAnotherPlatformsFunction(t *testing.T) {
	rt := runtimeImage(t)
	tag, err := name.NewTag("labelizer:latest")
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(image("labelizer.tar"), &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	other := "arm64"
	if cf.Architecture == other {
		other = "amd64"
	}
	cf = cf.DeepCopy()
	cf.Architecture = other
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	fn := filepath.Join(t.TempDir(), "labelizer-"+other+".tar")
	if err := tarball.WriteToFile(fn, tag, img); err != nil {
		t.Fatal(err)
	}
	out, err := runOcifn(t, "build", "--from-oci-tarball", fn, "--name", "function-labelizer",
		"--runtime-image-tarball", rt, "-o", filepath.Join(t.TempDir(), "f.xpkg"))
	if err == nil {
		t.Fatalf("ocifn build of a linux/%s function on the %s runtime succeeded:\n%s", other, runtime.GOARCH, out)
	}
	mustContain(t, "build output", out, "linux/"+other, "linux/"+runtime.GOARCH)
}

// TestBuildPackagesTheOtherABIsFunction: a function image built for the
// other ABI the runtime's CPU runs (linux/386 on linux/amd64, linux/arm on
// linux/arm64) runs in ocifn's containers, whose seccomp profile admits
// that ABI for this reason; build packages it, and the package answers.
func TestBuildPackagesTheOtherABIsFunction(t *testing.T) {
	other := map[string]string{"amd64": "386", "arm64": "arm"}[runtime.GOARCH]
	if other == "" {
		t.Skipf("no other ABI known on %s", runtime.GOARCH)
	}
	dir := t.TempDir()
	src := `package main

import (
	"io"
	"os"
	"runtime"
)

func main() {
	_, _ = io.Copy(io.Discard, os.Stdin)
	_, _ = os.Stdout.WriteString("{\"results\": [{\"severity\": \"SEVERITY_NORMAL\", \"message\": \"ran as " + runtime.GOARCH + "\"}]}\n")
}
`
	for name, text := range map[string]string{"main.go": src, "go.mod": "module fn\n\ngo 1.22\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	build := exec.Command("go", "build", "-o", "fn", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOARCH="+other, "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build for %s: %v\n%s", other, err, out)
	}
	bin := filepath.Join(dir, "fn")
	// Not every arm64 CPU runs 32-bit programs.
	if out, err := exec.Command(bin).CombinedOutput(); err != nil {
		t.Skipf("this machine does not run linux/%s programs: %v\n%s", other, err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		r, w := io.Pipe()
		go func() {
			tw := tar.NewWriter(w)
			_ = tw.WriteHeader(&tar.Header{Name: "fn", Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg})
			_, _ = tw.Write(data)
			w.CloseWithError(tw.Close())
		}()
		return r, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: layer})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", other
	cf.Config.Entrypoint = []string{"/fn"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("function-" + other + ":latest")
	if err != nil {
		t.Fatal(err)
	}
	fn := filepath.Join(dir, "function.tar")
	if err := tarball.WriteToFile(fn, tag, img); err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(dir, "function.xpkg")
	out, err := runOcifn(t, "build", "--from-oci-tarball", fn, "--name", "function-"+other,
		"--runtime-image-tarball", runtimeImage(t), "-o", pkg)
	if err != nil {
		t.Fatalf("ocifn build of a linux/%s function on the linux/%s runtime: %v\n%s", other, runtime.GOARCH, err, out)
	}
	req := filepath.Join(dir, "request.json")
	if err := os.WriteFile(req, []byte(`{"meta": {"tag": "abi"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runOcifn(t, "test", "--cache-dir", cacheDir(t), pkg, req)
	if err != nil {
		t.Fatalf("ocifn test of the package: %v\n%s", err, out)
	}
	mustContain(t, "ocifn test output", out, "ran as "+other)
}
