package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
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

// ghzReport is the part of ghz's JSON report the bench reads.
type ghzReport struct {
	Count               uint64         `json:"count"`
	Total               time.Duration  `json:"total"`
	Rps                 float64        `json:"rps"`
	StatusCodes         map[string]int `json:"statusCodeDistribution"`
	ErrorDistribution   map[string]int `json:"errorDistribution"`
	LatencyDistribution []struct {
		Percentage int           `json:"percentage"`
		Latency    time.Duration `json:"latency"`
	} `json:"latencyDistribution"`
}

// run sends calls from clients concurrent workers (one connection each)
// for d (d 0: one call), with rps calls per second in all when rps > 0,
// and returns ghz's percentiles and throughput. Server reflection gives
// ghz the service.
func (g *ghzTool) run(ctx context.Context, addr string, clients int, d time.Duration, rps int) (result, error) {
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
		return result{}, fmt.Errorf("ghz %s: %v: %s", strings.Join(args, " "), err, errb.Bytes())
	}
	// ghz runs on the same CPUs as the server: its own CPU is reported so
	// that the machine's whole CPU per call can be accounted for.
	ghzCPU := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	var rep ghzReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return result{}, fmt.Errorf("ghz report: %w", err)
	}
	r := result{calls: int(rep.Count), perSecond: rep.Rps, clientCPU: ghzCPU}
	for code, n := range rep.StatusCodes {
		if code != "OK" {
			r.errors += n
		}
	}
	var msgs []string
	for m := range rep.ErrorDistribution {
		msgs = append(msgs, m)
	}
	sort.Strings(msgs)
	if len(msgs) > 0 {
		r.firstError = msgs[0]
	}
	for _, l := range rep.LatencyDistribution {
		switch l.Percentage {
		case 50:
			r.p50 = l.Latency
		case 90:
			r.p90 = l.Latency
		case 99:
			r.p99 = l.Latency
		}
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
