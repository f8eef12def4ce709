package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/credentials"

	"github.com/ocifn/ocifn/adaptor"
	"github.com/ocifn/ocifn/admit"
	"github.com/ocifn/ocifn/codec"
	"github.com/ocifn/ocifn/hook"
	"github.com/ocifn/ocifn/oci"
)

// defaultWarm keeps two containers ready: a call then starts in well under a
// millisecond instead of ~10 ms, for two idle processes' worth of memory.
const defaultWarm = 2

// returnHeap gives the free pages of Go's heap back to the kernel: once
// the bundle is ready, before serving, and each time the warm pool lets
// every container go after --warm-idle without a call. Go keeps them
// until the heap has grown to its next collection's goal, which an idle
// server does not reach, so the garbage of its start (the image's
// config, the bundle, the seccomp program) and of its last calls stayed
// resident: about 2 MB of the serving process's idle PSS (7.1 against
// 5.0 MB of anonymous memory after the start, trivial function).
// FreeOSMemory collects first, even when GOGC=off asked for no
// collection; that is left alone.
func returnHeap() {
	if gc := debug.SetGCPercent(-1); gc >= 0 {
		debug.SetGCPercent(gc)
		debug.FreeOSMemory()
	}
}

// defaultWarmIdle frees an unused function's containers after a while, as
// serverless platforms scale an unused function to zero.
const defaultWarmIdle = 5 * time.Minute

// defaultTarball is where `ocifn build` puts the function image inside a
// package, so the package's entrypoint needs no arguments.
const defaultTarball = "/ocifn/function.tar"

// APIs ocifn serves.
const (
	apiCrossplane = "crossplane"
	apiOpenWhisk  = "openwhisk"
	apiHTTP       = "http"
)

// openWhiskMaxTimeout is the --timeout of the OpenWhisk front when none is
// given: OpenWhisk's largest time limit of an action. Each activation's
// deadline, from its action's own limit, ends it sooner.
const openWhiskMaxTimeout = 5 * time.Minute

// httpAddress is where the HTTP fronts listen by default, as OpenWhisk and
// Kubeless expect.
const httpAddress = ":8080"

// checkAPI says why api is not what ocifn serve can speak, if it is not.
func checkAPI(api string) error {
	switch api {
	case apiCrossplane, apiOpenWhisk, apiHTTP:
		return nil
	}
	return fmt.Errorf("want %s, %s or %s", apiCrossplane, apiOpenWhisk, apiHTTP)
}

// checkIOFront says why an I/O mode cannot go with api, if it cannot. An
// I/O mode is how a RunFunctionRequest reaches the function; the HTTP
// fronts' calls are no such request and reach it in their own protocol,
// so a mode given with them would be ignored without a word.
func checkIOFront(api, io string) error {
	protocols := map[string]string{apiOpenWhisk: "OpenWhisk's action interface", apiHTTP: "CGI (RFC 3875)"}
	if io == "" || protocols[api] == "" {
		return nil
	}
	return fmt.Errorf("an I/O mode is how a Crossplane RunFunctionRequest reaches the function, and applies to --api %s only: --api %s calls reach it as %s defines", apiCrossplane, api, protocols[api])
}

// defaultMaxRequestBytes bounds an HTTP front's request body.
const defaultMaxRequestBytes = 64 << 20

type serveOptions struct {
	functionFlags
	// warmIgnored says that --warm was given to an HTTP front, which
	// cannot use warm containers.
	warmIgnored bool
	// grpcIgnored are the flags of the gRPC front alone given to an HTTP
	// front.
	grpcIgnored []string
	// ioIgnored says why OCIFN_IO was ignored: it came with an HTTP
	// front, which has no use for an I/O mode.
	ioIgnored error
	// addressFrom names the variable --api http took its port from
	// (FUNC_PORT, PORT), if it did.
	addressFrom     string
	api             string
	maxRequestBytes byteSize
	resultTTL       time.Duration
	resultsMaxBytes byteSize
	tarball         string
	address         string
	insecure        bool
	tlsDir          string
	gracePeriod     time.Duration
	maxRecvMsgSize  byteSize
	maxSendMsgSize  byteSize
	maxInflight     byteSize
	maxConcurrency  int
	maxQueue        int
	metricsAddress  string
	cache           bool
	cacheTTL        time.Duration
	cacheMaxBytes   byteSize
	profiling       bool
	debug           bool
	logFormat       string

	// tlsDirFlag says that tlsDir came from --tls-server-certs-dir, not
	// from TLS_SERVER_CERTS_DIR.
	tlsDirFlag bool
}

func newServeCommand() *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve calls by running an image in a fresh rootless container per call",
		Long: `Serve Crossplane's FunctionRunnerService (v1 and v1beta1) over gRPC, or,
with --api, OpenWhisk's action proxy (openwhisk) or CGI functions (http)
over HTTP on :8080, with /healthz and /metrics on the same port.

At startup the image tarball is read, every digest checked, and its layers
unpacked once into a read-only root filesystem. Each RunFunction call then
runs the image's entrypoint in a fresh rootless crun container: the request
on stdin, the response on stdout, as JSON unless --io or the package names
another I/O mode.`,
		Example: `  # Local development, plaintext gRPC on :9443:
  ocifn serve --insecure --tarball function.tar

  # As Crossplane runs it (TLS material in TLS_SERVER_CERTS_DIR):
  ocifn serve

  # As an OpenWhisk Docker action, on :8080:
  ocifn serve --api openwhisk --tarball function.tar`,
		Args: noArgs("--tarball"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			o.tlsDirFlag = f.Changed("tls-server-certs-dir")
			// A bad value from the environment is named as such: no flag
			// was given. The HTTP fronts never read it (checkIOFront
			// below ignores it with a warning), so it cannot stop them.
			if v := os.Getenv(oci.EnvIO); v != "" && !f.Changed("io") && o.api == apiCrossplane {
				if _, err := codec.ByName(v); err != nil {
					return fmt.Errorf("%s=%s in the environment (ocifn build --io sets it in a package): %w", oci.EnvIO, v, err)
				}
			}
			if v := os.Getenv(oci.EnvAPI); v != "" && !f.Changed("api") {
				if err := checkAPI(v); err != nil {
					return fmt.Errorf("%s=%s in the environment (ocifn build --api sets it in a package): %w", oci.EnvAPI, v, err)
				}
			}
			if err := checkIOFront(o.api, o.io); err != nil {
				if f.Changed("io") {
					return fmt.Errorf("--io %s: %w", o.io, err)
				}
				// A package built before ocifn build refused the pair
				// carries both: it is served, with a warning.
				o.ioIgnored, o.io = err, ""
			}
			// The HTTP fronts serve metrics on their own port, where the
			// gRPC front's defaults would collide.
			if o.api != apiCrossplane {
				o.noIO = true
				if !f.Changed("address") {
					o.address = httpAddress
				}
				if !f.Changed("metrics-address") {
					o.metricsAddress = ""
				}
				// Their calls set arguments and environment per call, which
				// a container created ahead cannot take: each gets its own.
				// A negative --warm is left for check to refuse, as
				// the gRPC front does.
				if o.warm > 0 {
					o.warmIgnored = f.Changed("warm")
					o.warm = 0
				}
				for _, name := range grpcOnlyFlags {
					if f.Changed(name) {
						o.grpcIgnored = append(o.grpcIgnored, "--"+name)
					}
				}
			}
			if o.api == apiHTTP && !f.Changed("address") {
				var err error
				if o.address, o.addressFrom, err = platformAddress(); err != nil {
					return err
				}
			}
			if o.api == apiHTTP && !f.Changed("timeout") {
				if err := o.kubelessTimeout(); err != nil {
					return err
				}
			}
			if o.api == apiOpenWhisk && !f.Changed("timeout") {
				// OpenWhisk's invoker gives each activation the deadline
				// of its action's time limit (60 s by default, up to
				// 5 min), which the proxy keeps; Crossplane's 25 s would
				// stop longer actions before their limit.
				o.timeout = openWhiskMaxTimeout
			}
			return o.run(cmd.Context())
		},
	}
	f := cmd.Flags()
	// In a package, ocifn build --io records the mode in the environment.
	o.io = os.Getenv(oci.EnvIO)
	api := os.Getenv(oci.EnvAPI)
	if api == "" {
		api = apiCrossplane
	}
	f.StringVar(&o.api, "api", api, "what calls speak: crossplane (gRPC), openwhisk (OpenWhisk's action proxy on HTTP) or http (CGI functions on HTTP) (env "+oci.EnvAPI+")")
	o.maxRequestBytes = defaultMaxRequestBytes
	f.Var(&o.maxRequestBytes, "max-request-bytes", "largest request body the HTTP fronts accept, in bytes (e.g. 64Mi)")
	f.DurationVar(&o.resultTTL, "result-ttl", time.Hour, "HTTP fronts: how long the result of an asynchronous invocation (Prefer: respond-async) is kept")
	o.resultsMaxBytes = 256 << 20
	f.Var(&o.resultsMaxBytes, "results-max-bytes", "HTTP fronts: the most the results of asynchronous invocations this server stored, or took over from a server gone from a shared invocations directory, take on disk (e.g. 256Mi); the oldest go first")
	o.functionFlags.register(f)
	f.Lookup("io").Usage += " (env " + oci.EnvIO + ")"
	f.Lookup("timeout").Usage += "; with --api http, FUNC_TIMEOUT (seconds) when not given, as Kubeless sets it; with --api openwhisk, 5m when not given, the longest limit of an OpenWhisk action, whose deadline ends it sooner"
	f.IntVar(&o.warm, "warm", defaultWarm, "fewest containers to keep created ahead of calls, so that a call only has to start one; each still serves a single call; the pool grows to as many calls as ran at once, and by one for each call that found it empty though large enough, up to --max-concurrency (0: off)")
	f.DurationVar(&o.warmIdle, "warm-idle", defaultWarmIdle, "after this long without a call, let every warm container go; the next call refills the pool (0: never)")
	f.StringVar(&o.tarball, "tarball", defaultTarball, "image tarball of the function: docker save output (optionally gzipped) or an OCI archive")
	f.StringVar(&o.address, "address", ":9443", "address to serve on; :8080 by default for the HTTP fronts, and with --api http the port in FUNC_PORT (Kubeless) or else PORT (Knative) when set")
	f.BoolVar(&o.insecure, "insecure", false, "serve plaintext gRPC without TLS (local development only)")
	f.StringVar(&o.tlsDir, "tls-server-certs-dir", os.Getenv("TLS_SERVER_CERTS_DIR"), "directory with tls.crt, tls.key and ca.crt; client certificates are required (env TLS_SERVER_CERTS_DIR)")
	f.DurationVar(&o.gracePeriod, "grace-period", 30*time.Second, "on SIGTERM, how long running calls may take to finish (0: stop them at once); a second SIGTERM, SIGINT or SIGHUP, a second or more after the first, ends it; calls still running then are stopped and answered UNAVAILABLE (HTTP 503) saying so")
	o.maxRecvMsgSize, o.maxInflight = adaptor.DefaultMaxRecvMsgSize, adaptor.DefaultMaxInflightBytes
	f.Var(&o.maxRecvMsgSize, "max-recv-msg-size", "largest gRPC request accepted, in bytes (e.g. 64Mi)")
	o.maxSendMsgSize = adaptor.DefaultMaxSendMsgSize
	f.Var(&o.maxSendMsgSize, "max-send-msg-size", "largest gRPC response sent, in bytes (e.g. 4Mi, what Crossplane's gRPC client accepts); a function's answer that takes more in protobuf gets a Fatal result saying so")
	f.Var(&o.maxInflight, "max-inflight-bytes", "memory that calls being received or run may hold at once, in bytes (e.g. 1Gi); Go's soft memory limit is set to 3/4 of it, unless GOMEMLIMIT is set. Crossplane front: a request counts twice the largest size until it is read, then what it takes decoded and encoded for the function, counted from its bytes; the function's answer its stdout, then what decoding it takes; beyond it, RESOURCE_EXHAUSTED. HTTP fronts: a body counts its Content-Length before it is read (or its buffers as it is read), with the copies the front makes of it (OpenWhisk's), queued asynchronous invocations' bodies too (given up, the invocation not run, to a running call's output that needs them); the function's stdout and stderr every buffer they grow into; beyond it, 503 with Retry-After (without it for output: the function ran and was stopped), or, for what could never fit, 413 for a body and 502 for output")
	f.IntVar(&o.maxConcurrency, "max-concurrency", adaptor.DefaultMaxConcurrency(), "calls running at once; by default 4 per CPU")
	f.IntVar(&o.maxQueue, "max-queue", 0, "calls waiting for a slot before new ones are refused (gRPC RESOURCE_EXHAUSTED, HTTP 503) (0: 4 x --max-concurrency)")
	f.StringVar(&o.metricsAddress, "metrics-address", ":8080", "address to serve Prometheus metrics on, at /metrics (empty: no metrics; default empty for the HTTP fronts, which serve /metrics on --address)")
	f.BoolVar(&o.cache, "cache", true, "answer a request whose tag was seen before from the response cache while the earlier response's meta.ttl lasts")
	f.DurationVar(&o.cacheTTL, "cache-ttl", 0, "cache every response for this long, whatever its meta.ttl (only for deterministic functions)")
	o.cacheMaxBytes = adaptor.DefaultCacheMaxBytes
	f.Var(&o.cacheMaxBytes, "cache-max-bytes", "size of the response cache, in bytes (e.g. 64Mi); least recently used responses are dropped beyond it")
	f.BoolVar(&o.debug, "debug", false, "log more")
	f.BoolVar(&o.profiling, "profiling", false, "serve Go's pprof profiles at /debug/pprof/ on --metrics-address")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	return cmd
}

var errNoTransport = errors.New("refusing to start without a transport security choice: pass --tls-server-certs-dir DIR (or set TLS_SERVER_CERTS_DIR) to serve mTLS, or --insecure to serve plaintext for local development")

// secondSignalAfter is how long after a shutdown's start a stop signal
// counts as a second one (graceContext).
const secondSignalAfter = time.Second

// graceContext returns the context of a shutdown's grace period: it ends
// after period, or at a second stop signal, whose sender (a second Ctrl-C)
// wants the calls still running stopped now rather than waited for. They
// are stopped and cleaned up as at the period's end.
//
// A signal within secondSignalAfter of the shutdown's start is the first
// one again: a terminal signals its whole process group, so ocifn running
// in namespaces of its own (host.Reexec) gets a Ctrl-C both from the
// terminal and as forwarded by its parent.
func graceContext(period time.Duration, log *slog.Logger) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), period)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, stopSignals...)
	start := time.Now()
	go func() {
		for {
			select {
			case s := <-sigs:
				if time.Since(start) < secondSignalAfter {
					continue
				}
				log.Warn("a second signal ends the grace period", "signal", s.String())
				cancel()
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		cancel()
	}
}

// drainWithin runs drain, which refuses new calls and waits for those
// already admitted, until it returns or grace ends, and says whether it
// returned. Meanwhile the server's port stays open, so that what comes
// (Kubernetes takes a moment to stop sending to a terminating pod) gets an
// answer it can act on, a refusal, rather than a refused connection.
func drainWithin(grace context.Context, drain func()) bool {
	drained := make(chan struct{})
	go func() {
		drain()
		close(drained)
	}()
	select {
	case <-drained:
		return true
	case <-grace.Done():
		return false
	}
}

// warnIgnored warns of what the HTTP fronts ignore. It runs once ocifn is
// in its own namespaces: the process that re-executes itself there would
// log every warning a second time.
func (o *serveOptions) warnIgnored(log *slog.Logger) {
	if o.api == apiCrossplane {
		return
	}
	if o.tlsDir != "" {
		log.Warn("--tls-server-certs-dir (or TLS_SERVER_CERTS_DIR) applies to the gRPC front only: this front serves plain HTTP, for the platform's proxy to terminate TLS", "api", o.api, "tls_server_certs_dir", o.tlsDir)
	}
	if o.ioIgnored != nil {
		log.Warn(oci.EnvIO+" in the environment is ignored", "reason", o.ioIgnored.Error())
	}
	if o.warmIgnored {
		log.Warn("--warm does not apply to the HTTP fronts: each call sets its own environment, which a container created ahead cannot take, so every call gets a container of its own", "api", o.api)
	}
	if len(o.grpcIgnored) > 0 {
		log.Warn("flags of the gRPC front are ignored by the HTTP fronts: they have no response cache (a Crossplane request's tag keys it) and read bodies up to --max-request-bytes", "api", o.api, "flags", o.grpcIgnored)
	}
}

// grpcOnlyFlags are the flags only the gRPC front uses, which an HTTP
// front would otherwise ignore without a word.
var grpcOnlyFlags = []string{"cache", "cache-ttl", "cache-max-bytes", "max-recv-msg-size", "max-send-msg-size"}

// stoppedWhileStarting returns err, the failure of a step of the startup,
// unless a SIGTERM, SIGINT or SIGHUP (ctx) cut the step short: then the server
// stops as it does once serving, with exit code 0, for a pod deleted
// while it unpacks its image has not failed.
func stoppedWhileStarting(ctx context.Context, log *slog.Logger, err error) error {
	if ctx.Err() == nil {
		return err
	}
	log.Info("stopped before serving", "interrupted", err.Error())
	return nil
}

func (o *serveOptions) run(ctx context.Context) error {
	log, err := newLogger(o.logFormat, o.debug)
	if err != nil {
		return err
	}
	if err := checkAPI(o.api); err != nil {
		return fmt.Errorf("--api %q: %w", o.api, err)
	}
	// The profiles are served on the metrics address only: without one,
	// --profiling would do nothing.
	if o.profiling && o.metricsAddress == "" {
		return errors.New("--profiling serves Go's profiles on --metrics-address, which is empty (no metrics; the default of the HTTP fronts): give one too, such as --metrics-address 127.0.0.1:6060")
	}
	if o.maxRequestBytes <= 0 {
		return fmt.Errorf("--max-request-bytes %d: must be positive", o.maxRequestBytes)
	}
	if o.resultTTL <= 0 || o.resultsMaxBytes <= 0 {
		return fmt.Errorf("--result-ttl %s, --results-max-bytes %d: both must be positive", o.resultTTL, o.resultsMaxBytes)
	}
	var creds credentials.TransportCredentials
	switch {
	case o.api != apiCrossplane:
		// OpenWhisk and Kubeless talk plain HTTP to their runtimes
		// (warnIgnored says so).
	case o.tlsDir != "" && o.insecure && !o.tlsDirFlag:
		// Not given on the command line: "pass one" would not fit.
		return fmt.Errorf("--insecure and TLS_SERVER_CERTS_DIR=%s in the environment exclude each other: unset the variable to serve plaintext, or drop --insecure to serve mTLS with its certificates", o.tlsDir)
	case o.tlsDir != "" && o.insecure:
		return errors.New("--insecure and --tls-server-certs-dir exclude each other: pass one")
	case o.tlsDir != "":
		if creds, err = adaptor.LoadServerTLS(o.tlsDir); err != nil {
			return err
		}
	case !o.insecure:
		return errNoTransport
	}
	if o.maxConcurrency <= 0 {
		return fmt.Errorf("--max-concurrency %d: must be positive", o.maxConcurrency)
	}
	if err := o.checkGRPCFlags(); err != nil {
		if o.api != apiCrossplane {
			// warnIgnored says such flags are ignored here: the
			// refusal says why this one is not.
			return fmt.Errorf("%w (--api %s ignores this flag of the gRPC front, but not a value no front could take)", err, o.api)
		}
		return err
	}
	if err := o.checkInflightBytes(); err != nil {
		return err
	}
	if o.gracePeriod < 0 {
		return fmt.Errorf("--grace-period %s: must not be negative", o.gracePeriod)
	}
	if o.maxQueue < 0 {
		return fmt.Errorf("--max-queue %d: must not be negative", o.maxQueue)
	}
	if o.maxQueue == 0 {
		o.maxQueue = 4 * o.maxConcurrency
	}
	rt, err := o.check()
	if err != nil {
		return err
	}
	if _, err := os.Stat(o.tarball); err != nil {
		return fmt.Errorf("cannot read the function image tarball: %w (pass --tarball PATH)", err)
	}

	if code, reexeced, err := enterNamespaces(log); reexeced || err != nil {
		if err != nil {
			return err
		}
		return exitError{code: code}
	}
	o.warnIgnored(log)

	// Go's heap grows to twice what is live between collections; a soft
	// limit below the in-flight bound makes the collector run before the
	// garbage of finished calls takes the RSS past it. (Of what a request
	// is counted for, its encoding's garbage and the bytes it was read
	// from are not live for long.)
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(int64(o.maxInflight) / 4 * 3)
	}

	ctx, stop := signal.NotifyContext(ctx, stopSignals...)
	defer stop()

	reg := newRegistry()
	metrics := hook.NewMetrics(reg)
	stopMetrics, err := serveMetrics(ctx, log, o.metricsAddress, reg, o.profiling)
	if err != nil {
		return err
	}
	defer stopMetrics()
	tracer, stopTracing, err := newTracer(ctx, log)
	if err != nil {
		return err
	}
	defer stopTracing()

	// One hook chain and one gate for whatever front serves.
	hooks := []hook.Hook{}
	if tracer != nil {
		hooks = append(hooks, hook.Tracing{Tracer: tracer})
	}
	hooks = append(hooks, metrics)
	if o.cache && o.api == apiCrossplane {
		hooks = append(hooks, hook.Cache{Store: adaptor.NewCache(int(o.cacheMaxBytes)), Metrics: metrics})
	}
	hooks = append(hooks, hook.Log{Logger: log})
	chain := hook.NewChain(log, hooks...)
	gate := admit.New(o.maxConcurrency, o.maxQueue, metrics.Admission)
	if o.api != apiCrossplane {
		return o.serveHTTP(ctx, log, rt, reg, chain, gate, tracer != nil)
	}

	// Listen first: health checks get NOT_SERVING, rather than no answer,
	// while the image is unpacked.
	srv := adaptor.NewServer(creds, int(o.maxRecvMsgSize), adaptor.WithMaxInflightBytes(int64(o.maxInflight)), adaptor.WithStreamWorkers(o.maxConcurrency), adaptor.WithRecvTimeout(o.timeout), adaptor.WithHooksWhileStarting(chain), adaptor.WithMaxSendMsgSize(int(o.maxSendMsgSize)))
	lis, err := listen(o.address, "", "--address")
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer srv.Stop()
	log.Info("listening", "address", lis.Addr().String(), "tls", creds != nil)

	o.warmMax = o.maxConcurrency
	if o.warm > o.maxConcurrency {
		// A warm container serves one call, and no more calls than that
		// run at once: the rest would only hold memory.
		log.Warn("--warm is more than --max-concurrency; the pool keeps at most --max-concurrency containers", "warm", o.warm, "max_concurrency", o.maxConcurrency)
		o.warm = o.maxConcurrency
	}
	b, err := o.prepare(ctx, log, rt, o.tarball)
	if err != nil {
		return stoppedWhileStarting(ctx, log, err)
	}
	registerPoolMetrics(reg, b)
	registerFunctionCPU(reg, b)
	fn := o.function(log, b, adaptor.WithGate(gate), adaptor.WithHooks(chain, o.cacheTTL), adaptor.WithMetrics(metrics),
		adaptor.WithMaxResponseBytes(int(o.maxSendMsgSize)), adaptor.WithHooksAfterAnswer())
	// However serving ends, no call may still run when the bundle goes:
	// stop the server (it waits for its handlers), refuse and wait out
	// calls, then remove the containers and the unpacked image. Deferred
	// calls run last first, so this runs before the srv.Stop above.
	defer func() {
		srv.Stop()
		fn.Drain()
		if err := b.Close(); err != nil {
			log.Error("cleanup failed", "error", err)
		}
	}()
	returnHeap()
	srv.Ready(fn)
	log.Info("serving", "address", lis.Addr().String(), "tls", creds != nil, "max_concurrency", o.maxConcurrency, "max_queue", o.maxQueue, "tracing", tracer != nil)

	select {
	case err := <-served:
		return fmt.Errorf("gRPC server stopped: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down", "grace_period", o.gracePeriod)
	srv.Drain()
	grace, cancel := graceContext(o.gracePeriod, log)
	defer cancel()
	// Health checks NOT_SERVING, and new calls and those still queued
	// UNAVAILABLE at once (the gate's Drain wakes the queue), until the
	// calls already admitted are done (drainWithin); grpc-go's graceful
	// stop closes the listener first, so it comes after.
	stopped := make(chan struct{})
	gracefulStop := func() { go func() { srv.GracefulStop(); close(stopped) }() }
	drained := drainWithin(grace, fn.Drain)
	if drained {
		gracefulStop()
	}
	select {
	case <-stopped:
	case <-grace.Done():
		log.Warn("grace period over; stopping calls still running")
		if !drained {
			// Each call still running kills its container and answers
			// UNAVAILABLE saying why, as the HTTP fronts answer 503:
			// the graceful stop sends those answers before it closes
			// their connections. Those still open a moment later are
			// closed.
			fn.StopCalls()
			gracefulStop()
			answered := time.NewTimer(answerGrace)
			defer answered.Stop()
			select {
			case <-stopped:
			case <-answered.C:
			}
		}
		srv.Stop()
	}
	log.Info("stopped")
	return nil
}

// checkGRPCFlags says why a flag of the gRPC front alone (grpcOnlyFlags)
// holds a value no front could take, if one does: a typo, whatever the
// front, which an HTTP front would otherwise ignore with a warning and
// the gRPC front refuse on the day the same flags serve it.
func (o *serveOptions) checkGRPCFlags() error {
	// gRPC frames a message with a 32-bit length, and takes the limit as
	// an int.
	if o.maxRecvMsgSize <= 0 || o.maxRecvMsgSize > math.MaxInt32 {
		return fmt.Errorf("--max-recv-msg-size %d: must be positive and at most %d", o.maxRecvMsgSize, math.MaxInt32)
	}
	if o.maxSendMsgSize <= 0 || o.maxSendMsgSize > math.MaxInt32 {
		return fmt.Errorf("--max-send-msg-size %d: must be positive and at most %d", o.maxSendMsgSize, math.MaxInt32)
	}
	if o.cacheTTL < 0 || o.cacheMaxBytes <= 0 {
		return fmt.Errorf("--cache-ttl %s, --cache-max-bytes %d: want a TTL of 0 or more and a positive size", o.cacheTTL, o.cacheMaxBytes)
	}
	// --cache-ttl asks for every response to be cached, --cache=false for
	// none: which one was meant cannot be told.
	if !o.cache && o.cacheTTL > 0 {
		return fmt.Errorf("--cache=false and --cache-ttl %s exclude each other: the first turns the response cache off, the second caches every response", o.cacheTTL)
	}
	return nil
}

// checkInflightBytes refuses an in-flight budget too small for the largest
// request of the gRPC front, one of --max-recv-msg-size as it is decoded,
// which it charges before reading any. The HTTP fronts charge a body what
// it announces or takes, and answer one the budget could never hold 413
// naming the flag: there the budget need only be positive, and neither
// --max-recv-msg-size, a flag they do not read, nor --max-request-bytes
// bounds it.
func (o *serveOptions) checkInflightBytes() error {
	if o.api == apiCrossplane {
		return adaptor.CheckInflightBytes(int64(o.maxInflight), int(o.maxRecvMsgSize))
	}
	if o.maxInflight <= 0 {
		return fmt.Errorf("--max-inflight-bytes %d: must be positive", o.maxInflight)
	}
	return nil
}
