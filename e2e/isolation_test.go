package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
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
	// The user gets its own copies of the images: the checkout may sit
	// under a directory it cannot enter.
	for _, name := range []string{"nsprobe.tar", "labelizer.tar"} {
		data, err := os.ReadFile(image(name))
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
	as := asUser(uint32(uid), uint32(gid), home)
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

// childOf returns the only child process of pid.
func childOf(t *testing.T, pid int) int {
	t.Helper()
	children := childrenOf(t, pid)
	if len(children) != 1 {
		t.Fatalf("process %d has children %v, want exactly one (the re-executed ocifn)", pid, children)
	}
	return children[0]
}
