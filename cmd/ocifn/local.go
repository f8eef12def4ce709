package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ocifn/ocifn/adaptor"
	"github.com/ocifn/ocifn/bundle"
	"github.com/ocifn/ocifn/oci"
	"github.com/ocifn/ocifn/pipeline"
)

// imageKind says where a function image named on the command line is.
type imageKind int

const (
	imageFile imageKind = iota
	imageRegistry
)

// classifyImage tells a file (docker save or OCI archive, or a Function
// package) from a registry reference: what exists on disk, or looks like a
// path or a tarball name, is a file.
func classifyImage(s string) (imageKind, error) {
	if _, err := os.Stat(s); err == nil {
		return imageFile, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("cannot read the function image %s: %w", s, err)
	}
	for _, ext := range []string{".tar", ".tgz", ".tar.gz", ".xpkg", ".gz", ".zst"} {
		if strings.HasSuffix(s, ext) {
			return 0, fmt.Errorf("the function image %s does not exist", s)
		}
	}
	if pipeline.IsPath(s) {
		return 0, fmt.Errorf("the function image %s does not exist", s)
	}
	return imageRegistry, nil
}

// readableTwice reports whether every path can be read again after a
// re-exec into ocifn's own namespaces: standard input ("-") and pipes (such
// as bash's <(...)) can be read only once, so the parent must leave them to
// the re-executed child. Empty paths are skipped.
func readableTwice(paths ...string) bool {
	for _, p := range paths {
		if p == "" {
			continue
		}
		if p == "-" {
			return false
		}
		if fi, err := os.Stat(p); err == nil && !fi.Mode().IsRegular() && !fi.IsDir() {
			return false
		}
	}
	return true
}

// contextFilePaths returns the files of --context-files KEY=FILE flags.
func contextFilePaths(kvs []string) []string {
	out := make([]string, 0, len(kvs))
	for _, kv := range kvs {
		_, file, _ := strings.Cut(kv, "=")
		out = append(out, file)
	}
	return out
}

// surviveClosedOutput makes a write to a closed stdout or stderr (`ocifn
// test ... | head`) fail with EPIPE, as it does on any other file: by
// default Go ends the process with SIGPIPE on the spot, before the deferred
// cleanup removes the unpacked image and the containers of a call still
// running. The returned function undoes it.
func surviveClosedOutput() (stop func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, unix.SIGPIPE)
	return func() { signal.Stop(c) }
}

// interrupted is err, a call's or a pipeline's failure, said as what it
// was when a stop signal (ctx) ended it: the call's own error then reads
// "rpc error: code = Canceled", of an RPC that was never made.
func interrupted(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	return fmt.Errorf("stopped while a function ran (%v): its container and the unpacked image are removed", context.Cause(ctx))
}

// localFunctions prepares function images on this machine, each once, and
// runs their calls in containers. It must be used inside ocifn's own
// namespaces (enterNamespaces).
type localFunctions struct {
	flags    functionFlags
	log      *slog.Logger
	rt       *bundle.Runtime
	registry []oci.RegistryOption
	bundles  []*bundle.Bundle
	byKey    map[string]*adaptor.Function
}

func newLocalFunctions(flags functionFlags, log *slog.Logger, rt *bundle.Runtime, insecureRegistry bool) *localFunctions {
	l := &localFunctions{flags: flags, log: log, rt: rt, byKey: map[string]*adaptor.Function{}}
	if insecureRegistry {
		l.registry = append(l.registry, oci.WithInsecureRegistry())
	}
	return l
}

// get returns the function for an image file or registry reference, and
// the image name in it ("" when the tarball holds one image).
func (l *localFunctions) get(ctx context.Context, location, image string) (*adaptor.Function, error) {
	key := location + "\x00" + image
	if f, ok := l.byKey[key]; ok {
		return f, nil
	}
	kind, err := classifyImage(location)
	if err != nil {
		return nil, err
	}
	path := location
	if kind == imageRegistry {
		if path, err = l.pull(ctx, location); err != nil {
			return nil, err
		}
		// Unpacked into the bundle, the pulled tarball is not needed.
		defer os.Remove(path)
	}
	flags := l.flags
	if image != "" {
		flags.image = image
	}
	b, err := flags.prepare(ctx, l.log, l.rt, path)
	if err != nil {
		return nil, err
	}
	l.bundles = append(l.bundles, b)
	f := flags.function(l.log, b)
	l.byKey[key] = f
	return f, nil
}

// pull fetches an image or package from its registry into a tarball in the
// cache directory.
func (l *localFunctions) pull(ctx context.Context, ref string) (string, error) {
	if err := l.flags.makeCacheDir(); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(l.flags.cacheDir, "pull-*.tar")
	if err != nil {
		return "", fmt.Errorf("cannot create a file for the pulled image in %s: %w", l.flags.cacheDir, err)
	}
	f.Close()
	start := time.Now()
	digest, err := oci.Pull(ctx, ref, f.Name(), l.registry...)
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("cannot pull %s: %w", ref, registryHint(err, ref))
	}
	l.log.Info("pulled", "ref", ref, "digest", digest.String(), "duration", time.Since(start).Round(time.Millisecond))
	return f.Name(), nil
}

// Close removes every prepared bundle.
func (l *localFunctions) Close() {
	for _, b := range l.bundles {
		if err := b.Close(); err != nil {
			l.log.Error("cleanup failed", "error", err)
		}
	}
	l.bundles = nil
}
