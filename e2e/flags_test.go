package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestServeRefusesFlagsThatCannotWork: a flag value that would leave the
// server unable to do what it was asked (every call failing, or a flag
// with no effect) stops the startup with an error naming the flag, rather
// than a server that starts and then fails or ignores it.
func TestServeRefusesFlagsThatCannotWork(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want []string
	}{
		// crun cannot write such a map: the server served, and every call
		// got a Fatal result "writing file /proc/PID/gid_map: Invalid
		// argument".
		{"id_map_past_the_last_id", []string{"--id-map-start", "4294967295"}, []string{"--id-map-start", "--id-map-size"}},
		{"id_map_of_no_ids", []string{"--id-map-size", "0"}, []string{"--id-map-size"}},
		// Root in the function would be root on the host.
		{"id_map_from_host_root", []string{"--id-map-start", "0"}, []string{"--id-map-start", "root"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--insecure", "--address", "127.0.0.1:0", "--metrics-address", "", "--cache-dir", cacheDir(t), "--tarball", image("labelizer.tar")}, tc.args...)
			ctx, cancel := context.WithTimeout(context.Background(), patient(20*time.Second))
			defer cancel()
			cmd := exec.CommandContext(ctx, ocifnBin, args...)
			cmd.Env = append(os.Environ(), "TLS_SERVER_CERTS_DIR=")
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("ocifn %s started and served until killed:\n%s", strings.Join(args, " "), out)
			}
			if err == nil {
				t.Fatalf("ocifn %s exited 0:\n%s", strings.Join(args, " "), out)
			}
			if strings.Contains(string(out), "msg=serving ") {
				t.Errorf("the server reported serving before it failed:\n%s", out)
			}
			mustContain(t, "output", string(out), tc.want...)
		})
	}
}
