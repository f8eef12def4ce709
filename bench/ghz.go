package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// ghzTool runs ghz (github.com/bojand/ghz, pinned by the Makefile), an
// independent open-source gRPC load tool, so that the figures of ocifn and
// of its peer are measured by the same client anyone can use.
type ghzTool struct {
	path string
	// request is the example request, as the JSON file ghz sends.
	request string
}

// ghzReport is the part of ghz's JSON report the bench reads: each call's
// latency and status, so that the rounds of a cell can be summed.
type ghzReport struct {
	Total   time.Duration `json:"total"`
	Details []struct {
		Latency time.Duration `json:"latency"`
		Error   string        `json:"error"`
	} `json:"details"`
}

// run sends calls from clients concurrent workers (one connection each)
// for d (d 0: one call), with rps calls per second in all when rps > 0,
// and returns every call's latency and the CPU ghz used. Server
// reflection gives ghz the service.
func (g *ghzTool) run(ctx context.Context, addr string, clients int, d time.Duration, rps int) (round, error) {
	args := []string{"--insecure", "--call", "apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction",
		"-D", g.request, "-c", fmt.Sprint(clients), "--connections", fmt.Sprint(clients),
		"-O", "json", "--timeout", "20s", "--duration-stop", "wait"}
	if d > 0 {
		args = append(args, "-z", d.String())
	} else {
		args = append(args, "-n", "1")
	}
	if rps > 0 {
		args = append(args, "--rps", fmt.Sprint(rps))
	}
	args = append(args, addr)
	cmd := exec.CommandContext(ctx, g.path, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return round{}, fmt.Errorf("ghz %s: %v: %s", strings.Join(args, " "), err, errb.Bytes())
	}
	var rep ghzReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return round{}, fmt.Errorf("ghz report: %w", err)
	}
	// ghz runs on the same CPUs as the server: its own CPU is reported so
	// that the machine's whole CPU per call can be accounted for.
	r := round{elapsed: rep.Total, client: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
	var msgs []string
	for _, c := range rep.Details {
		r.lat = append(r.lat, c.Latency)
		if c.Error != "" {
			r.errors++
			msgs = append(msgs, c.Error)
		}
	}
	if len(msgs) > 0 {
		slices.Sort(msgs)
		r.firstError = msgs[0]
	}
	return r, nil
}

// findGhz checks that the ghz binary runs.
func findGhz(path, request string) (*ghzTool, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("ghz not found at %s (make bench installs it): %w", path, err)
	}
	return &ghzTool{path: path, request: request}, nil
}
