package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/ocifn/ocifn/oci"
)

func newPushCommand() *cobra.Command {
	var insecure bool
	cmd := &cobra.Command{
		Use:   "push PACKAGE REGISTRY/REPOSITORY:TAG",
		Short: "Push a Function package to an OCI registry",
		Long: `Push a package built by "ocifn build" to any OCI registry.

Credentials come from the docker configuration (~/.docker/config.json or
$DOCKER_CONFIG/config.json, "docker login", credential helpers). As
"crossplane xpkg push" does, the layer holding package.yaml is annotated
io.crossplane.xpkg: base in the pushed manifest. Prints the pushed
reference by digest.

A reference by digest (REPOSITORY@sha256:...) must name the package's own
manifest; with a tag too (REPOSITORY:TAG@sha256:...), the package is
pushed under the tag once its digest is checked.`,
		Example: `  ocifn push function.xpkg registry.example.com/acme/function-labels:v0.1.0

  # A local registry without TLS, or with a self-signed certificate:
  ocifn push --insecure-registry function.xpkg 127.0.0.1:5000/function-labels:v0.1.0`,
		Args: argsBetween(2, 2, "PACKAGE, the file ocifn build wrote, and REGISTRY/REPOSITORY:TAG, where to push it", "ocifn push function.xpkg registry.example.com/acme/function-labels:v0.1.0"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPush(cmd.Context(), args[0], args[1], insecure)
		},
	}
	cmd.Flags().BoolVar(&insecure, "insecure-registry", false, "allow plain HTTP, or a TLS certificate not verified, to the registry (for a local test registry)")
	return cmd
}

func runPush(ctx context.Context, pkg, ref string, insecure bool) error {
	if _, err := os.Stat(pkg); err != nil {
		return fmt.Errorf("cannot read the package: %w", err)
	}
	status := newStatusLine(os.Stderr)
	defer status.done()
	opts := []oci.RegistryOption{oci.WithTransferProgress(status.bytes("pushing " + pkg))}
	if insecure {
		opts = append(opts, oci.WithInsecureRegistry())
	}
	status.step("reading " + pkg)
	d, err := oci.Push(ctx, pkg, ref, opts...)
	if err != nil {
		return registryHint(err, ref)
	}
	status.done()
	fmt.Fprintln(os.Stdout, d.String())
	return nil
}
