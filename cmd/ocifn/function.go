package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containers/storage/pkg/unshare"
	"github.com/spf13/pflag"

	"github.com/ocifn/ocifn/adaptor"
	"github.com/ocifn/ocifn/bundle"
	"github.com/ocifn/ocifn/codec"
	"github.com/ocifn/ocifn/host"
	"github.com/ocifn/ocifn/oci"
	"github.com/ocifn/ocifn/spec"
)

// functionFlags are the flags of every command that runs a function image
// on this machine (serve, and the local author commands).
type functionFlags struct {
	image string
	// chooseImage says how the user picks one image of a tarball of
	// several, when image does not: "" means --image.
	chooseImage    string
	cacheDir       string
	stateDir       string
	runtime        string
	network        string
	timeout        time.Duration
	maxOutputBytes byteSize
	idMapStart     uint32
	idMapSize      uint32
	memoryLimit    byteSize
	pidsLimit      int64
	maxRootfsBytes byteSize
	// warm is set by serve only: a one-off call has no use for containers
	// created ahead.
	warm int
	// io is --io, the I/O mode; "" means the one the image records.
	io string
	// codec is the I/O mode prepare resolved for the image.
	codec codec.Codec
	// noIO is set by the HTTP fronts, whose calls reach the function in
	// their own protocol: the image's I/O mode is neither resolved (one
	// this ocifn does not know must not stop them) nor logged.
	noIO bool
	// warmMax and warmIdle size the warm pool beyond its minimum, warm
	// (see bundle.PoolOptions); set by serve only.
	warmMax  int
	warmIdle time.Duration
	// memoryLimitUnitless says --memory-limit was given without a unit.
	memoryLimitUnitless bool
}

func (o *functionFlags) register(f *pflag.FlagSet) {
	f.StringVar(&o.image, "image", "", "image to run when the tarball holds several: its name, or the digest (sha256:...) an unnamed one is listed by")
	f.StringVar(&o.cacheDir, "cache-dir", defaultCacheDir(), "directory for the unpacked image")
	f.StringVar(&o.stateDir, "state-dir", bundle.DefaultStateDir, "directory, best a tmpfs, where crun keeps each container's state while it lives (empty or unusable: in --cache-dir)")
	f.StringVar(&o.runtime, "runtime", "crun", "OCI runtime binary: a path, or a name looked up on PATH")
	f.StringVar(&o.network, "network", spec.NetworkNone, "network of each call: none (loopback only) or host")
	f.DurationVar(&o.timeout, "timeout", adaptor.DefaultTimeout, "longest a call may run; the caller's deadline applies too")
	o.maxOutputBytes = adaptor.DefaultMaxOutputBytes
	f.Var(&o.maxOutputBytes, "max-output-bytes", "largest response a function may print on stdout, in bytes (e.g. 64Mi)")
	f.Uint32Var(&o.idMapStart, "id-map-start", 100000, "when run as root: first host uid/gid that container ids map to")
	f.Uint32Var(&o.idMapSize, "id-map-size", 65536, "when run as root: how many container uids/gids are mapped")
	o.memoryLimit, o.maxRootfsBytes = bundle.DefaultMemoryLimit, DefaultMaxRootfsBytes
	f.Var(unitSize{&o.memoryLimit, &o.memoryLimitUnitless}, "memory-limit", "memory of one call (e.g. 512Mi; 0: no limit): a cgroup limit where cgroup v2 is delegated, else RLIMIT_DATA per process")
	f.Int64Var(&o.pidsLimit, "pids-limit", bundle.DefaultPidsLimit, "processes and threads of one call: a cgroup limit where cgroup v2 is delegated, else RLIMIT_NPROC")
	f.Var(&o.maxRootfsBytes, "max-rootfs-bytes", "largest unpacked size of the function image (e.g. 4Gi; 0: no limit)")
	f.StringVar(&o.io, "io", o.io, "I/O mode of the function: "+strings.Join(codec.Names(), ", ")+" (default: the mode the image or package records, else json)")
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

// check validates the flags and finds the runtime, so that mistakes are
// reported before any work starts.
func (o *functionFlags) check() (*bundle.Runtime, error) {
	if o.network != spec.NetworkNone && o.network != spec.NetworkHost {
		return nil, fmt.Errorf("--network %q: want %q or %q", o.network, spec.NetworkNone, spec.NetworkHost)
	}
	if o.timeout <= 0 {
		return nil, fmt.Errorf("--timeout %s: must be positive", o.timeout)
	}
	if o.warm < 0 {
		return nil, fmt.Errorf("--warm %d: must not be negative", o.warm)
	}
	if o.warmIdle < 0 {
		return nil, fmt.Errorf("--warm-idle %s: must not be negative", o.warmIdle)
	}
	if o.pidsLimit <= 0 {
		return nil, fmt.Errorf("--pids-limit %d: must be positive", o.pidsLimit)
	}
	if o.maxOutputBytes <= 0 {
		return nil, fmt.Errorf("--max-output-bytes %d: must be positive", o.maxOutputBytes)
	}
	if err := checkIDMap(o.idMapStart, o.idMapSize); err != nil {
		return nil, err
	}
	if err := o.checkMemoryLimit(); err != nil {
		return nil, err
	}
	if o.io != "" {
		if _, err := codec.ByName(o.io); err != nil {
			return nil, fmt.Errorf("--io: %w", err)
		}
	}
	return bundle.FindRuntime(o.runtime)
}

// maxHostID is the largest id a user namespace can map to: (uid_t)-1 is
// no id, and the kernel refuses a map that reaches or wraps past it.
const maxHostID = 1<<32 - 2

// checkIDMap refuses host id ranges that the kernel would refuse at every
// call (the server would start and answer only Fatal results) or that give
// the function root on the host.
func checkIDMap(start, size uint32) error {
	switch {
	case size == 0:
		return errors.New("--id-map-size 0: the containers need at least root (container id 0) mapped")
	case start == 0:
		return errors.New("--id-map-start 0: root in the function would be root on the host; choose an unprivileged range (the default is 100000)")
	case uint64(start)+uint64(size)-1 > maxHostID:
		return fmt.Errorf("--id-map-start %d, --id-map-size %d: the range ends past %d, the last host id", start, size, maxHostID)
	}
	return nil
}

// makeCacheDir creates the cache directory if it is not there, searchable
// by the containers' ids (0711), which bundle.New checks: it must come
// before anything is created inside it, whose parents os.MkdirAll would
// make with the child's own mode.
func (o *functionFlags) makeCacheDir() error {
	if err := os.MkdirAll(o.cacheDir, 0o711); err != nil {
		return fmt.Errorf("cannot create the cache directory %s: %w", o.cacheDir, err)
	}
	return nil
}

// prepare reads the image tarball, checks it and unpacks it into a bundle.
// It must run inside ocifn's own namespaces (see enterNamespaces).
func (o *functionFlags) prepare(ctx context.Context, log *slog.Logger, rt *bundle.Runtime, tarball string) (*bundle.Bundle, error) {
	mode := bundle.IDSingle
	if !unshare.IsRootless() {
		mode = bundle.IDRange
	}
	start := time.Now()
	// A compressed tarball is decompressed into the cache directory.
	if err := o.makeCacheDir(); err != nil {
		return nil, err
	}
	img, err := oci.OpenFunction(tarball, oci.WithImageName(o.image), oci.WithScratchDir(o.cacheDir), oci.WithMaxScratchBytes(int64(o.maxRootfsBytes)))
	if err != nil {
		if errors.Is(err, oci.ErrSeveralImages) {
			how := o.chooseImage
			if how == "" {
				how = "--image NAME"
			}
			return nil, fmt.Errorf("%w (choose with %s)", err, how)
		}
		return nil, o.nameRootfsLimit(err)
	}
	defer img.Close()
	if !o.noIO {
		if o.codec, err = ioMode(o.io, img); err != nil {
			return nil, err
		}
	}
	if removed, err := bundle.Sweep(rt, o.cacheDir); err != nil {
		log.Warn("cannot clean up what an earlier run left in the cache directory", "error", err)
	} else if len(removed) > 0 {
		log.Info("removed what an earlier run left in the cache directory", "directories", removed)
	}
	b, err := bundle.Create(ctx, rt, img.Image(), o.cacheDir, bundle.Options{
		Mode: mode, RangeStart: o.idMapStart, RangeSize: o.idMapSize, Network: o.network, StateDir: o.stateDir, Warm: o.warm, WarmMax: o.warmMax, WarmIdle: o.warmIdle, OnIdle: returnHeap,
		OnRefill: func(err error) {
			if err != nil {
				log.Warn("the warm pool cannot create containers: calls create their own meanwhile, and the pool tries again every second", "error", err)
			} else {
				log.Info("the warm pool creates containers again")
			}
		},
		MaxRootfsBytes: int64(o.maxRootfsBytes), Limits: o.limits(log), OwnMountNamespace: host.ReexecParent() != 0,
		Warn: func(w oci.Warning) {
			log.Warn("image entry neutralised", "layer", w.Layer, "entry", w.Entry, "reason", w.Reason)
		},
		OnStuck: func(s bundle.Stuck) {
			log.Warn("crun did not end in time and was killed", "command", s.Command, "container", s.Container, "error", s.Err)
		},
	})
	if err != nil {
		return nil, o.nameRootfsLimit(fmt.Errorf("cannot prepare the function image %s: %w", tarball, err))
	}
	attrs := []any{"tarball", tarball, "image", img.Name(), "digest", img.Digest().String(), "id_mode", mode}
	if o.codec != nil {
		attrs = append(attrs, "io", o.codec.Name())
	}
	attrs = append(attrs, "duration", time.Since(start).Round(time.Millisecond), "runtime", rt.Version(), "crun", rt.Launch(), "dev", b.Dev())
	log.Info("image unpacked", attrs...)
	log.Debug("runtime config", "args", b.Spec().Process.Args, "user", b.Spec().Process.User, "uid_mappings", b.Spec().Linux.UIDMappings)
	return b, nil
}

// nameRootfsLimit names --max-rootfs-bytes in err when err is of an image
// past the limit that flag sets, so that the user knows what raises it.
func (o *functionFlags) nameRootfsLimit(err error) error {
	switch {
	case !errors.Is(err, oci.ErrTooLarge):
		return err
	case o.maxRootfsBytes == 0:
		// No limit for the layers; the tarball's decompressed size and
		// an embedded image keep oci's.
		return fmt.Errorf("%w (with --max-rootfs-bytes 0, a decompressed tarball and the image a package embeds are still limited to %d bytes)", err, int64(oci.DefaultMaxScratchBytes))
	}
	return fmt.Errorf("%w (--max-rootfs-bytes %d: raise it for a larger image)", err, o.maxRootfsBytes)
}

// ioMode resolves the I/O mode of a function image: --io (flag) wins over the
// mode the image or its package records (oci.LabelIO); without either it
// is json.
func ioMode(flag string, img *oci.Image) (codec.Codec, error) {
	if flag != "" {
		return codec.ByName(flag)
	}
	c, err := codec.ByName(img.IOMode())
	if err != nil {
		return nil, fmt.Errorf("the image records an I/O mode this ocifn does not know (label %s): %w; upgrade ocifn or override it with --io", oci.LabelIO, err)
	}
	return c, nil
}

// function returns the adaptor's Function running calls in b.
func (o *functionFlags) function(log *slog.Logger, b *bundle.Bundle, opts ...adaptor.Option) *adaptor.Function {
	base := []adaptor.Option{adaptor.WithLogger(log), adaptor.WithTimeout(o.timeout), adaptor.WithMaxOutputBytes(int(o.maxOutputBytes))}
	if o.codec != nil {
		base = append(base, adaptor.WithCodec(o.codec))
	}
	return adaptor.NewFunction(runner{b}, append(base, opts...)...)
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
	return adaptor.Exit{Code: e.Code, RuntimeError: e.RuntimeError, OOMKilled: e.OOMKilled, Start: e.Start, Duration: e.Duration}, err
}

// Call runs a call of an HTTP front (see front.Runner).
func (r runner) Call(ctx context.Context, c bundle.Call) (bundle.Exit, error) {
	return r.b.Call(ctx, c)
}

// Args are the image's process arguments.
func (r runner) Args() []string { return r.b.Spec().Process.Args }

// newLogger returns the logger of a command, on stderr.
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
