package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/containers/storage/pkg/unshare"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	imgspec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/ocifn/ocifn/bundle"
	"github.com/ocifn/ocifn/codec"
	"github.com/ocifn/ocifn/host"
	"github.com/ocifn/ocifn/oci"
	"github.com/ocifn/ocifn/spec"
)

type buildOptions struct {
	from           string
	image          string
	output         string
	packageFile    string
	name           string
	runtimeImage   string
	runtimeTarball string
	insecure       bool
	io             string
	capabilities   []string
	api            string
}

func newBuildCommand() *cobra.Command {
	o := &buildOptions{}
	cmd := &cobra.Command{
		Use:   "build --from-oci-tarball FILE (--package-file crossplane.yaml | --name NAME) (--runtime-image REF | --runtime-image-tarball FILE) [-o FILE]",
		Short: "Build a Crossplane Function package (xpkg) from an image tarball",
		Long: `Build a Crossplane Function package from a function image tarball.

The package is an OCI image: the ocifn runtime image (ocifn and crun; its
entrypoint is "ocifn serve"), the function image embedded at
` + oci.FunctionTarball + ` (where "ocifn serve" looks by default), and a last layer
holding only package.yaml: the Function metadata and any
CustomResourceDefinitions, from --package-file as it is, or generated from
--name (declaring the capabilities composition and operation, so that
Crossplane v2 runs the Function in Compositions and Operations; see
--capabilities).

The function image is checked first: every digest, every layer unpacked
into a scratch directory, its /proc, /dev, /sys and /tmp directories, and
its user found in its own /etc/passwd and /etc/group, as "ocifn serve"
checks them at its start. The package is written as a docker-save tarball,
what "crossplane xpkg build" writes; push it with "ocifn push".`,
		Example: `  docker save my-function | gzip > function.tgz
  ocifn build --from-oci-tarball function.tgz --name function-labels \
    --runtime-image-tarball build/ocifn-runtime.tar -o function.xpkg

  ocifn build --from-oci-tarball function.tar --package-file crossplane.yaml \
    --runtime-image registry.example.com/ocifn/runtime:v0.1.0 -o function.xpkg`,
		Args: noArgs("--from-oci-tarball"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.Flags().Changed("capabilities"))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.from, "from-oci-tarball", "", "the function image: docker save output (optionally gzipped) or an OCI archive")
	f.StringVar(&o.image, "image", "", "image to package when the tarball holds several: its name, or the digest (sha256:...) an unnamed one is listed by")
	f.StringVarP(&o.output, "output", "o", "", "where to write the package (default: NAME.xpkg, after the Function's name)")
	f.StringVar(&o.packageFile, "package-file", "", "package metadata: a YAML stream with one Function (meta.pkg.crossplane.io) and any CustomResourceDefinitions")
	f.StringVar(&o.name, "name", "", "generate minimal package metadata for a Function of this name")
	f.StringVar(&o.runtimeImage, "runtime-image", "", "the ocifn runtime image to build on, from a registry")
	f.StringVar(&o.runtimeTarball, "runtime-image-tarball", "", "the ocifn runtime image to build on, as an image tarball (make image)")
	f.BoolVar(&o.insecure, "insecure-registry", false, "allow plain HTTP, or a TLS certificate not verified, to the registry of --runtime-image")
	f.StringSliceVar(&o.capabilities, "capabilities", oci.DefaultCapabilities, "with --name: what the Function declares it can be used for, in spec.capabilities (Crossplane v2 runs it in Compositions with composition, in Operations with operation; empty: declare nothing)")
	f.StringVar(&o.io, "io", "", "I/O mode of the function, recorded in the package for ocifn serve: "+strings.Join(codec.Names(), ", ")+" (default: none recorded, which means json)")
	f.StringVar(&o.api, "api", apiCrossplane, "what the package serves: crossplane (a Function package), openwhisk (an OpenWhisk Docker action) or http (a Kubeless custom runtime or Knative Service); the image's entrypoint then serves it on :8080")
	return cmd
}

func (o *buildOptions) check(capabilitiesSet bool) error {
	apiErr := checkAPI(o.api)
	switch {
	case capabilitiesSet && o.packageFile != "":
		return errors.New("--capabilities applies to generated metadata (--name); with --package-file, set spec.capabilities in the file, which is packaged as it is")
	case o.from == "":
		return errors.New("--from-oci-tarball is required: the function image tarball (docker save IMAGE | gzip > function.tgz)")
	case (o.packageFile == "") == (o.name == ""):
		return errors.New("pass exactly one of --package-file (Function metadata, e.g. crossplane.yaml) and --name (generate minimal metadata)")
	case apiErr != nil:
		return fmt.Errorf("--api %q: %w", o.api, apiErr)
	case (o.runtimeImage == "") == (o.runtimeTarball == ""):
		return errors.New("pass exactly one of --runtime-image REF and --runtime-image-tarball FILE: the ocifn runtime image the package runs (make image builds build/ocifn-runtime.tar)")
	}
	if o.io != "" {
		if _, err := codec.ByName(o.io); err != nil {
			return fmt.Errorf("--io: %w", err)
		}
	}
	if err := checkIOFront(o.api, o.io); err != nil {
		return fmt.Errorf("--io %s: %w", o.io, err)
	}
	if _, err := os.Stat(o.from); err != nil {
		return fmt.Errorf("cannot read the function image tarball: %w", err)
	}
	if o.runtimeImage != "" {
		// A reference that cannot name an image is refused now, not
		// after the function image is unpacked.
		if _, err := oci.ParseReference(o.runtimeImage); err != nil {
			return fmt.Errorf("--runtime-image: %w", err)
		}
	}
	if o.runtimeTarball != "" {
		if _, err := os.Stat(o.runtimeTarball); err != nil {
			return fmt.Errorf("cannot read the runtime image tarball: %w", err)
		}
	}
	return nil
}

// meta reads or generates package.yaml and validates it.
func (o *buildOptions) meta() (*oci.PackageMeta, error) {
	var (
		data []byte
		err  error
		from = "--name"
	)
	if o.packageFile != "" {
		from = o.packageFile
		if data, err = os.ReadFile(o.packageFile); err != nil {
			return nil, fmt.Errorf("cannot read the package metadata: %w", err)
		}
	} else {
		for _, c := range o.capabilities {
			if !oci.KnownCapability(c) {
				fmt.Fprintf(os.Stderr, "warning: --capabilities %q: Crossplane knows %s; a Function declares only what Crossplane may use it for, so a misspelt one bars it\n", c, strings.Join(oci.DefaultCapabilities, " and "))
			}
		}
		if data, err = oci.GenerateFunctionMeta(o.name, o.capabilities); err != nil {
			return nil, err
		}
	}
	m, err := oci.ParsePackageMeta(data)
	if err != nil {
		return nil, fmt.Errorf("invalid package metadata (%s): %w", from, err)
	}
	if o.packageFile != "" {
		// With --name, --capabilities was warned of above.
		for _, w := range m.Warnings {
			fmt.Fprintf(os.Stderr, "warning: %s: %s\n", o.packageFile, w)
		}
	}
	return m, nil
}

func (o *buildOptions) run(ctx context.Context, capabilitiesSet bool) error {
	if err := o.check(capabilitiesSet); err != nil {
		return err
	}
	// Metadata and output are checked before the slow steps, and before
	// re-executing.
	meta, err := o.meta()
	if err != nil {
		return err
	}
	output := o.output
	if output == "" {
		output = meta.Function.Name + ".xpkg"
	}
	if st, err := os.Stat(filepath.Dir(output)); err != nil || !st.IsDir() {
		return fmt.Errorf("cannot write the package to %s: its directory does not exist", output)
	}
	// The package and the scratch files are written next to it, after the
	// slow steps: a directory the user cannot write to is refused first.
	if err := unix.Access(filepath.Dir(output), unix.W_OK); err != nil {
		return fmt.Errorf("cannot write the package to %s: its directory: %w", output, err)
	}
	if st, err := os.Stat(output); err == nil && st.IsDir() {
		return fmt.Errorf("cannot write the package to %s: it is a directory; name the package file (-o %s)", output, filepath.Join(output, meta.Function.Name+".xpkg"))
	}

	// Unpacking a layer needs root or a user namespace (see oci.Unpack).
	if code, reexeced, err := enterUserNamespace(); reexeced || err != nil {
		if err != nil {
			return err
		}
		return exitError{code: code}
	}

	// Interrupted, the build stops where it can and always removes its
	// scratch files and half-written output.
	ctx, stop := signal.NotifyContext(ctx, stopSignals...)
	defer stop()

	status := newStatusLine(os.Stderr)
	defer status.done()

	status.step("reading the function image " + o.from)
	fn, err := oci.Open(o.from, oci.WithImageName(o.image))
	if err != nil {
		if errors.Is(err, oci.ErrSeveralImages) {
			return fmt.Errorf("%w (choose with --image NAME)", err)
		}
		return err
	}
	defer fn.Close()
	if oci.IsPackage(fn.ConfigFile()) {
		return fmt.Errorf("%s is already an ocifn package; pass the function image tarball itself", o.from)
	}
	// What ocifn serve would refuse at its start is refused here, before a
	// package that could only crash-loop in the cluster is written.
	if cfg := fn.ConfigFile(); cfg == nil || len(spec.Args(imgspec.ImageConfig{Entrypoint: cfg.Config.Entrypoint, Cmd: cfg.Config.Cmd})) == 0 {
		return fmt.Errorf("the function image %s has neither Entrypoint nor Cmd: there is no program to run (set ENTRYPOINT or CMD in its Dockerfile)", o.from)
	}
	if _, err := ioMode(o.io, fn); err != nil {
		return fmt.Errorf("the function image %s: %w", o.from, err)
	}

	status.step("unpacking the function image to check it")
	if err := checkUnpacks(ctx, o.from, fn.Image(), fn.ConfigFile().Config.User); err != nil {
		return err
	}

	status.step("reading the runtime image")
	rt, closeRuntime, err := o.runtime(ctx)
	if err != nil {
		return err
	}
	defer closeRuntime()

	scratch, err := os.MkdirTemp(filepath.Dir(output), ".ocifn-build-")
	if err != nil {
		return fmt.Errorf("cannot create a scratch directory next to %s: %w", output, err)
	}
	defer os.RemoveAll(scratch)
	fnTar := filepath.Join(scratch, "function.tar")
	status.step("writing the function image")
	if err := oci.WriteFunctionTarball(ctx, fn, fnTar); err != nil {
		return err
	}

	pkg, err := oci.BuildPackage(oci.PackageInput{
		Runtime:         rt,
		FunctionTarball: fnTar,
		Function:        fn,
		Meta:            meta,
		Labels:          map[string]string{oci.LabelBuildVersion: version},
		IO:              o.io,
		API:             packageAPI(o.api),
	})
	if err != nil {
		return err
	}
	var tag name.Reference
	if t, err := name.NewTag(meta.Function.Name + ":latest"); err == nil {
		tag = t
	}
	if err := oci.WritePackage(ctx, pkg, output, tag, status.bytes("writing "+output)); err != nil {
		return err
	}
	status.done()
	// The digest the package has once pushed, which a Function's
	// spec.package can pin: push annotates the metadata layer, which the
	// docker-save file cannot, and that changes the manifest.
	pushed, err := oci.AnnotateLayers(pkg)
	if err != nil {
		return err
	}
	digest, err := pushed.Digest()
	if err != nil {
		return err
	}
	// The function image's digest as serve and inspect will report it;
	// rewritten as docker save output, an OCI archive's differs.
	cf, err := pkg.ConfigFile()
	if err != nil {
		return err
	}
	served := cf.Config.Labels[oci.LabelFunctionDigest]
	if given := fn.Digest().String(); given != served {
		served += "; the tarball given has manifest " + given
	}
	fmt.Fprintf(os.Stdout, "built %s: Function %s, function image %s (%s), package %s\n",
		output, meta.Function.Name, displayName(fn.Name()), served, digest)
	return nil
}

func displayName(n string) string {
	if n == "" {
		return "unnamed"
	}
	return n
}

// runtime opens the runtime image from the tarball or the registry. The
// returned function releases it.
func (o *buildOptions) runtime(ctx context.Context) (v1.Image, func(), error) {
	if o.runtimeTarball != "" {
		img, err := oci.Open(o.runtimeTarball)
		if errors.Is(err, oci.ErrSeveralImages) {
			// Open's advice, to choose one by name, has no flag here:
			// --image chooses the function image.
			return nil, nil, fmt.Errorf("cannot read the runtime image: %w; there is no choosing the runtime image out of several (--image chooses the function image): give --runtime-image-tarball a tarball of the runtime image alone, as make image writes it", err)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("cannot read the runtime image: %w", err)
		}
		if err := isRuntime(img.ConfigFile(), o.runtimeTarball); err != nil {
			_ = img.Close()
			return nil, nil, err
		}
		// The function image's layers are checked as they are unpacked;
		// the runtime's are copied, and one that does not match would
		// fail only at push or in the cluster's pull.
		if err := oci.VerifyLayers(ctx, img.Image()); err != nil {
			_ = img.Close()
			return nil, nil, fmt.Errorf("the runtime image %s does not match its digests: %w", o.runtimeTarball, err)
		}
		return img.Image(), func() { _ = img.Close() }, nil
	}
	var opts []oci.RegistryOption
	if o.insecure {
		opts = append(opts, oci.WithInsecureRegistry())
	}
	img, err := oci.RemoteImage(ctx, o.runtimeImage, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("cannot get the runtime image: %w", registryHint(err, o.runtimeImage))
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, nil, fmt.Errorf("cannot read the runtime image's config: %w", err)
	}
	if err := isRuntime(cf, o.runtimeImage); err != nil {
		return nil, nil, err
	}
	return img, func() {}, nil
}

// checkUnpacks applies every layer of img, the function image from, to a
// scratch directory, which verifies each layer against its digests on the
// way, resolves the image's user in it, and removes it. It stops past what
// ocifn serve unpacks by default (--max-rootfs-bytes), so that a layer that
// decompresses without end cannot fill the disk, and an image serve would
// refuse is refused now.
func checkUnpacks(ctx context.Context, from string, img v1.Image, user string) error {
	dir, err := os.MkdirTemp("", "ocifn-build-check-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	opts := []oci.UnpackOption{oci.WithMaxBytes(DefaultMaxRootfsBytes)}
	if unshare.IsRootless() {
		opts = append(opts, oci.WithoutChown())
	}
	rootfs := filepath.Join(dir, "rootfs")
	if err := oci.Unpack(ctx, img, rootfs, opts...); err != nil {
		return fmt.Errorf("the function image %s does not unpack: %w", from, err)
	}
	// serve checks these at its start and stops there when they fail: such
	// a package would only crash-loop in the cluster.
	if err := bundle.CheckMountPoints(rootfs); err != nil {
		return fmt.Errorf("the function image %s: %w", from, err)
	}
	if _, err := bundle.ResolveUser(rootfs, user); err != nil {
		return fmt.Errorf("the function image %s: %w", from, err)
	}
	return nil
}

// enterUserNamespace re-executes ocifn in a user and mount namespace of its
// own when it runs unprivileged, so that image layers can be unpacked. It
// reports whether it did, with the child's exit code.
func enterUserNamespace() (code int, reexeced bool, err error) {
	if host.Inside() {
		return 0, false, host.FinishInside()
	}
	if os.Geteuid() == 0 {
		return 0, false, nil
	}
	code, err = host.Reexec(host.Plan{UserNS: true})
	return code, true, err
}

// missingHelper finds the credential helper program the docker-credential-
// helpers client could not run in its message, which it does not wrap.
var missingHelper = regexp.MustCompile(`exec: "(docker-credential-[^"]*)": executable file not found`)

// registryHint explains a failed registry call: to a plain-HTTP registry,
// to one whose certificate this machine cannot verify, with a credential
// helper that is not installed, or refused for want of credentials.
func registryHint(err error, ref string) error {
	if err != nil && !strings.Contains(ref, "://") && strings.Contains(err.Error(), "http: server gave HTTP response to HTTPS client") {
		return fmt.Errorf("%w (a plain-HTTP registry needs --insecure-registry)", err)
	}
	// Go's message names the authority as unknown, not what makes it
	// known: a registry of one's own CA is a common setup.
	var ua x509.UnknownAuthorityError
	if errors.As(err, &ua) {
		return fmt.Errorf("%w (the registry's certificate is signed by an authority this machine does not trust: name its CA certificate in SSL_CERT_FILE or SSL_CERT_DIR, or skip verification with --insecure-registry)", err)
	}
	// The client's message names the program, not the config that asks
	// for it: one copied from a machine with Docker Desktop, say.
	if m := missingHelper.FindStringSubmatch(fmt.Sprint(err)); m != nil {
		return fmt.Errorf("%w (the docker config %s names the credential helper %s, in credsStore or credHelpers, and no such program is on PATH: install it, or remove it from the config)", err, dockerConfigFile(), m[1])
	}
	// A push's first call is a HEAD, whose 401 carries no message: say
	// where the credentials come from.
	var te *transport.Error
	if errors.As(err, &te) && (te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden) {
		host := ref
		if r, perr := name.ParseReference(ref); perr == nil {
			host = r.Context().RegistryStr()
		}
		return fmt.Errorf("%w (the registry refused the credentials of the docker config, or there were none (some registries say so of a repository that does not exist): docker login %s, or set DOCKER_CONFIG to the directory of a config.json that has them)", err, host)
	}
	return err
}

// dockerConfigFile is the docker config the registry client reads.
func dockerConfigFile() string {
	if dir := os.Getenv("DOCKER_CONFIG"); dir != "" {
		return filepath.Join(dir, "config.json")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "~/.docker/config.json"
	}
	return filepath.Join(home, ".docker", "config.json")
}

// packageAPI is what a package records of --api: nothing for Crossplane's
// gRPC, the default.
func packageAPI(api string) string {
	if api == apiCrossplane {
		return ""
	}
	return api
}

// isRuntime refuses an image that is not an ocifn runtime image (`make
// image`, which labels it with its version): a package built on another
// would never serve a call. A package keeps the runtime's labels, so it is
// refused too: built on one, a package holds two function images and two
// layers marked as package.yaml's, which inspect and serve refuse and
// Crossplane will not install.
func isRuntime(cf *v1.ConfigFile, from string) error {
	if cf == nil || cf.Config.Labels[oci.LabelVersion] == "" {
		return fmt.Errorf("%s is not an ocifn runtime image: its config has no %s label (build one with make image)", from, oci.LabelVersion)
	}
	// Sorted, dev.ocifn.function comes before io.crossplane.xpkg:…, so
	// that the error names the same label each time.
	for _, k := range sortedKeys(cf.Config.Labels) {
		if k == oci.LabelFunction || strings.HasPrefix(k, oci.AnnotationKey+":") {
			return fmt.Errorf("%s is a Function package, not the ocifn runtime image: its config has the label %s; build on the runtime image itself (make image)", from, k)
		}
	}
	return nil
}
