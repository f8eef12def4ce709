package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ocifn/ocifn/scaffold"
)

type initOptions struct {
	template string
	dir      string
}

func newInitCommand() *cobra.Command {
	o := &initOptions{}
	cmd := &cobra.Command{
		Use:   "init NAME",
		Short: "Create a new function directory from a template (jq, yq or sh)",
		Long: `Create a directory with everything a new function needs, ready to build,
test and package:

  function.jq|.yq|.sh  the function; it composes a ConfigMap from the XR
  Dockerfile           FROM scratch, plus the pieces build.sh stages
  build.sh             builds function.tar with buildah, docker or podman
  crossplane.yaml      the package metadata, for "ocifn build"
  Makefile             make image, test, render, package, push
  README.md            how to build, test and package it
  example/             a request and its expected response, an XR, a
                       Composition, Functions and the expected render output;
                       "make test" checks every example/NAME.request.yaml you
                       add against its NAME.expected.yaml, a Fatal result too
  .gitignore           leaves out what make builds (function.tar, stage/, ...)
  .dockerignore        keeps function.tar, function.xpkg, .build/ and
                       example/ out of the image's build context

Templates: jq (the image holds only jq), yq (only yq), sh (busybox sh and jq).
NAME is the Function's name (a DNS label, such as function-greeting); the
directory is ./NAME unless --dir says otherwise. It is not made a git
repository: run "git init" in it to review what "make expected" changes
with "git diff".`,
		Example: `  ocifn init function-greeting --template jq
  cd function-greeting
  make image test render   # build function.tar, run the examples
  make package             # function.xpkg, ready for "ocifn push"`,
		Args: initArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(args[0], cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.template, "template", "t", "jq", "the function's language: "+strings.Join(scaffold.TemplateNames(), ", "))
	f.StringVar(&o.dir, "dir", "", "directory to create (default ./NAME)")
	_ = cmd.RegisterFlagCompletionFunc("template", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return scaffold.TemplateNames(), cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// initArgs says what NAME is when it is missing or given with more:
// cobra's "accepts 1 arg(s), received 0" names neither NAME nor a way to
// give it.
func initArgs(cmd *cobra.Command, args []string) error {
	const name = "NAME, the new Function's name (a DNS label, such as function-greeting; the directory is ./NAME unless --dir says otherwise): ocifn init function-greeting --template jq"
	switch len(args) {
	case 0:
		return fmt.Errorf("%s needs %s", cmd.CommandPath(), name)
	case 1:
		return nil
	}
	return fmt.Errorf("%s takes one argument, got %d (%s): give %s", cmd.CommandPath(), len(args), strings.Join(args, " "), name)
}

func (o *initOptions) run(name string, stdout io.Writer) error {
	dir := o.dir
	if dir == "" {
		dir = name
	}
	files, err := scaffold.Write(dir, name, o.template)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Created the %s function %s in %s:\n", o.template, name, dir)
	for _, f := range files {
		fmt.Fprintf(stdout, "  %s\n", filepath.Join(dir, f))
	}
	fmt.Fprintf(stdout, "\nNext:\n  cd %s\n  make image test render   # build function.tar and check it on the examples\n  make package             # the Crossplane package, function.xpkg\n", dir)
	return nil
}
