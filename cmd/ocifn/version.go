package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ocifn/ocifn/bundle"
)

func newVersionCommand() *cobra.Command {
	var crun string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of ocifn and of the crun it finds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "ocifn %s (commit %s)\n", version, commit)
			rt, err := bundle.FindRuntime(crun)
			if err != nil {
				// Not an error of this command: build, push and inspect
				// need no crun.
				fmt.Fprintf(out, "no OCI runtime: %v (serve, test and render need one)\n", err)
				return nil
			}
			fmt.Fprintf(out, "%s (%s)\n", rt.Version(), rt.Path())
			return nil
		},
	}
	cmd.Flags().StringVar(&crun, "runtime", "crun", "OCI runtime binary: a path, or a name looked up on PATH")
	return cmd
}
