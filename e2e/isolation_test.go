package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// probe calls the nsprobe function and returns what it reported.
func probe(t *testing.T, s *server) map[string]any {
	t.Helper()
	rsp := s.call(t, loadRequest(t, "nsprobe", "request.json"))
	if len(rsp.GetResults()) != 0 {
		t.Fatalf("nsprobe failed: %v\n%s", rsp.GetResults(), s.stderr)
	}
	return rsp.GetContext().AsMap()
}

// TestFunctionRunsInItsOwnNamespaces checks, from inside a function, that it
// has its own user, pid, mount, network, ipc, uts and cgroup namespaces, a uid
// map to unprivileged host ids, only loopback, a read-only root and a
// writable /tmp.
func TestFunctionRunsInItsOwnNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test checks the root mode and must run as root (CI does)")
	}
	s := startServer(t, []string{"--tarball", image("nsprobe.tar")})
	got := probe(t, s)

	ns, _ := got["ns"].(map[string]any)
	for _, name := range []string{"user", "pid", "mnt", "net", "ipc", "uts", "cgroup"} {
		own, err := os.Readlink("/proc/self/ns/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if ns[name] == nil || ns[name] == own {
			t.Errorf("%s namespace: function has %v, the host has %s: want a namespace of its own", name, ns[name], own)
		}
	}
	want := map[string]string{
		"uid_map":    "0 100000 65536",
		"gid_map":    "0 100000 65536",
		"pid":        "1",
		"interfaces": "lo",
		"uid":        "0",
		"tmp_write":  "ok",
		"root_write": "denied",
		"cwd":        "/fn",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}

	// Two calls never share /tmp: the probe writes a file there and reports
	// whether one was already present.
	if again := probe(t, s); again["tmp_write"] != "ok" {
		t.Errorf("second call: tmp_write %q", again["tmp_write"])
	}
}

// TestIDMapFlags moves the host id range.
func TestIDMapFlags(t *testing.T) {
	s := startServer(t, []string{"--tarball", image("nsprobe.tar"), "--id-map-start", "200000", "--id-map-size", "1000"})
	if got := probe(t, s)["uid_map"]; got != "0 200000 1000" {
		t.Errorf("uid_map: got %q", got)
	}
}

// testUser returns an unprivileged user for the rootless test, creating it
// if needed.
func testUser(t *testing.T) *user.User {
	t.Helper()
	const name = "ocifn-e2e"
	u, err := user.Lookup(name)
	if err != nil {
		out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput()
		if err != nil {
			t.Fatalf("cannot create the unprivileged test user: %v\n%s", err, out)
		}
		if u, err = user.Lookup(name); err != nil {
			t.Fatal(err)
		}
	}
	return u
}

// TestUnprivileged starts ocifn as an unprivileged user: the function runs
// as root of its own user namespace, which maps to that user and nothing
// more, and still answers correctly.
func TestUnprivileged(t *testing.T) {
	u, home, as := unprivileged(t, "nsprobe.tar", "labelizer.tar")
	cache := filepath.Join(home, "cache")

	s := startServer(t, []string{"--tarball", filepath.Join(home, "nsprobe.tar"), "--cache-dir", cache}, as)
	got := probe(t, s)
	// Relative to ocifn's own user namespace, where the user is root: the
	// function's root is the user, and no other id exists.
	if got["uid_map"] != "0 0 1" || got["uid"] != "0" {
		t.Errorf("uid_map %q, uid %q: want the single mapping 0 0 1", got["uid_map"], got["uid"])
	}
	// From the host: ocifn re-executed itself in a user namespace that maps
	// root to the unprivileged user, and the function's is nested inside.
	ocifnMap, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", childOf(t, s.cmd.Process.Pid)))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Fields(string(ocifnMap))[1] != u.Uid {
		t.Errorf("ocifn's process uid_map %q does not map to the test user %s", ocifnMap, u.Uid)
	}
	for k, v := range map[string]string{"pid": "1", "interfaces": "lo", "tmp_write": "ok", "root_write": "denied"} {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}

	s2 := startServer(t, []string{"--tarball", filepath.Join(home, "labelizer.tar"), "--cache-dir", cache}, as)
	req := loadRequest(t, "labelizer", "request.json")
	want := withTag(loadResponse(t, "labelizer", "expected.json"), req)
	if d := diff(want, s2.call(t, req)); d != "" {
		t.Errorf("response (-want +got):\n%s", d)
	}
}

// TestContainersMakeNoKeyrings: a container costs its user nothing of the
// kernel's key quota. Keyrings are not namespaced: one made for a container
// would be charged to the user ocifn runs as on the host, whose quota every
// process of that user on the machine shares, though the function may not
// use a keyring at all.
func TestContainersMakeNoKeyrings(t *testing.T) {
	u, home, as := unprivileged(t, "trivial.tar")
	// The keys the user holds already: its user and user session keyrings,
	// once anything that ran as the user made them (buildah, a login),
	// live as long as the machine.
	before := keysOf(t, u.Uid)
	s := startServer(t, []string{"--tarball", filepath.Join(home, "trivial.tar"), "--cache-dir", filepath.Join(home, "cache"),
		"--warm", "4", "--metrics-address", "127.0.0.1:0"}, as)
	eventually(t, 10*time.Second, "four warm containers", func() bool { return s.metric(t, "ocifn_warm_containers") == 4 })
	req := loadRequest(t, "trivial", "request.json")
	for range 4 {
		s.call(t, req)
	}
	// Four warm containers, and four more made for the pool after the
	// calls: with a keyring each, the user would hold eight keys or so
	// until the kernel collected those of the containers that are gone.
	if n := keysOf(t, u.Uid); n > before {
		t.Errorf("the user ocifn runs as holds %d keys with 4 warm containers after 4 calls, want no more than the %d before (/proc/key-users)", n, before)
	}
}

// keysOf returns how many keys the user uid owns, by /proc/key-users.
func keysOf(t *testing.T, uid string) int {
	t.Helper()
	data, err := os.ReadFile("/proc/key-users")
	if err != nil {
		t.Fatal(err)
	}
	// "  999:     2 2/2 2/200 46/20000": the user, the structure's usage,
	// then keys owned/instantiated.
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != uid+":" {
			continue
		}
		n, err := strconv.Atoi(strings.SplitN(f[2], "/", 2)[0])
		if err != nil {
			t.Fatalf("/proc/key-users: %q: %v", line, err)
		}
		return n
	}
	return 0
}

// unprivileged returns the test user, a home directory of its own holding
// copies of the named test images (the checkout may sit under a directory
// it cannot enter), and the option that starts a server as that user.
func unprivileged(t *testing.T, images ...string) (*user.User, string, serverOption) {
	t.Helper()
	files := map[string]string{}
	for _, name := range images {
		files[image(name)] = name
	}
	return userHome(t, files)
}

// userHome returns the test user, a new home directory it owns holding a
// copy of each file of files (host path to name in the home), and the
// option that starts a server as that user.
func userHome(t *testing.T, files map[string]string) (*user.User, string, serverOption) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test creates a user and must run as root (CI does)")
	}
	u := testUser(t)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	home, err := os.MkdirTemp("", "ocifn-e2e-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	for src, name := range files {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(home, uid, gid); err != nil {
		t.Fatal(err)
	}
	return u, home, asUser(uint32(uid), uint32(gid), home)
}

// devProcScript reports, as the response's context, what a function finds
// in its /dev: the entries, whether each device behaves as it should, and
// whether /dev itself takes a new file; which of its devices take new
// times (touch) rather than being refused as read-only (unprivileged, they
// are the host's own nodes); who owns /dev/mqueue and the
// loopback device's sysfs entries; and whether /proc reads, and
// takes a write to the process's own oom_score_adj (which any process may
// make where /proc is writable, raising it). A refused write reports the
// shell's error, which names the reason.
const devProcScript = `ok() { if "$@" >/dev/null 2>&1; then echo ok; else echo failed; fi; }
null=$(ok sh -c 'echo x >/dev/null && [ ! -s /dev/null ]')
zero=$(ok sh -c '[ "$(head -c 4 /dev/zero | od -An -tx1 | tr -d " \n")" = 00000000 ]')
random=$(ok sh -c '[ "$(head -c 16 /dev/urandom | wc -c)" -eq 16 ] && [ "$(head -c 16 /dev/random | wc -c)" -eq 16 ]')
full=$(sh -c 'echo x >/dev/full' 2>&1 | grep -q 'No space left' && echo ENOSPC || echo other)
links=$(ok sh -c '[ -d /dev/fd/ ] && [ -L /dev/stdin ] && [ -L /dev/stdout ] && [ -L /dev/stderr ]')
echo to-stderr >/dev/stderr
dev_write=$( (: >/dev/ocifn-probe) 2>&1 && echo allowed)
dev_touch=$(for d in null zero full random urandom tty; do touch /dev/$d 2>&1 | grep -q 'Read-only file system' || printf '%s ' $d; done)
entries=$(ls /dev | tr '\n' ' ')
proc_write=$( (echo 1000 >/proc/self/oom_score_adj) 2>&1 && echo allowed)
status=$(ok grep -q '^NoNewPrivs:.*1' /proc/self/status)
owners=$(stat -c '%u:%g' /dev/mqueue /sys/class/net/lo/address 2>&1 | tr '\n' ' ')
jq -c --arg null "$null" --arg zero "$zero" --arg random "$random" --arg full "$full" \
	--arg links "$links" --arg dev_write "$dev_write" --arg dev_touch "$dev_touch" --arg entries "$entries" \
	--arg proc_write "$proc_write" --arg status "$status" --arg owners "$owners" \
	'{desired: .desired, context: {null: $null, zero: $zero, random: $random, full: $full, links: $links,
	  dev_write: $dev_write, dev_touch: $dev_touch, entries: $entries, proc_write: $proc_write, status: $status, owners: $owners}}'`

// TestDevAndProc checks, from inside a function, that its /dev has the
// devices and links every container has, that they work and that /dev is
// read-only, both when ocifn runs as root (a directory of device nodes
// made once per bundle) and unprivileged (where it may not make device
// nodes: the host's, bind mounted in its own mount namespace), and that
// its devices are read-only with crun's writable tmpfs /dev too (root on
// a nodev cache disk); and that /proc reads but takes no write.
func TestDevAndProc(t *testing.T) {
	_, home, as := unprivileged(t, "sh-function.tar")
	_, nodev := smallDisk(t, 256<<20)
	for _, c := range []struct {
		name string
		args []string
		opts []serverOption
		dev  string
		// devWritable: crun's tmpfs /dev, which takes new files.
		devWritable bool
		// forkServer: a crun that has ocifn's fork server (hack/crun.sh).
		forkServer bool
	}{
		{"root", []string{"--debug", "--tarball", image("sh-function.tar")}, nil, `dev=prepared`, false, true},
		{"unprivileged", []string{"--debug", "--tarball", filepath.Join(home, "sh-function.tar"), "--cache-dir", filepath.Join(home, "cache")}, []serverOption{as}, `dev="prepared, devices bind mounted"`, false, true},
		// No device node opens on a nodev disk: crun binds the host's.
		{"root on a nodev cache disk", []string{"--debug", "--tarball", image("sh-function.tar"), "--cache-dir", nodev}, nil, `dev=tmpfs`, true, true},
		// Debian bookworm's crun (hack/deps.sh installs it, and the
		// cgroup v2 guest has it) does not carry the devices' mounts
		// along: crun's tmpfs /dev, and the log says why in words.
		{"unprivileged, Debian's crun 1.8.1", []string{"--debug", "--tarball", filepath.Join(home, "sh-function.tar"), "--cache-dir", filepath.Join(home, "cache-debian"), "--runtime", "/usr/bin/crun"}, []serverOption{as},
			`this crun likely does not carry bind mounts along with an rbind mount in a user namespace`, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := hostDevices()
			s := startServer(t, c.args, c.opts...)
			rsp := s.call(t, shRequest(t, "dev-and-proc", devProcScript))
			if len(rsp.GetResults()) != 0 {
				t.Fatalf("the script failed: %v", rsp.GetResults())
			}
			got := rsp.GetContext().AsMap()
			// The message queue file system and the loopback device's
			// sysfs entries belong to the container's root: the
			// namespaces that hold them are made once its ids are mapped.
			// The devices are read-only too: bind mounted, they are the
			// host's nodes, whose times a touch would set.
			for k, v := range map[string]string{"null": "ok", "zero": "ok", "random": "ok", "full": "ENOSPC", "links": "ok", "status": "ok", "owners": "0:0 0:0 ", "dev_touch": ""} {
				if got[k] != v {
					t.Errorf("%s: got %q, want %q (context %v)", k, got[k], v, got)
				}
			}
			// Read-only, not merely out of reach of the function's ids.
			for _, k := range []string{"dev_write", "proc_write"} {
				if k == "dev_write" && c.devWritable {
					continue
				}
				if w, _ := got[k].(string); !strings.Contains(w, "Read-only file system") {
					t.Errorf("%s: got %q, want the write refused as on a read-only file system", k, w)
				}
			}
			entries, _ := got["entries"].(string)
			for _, e := range []string{"fd", "full", "mqueue", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty", "urandom", "zero"} {
				if !slices.Contains(strings.Fields(entries), e) {
					t.Errorf("/dev has no %s: %q", e, entries)
				}
			}
			// The function's stderr line reached the server's log (with
			// --debug; it may still be in the pipe from the server), which
			// also says what /dev the containers get.
			eventually(t, 5*time.Second, "the function's stderr logged", func() bool { return strings.Contains(s.stderr.String(), "to-stderr") })
			mustContain(t, "server log", s.stderr.String(), c.dev)
			// Containers are made by a resident crun that forks for
			// each (TestForkServer), unprivileged too.
			if c.forkServer {
				mustContain(t, "server log", s.stderr.String(), "crun=fork-server")
			}
			if after := hostDevices(); after != before {
				t.Errorf("the host's devices changed:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

// childOf returns the only child process of pid.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	children := childrenOf(t, pid)
	if len(children) != 1 {
		t.Fatalf("process %d has children %v, want exactly one (the re-executed ocifn)", pid, children)
	}
	return children[0]
}
