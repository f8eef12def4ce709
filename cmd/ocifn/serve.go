package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"github.com/containers/storage/pkg/unshare"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/credentials"

	"github.com/ocifn/ocifn/adaptor"
	"github.com/ocifn/ocifn/bundle"
	"github.com/ocifn/ocifn/host"
	"github.com/ocifn/ocifn/oci"
	"github.com/ocifn/ocifn/spec"
)

// defaultTarball is where `ocifn build` puts the function image inside a
// package, so the package's entrypoint needs no arguments.
const defaultTarball = "/ocifn/function.tar"

type serveOptions struct {
	tarball        string
	image          string
	address        string
	insecure       bool
	tlsDir         string
	cacheDir       string
	runtime        string
	network        string
	timeout        time.Duration
	gracePeriod    time.Duration
	maxOutputBytes int
	maxRecvMsgSize int
	idMapStart     uint32
	idMapSize      uint32
	debug          bool
	logFormat      string
}

func newServeCommand() *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve RunFunction calls by running an image in a fresh rootless container per call",
		Long: `Serve Crossplane's FunctionRunnerService (v1 and v1beta1) over gRPC.

At startup the image tarball is read, every digest checked, and its layers
unpacked once into a read-only root filesystem. Each RunFunction call then
runs the image's entrypoint in a fresh rootless crun container: the request
as JSON on stdin, the response as JSON on stdout.`,
		Example: `  # Local development, plaintext gRPC on :9443:
  ocifn serve --insecure --tarball function.tar

  # As Crossplane runs it (TLS material in TLS_SERVER_CERTS_DIR):
  ocifn serve`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context()) },
	}
	f := cmd.Flags()
	f.StringVar(&o.tarball, "tarball", defaultTarball, "image tarball of the function: docker save output (optionally gzipped) or an OCI archive")
	f.StringVar(&o.image, "image", "", "image to serve when the tarball holds several")
	f.StringVar(&o.address, "address", ":9443", "address to serve gRPC on")
	f.BoolVar(&o.insecure, "insecure", false, "serve plaintext gRPC without TLS (local development only)")
	f.StringVar(&o.tlsDir, "tls-server-certs-dir", os.Getenv("TLS_SERVER_CERTS_DIR"), "directory with tls.crt, tls.key and ca.crt; client certificates are required (env TLS_SERVER_CERTS_DIR)")
	f.StringVar(&o.cacheDir, "cache-dir", defaultCacheDir(), "directory for the unpacked image and container state")
	f.StringVar(&o.runtime, "runtime", "crun", "OCI runtime binary: a path, or a name looked up on PATH")
	f.StringVar(&o.network, "network", spec.NetworkNone, "network of each call: none (loopback only) or host")
	f.DurationVar(&o.timeout, "timeout", adaptor.DefaultTimeout, "longest a call may run; the caller's deadline applies too")
	f.DurationVar(&o.gracePeriod, "grace-period", 30*time.Second, "on SIGTERM, how long running calls may take to finish")
	f.IntVar(&o.maxOutputBytes, "max-output-bytes", adaptor.DefaultMaxOutputBytes, "largest response a function may print on stdout")
	f.IntVar(&o.maxRecvMsgSize, "max-recv-msg-size", adaptor.DefaultMaxRecvMsgSize, "largest gRPC request accepted, in bytes")
	f.Uint32Var(&o.idMapStart, "id-map-start", 100000, "when run as root: first host uid/gid that container ids map to")
	f.Uint32Var(&o.idMapSize, "id-map-size", 65536, "when run as root: how many container uids/gids are mapped")
	f.BoolVar(&o.debug, "debug", false, "log more")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	return cmd
}

// defaultCacheDir is under /var/cache for real root (container ids other
// than root must be able to reach it, which /root does not allow) and the
// user's cache directory otherwise.
func defaultCacheDir() string {
	if !unshare.IsRootless() {
		return "/var/cache/ocifn"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "ocifn")
	}
	return filepath.Join(os.TempDir(), "ocifn")
}

var errNoTransport = errors.New("refusing to start without a transport security choice: pass --tls-server-certs-dir DIR (or set TLS_SERVER_CERTS_DIR) to serve mTLS, or --insecure to serve plaintext for local development")

func (o *serveOptions) run(ctx context.Context) error {
	log, err := newLogger(o.logFormat, o.debug)
	if err != nil {
		return err
	}
	var creds credentials.TransportCredentials
	switch {
	case o.tlsDir != "" && o.insecure:
		return errors.New("--insecure and --tls-server-certs-dir (or TLS_SERVER_CERTS_DIR) exclude each other: pass one")
	case o.tlsDir != "":
		if creds, err = adaptor.LoadServerTLS(o.tlsDir); err != nil {
			return err
		}
	case !o.insecure:
		return errNoTransport
	}
	if o.network != spec.NetworkNone && o.network != spec.NetworkHost {
		return fmt.Errorf("--network %q: want %q or %q", o.network, spec.NetworkNone, spec.NetworkHost)
	}
	rt, err := bundle.FindRuntime(o.runtime)
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

	ctx, stop := signal.NotifyContext(ctx, unix.SIGTERM, unix.SIGINT)
	defer stop()

	mode := bundle.IDSingle
	if !unshare.IsRootless() {
		mode = bundle.IDRange
	}
	start := time.Now()
	img, err := oci.Open(o.tarball, oci.WithImageName(o.image), oci.WithScratchDir(o.cacheDir))
	if err != nil {
		return err
	}
	b, err := bundle.Create(ctx, rt, img.Image(), o.cacheDir, bundle.Options{
		Mode: mode, RangeStart: o.idMapStart, RangeSize: o.idMapSize, Network: o.network,
	})
	img.Close()
	if err != nil {
		return fmt.Errorf("cannot prepare the function image %s: %w", o.tarball, err)
	}
	defer func() {
		if err := b.Close(); err != nil {
			log.Error("cleanup failed", "error", err)
		}
	}()
	log.Info("image unpacked", "tarball", o.tarball, "image", img.Name(), "digest", img.Digest().String(),
		"id_mode", mode, "duration", time.Since(start).Round(time.Millisecond), "runtime", rt.Version())
	log.Debug("runtime config", "args", b.Spec().Process.Args, "user", b.Spec().Process.User, "uid_mappings", b.Spec().Linux.UIDMappings)

	fn := adaptor.NewFunction(runner{b}, adaptor.WithLogger(log), adaptor.WithTimeout(o.timeout), adaptor.WithMaxOutputBytes(o.maxOutputBytes))
	srv := adaptor.NewServer(fn, creds, o.maxRecvMsgSize)
	lis, err := net.Listen("tcp", o.address)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", o.address, err)
	}
	srv.SetServing(true)
	log.Info("serving", "address", lis.Addr().String(), "tls", creds != nil)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		return fmt.Errorf("gRPC server stopped: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down", "grace_period", o.gracePeriod)
	srv.SetServing(false)
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(o.gracePeriod):
		log.Warn("grace period over; stopping calls still running")
		srv.Stop()
	}
	return nil
}

// enterNamespaces re-executes ocifn in namespaces of its own when the host
// needs it (see package host). It reports whether it did, with the child's
// exit code; the caller must then return that code.
func enterNamespaces(log *slog.Logger) (code int, reexeced bool, err error) {
	if host.Inside() {
		return 0, false, host.FinishInside()
	}
	cg, err := host.DetectCgroups()
	if err != nil {
		return 0, false, err
	}
	plan := host.PlanFor(os.Geteuid(), cg)
	if !plan.Needed() {
		return 0, false, nil
	}
	log.Debug("re-executing in own namespaces", "user_namespace", plan.UserNS, "mask_cgroup2", plan.MaskUnified, "cgroups", cg.Layout)
	code, err = host.Reexec(plan)
	return code, true, err
}

// runner adapts a bundle to the adaptor's Runner.
type runner struct{ b *bundle.Bundle }

func (r runner) Run(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (adaptor.Exit, error) {
	e, err := r.b.Run(ctx, stdin, stdout, stderr)
	return adaptor.Exit{Code: e.Code, RuntimeError: e.RuntimeError, Duration: e.Duration}, err
}

func newLogger(format string, debug bool) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	if debug {
		opts.Level = slog.LevelDebug
	}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}
