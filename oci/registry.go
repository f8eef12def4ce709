package oci

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// RegistryOption changes how Pull, Push and RemoteImage talk to a registry.
type RegistryOption func(*registryOptions)

type registryOptions struct {
	insecure bool
	progress func(done, total int64)
	platform v1.Platform
	maxPull  int64
}

// WithMaxPullBytes caps what Pull may write: the image's config and layers
// as its manifest declares them (default DefaultMaxScratchBytes). The
// registry client checks each blob against its declared size and digest,
// so a hostile image cannot send more than its manifest says.
func WithMaxPullBytes(n int64) RegistryOption {
	return func(o *registryOptions) { o.maxPull = n }
}

// WithInsecureRegistry allows plain HTTP, and TLS with a certificate that
// is not verified, to the registry: for a local test registry such as
// 127.0.0.1:5000, or one with a self-signed certificate, as docker's
// insecure-registries and crane --insecure allow both.
func WithInsecureRegistry() RegistryOption {
	return func(o *registryOptions) { o.insecure = true }
}

// WithTransferProgress calls fn with the bytes transferred so far and the
// total, while layers are pushed or pulled.
func WithTransferProgress(fn func(done, total int64)) RegistryOption {
	return func(o *registryOptions) { o.progress = fn }
}

// WithPlatform chooses the image of a multi-platform index (default:
// linux and the architecture of this program).
func WithPlatform(p v1.Platform) RegistryOption {
	return func(o *registryOptions) { o.platform = p }
}

func registryOpts(opts []RegistryOption) registryOptions {
	o := registryOptions{platform: v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// ParseReference parses an image reference the way Pull, Push and
// RemoteImage do.
func ParseReference(ref string, opts ...RegistryOption) (name.Reference, error) {
	o := registryOpts(opts)
	var nopts []name.Option
	if o.insecure {
		nopts = append(nopts, name.Insecure)
	}
	r, err := name.ParseReference(ref, nopts...)
	if err != nil {
		// name.ParseReference tries a tag, then a digest, and says only
		// "could not parse reference"; the parser the reference's form
		// calls for says what is wrong (a repository in upper case, a
		// tag with a space).
		if strings.Contains(ref, "@") {
			_, err = name.NewDigest(ref, nopts...)
		} else {
			_, err = name.NewTag(ref, nopts...)
		}
		return nil, fmt.Errorf("invalid image reference %q: %w", ref, err)
	}
	return r, nil
}

// remoteOptions are the go-containerregistry options for one transfer.
// Credentials come from the docker config (~/.docker/config.json,
// $DOCKER_CONFIG) and its credential helpers.
func (o registryOptions) remote(ctx context.Context, updates chan<- v1.Update) []remote.Option {
	ro := []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithPlatform(o.platform),
	}
	if updates != nil {
		ro = append(ro, remote.WithProgress(updates))
	}
	if o.insecure {
		// name.Insecure only lets the client fall back to plain HTTP:
		// the HTTPS attempt would still fail on the certificate.
		t := remote.DefaultTransport.(*http.Transport).Clone()
		if t.TLSClientConfig == nil {
			t.TLSClientConfig = &tls.Config{}
		}
		t.TLSClientConfig.InsecureSkipVerify = true //nolint:gosec // asked for with --insecure-registry
		ro = append(ro, remote.WithTransport(t))
	}
	return ro
}

// watch forwards progress updates to fn until the channel is closed. The
// returned function waits for that.
func (o registryOptions) watch() (chan v1.Update, func()) {
	if o.progress == nil {
		return nil, func() {}
	}
	updates := make(chan v1.Update, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for u := range updates {
			if u.Error == nil {
				o.progress(u.Complete, u.Total)
			}
		}
	}()
	return updates, func() { <-done }
}

// RemoteImage returns the image ref names in its registry; layers are
// fetched when they are read. An index resolves to the image of the
// platform (WithPlatform).
func RemoteImage(ctx context.Context, ref string, opts ...RegistryOption) (v1.Image, error) {
	o := registryOpts(opts)
	r, err := ParseReference(ref, opts...)
	if err != nil {
		return nil, err
	}
	img, err := remote.Image(r, o.remote(ctx, nil)...)
	if err != nil {
		return nil, fmt.Errorf("cannot fetch %s: %w", r, err)
	}
	return img, nil
}

// Pull fetches the image (or ocifn package) ref names from its registry and
// writes it to dest as a docker-save tarball that Open and OpenFunction
// read. dest is replaced atomically. It returns the manifest digest of the
// pulled image.
func Pull(ctx context.Context, ref, dest string, opts ...RegistryOption) (v1.Hash, error) {
	o := registryOpts(opts)
	r, err := ParseReference(ref, opts...)
	if err != nil {
		return v1.Hash{}, err
	}
	img, err := remote.Image(r, o.remote(ctx, nil)...)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("cannot fetch %s: %w", r, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	m, err := img.Manifest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("cannot read the manifest of %s: %w", r, err)
	}
	limit := o.maxPull
	if limit <= 0 {
		limit = DefaultMaxScratchBytes
	}
	var size int64
	for _, d := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		if d.Size < 0 || size > limit-d.Size {
			return v1.Hash{}, fmt.Errorf("%s is larger than the limit of %d bytes of a pulled image: its manifest declares more", r, limit)
		}
		size += d.Size
	}
	var tag name.Reference
	if t, ok := r.(name.Tag); ok {
		tag = t
	}
	if err := WritePackage(ctx, img, dest, tag, o.progress); err != nil {
		return v1.Hash{}, fmt.Errorf("cannot write %s to %s: %w", r, dest, err)
	}
	return digest, nil
}

// Push uploads the package (or any image) tarball at path to ref and
// returns the reference by digest of what was pushed. As `crossplane xpkg
// push` does, the layer labels of the config (LayerLabel) become
// annotations of the layers in the pushed manifest, so Crossplane finds
// package.yaml in the layer annotated io.crossplane.xpkg: base.
func Push(ctx context.Context, path, ref string, opts ...RegistryOption) (name.Digest, error) {
	o := registryOpts(opts)
	r, err := ParseReference(ref, opts...)
	if err != nil {
		return name.Digest{}, err
	}
	pkg, err := Open(path)
	if errors.Is(err, ErrSeveralImages) {
		// Open's advice, to choose one by name, is for the commands that
		// can (build --image).
		return name.Digest{}, fmt.Errorf("%w; ocifn push pushes one image and cannot choose: give it a file of one (ocifn build writes one)", err)
	}
	if err != nil {
		return name.Digest{}, err
	}
	defer pkg.Close()
	// Open picks this machine's image out of a multi-platform one: pushed
	// under the tag, the other platforms would be lost without a word.
	if ps := pkg.Platforms(); len(ps) > 1 {
		return name.Digest{}, fmt.Errorf("%s is a multi-platform image (%s), and ocifn push pushes one image: crossplane xpkg push -f PKG1,PKG2 pushes one package per platform under one tag, skopeo copy --all copies a whole index",
			filepath.Base(path), strings.Join(ps, ", "))
	}
	img, err := AnnotateLayers(pkg.Image())
	if err != nil {
		return name.Digest{}, err
	}
	// Crossplane would refuse to install it.
	if _, err := PackageLayerIndex(img); err != nil {
		return name.Digest{}, fmt.Errorf("cannot push %s: %w", filepath.Base(path), err)
	}
	digest, err := img.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	// A reference by digest names the manifest it must be. Some
	// registries take a manifest under another digest's name without a
	// check; the others refuse it only once every layer is uploaded.
	target := r
	if d, ok := r.(name.Digest); ok {
		if d.DigestStr() != digest.String() {
			return name.Digest{}, fmt.Errorf("cannot push %s to %s: its manifest is %s, not the digest the reference names (push to a tag, or to %s)",
				filepath.Base(path), r, digest, r.Context().Digest(digest.String()))
		}
		// REPOSITORY:TAG@sha256:… parses as the digest alone: written
		// by digest, the tag would not be, and nothing would say so.
		// The digest checked, the tag is what is pushed to.
		if t, ok := digestRefTag(ref, opts); ok {
			target = t
		}
	}
	updates, wait := o.watch()
	err = remote.Write(target, img, o.remote(ctx, updates)...)
	wait()
	if err != nil {
		return name.Digest{}, fmt.Errorf("cannot push %s to %s: %w", filepath.Base(path), r, err)
	}
	return r.Context().Digest(digest.String()), nil
}

// digestRefTag returns the tag of a reference that names both a tag and a
// digest (REPOSITORY:TAG@sha256:…), which go-containerregistry parses as
// the digest alone.
func digestRefTag(ref string, opts []RegistryOption) (name.Tag, bool) {
	repo, _, ok := strings.Cut(ref, "@")
	if !ok || !strings.Contains(repo[strings.LastIndex(repo, "/")+1:], ":") {
		return name.Tag{}, false
	}
	r, err := ParseReference(repo, opts...)
	if err != nil {
		return name.Tag{}, false
	}
	t, ok := r.(name.Tag)
	return t, ok
}

// AnnotateLayers returns img with the annotations its config labels give
// its layers (LayerLabel(digest) = value becomes io.crossplane.xpkg: value
// on that layer's descriptor). Without such labels img is returned as is.
func AnnotateLayers(img v1.Image) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("cannot read the image config: %w", err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("cannot list the image's layers: %w", err)
	}
	mt, err := img.MediaType()
	if err != nil {
		return nil, err
	}
	adds := make([]mutate.Addendum, len(layers))
	annotated := false
	for i, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		adds[i] = mutate.Addendum{Layer: l}
		if v, ok := cf.Config.Labels[LayerLabel(d.String())]; ok {
			adds[i].Annotations = map[string]string{AnnotationKey: v}
			annotated = true
		}
	}
	if !annotated {
		return img, nil
	}
	out, err := mutate.Append(mutate.MediaType(empty.Image, mt), adds...)
	if err != nil {
		return nil, fmt.Errorf("cannot annotate the layers: %w", err)
	}
	return mutate.ConfigFile(out, cf)
}
