package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocifn/ocifn/spec"
)

// Where an ocifn package keeps the function image, and the image config
// labels that describe the package. The runtime image (`make image`) sets
// the runtime's labels; `ocifn build` adds the others.
const (
	// FunctionTarball is the function image inside a package: the default
	// of `ocifn serve --tarball`, so the package's entrypoint needs no
	// arguments.
	FunctionTarball = "/ocifn/function.tar"

	// LabelVersion, LabelCommit and LabelCrunVersion describe the runtime:
	// the ocifn and the crun that serve the function.
	LabelVersion     = "dev.ocifn.version"
	LabelCommit      = "dev.ocifn.commit"
	LabelCrunVersion = "dev.ocifn.crun.version"
	// LabelFunction marks an ocifn package; its value is FunctionTarball.
	LabelFunction = "dev.ocifn.function"
	// LabelFunctionDigest and LabelFunctionName identify the embedded image.
	LabelFunctionDigest = "dev.ocifn.function.digest"
	LabelFunctionName   = "dev.ocifn.function.name"
	// LabelBuildVersion is the version of the ocifn that built the package.
	LabelBuildVersion = "dev.ocifn.build.version"
	// LabelIO is the function's I/O mode (json, functionio, krm), set by
	// `ocifn build --io` on a package, or by an author on a function image.
	// Absent means json.
	LabelIO = "dev.ocifn.io"
	// EnvIO carries LabelIO into the package's container, where `ocifn
	// serve` reads it: a process cannot see its own image's labels.
	EnvIO = "OCIFN_IO"
	// LabelAPI is what the package serves (openwhisk, http), set by `ocifn
	// build --api`. Absent means a Crossplane Function package.
	LabelAPI = "dev.ocifn.api"
	// EnvAPI carries LabelAPI into the package's container, as EnvIO does.
	EnvAPI = "OCIFN_API"
	// HTTPPort is the port the HTTP fronts serve on, exposed by packages
	// built for them.
	HTTPPort = "8080/tcp"
)

// Mode bits of the files a package adds.
const (
	packageFileMode = 0o644
	functionDirMode = 0o755
)

// PackageInput is what a Function package is built from.
type PackageInput struct {
	// Runtime is the runtime image (ocifn, crun, entrypoint `ocifn serve`).
	Runtime v1.Image
	// FunctionTarball is the function image as a docker-save tarball, from
	// WriteFunctionTarball; it is embedded as it is.
	FunctionTarball string
	// Function is the function image, for its digest and name labels.
	Function *Image
	// Meta is the validated package.yaml.
	Meta *PackageMeta
	// Labels are more image config labels (e.g. LabelBuildVersion).
	Labels map[string]string
	// IO is the function's I/O mode, recorded as LabelIO and EnvIO; ""
	// records nothing, which means json.
	IO string
	// API is what the package serves when not Crossplane's gRPC (openwhisk,
	// http), recorded as LabelAPI and EnvAPI with HTTPPort exposed; ""
	// records nothing.
	API string
}

// BuildPackage returns the Function package image: the runtime's layers
// (gzip-compressed, as registries expect), a layer with the function image
// at FunctionTarball, and last the metadata layer holding only
// package.yaml. The runtime's config (entrypoint, env, ports, labels) is
// kept; the labels gain LabelFunction*, the input's Labels and, as
// `crossplane xpkg build` does, LayerLabel(metadata layer digest) = "base",
// which Push turns into the layer annotation.
func BuildPackage(in PackageInput) (v1.Image, error) {
	base, err := in.Runtime.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("cannot read the runtime image config: %w", err)
	}
	if len(base.Config.Entrypoint) == 0 && len(base.Config.Cmd) == 0 {
		return nil, errors.New("the runtime image has neither Entrypoint nor Cmd: Crossplane would have nothing to run")
	}
	// The function runs on the runtime's machine: one built for a platform
	// it cannot run fails every call ("Exec format error"); one built for
	// the other ABI its CPU runs (linux/386 on linux/amd64) works. An
	// image that does not say its platform is not held to one.
	if fcf := in.Function.ConfigFile(); fcf != nil && fcf.Architecture != "" && base.Architecture != "" &&
		(fcf.OS != base.OS || !spec.Runs(base.Architecture, fcf.Architecture)) {
		return nil, fmt.Errorf("the function image is for %s and the runtime image for %s, where the function's programs cannot run: build both for one platform", platform(fcf), platform(base))
	}
	layers, err := in.Runtime.Layers()
	if err != nil {
		return nil, fmt.Errorf("cannot list the runtime image's layers: %w", err)
	}

	fnLayer, err := functionLayer(in.FunctionTarball)
	if err != nil {
		return nil, err
	}
	// The digest of the function image as the package embeds it, which
	// ocifn serve and inspect report: rewritten as docker save output, an
	// OCI archive's image has another manifest, and so another digest,
	// than the one given (its config and layers are the same).
	embedded, err := Open(in.FunctionTarball)
	if err != nil {
		return nil, fmt.Errorf("cannot read the function tarball back: %w", err)
	}
	fnDigest := embedded.Digest()
	_ = embedded.Close()
	metaLayer, err := metadataLayer(in.Meta.Raw)
	if err != nil {
		return nil, err
	}
	metaDigest, err := metaLayer.Digest()
	if err != nil {
		return nil, err
	}

	// History must list one non-empty entry per layer, or tools disagree
	// about which entry belongs to which layer: keep the runtime's only if
	// it is consistent.
	history := consistentHistory(base.History, len(layers))
	adds := make([]mutate.Addendum, 0, len(layers)+2)
	for i, l := range layers {
		cl, err := compressed(l)
		if err != nil {
			return nil, fmt.Errorf("runtime layer %d: %w", i+1, err)
		}
		adds = append(adds, mutate.Addendum{Layer: cl, MediaType: types.DockerLayer})
	}
	epoch := v1.Time{Time: time.Unix(0, 0).UTC()}
	adds = append(adds,
		mutate.Addendum{Layer: fnLayer, MediaType: types.DockerLayer},
		mutate.Addendum{Layer: metaLayer, MediaType: types.DockerLayer},
	)
	img, err := mutate.Append(empty.Image, adds...)
	if err != nil {
		return nil, fmt.Errorf("cannot assemble the package image: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Variant, cf.OSVersion = base.Architecture, base.OS, base.Variant, base.OSVersion
	cf.Created = base.Created
	cf.Author = base.Author
	cf.Config = *base.Config.DeepCopy()
	labels := map[string]string{}
	maps.Copy(labels, base.Config.Labels)
	maps.Copy(labels, in.Labels)
	labels[LabelFunction] = FunctionTarball
	labels[LabelFunctionDigest] = fnDigest.String()
	if n := in.Function.Name(); n != "" {
		labels[LabelFunctionName] = n
	}
	labels[LayerLabel(metaDigest.String())] = PackageAnnotation
	cf.Config.Labels = labels
	if in.IO != "" {
		labels[LabelIO] = in.IO
		cf.Config.Env = setEnv(cf.Config.Env, EnvIO, in.IO)
	}
	if in.API != "" {
		labels[LabelAPI] = in.API
		cf.Config.Env = setEnv(cf.Config.Env, EnvAPI, in.API)
		if cf.Config.ExposedPorts == nil {
			cf.Config.ExposedPorts = map[string]struct{}{}
		}
		cf.Config.ExposedPorts[HTTPPort] = struct{}{}
	}
	if history != nil {
		cf.History = append(history,
			v1.History{Created: epoch, CreatedBy: "ocifn build: function image " + FunctionTarball, Comment: fnDigest.String()},
			v1.History{Created: epoch, CreatedBy: "ocifn build: " + PackageFile + " (" + in.Meta.Function.Name + ")"},
		)
	} else {
		cf.History = nil
	}
	return mutate.ConfigFile(img, cf)
}

// setEnv returns env with key set to value, replacing any earlier value.
func setEnv(env []string, key, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, e := range env {
		if !strings.HasPrefix(e, key+"=") {
			out = append(out, e)
		}
	}
	return append(out, key+"="+value)
}

// consistentHistory returns h if it has exactly n non-empty-layer entries.
func consistentHistory(h []v1.History, n int) []v1.History {
	count := 0
	for _, e := range h {
		if !e.EmptyLayer {
			count++
		}
	}
	if count != n {
		return nil
	}
	return append([]v1.History{}, h...)
}

// compressed returns l gzip-compressed; layers that already are stay as
// they are, digest and all.
func compressed(l v1.Layer) (v1.Layer, error) {
	mt, err := l.MediaType()
	if err != nil {
		return nil, err
	}
	switch mt {
	case types.DockerLayer, types.OCILayer:
		return l, nil
	}
	return tarball.LayerFromOpener(l.Uncompressed, tarball.WithMediaType(types.DockerLayer))
}

// metadataLayer is a layer with package.yaml alone, at its root.
func metadataLayer(data []byte) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: PackageFile, Mode: packageFileMode, Size: int64(len(data)),
		ModTime: time.Unix(0, 0), Format: tar.FormatPAX,
	}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.DockerLayer))
}

// functionLayer is a layer with the directory of FunctionTarball and the
// file, read from src each time the layer is read.
func functionLayer(src string) (v1.Layer, error) {
	fi, err := os.Stat(src)
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	dir := strings.TrimPrefix(path.Dir(FunctionTarball), "/")
	file := strings.TrimPrefix(FunctionTarball, "/")
	opener := func() (io.ReadCloser, error) {
		f, err := os.Open(src) //nolint:gosec // Our own temporary file.
		if err != nil {
			return nil, err
		}
		pr, pw := io.Pipe()
		go func() {
			defer f.Close()
			tw := tar.NewWriter(pw)
			epoch := time.Unix(0, 0)
			err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: functionDirMode, ModTime: epoch, Format: tar.FormatPAX})
			if err == nil {
				err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: file, Mode: packageFileMode, Size: size, ModTime: epoch, Format: tar.FormatPAX})
			}
			if err == nil {
				var n int64
				n, err = io.Copy(tw, f)
				if err == nil && n != size {
					err = fmt.Errorf("%s changed size while it was read", src)
				}
			}
			if err == nil {
				err = tw.Close()
			}
			pw.CloseWithError(err)
		}()
		return pr, nil
	}
	return tarball.LayerFromOpener(opener, tarball.WithMediaType(types.DockerLayer))
}

// WriteFunctionTarball writes img as a docker-save tarball (one image, its
// layers as they are stored) at dest: the form in which a package embeds
// the function image, whatever the user's tarball was (gzipped, an OCI
// archive, several images). Reading it needs no decompression to scratch.
func WriteFunctionTarball(ctx context.Context, img *Image, dest string) error {
	var ref name.Reference
	if img.Name() != "" {
		if t, err := name.NewTag(img.Name()); err == nil {
			ref = t
		}
	}
	f, err := os.Create(dest) //nolint:gosec // A path the caller chose.
	if err != nil {
		return err
	}
	if err := tarball.Write(ref, img.Image(), ctxWriter{ctx, f}); err != nil {
		_ = f.Close()
		return fmt.Errorf("cannot write the function image tarball: %w", err)
	}
	return f.Close()
}

// WritePackage writes a package image as a docker-save tarball at dest
// (what `crossplane xpkg build` writes), atomically: a temporary file in
// the same directory is renamed over dest once complete. progress, if not
// nil, receives the bytes written so far and the total. When ctx ends
// first, dest is left as it was.
func WritePackage(ctx context.Context, img v1.Image, dest string, tag name.Reference, progress func(done, total int64)) error {
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".*.tmp")
	if err != nil {
		return fmt.Errorf("cannot create the package file next to %s: %w", dest, err)
	}
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	var opts []tarball.WriteOption
	var updates chan v1.Update
	var drained chan struct{}
	if progress != nil {
		updates = make(chan v1.Update, 16)
		drained = make(chan struct{})
		opts = append(opts, tarball.WithProgress(updates))
		go func() {
			defer close(drained)
			for u := range updates {
				if u.Error == nil {
					progress(u.Complete, u.Total)
				}
			}
		}()
	}
	err = tarball.Write(tag, img, ctxWriter{ctx, tmp}, opts...)
	if updates != nil {
		// tarball.Write sends on the channel but leaves closing it to us.
		close(updates)
		<-drained
	}
	if err != nil {
		return fmt.Errorf("cannot write the package: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), dest); err != nil {
		return fmt.Errorf("cannot move the package into place: %w", err)
	}
	done = true
	return nil
}

// ctxWriter fails its writes once ctx has ended, so that a long write of a
// tarball stops when it is interrupted.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}
