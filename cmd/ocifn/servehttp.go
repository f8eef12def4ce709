package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ocifn/ocifn/admit"
	"github.com/ocifn/ocifn/bundle"
	"github.com/ocifn/ocifn/front"
	"github.com/ocifn/ocifn/front/cgi"
	"github.com/ocifn/ocifn/front/openwhisk"
	"github.com/ocifn/ocifn/hook"
)

// kubelessTimeout takes the call timeout from FUNC_TIMEOUT (seconds), which
// Kubeless sets for its runtimes, when --timeout is not given.
func (o *serveOptions) kubelessTimeout() error {
	v := os.Getenv("FUNC_TIMEOUT")
	if v == "" {
		return nil
	}
	// NaN, infinities and values past what a Duration holds (292 years)
	// convert to a negative Duration, which --timeout's check would then
	// blame on a flag not given; under a nanosecond rounds to 0.
	secs, err := strconv.ParseFloat(v, 64)
	d := time.Duration(secs * float64(time.Second))
	if err != nil || !(secs > 0 && secs < float64(math.MaxInt64/time.Second)) || d <= 0 {
		return fmt.Errorf("FUNC_TIMEOUT %q: want a positive number of seconds, at least a nanosecond and within 292 years", v)
	}
	o.timeout = d
	return nil
}

// platformAddress is where --api http listens when --address is not
// given: on the port Kubeless (FUNC_PORT, the function's port) or Knative
// (PORT, the container's port) tells its runtimes to listen on, which the
// platform's Service or proxy sends the calls to; else on :8080. from
// names the variable the port came from, if one did.
func platformAddress() (addr, from string, err error) {
	for _, env := range []string{"FUNC_PORT", "PORT"} {
		v := os.Getenv(env)
		if v == "" || strings.Contains(v, "://") {
			// Unset, or a Kubernetes service link of a Service named
			// func (FUNC_PORT=tcp://IP:PORT), which the kubelet puts in
			// every pod of its namespace: not this pod's port.
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			return "", "", fmt.Errorf("%s %q: want a port number from 1 to 65535", env, v)
		}
		return ":" + strconv.Itoa(n), env, nil
	}
	return httpAddress, "", nil
}

// closer is a front that holds files until it is closed.
type closer interface{ Close() error }

// noFiles is a front that holds none.
type noFiles struct{}

func (noFiles) Close() error { return nil }

// answerGrace is how long the calls stopped at the grace period's end
// have to answer before their connections are closed.
const answerGrace = 2 * time.Second

// serveHTTP serves an HTTP front: it listens first (health checks fail
// until the image is unpacked), then serves calls until ctx ends, then
// drains for the grace period. tracing says whether chain traces calls.
func (o *serveOptions) serveHTTP(ctx context.Context, log *slog.Logger, rt *bundle.Runtime, reg *prometheus.Registry, chain *hook.Chain, gate *admit.Gate, tracing bool) error {
	srv := front.NewServer(reg)
	srv.CountRefusals(chain, o.api)
	if o.api == apiOpenWhisk {
		srv.EndRefusals(openwhisk.EndRefused(os.Stdout, os.Stderr))
		srv.AnswerErrorsAs(front.JSONError)
	} else {
		srv.TagRefusals(cgi.Tag)
	}
	// A port that came from the environment is named where it cannot be
	// listened on: no --address was given.
	what := ""
	if o.addressFrom != "" {
		what = " (the port in " + o.addressFrom + ")"
	}
	lis, err := listen(o.address, what, "--address")
	if err != nil {
		return err
	}
	// The calls' requests end with calls, not with their connections: at
	// the grace period's end they are stopped and still answered.
	calls, stopCalls := context.WithCancelCause(context.Background())
	defer stopCalls(nil)
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second, ErrorLog: httpErrorLog(log),
		BaseContext: func(net.Listener) context.Context { return calls }}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(lis) }()
	defer hs.Close()
	log.Info("listening", "api", o.api, "address", lis.Addr().String())
	// Calls that come before the front is ready wait for it: if it never
	// is (a signal, an image that cannot be prepared), they are answered
	// before the port closes.
	ready := false
	defer func() {
		if !ready {
			srv.Abandon()
			actx, cancel := context.WithTimeout(context.Background(), answerGrace)
			defer cancel()
			_ = hs.Shutdown(actx)
		}
	}()

	// Results of asynchronous invocations outlive a restart in the cache
	// directory.
	if err := o.makeCacheDir(); err != nil {
		return err
	}
	inv, err := front.OpenInvocations(filepath.Join(o.cacheDir, "invocations-"+o.api), o.resultTTL, int64(o.resultsMaxBytes), int64(o.maxRequestBytes), log)
	if err != nil {
		return err
	}
	inv.RefuseWhenFull(gate)
	// One budget for the front's calls and the invocations', as the
	// Crossplane front's calls share theirs.
	budget := admit.NewBudget(int64(o.maxInflight))
	var copies func(int64) int64
	if o.api == apiOpenWhisk {
		copies = openwhisk.Copies
	}
	inv.ChargeTo(budget, copies)
	inv.ReadBodiesWithin(o.timeout)
	inv.CountRefusals(chain, o.api)
	if o.api == apiOpenWhisk {
		inv.EndRefusals(openwhisk.EndRefused(os.Stdout, os.Stderr))
		inv.AnswerErrorsAs(front.JSONError)
	} else {
		inv.TagRefusals(cgi.Tag)
	}
	b, err := o.prepare(ctx, log, rt, o.tarball)
	if err != nil {
		return stoppedWhileStarting(ctx, log, err)
	}
	registerFunctionCPU(reg, b)
	// The fronts' files go with the bundle: removed on shutdown, swept at
	// the next start if this process is killed.
	work, err := b.ScratchDir()
	if err != nil {
		_ = b.Close()
		return err
	}
	cfg := &front.Config{
		Runner: runner{b}, Hooks: chain, Gate: gate, Budget: budget, Copies: copies, Log: log,
		Timeout: o.timeout, MaxOutputBytes: int(o.maxOutputBytes), MaxRequestBytes: int64(o.maxRequestBytes), WorkDir: work,
	}
	var h http.Handler
	var files closer = noFiles{}
	switch o.api {
	case apiOpenWhisk:
		p := openwhisk.New(cfg, os.Getenv("__OW_API_HOST"), os.Stdout, os.Stderr)
		h, files = p, p
	default:
		h = cgi.New(cfg)
	}
	// However serving ends, no call may still run when the bundle goes.
	defer func() {
		_ = hs.Close()
		inv.Close()
		gate.Drain()
		if err := files.Close(); err != nil {
			log.Error("cleanup failed", "error", err)
		}
		if err := b.Close(); err != nil {
			log.Error("cleanup failed", "error", err)
		}
	}()
	returnHeap()
	srv.Ready(inv.Wrap(h))
	ready = true
	log.Info("serving", "address", lis.Addr().String(), "api", o.api, "max_concurrency", o.maxConcurrency, "max_queue", o.maxQueue, "timeout", o.timeout, "tracing", tracing)

	select {
	case err := <-served:
		return fmt.Errorf("HTTP server stopped: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down", "grace_period", o.gracePeriod)
	srv.Drain()
	sctx, cancel := graceContext(o.gracePeriod, log)
	defer cancel()
	// 503 from /healthz, and at once for a new call, synchronous or not,
	// and for one still queued, until the calls already admitted are done
	// (drainWithin).
	drainWithin(sctx, gate.Drain)
	err = hs.Shutdown(sctx)
	inv.Wait(sctx)
	if err != nil || sctx.Err() != nil {
		log.Warn("grace period over; stopping calls still running")
		// Each call still running kills its container and answers 503
		// saying why; asynchronous ones end with that as their result.
		// Connections still open a moment later are closed.
		stopCalls(front.ErrShutdown)
		inv.Close()
		actx, cancel := context.WithTimeout(context.Background(), answerGrace)
		defer cancel()
		if hs.Shutdown(actx) != nil {
			_ = hs.Close()
		}
	}
	log.Info("stopped")
	return nil
}
