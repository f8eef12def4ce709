package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ocifn/ocifn/pipeline"
)

type testOptions struct {
	functionFlags
	files         pipeline.RequestFiles
	contextFiles  []string
	contextValues []string
	output        string
	debug         bool
	insecureReg   bool
	expected      string
	update        bool
	// want is the response the --expected file holds, when it holds one.
	want *fnv1.RunFunctionResponse
	// unreadable is why the --expected file, which exists, is no
	// response, when --update is to replace it.
	unreadable error
}

func newTestCommand() *cobra.Command {
	o := &testOptions{}
	cmd := &cobra.Command{
		Use:   "test IMAGE [REQUEST]",
		Short: "Run one RunFunction call locally, without a server, and print the response",
		Long: `Run one call of a function image on this machine, the way "ocifn serve"
would run it (a fresh rootless container), and print the response.

IMAGE is an image tarball (docker save output, plain or gzipped, or an OCI
archive), a Function package built by "ocifn build", or a registry reference
to either (pulled first; --insecure-registry allows plain HTTP).

REQUEST is a RunFunctionRequest in YAML or JSON ("-" reads standard input),
one document: a file of several is refused, as one call is made, and so is
a key given twice in one mapping, whose first value would not be sent.
Instead of writing the whole request, or to change parts of it, give the
pieces as files:

  --xr FILE          the composite resource (observed.composite)
  --observed FILE    composed resources that exist (observed.resources)
  --desired FILE     composed resources desired by earlier steps (desired.resources)
  --desired-xr FILE  the composite resource as earlier steps desire it (desired.composite)
  --input FILE       the pipeline step's input

--observed and --desired take YAML streams (documents separated by "---") or
directories of YAML files. Each resource is named in the state by its
crossplane.io/composition-resource-name annotation, or else by metadata.name.
A request or a response given to one of these flags (no apiVersion or kind,
and a key of theirs: observed, results, meta) is refused, saying where it
goes, rather than sent whole as the piece.

The response is printed on stdout (YAML, or JSON with -o json); what the
function writes on stderr is shown on stderr, each line starting with "  | ".
The exit code is 0 when the function answered without a Fatal result, and 1
when it returned a Fatal result (the response is printed all the same) or
could not be called.

With --expected FILE, the response is not printed but compared with FILE,
a response as ocifn test prints it (YAML or JSON, comments allowed): the
exit code is 0 when they are the same response, a Fatal result included,
which is how to check that the function refuses bad input; when they
differ, 1, with a diff on stderr. --update writes the response to FILE
instead, as -o prints it, once the call was made: a Fatal result there
replaces only a Fatal result FILE expects, or a FILE that does not exist
yet, so that a function broken by mistake does not overwrite the
responses it should give; an XR, a stream of objects (--observed's) or a
request named by mistake as FILE is never written over.`,
		Example: `  # A request written out in YAML:
  ocifn test function.tar request.yaml

  # Assemble the request from an XR and a step input:
  ocifn test function.tar --xr xr.yaml --input input.yaml

  # Start from a request and replace the observed composed resources:
  ocifn test function.tar request.yaml --observed observed.yaml -o json

  # A package, from a registry:
  ocifn test registry.example.com/acme/function-labels:v0.1.0 request.yaml

  # Check the response against one recorded before (a Fatal result too):
  ocifn test function.tar refused.request.yaml --expected refused.expected.yaml

  # Record it (again), after a change on purpose:
  ocifn test function.tar refused.request.yaml --expected refused.expected.yaml --update

  # The request on standard input:
  jq '.input.value = 2' request.json | ocifn test function.tar -`,
		Args: argsBetween(1, 2, "IMAGE, an image tarball, a Function package or a registry reference, and optionally REQUEST, a RunFunctionRequest file", "ocifn test function.tar example/request.yaml"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 {
				o.files.Request = args[1]
			}
			return o.run(cmd.Context(), args[0], cmd.InOrStdin(), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	o.functionFlags.register(f)
	// Each takes one file: a second would replace the first without a
	// word (a YAML stream or a directory holds several resources).
	f.Var((*onceFile)(&o.files.Input), "input", "YAML or JSON file with the pipeline step's input")
	f.Var((*onceFile)(&o.files.XR), "xr", "YAML or JSON file with the composite resource (observed)")
	f.Var((*onceFile)(&o.files.DesiredXR), "desired-xr", "YAML or JSON file with the desired composite resource")
	f.Var((*onceFile)(&o.files.Observed), "observed", "YAML stream or directory of observed composed resources")
	f.Var((*onceFile)(&o.files.Desired), "desired", "YAML stream or directory of desired composed resources")
	f.StringArrayVar(&o.contextFiles, "context-files", nil, "context value from a JSON or YAML file, as KEY=FILE (repeatable)")
	f.StringArrayVar(&o.contextValues, "context-values", nil, "context value as KEY=JSON (or YAML, as crossplane render reads it; repeatable); wins over --context-files")
	f.StringVarP(&o.output, "output", "o", "yaml", "output format of the response: yaml or json")
	f.StringVar(&o.expected, "expected", "", "compare the response with this file (YAML or JSON) instead of printing it: exit code 0 when they are the same, a Fatal result included; 1 and a diff when not")
	f.BoolVar(&o.update, "update", false, "with --expected: write the response to that file instead of comparing (a Fatal result replaces only an expected Fatal result, or a missing file)")
	f.BoolVar(&o.insecureReg, "insecure-registry", false, "allow plain HTTP, or TLS certificates not verified, to registries (for a local test registry)")
	f.BoolVar(&o.debug, "debug", false, "also show ocifn's own progress (image unpacked, the call and its duration)")
	return cmd
}

func (o *testOptions) request(stdin io.Reader) (*fnv1.RunFunctionRequest, error) {
	ctx, err := pipeline.ParseContext(o.contextFiles, o.contextValues)
	if err != nil {
		return nil, err
	}
	o.files.Context = ctx
	if o.files.Request == "" && o.files.XR == "" && o.files.Input == "" {
		return nil, fmt.Errorf("nothing to send: give a REQUEST file, or at least --xr or --input")
	}
	return pipeline.BuildRequest(o.files, stdin)
}

// inputPaths are the files the request is read from.
func (o *testOptions) inputPaths() []string {
	f := o.files
	return append([]string{f.Request, f.Input, f.XR, f.DesiredXR, f.Observed, f.Desired}, contextFilePaths(o.contextFiles)...)
}

func (o *testOptions) run(ctx context.Context, image string, stdin io.Reader, stdout, stderr io.Writer) error {
	if o.output != "yaml" && o.output != "json" {
		return fmt.Errorf("--output %q: want yaml or json", o.output)
	}
	if err := o.readExpected(); err != nil {
		return err
	}
	defer surviveClosedOutput()()
	log := newHumanLogger(stderr, o.debug)
	rt, err := o.check()
	if err != nil {
		return err
	}
	if _, err := classifyImage(image); err != nil {
		return err
	}
	if readableTwice(o.inputPaths()...) {
		// Mistakes in the files show before the image is unpacked (and, on
		// hosts that need it, before ocifn re-executes itself).
		if _, err := o.request(stdin); err != nil {
			return err
		}
	}

	if code, reexeced, err := enterNamespaces(log); reexeced || err != nil {
		if err != nil {
			return err
		}
		return exitError{code: code}
	}

	req, err := o.request(stdin)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, stopSignals...)
	defer stop()

	fns := newLocalFunctions(o.functionFlags, log, rt, o.insecureReg)
	defer fns.Close()
	fn, err := fns.get(ctx, image, "")
	if err != nil {
		return err
	}
	rsp, err := fn.Run(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return interrupted(ctx, err)
		}
		return fmt.Errorf("the call failed: %w", err)
	}
	if o.expected != "" {
		return o.checkExpected(rsp, stderr)
	}
	if err := printResponse(stdout, rsp, o.output); err != nil {
		return err
	}
	if r := pipeline.FatalResult(rsp); r != nil {
		fmt.Fprintf(stderr, "ocifn: the function returned a Fatal result: %s\n", r.GetMessage())
		return exitError{code: 1}
	}
	return nil
}

// readExpected reads the --expected file before the image is unpacked, so
// that a mistake in it shows first. With --update the file may be missing,
// and one that is not a response is overwritten, but by an answer only,
// and not when it is another file (an XR, a request) named by mistake.
func (o *testOptions) readExpected() error {
	if o.expected == "" {
		if o.update {
			return fmt.Errorf("--update writes the file --expected names; give --expected FILE")
		}
		return nil
	}
	b, err := os.ReadFile(o.expected)
	switch {
	case o.update && errors.Is(err, fs.ErrNotExist):
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("cannot read the expected response: %w (--update records it)", err)
	case err != nil:
		// --update cannot help here (a directory, a file not readable).
		return fmt.Errorf("cannot read the expected response: %w", err)
	}
	rsp, err := pipeline.ParseResponse(b)
	switch {
	case err != nil && !o.update:
		return fmt.Errorf("%s: %w", o.expected, err)
	case errors.Is(err, pipeline.ErrOtherFile):
		// An XR or a request named by mistake would be lost, where an
		// expected response with a mistake in it is mended.
		return fmt.Errorf("%s: %w; --update writes over an expected response only, and leaves it as it is", o.expected, err)
	}
	o.want, o.unreadable = rsp, err
	return nil
}

// checkExpected compares the response with the --expected file, or
// writes it there with --update.
func (o *testOptions) checkExpected(rsp *fnv1.RunFunctionResponse, stderr io.Writer) error {
	fatal := pipeline.FatalResult(rsp)
	if o.update {
		if fatal != nil && o.want != nil && pipeline.FatalResult(o.want) == nil {
			// The expected response of a request the function answers is
			// not replaced by a failure: a broken function would overwrite
			// every reviewed response.
			fmt.Fprintf(stderr, "ocifn: the function returned a Fatal result: %s\n", fatal.GetMessage())
			return fmt.Errorf("%s expects a response without a Fatal result, and is left as it was; if the function must refuse this request, remove %s and update again", o.expected, o.expected)
		}
		if fatal != nil && o.unreadable != nil {
			// Nor is a file that holds no response: an expected answer
			// with a mistake in it, or another file named by mistake.
			fmt.Fprintf(stderr, "ocifn: the function returned a Fatal result: %s\n", fatal.GetMessage())
			return fmt.Errorf("%s holds no response (%v), and is left as it was: a Fatal result replaces only an expected Fatal result; if the function must refuse this request, remove %s and update again", o.expected, o.unreadable, o.expected)
		}
		var b bytes.Buffer
		if err := printResponse(&b, rsp, o.output); err != nil {
			return err
		}
		if err := writeFileAtomic(o.expected, b.Bytes()); err != nil {
			return fmt.Errorf("cannot record the response: %w", err)
		}
		if fatal != nil {
			fmt.Fprintf(stderr, "ocifn: recorded the function's Fatal result in %s: %s\n", o.expected, fatal.GetMessage())
		}
		return nil
	}
	d, err := pipeline.DiffResponses(o.want, rsp)
	if err != nil {
		return fmt.Errorf("cannot compare the response with %s: %w", o.expected, err)
	}
	if d != "" {
		fmt.Fprintf(stderr, "ocifn: the response differs from %s:\n%s", o.expected, d)
		return exitError{code: 1}
	}
	if fatal != nil {
		fmt.Fprintf(stderr, "ocifn: the response matches %s, its Fatal result included: %s\n", o.expected, fatal.GetMessage())
	}
	return nil
}

// writeFileAtomic replaces path with data, or leaves it as it was: a
// rename of a file written next to it. It writes what a write to path
// would: the file a symlink names, which a rename over the link would
// leave as it was, the link turned into a file of its own; and the file
// keeps its mode (0644 for a new one).
func writeFileAtomic(path string, data []byte) error {
	path, err := symlinkTarget(path)
	if err != nil {
		return err
	}
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(path); err == nil {
		mode = fi.Mode().Perm()
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// symlinkTarget is the file path names once every symlink on the way is
// followed, whether that file exists or not (a link to a file not yet
// written).
func symlinkTarget(path string) (string, error) {
	for range 40 { // as many links as the kernel follows (MAXSYMLINKS)
		fi, err := os.Lstat(path)
		if errors.Is(err, fs.ErrNotExist) || (err == nil && fi.Mode()&fs.ModeSymlink == 0) {
			return path, nil
		}
		if err != nil {
			return "", err
		}
		link, err := os.Readlink(path)
		if err != nil {
			return "", err
		}
		if !filepath.IsAbs(link) {
			link = filepath.Join(filepath.Dir(path), link)
		}
		path = link
	}
	return "", &fs.PathError{Op: "write", Path: path, Err: syscall.ELOOP}
}

func printResponse(w io.Writer, rsp *fnv1.RunFunctionResponse, format string) error {
	var (
		b   []byte
		err error
	)
	if format == "json" {
		// protojson varies its whitespace on purpose; Indent makes it
		// stable, for diffs.
		var compact []byte
		if compact, err = protojson.Marshal(rsp); err == nil {
			var buf bytes.Buffer
			err = json.Indent(&buf, compact, "", "  ")
			b = append(buf.Bytes(), '\n')
		}
	} else {
		b, err = pipeline.MessageYAML(rsp)
	}
	if err != nil {
		return fmt.Errorf("cannot print the response: %w", err)
	}
	_, err = w.Write(b)
	return err
}

// onceFile is a flag naming one file, refused when given twice.
type onceFile string

func (f *onceFile) String() string { return string(*f) }
func (f *onceFile) Type() string   { return "FILE" }

func (f *onceFile) Set(v string) error {
	if *f != "" {
		return fmt.Errorf("given twice (%s, then %s): it takes one file; put several resources in one YAML stream or a directory", string(*f), v)
	}
	*f = onceFile(v)
	return nil
}
