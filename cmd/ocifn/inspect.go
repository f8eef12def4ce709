package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"

	"github.com/ocifn/ocifn/codec"
	"github.com/ocifn/ocifn/oci"
)

func newInspectCommand() *cobra.Command {
	var (
		insecure bool
		format   string
	)
	cmd := &cobra.Command{
		Use:   "inspect PACKAGE|REFERENCE",
		Short: "Show a Function package's metadata, runtime and function image",
		Long: `Show what a Function package holds: the Function metadata (name,
annotations, dependencies) and CustomResourceDefinitions of package.yaml, the
ocifn and crun versions of its runtime, and the embedded function image's
digest and process (entrypoint, cmd, env, working directory, user).

The package is a file ("ocifn build" output, or any xpkg tarball) or a
registry reference.`,
		Example: `  ocifn inspect function.xpkg
  ocifn inspect -o json registry.example.com/acme/function-labels:v0.1.0`,
		Args: argsBetween(1, 1, "one PACKAGE, a package file, or a REFERENCE to one in a registry", "ocifn inspect function.xpkg"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "text" && format != "json" {
				return fmt.Errorf("--output %q: want text or json", format)
			}
			info, err := inspect(cmd.Context(), args[0], insecure)
			if err != nil {
				return err
			}
			if format == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			}
			printPackageInfo(cmd.OutOrStdout(), args[0], info)
			return nil
		},
	}
	cmd.Flags().BoolVar(&insecure, "insecure-registry", false, "allow plain HTTP, or a TLS certificate not verified, to the registry")
	cmd.Flags().StringVarP(&format, "output", "o", "text", "output format: text or json")
	return cmd
}

func inspect(ctx context.Context, what string, insecure bool) (*oci.PackageInfo, error) {
	if _, err := os.Stat(what); err == nil {
		img, err := oci.Open(what)
		if errors.Is(err, oci.ErrSeveralImages) {
			// Open's advice, to choose one by name or digest, is for the
			// commands that can (--image): inspect has no flag for it.
			return nil, fmt.Errorf("%w; ocifn inspect describes one package and cannot choose: give it a file of one (ocifn build writes one)", err)
		}
		if err != nil {
			return nil, err
		}
		defer img.Close()
		// A file is described as it will be pushed, its metadata layer
		// annotated, so that its digest is the one the registry will
		// have, as build prints it.
		pushed, err := oci.AnnotateLayers(img.Image())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return inspectImage(what, pushed)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	// What is named as a file is not looked for in a registry (Docker Hub,
	// for a name without a host): "function.tgz", the README's name for a
	// gzipped tarball, is a valid reference too.
	if slices.ContainsFunc([]string{".xpkg", ".tar", ".tgz", ".gz", ".zst"}, func(ext string) bool { return strings.HasSuffix(what, ext) }) ||
		strings.HasPrefix(what, ".") || strings.HasPrefix(what, "/") {
		return nil, fmt.Errorf("the package %s does not exist", what)
	}
	var opts []oci.RegistryOption
	if insecure {
		opts = append(opts, oci.WithInsecureRegistry())
	}
	img, err := oci.RemoteImage(ctx, what, opts...)
	if err != nil {
		return nil, registryHint(err, what)
	}
	return inspectImage(what, img)
}

// inspectImage inspects the package image img, naming what in its errors.
func inspectImage(what string, img v1.Image) (*oci.PackageInfo, error) {
	info, err := oci.InspectPackage(img, "")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return info, nil
}

func printPackageInfo(w io.Writer, what string, info *oci.PackageInfo) {
	fm := info.Meta.Function
	p := func(format string, a ...any) { fmt.Fprintf(w, format+"\n", a...) }
	list := func(s []string) string {
		if len(s) == 0 {
			return "-"
		}
		b, _ := json.Marshal(s)
		return string(b)
	}
	or := func(s, d string) string {
		if s == "" {
			return d
		}
		return s
	}
	p("Package:      %s", what)
	p("Digest:       %s", info.Digest)
	p("Function:     %s (%s)", fm.Name, fm.APIVersion)
	for _, k := range sortedKeys(fm.Annotations) {
		v := fm.Annotations[k]
		if strings.Contains(v, "\n") {
			v = strconv.Quote(strings.TrimSpace(v)) // one line, as the rest
		}
		p("  annotation  %s: %s", k, v)
	}
	for _, k := range sortedKeys(fm.Labels) {
		p("  label       %s: %s", k, fm.Labels[k])
	}
	if fm.Crossplane != "" {
		p("  crossplane  %s", fm.Crossplane)
	}
	if fm.Image != "" {
		p("  image       %s", fm.Image)
	}
	if len(fm.Capabilities) > 0 {
		p("  capabilities %s", strings.Join(fm.Capabilities, ", "))
	}
	if len(fm.DependsOn) == 0 {
		p("  dependsOn   -")
	}
	for _, d := range fm.DependsOn {
		p("  dependsOn   %s", d)
	}
	for _, c := range info.Meta.CRDs {
		p("  CRD         %s", c)
	}
	where := "no layer annotation: found by scanning the layers"
	if info.MetaAnnotated {
		where = oci.AnnotationKey + ": " + oci.PackageAnnotation
	}
	p("  metadata    layer %d (%s)", info.MetaLayer+1, where)
	r := info.Runtime
	if r.OcifnVersion == "" {
		// "ocifn unknown" would say an ocifn of no known version serves
		// it: crossplane xpkg build packages any image as the runtime.
		p("Runtime:      not ocifn (the package image has no %s label: its own entrypoint serves the function)", oci.LabelVersion)
	} else {
		p("Runtime:      ocifn %s (commit %s), crun %s", r.OcifnVersion, or(r.OcifnCommit, "unknown"), or(r.CrunVersion, "unknown"))
	}
	p("  entrypoint  %s %s", list(r.Entrypoint), list(r.Cmd))
	p("  platform    %s", or(r.Platform, "-"))
	if r.BuiltBy != "" {
		p("  built by    ocifn %s", r.BuiltBy)
	} else {
		p("  built by    not ocifn build (no %s label)", oci.LabelBuildVersion)
	}
	if info.Function != nil {
		p("  serves      --api %s, --io %s", or(r.API, apiCrossplane), or(r.IO, codec.Default))
	}
	f := info.Function
	if f == nil {
		p("Function image: none (not a package built by ocifn)")
		return
	}
	p("Function image: %s", f.Path)
	p("  name        %s", or(f.Name, "-"))
	p("  digest      %s", f.Digest)
	p("  platform    %s, %s", or(f.Platform, "-"), plural(f.Layers, "layer"))
	p("  entrypoint  %s", list(f.Entrypoint))
	p("  cmd         %s", list(f.Cmd))
	p("  env         %s", list(f.Env))
	p("  workdir     %s", or(f.WorkingDir, "/"))
	p("  user        %s", or(f.User, "root (default)"))
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// plural is n and noun, in the plural unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
