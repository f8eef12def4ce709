package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// Set at build time with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = "unknown"
)

// exitError carries a specific exit code out of a command.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit code %d", e.code) }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "ocifn",
		Short: "Run any OCI container image as a Crossplane Composition Function",
		Long: `ocifn makes any OCI container image a Crossplane Composition Function.

A function is a program in an image that reads a RunFunctionRequest as JSON
on stdin and prints a RunFunctionResponse as JSON on stdout: a jq filter, a yq
expression or a shell script is enough. "ocifn serve" answers Crossplane's
gRPC RunFunction calls by running each call in a fresh rootless container.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newServeCommand(), newVersionCommand(), newTestCommand(), newRenderCommand(), newInitCommand())
	root.AddCommand(newBuildCommand(), newPushCommand(), newInspectCommand())
	return root
}

func execute() int {
	cmd, err := newRootCommand().ExecuteC()
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	case jsonLogs(cmd):
		// The last line of a JSON log is a record too, for the
		// collector that parses the rest of it.
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("exiting", "error", err.Error())
		return 1
	default:
		fmt.Fprintln(os.Stderr, "ocifn:", err)
		return 1
	}
}

// jsonLogs reports whether cmd was asked for JSON logs (--log-format json).
func jsonLogs(cmd *cobra.Command) bool {
	if cmd == nil {
		return false
	}
	f := cmd.Flags().Lookup("log-format")
	return f != nil && f.Value.String() == "json"
}

// noArgs refuses positional arguments to a command that takes its input
// from a flag, and names the flag: "unknown command", cobra's message,
// would send the user looking for a subcommand.
func noArgs(flag string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("%s takes no arguments, got %q: pass the image tarball with %s", cmd.CommandPath(), args[0], flag)
		}
		return nil
	}
}

// argsBetween takes from min to max positional arguments, and otherwise
// says what they are and shows a command that gives them, where cobra's
// "accepts between 1 and 2 arg(s), received 0" says neither.
func argsBetween(min, max int, what, example string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) >= min && len(args) <= max {
			return nil
		}
		got := "none"
		if len(args) > 0 {
			got = fmt.Sprintf("%d (%s)", len(args), strings.Join(args, " "))
		}
		return fmt.Errorf("%s takes %s; got %s: %s", cmd.CommandPath(), what, got, example)
	}
}
