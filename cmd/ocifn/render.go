package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ocifn/ocifn/pipeline"
)

type renderOptions struct {
	functionFlags
	observed          string
	extraResources    []string
	requiredResources []string
	credentials       string
	contextFiles      []string
	contextValues     []string
	includeResults    bool
	includeFullXR     bool
	includeContext    bool
	xrd               string
	includeFullOp     bool
	watched           string
	debug             bool
	insecureReg       bool
}

func newRenderCommand() *cobra.Command {
	o := &renderOptions{}
	cmd := &cobra.Command{
		Use:   "render (XR COMPOSITION | OPERATION) FUNCTIONS",
		Short: "Run a Composition's function pipeline locally and print what it composes, like crossplane render",
		Long: `Show what Crossplane would compose for a composite resource (XR): run the
function pipeline of a Composition (spec.mode: Pipeline) on this machine, step
by step, and print the XR and the composed resources as a YAML stream. Nothing
talks to a cluster.

XR is a YAML file with the composite resource, COMPOSITION a YAML file with the
Composition, FUNCTIONS a YAML file (or a directory of them) with the
pkg.crossplane.io Function objects its steps name. How each Function runs:

  render.crossplane.io/runtime-development-target: "localhost:9443"
      call a function that is already running (plaintext gRPC): any
      Crossplane function, whatever its SDK, or "ocifn serve --insecure".
      render.crossplane.io/runtime: Development alone means localhost:9443.

  render.ocifn.dev/tarball: "function.tar"
      run this image tarball (docker save output or OCI archive) or Function
      package, in a fresh rootless container per call as "ocifn serve" does.
      A relative path is relative to the FUNCTIONS file.
      render.ocifn.dev/image picks an image in a tarball of several.

  neither: render.crossplane.io/runtime-docker-image if set, else
      spec.package, is a file when it starts with "/", "./" or "../"
      (relative to the FUNCTIONS file), and a registry reference otherwise,
      pulled once per render (--insecure-registry allows plain HTTP).

Each local image is unpacked once per render, whichever number of steps use
it. Steps run in order; each sees the desired state and the context the step
before returned. A Fatal result stops the pipeline: the error names the step
and its message, nothing is printed on stdout and the exit code is 1.

The output is what crossplane composition render prints: the XR with its
resource references, the status the pipeline desired and Crossplane's
conditions; the composed resources, sorted by name, with the metadata and
the name Crossplane gives them. Functions' stderr is shown on stderr, each
line starting with "  STEP | ".

With OPERATION FUNCTIONS (an ops.crossplane.io Operation), render runs the
Operation's pipeline and prints what crossplane operation render does: the
Operation with its status (each step's output, the resources applied), then
those resources. The Operation is read into Crossplane's Go type, as the
crossplane CLI reads it: metadata keys ObjectMeta does not have are
dropped, and a number or a YAML 1.1 boolean (y, off) written for a string
(a label, a step's name) is a string ("true"). A CronOperation or
WatchOperation runs the Operation its spec.operationTemplate makes, named
after it; a WatchOperation needs the resource whose change it runs for
(--watched-resource), which each step then requires as
ops.crossplane.io/watched-resource.`,
		Example: `  # Simulate creating a new XR:
  ocifn render xr.yaml composition.yaml functions.yaml

  # Simulate an update, with the composed resources that exist already:
  ocifn render xr.yaml composition.yaml functions.yaml --observed-resources=observed.yaml

  # Also print the functions' results and the final context:
  ocifn render -r -c xr.yaml composition.yaml functions.yaml

  # Run an Operation:
  ocifn render operation.yaml functions.yaml -r

  # Run a WatchOperation's Operation for a change of one resource:
  ocifn render watchoperation.yaml functions.yaml --watched-resource=configmap.yaml

  # Pass context values and resources the functions may ask for:
  ocifn render xr.yaml composition.yaml functions.yaml \
    --context-values=apiextensions.crossplane.io/environment='{"region": "eu-west-1"}' \
    --required-resources=environment-configs.yaml`,
		Args: argsBetween(2, 3, "XR COMPOSITION FUNCTIONS, or OPERATION FUNCTIONS (YAML files; FUNCTIONS may be a directory)", "ocifn render xr.yaml composition.yaml functions.yaml"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 2 {
				// OPERATION FUNCTIONS
				return o.run(cmd.Context(), args[0], "", args[1], cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			return o.run(cmd.Context(), args[0], args[1], args[2], cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		// crossplane operation render's -o is a switch, which its help
		// shows at the end of a command line; here -o takes a file.
		if strings.Contains(err.Error(), "'o' in -o") {
			return fmt.Errorf("%w: -o is --observed-resources FILE, as in crossplane composition render; for crossplane operation render's -o, give --include-full-operation", err)
		}
		return err
	})
	f := cmd.Flags()
	o.functionFlags.register(f)
	// Each Function picks its image with the render.ocifn.dev/image
	// annotation instead.
	_ = f.MarkHidden("image")
	o.chooseImage = "the Function's annotation " + pipeline.AnnotationImage + ": NAME"
	f.StringVarP(&o.observed, "observed-resources", "o", "", "YAML file or directory of composed resources that exist already, each with its crossplane.io/composition-resource-name annotation")
	// Repeatable, as crossplane render's are: each file adds resources.
	f.StringArrayVar(&o.extraResources, "extra-resources", nil, "YAML file or directory of resources the functions may ask for (same as --required-resources; repeatable)")
	f.StringArrayVarP(&o.requiredResources, "required-resources", "e", nil, "YAML file or directory of resources the functions may ask for (repeatable)")
	f.StringVar(&o.credentials, "function-credentials", "", "YAML file or directory of Secrets that pipeline steps name as credentials")
	f.StringArrayVar(&o.contextFiles, "context-files", nil, "context value from a JSON or YAML file, as KEY=FILE (repeatable)")
	f.StringArrayVar(&o.contextValues, "context-values", nil, "context value as KEY=JSON (or YAML, as crossplane render reads it; repeatable); wins over --context-files")
	f.BoolVarP(&o.includeResults, "include-function-results", "r", false, "also print the functions' results, as objects of kind Result")
	f.BoolVarP(&o.includeFullXR, "include-full-xr", "x", false, "print the XR's spec and metadata as given, not only what the pipeline desired")
	f.BoolVarP(&o.includeContext, "include-context", "c", false, "also print the pipeline's final context, as an object of kind Context")
	f.StringVar(&o.xrd, "xrd", "", "YAML file with the XR's CompositeResourceDefinition: its schema's defaults are applied to the XR, and its scope says where the XR keeps Crossplane's fields")
	f.BoolVar(&o.includeFullOp, "include-full-operation", false, "with an Operation: accepted as crossplane operation render's -o is; the Operation's spec is printed either way")
	f.StringVarP(&o.watched, "watched-resource", "w", "", "with an Operation: YAML file with the resource whose change a WatchOperation runs for; each step requires it as "+pipeline.RequirementWatchedResource+", and functions may ask for it")
	f.BoolVar(&o.insecureReg, "insecure-registry", false, "allow plain HTTP, or TLS certificates not verified, to registries (for a local test registry)")
	f.BoolVar(&o.debug, "debug", false, "also show ocifn's own progress (images unpacked, each call and its duration)")
	return cmd
}

// renderInputs is what the render command read from its files.
type renderInputs struct {
	in pipeline.Inputs
	// op is the Operation to run instead of a Composition.
	op *pipeline.Operation
	// template is the kind (CronOperation, WatchOperation) whose
	// spec.operationTemplate op is, if any.
	template  string
	functions map[string]pipeline.FunctionObject
}

// steps are the pipeline steps the render runs.
func (r *renderInputs) steps() []pipeline.Step {
	if r.op != nil {
		return r.op.Steps
	}
	return r.in.Composition.Steps
}

// loadPipeline reads the Composition, or the Operation when compPath is
// "" (firstPath is then the Operation), and the Functions.
func loadPipeline(firstPath, compPath, fnsPath string) (*renderInputs, error) {
	r := &renderInputs{functions: map[string]pipeline.FunctionObject{}}
	first, err := pipeline.ReadOperation(firstPath)
	if err != nil {
		return nil, fmt.Errorf("cannot read %s: %w", firstPath, err)
	}
	switch {
	case compPath == "" && !pipeline.IsOperation(first) && !pipeline.IsOperationTemplate(first):
		return nil, fmt.Errorf("%s holds %s (apiVersion %q): with two arguments render runs an Operation, a CronOperation or a WatchOperation (ops.crossplane.io/v1alpha1); a composite resource needs XR COMPOSITION FUNCTIONS", firstPath, first.Describe(), first.APIVersion())
	case compPath != "" && (pipeline.IsOperation(first) || pipeline.IsOperationTemplate(first)):
		return nil, fmt.Errorf("%s holds %s: render it as OPERATION FUNCTIONS, without a Composition", firstPath, first.Describe())
	case compPath == "":
		if pipeline.IsOperationTemplate(first) {
			// crossplane operation render runs the Operation of the
			// template, as the controller makes one at each schedule or
			// change.
			r.template = first.Kind()
			if first, err = pipeline.TemplateOperation(first); err != nil {
				return nil, fmt.Errorf("%s: %w", firstPath, err)
			}
		}
		if r.op, err = pipeline.ParseOperation(first); err != nil {
			if r.template != "" {
				return nil, fmt.Errorf("%s: the %s's spec.operationTemplate: %w", firstPath, r.template, err)
			}
			return nil, fmt.Errorf("%s: %w", firstPath, err)
		}
		return r, r.loadFunctions(fnsPath)
	}
	compObj, err := pipeline.ReadObject(compPath)
	if err != nil {
		return nil, fmt.Errorf("cannot read the Composition: %w", err)
	}
	if r.in.Composition, err = pipeline.ParseComposition(compObj); err != nil {
		return nil, fmt.Errorf("%s: %w", compPath, err)
	}
	r.in.XR = first
	return r, r.loadFunctions(fnsPath)
}

func (r *renderInputs) loadFunctions(fnsPath string) error {
	fnDocs, err := pipeline.ReadDocuments(fnsPath)
	if err != nil {
		return fmt.Errorf("cannot read the Functions: %w", err)
	}
	fns, err := pipeline.ParseFunctions(fnDocs)
	if err != nil {
		return err
	}
	for _, f := range fns {
		r.functions[f.Name] = f
	}
	return nil
}

// load reads every input and checks that they go together.
func (o *renderOptions) load(xrPath, compPath, fnsPath string) (*renderInputs, error) {
	r, err := loadPipeline(xrPath, compPath, fnsPath)
	if err != nil {
		return nil, err
	}
	if r.op != nil {
		for _, s := range r.op.Steps {
			if _, ok := r.functions[s.FunctionRef.Name]; !ok {
				return nil, fmt.Errorf("pipeline step %q uses the Function %q, which the functions file does not declare", s.Step, s.FunctionRef.Name)
			}
		}
		if given := givenFlags(map[string]bool{"--observed-resources": o.observed != "", "--xrd": o.xrd != "", "--include-full-xr": o.includeFullXR},
			"--observed-resources", "--xrd", "--include-full-xr"); given != "" {
			return nil, fmt.Errorf("%s for a composite resource, not an Operation", given)
		}
		if err := o.loadShared(r); err != nil {
			return nil, err
		}
		return r, o.loadWatched(r, xrPath)
	}
	if given := givenFlags(map[string]bool{"--include-full-operation": o.includeFullOp, "--watched-resource": o.watched != ""},
		"--include-full-operation", "--watched-resource"); given != "" {
		return nil, fmt.Errorf("%s for an Operation, not a composite resource", given)
	}
	xr := r.in.XR
	names := make([]string, 0, len(r.functions))
	for n := range r.functions {
		names = append(names, n)
	}
	if err := pipeline.Check(xr, r.in.Composition, names); err != nil {
		return nil, err
	}
	if o.xrd != "" {
		obj, err := pipeline.ReadObject(o.xrd)
		if err != nil {
			return nil, fmt.Errorf("cannot read the XRD: %w", err)
		}
		xrd, err := pipeline.ParseXRD(obj)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.xrd, err)
		}
		if err := xrd.Check(xr); err != nil {
			return nil, fmt.Errorf("%s: %w", o.xrd, err)
		}
		if err := xrd.ApplyDefaults(xr); err != nil {
			return nil, fmt.Errorf("%s: %w", o.xrd, err)
		}
		r.in.Schema = xrd.Schema
	}
	if o.observed != "" {
		if r.in.Observed, err = pipeline.ReadDocuments(o.observed); err != nil {
			return nil, fmt.Errorf("cannot read the observed resources: %w", err)
		}
		if err := pipeline.RequireKinds(r.in.Observed); err != nil {
			return nil, fmt.Errorf("--observed-resources: %w", err)
		}
		if _, err := pipeline.ComposedResources(r.in.Observed, true); err != nil {
			return nil, fmt.Errorf("observed resources: %w", err)
		}
	}
	return r, o.loadShared(r)
}

// givenFlags names, in the order of names, the flags given of those
// names, with the verb that agrees ("--xrd is", "--xrd and
// --include-full-xr are"), or "" when none is given.
func givenFlags(given map[string]bool, names ...string) string {
	var in []string
	for _, n := range names {
		if given[n] {
			in = append(in, n)
		}
	}
	switch len(in) {
	case 0:
		return ""
	case 1:
		return in[0] + " is"
	}
	return strings.Join(in[:len(in)-1], ", ") + " and " + in[len(in)-1] + " are"
}

// loadWatched reads the watched resource and requires it of each step of
// the Operation, as the WatchOperation controller does, and as crossplane
// operation render does with any Operation given --watched-resource. It
// is required too among the resources functions may ask for.
func (o *renderOptions) loadWatched(r *renderInputs, opPath string) error {
	if o.watched == "" {
		if r.template == "WatchOperation" {
			// Crossplane runs a WatchOperation's Operation only for a
			// resource that changed, which each step requires: without
			// one, render would show a run that never happens.
			return fmt.Errorf("%s holds a WatchOperation: give the resource whose change it runs for with --watched-resource FILE; each step requires it as %s", opPath, pipeline.RequirementWatchedResource)
		}
		return nil
	}
	docs, err := pipeline.ReadDocuments(o.watched)
	if err != nil {
		return fmt.Errorf("cannot read the watched resource: %w", err)
	}
	if len(docs) != 1 {
		return fmt.Errorf("--watched-resource must hold exactly one resource; %s holds %d", o.watched, len(docs))
	}
	if err := pipeline.RequireKinds(docs); err != nil {
		return fmt.Errorf("--watched-resource: %w", err)
	}
	if r.op, err = pipeline.WatchedOperation(r.op, docs[0].Object); err != nil {
		return fmt.Errorf("%s: %w", opPath, err)
	}
	r.in.Required = append(r.in.Required, docs[0].Object)
	return nil
}

// loadShared reads what a composite and an Operation render both take:
// required resources, credentials and context.
func (o *renderOptions) loadShared(r *renderInputs) error {
	var err error
	// In crossplane render's order: every --required-resources, then every
	// --extra-resources.
	for _, p := range append(append([]string(nil), o.requiredResources...), o.extraResources...) {
		docs, err := pipeline.ReadDocuments(p)
		if err != nil {
			return fmt.Errorf("cannot read the required resources: %w", err)
		}
		if err := pipeline.RequireKinds(docs); err != nil {
			return fmt.Errorf("required resources: %w", err)
		}
		for _, d := range docs {
			r.in.Required = append(r.in.Required, d.Object)
		}
	}
	if o.credentials != "" {
		docs, err := pipeline.ReadDocuments(o.credentials)
		if err != nil {
			return fmt.Errorf("cannot read the function credentials: %w", err)
		}
		for _, d := range docs {
			r.in.Credentials = append(r.in.Credentials, d.Object)
		}
	}
	r.in.Context, err = pipeline.ParseContext(o.contextFiles, o.contextValues)
	return err
}

// runtimes returns how each Function the pipeline uses runs, and whether
// any of them runs in local containers.
func (r *renderInputs) runtimes() (map[string]pipeline.Runtime, bool, error) {
	out := map[string]pipeline.Runtime{}
	local := false
	for _, s := range r.steps() {
		name := s.FunctionRef.Name
		if _, ok := out[name]; ok {
			continue
		}
		fn, ok := r.functions[name]
		if !ok {
			return nil, false, fmt.Errorf("pipeline step %q uses the Function %q, which the functions file does not declare", s.Step, name)
		}
		rt, err := fn.Runtime()
		if err != nil {
			return nil, false, err
		}
		if rt.Kind == pipeline.RuntimeTarball {
			if _, err := classifyImage(rt.Location); err != nil {
				return nil, false, fmt.Errorf("Function %q: %w", name, err)
			}
		}
		out[name] = rt
		local = local || rt.Kind != pipeline.RuntimeTarget
	}
	return out, local, nil
}

func (o *renderOptions) run(ctx context.Context, xrPath, compPath, fnsPath string, stdout, stderr io.Writer) error {
	defer surviveClosedOutput()()
	log := newHumanLogger(stderr, o.debug)
	// Mistakes in the inputs show before any image is unpacked, and before
	// ocifn re-executes itself, unless an input is a pipe that only the
	// re-executed ocifn may read.
	local := true
	if readableTwice(xrPath, compPath, fnsPath) {
		p, err := loadPipeline(xrPath, compPath, fnsPath)
		if err != nil {
			return err
		}
		if _, local, err = p.runtimes(); err != nil {
			return err
		}
	}
	inputs := append([]string{xrPath, compPath, fnsPath, o.observed, o.credentials, o.xrd, o.watched}, o.requiredResources...)
	inputs = append(append(inputs, o.extraResources...), contextFilePaths(o.contextFiles)...)
	if readableTwice(inputs...) {
		if _, err := o.load(xrPath, compPath, fnsPath); err != nil {
			return err
		}
	}
	fns := newLocalFunctions(o.functionFlags, log, nil, o.insecureReg)
	if local {
		var err error
		if fns.rt, err = o.check(); err != nil {
			return err
		}
		// Once, before any image is unpacked: every local function of this
		// render runs in these namespaces.
		if code, reexeced, err := enterNamespaces(log); reexeced || err != nil {
			if err != nil {
				return err
			}
			return exitError{code: code}
		}
	}
	r, err := o.load(xrPath, compPath, fnsPath)
	if err != nil {
		return err
	}
	runtimes, _, err := r.runtimes()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, stopSignals...)
	defer stop()
	defer fns.Close()

	r.in.Functions = map[string]pipeline.Function{}
	names := make([]string, 0, len(runtimes))
	for n := range runtimes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		rt := runtimes[name]
		switch rt.Kind {
		case pipeline.RuntimeTarget:
			remote, err := pipeline.DialRemote(rt.Location, o.timeout)
			if err != nil {
				return fmt.Errorf("Function %q: %w", name, err)
			}
			defer remote.Close()
			r.in.Functions[name] = remote
		default:
			f, err := fns.get(ctx, rt.Location, rt.Image)
			if err != nil {
				return fmt.Errorf("Function %q: %w", name, err)
			}
			r.in.Functions[name] = f
		}
	}
	r.in.BeforeCall = func(step, function string, i int) {
		setLogLabel(log, step)
		if i == 0 {
			log.Debug("running pipeline step", "step", step, "function", function)
		} else {
			log.Debug("calling the step again with the resources it asked for", "step", step, "function", function, "call", i+1)
		}
	}

	if r.op != nil {
		return o.printOperation(ctx, r, stdout, stderr)
	}
	out, err := pipeline.Render(ctx, r.in)
	if err != nil {
		return renderError(interrupted(ctx, err), stderr)
	}
	if o.includeFullXR {
		out.XR = pipeline.MergeXR(r.in.XR, out.XR)
	}
	return o.print(stdout, append([]pipeline.Object{out.XR}, out.Composed...), out.Results, out.Context)
}

// renderError is how a failed render ends: a Fatal result as one line on
// stderr and exit code 1, as crossplane render does; any other error as it
// is.
func renderError(err error, stderr io.Writer) error {
	var fatal *pipeline.FatalError
	if errors.As(err, &fatal) {
		fmt.Fprintf(stderr, "ocifn: %v\n", fatal)
		return exitError{code: 1}
	}
	return err
}

// print prints what a render produced, as crossplane render does: objs,
// then the results and the context when asked for.
func (o *renderOptions) print(stdout io.Writer, objs, results []pipeline.Object, pipelineContext pipeline.Object) error {
	if o.includeResults {
		objs = append(objs, results...)
	}
	if o.includeContext && pipelineContext != nil {
		objs = append(objs, pipelineContext)
	}
	return pipeline.WriteStream(stdout, objs)
}

// printOperation runs an Operation and prints it, as crossplane operation
// render does: the Operation with its status, the resources it applies,
// then results and context when asked for.
func (o *renderOptions) printOperation(ctx context.Context, r *renderInputs, stdout, stderr io.Writer) error {
	op := r.op
	if len(r.in.Context) > 0 || o.includeContext {
		op = withContextSteps(op, len(r.in.Context) > 0, o.includeContext)
	}
	out, err := pipeline.RenderOperation(ctx, pipeline.OperationInputs{
		Operation: op, Functions: r.in.Functions, Required: r.in.Required,
		Credentials: r.in.Credentials, Context: r.in.Context, BeforeCall: r.in.BeforeCall,
	})
	if err != nil {
		return renderError(interrupted(ctx, err), stderr)
	}
	return o.print(stdout, append([]pipeline.Object{out.Operation}, out.Applied...), out.Results, out.Context)
}

// withContextSteps adds to the Operation's spec the steps through which
// crossplane operation render seeds and captures the context, so that the
// printed spec is the same; ocifn passes the context itself, so nothing
// runs them.
func withContextSteps(op *pipeline.Operation, seed, capture bool) *pipeline.Operation {
	o := pipeline.Object{}
	for k, v := range op.Object {
		o[k] = v
	}
	spec, _ := o["spec"].(map[string]any)
	c := map[string]any{}
	for k, v := range spec {
		c[k] = v
	}
	steps, _ := c["pipeline"].([]any)
	step := func(name, mode string) map[string]any {
		return map[string]any{"step": name, "functionRef": map[string]any{"name": "crossplane-render-context"}, "input": map[string]any{"mode": mode}}
	}
	if seed {
		steps = append([]any{step("crossplane-render-inject-context", "Seed")}, steps...)
	}
	if capture {
		steps = append(append([]any(nil), steps...), step("crossplane-render-extract-context", "Capture"))
	}
	c["pipeline"] = steps
	o["spec"] = c
	return &pipeline.Operation{Object: o, Steps: op.Steps}
}
