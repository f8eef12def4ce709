package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// runScript runs hack/run.sh (`make run`) against the binary under test,
// serving on address.
func runScript(t *testing.T, address string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patient(3*time.Minute))
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "hack", "run.sh"))
	cmd.Env = append(os.Environ(), "ADDRESS="+address, "OCIFN_BIN="+ocifnBin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// `make run` calls the server it started. Its address is fixed
// (127.0.0.1:9443), so a server an earlier run or someone else left there
// answered the call while the script's own server had exited on the
// taken port, and the script printed that other function's answer and
// exited 0.
func TestMakeRunCallsItsOwnServer(t *testing.T) {
	t.Run("free address", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		address := lis.Addr().String()
		lis.Close()
		out, err := runScript(t, address)
		if err != nil {
			t.Fatalf("hack/run.sh: %v\n%s", err, out)
		}
		mustContain(t, "hack/run.sh's output", out, `"ocifn.dev/labelized": "true"`, "msg=call tag=labelizer-example front=crossplane outcome=ok")
	})
	t.Run("address taken by another function", func(t *testing.T) {
		other := startServer(t, []string{"--tarball", image("echo.tar")})
		out, err := runScript(t, other.addr)
		if err == nil {
			t.Fatalf("hack/run.sh succeeded though %s was another server's:\n%s", other.addr, out)
		}
		mustContain(t, "hack/run.sh's output", out, "ocifn serve exited before it listened on "+other.addr, "address already in use")
	})
}
