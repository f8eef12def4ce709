package adaptor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	fnv1 "github.com/crossplane/function-sdk-go/proto/v1"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/ocifn/ocifn/admit"
	"github.com/ocifn/ocifn/codec"
	"github.com/ocifn/ocifn/front"
	"github.com/ocifn/ocifn/hook"
)

// Defaults.
const (
	// DefaultTimeout is the longest a call may run when the caller allows
	// more. Crossplane gives a whole pipeline 30s per reconcile by default.
	DefaultTimeout = 25 * time.Second
	// DefaultMaxOutputBytes caps what a function may print on stdout.
	DefaultMaxOutputBytes = 64 << 20
)

// DefaultMaxConcurrency is how many calls run at once by default: functions
// are mostly CPU-bound (jq, yq, shells), so a few per core keeps the cores
// busy while one call waits on its container's start.
func DefaultMaxConcurrency() int { return 4 * runtime.NumCPU() }

// Function runs RunFunction calls through a Runner under the I/O contract.
type Function struct {
	runner         Runner
	log            *slog.Logger
	timeout        time.Duration
	maxOutputBytes int
	// maxResponseBytes: see WithMaxResponseBytes.
	maxResponseBytes int
	metrics          *hook.Metrics
	cache            *responseCache
	// cacheTTL, when set, is the TTL of every response, whatever the
	// function says.
	cacheTTL time.Duration
	// codec is the I/O mode: what the container reads and prints.
	codec codec.Codec
	// unknown remembers the unknown request fields already warned about.
	unknown unknownSeen
	// hooks, when set, replaces the chain built from the options above.
	hooks *hook.Chain
	gate  *admit.Gate
	// hooksAfterAnswer: see WithHooksAfterAnswer. afterHooks counts the
	// calls whose hooks are still to run, for Drain.
	hooksAfterAnswer bool
	afterHooks       sync.WaitGroup
	// caches says that hooks hold a response cache, which alone needs a
	// call's cache key.
	caches bool
	// stopped ends when StopCalls stops the calls running.
	stopped   context.Context
	stopCalls context.CancelFunc
}

// Option configures a Function.
type Option func(*Function)

// WithLogger sets the logger for call and stderr lines.
func WithLogger(l *slog.Logger) Option { return func(f *Function) { f.log = l } }

// WithTimeout sets the longest a call may run.
func WithTimeout(d time.Duration) Option { return func(f *Function) { f.timeout = d } }

// WithMaxOutputBytes caps the size of a function's stdout.
func WithMaxOutputBytes(n int) Option { return func(f *Function) { f.maxOutputBytes = n } }

// WithMaxResponseBytes is the largest response, in protobuf's encoding,
// that the caller can be sent (0: no limit). ocifn serve sets what the
// caller can receive, --max-send-msg-size, also gRPC's send limit: a
// function's output within --max-output-bytes can encode larger (JSON's
// `[0,0,…]` takes 2.5 bytes a value in protobuf's Struct), and gRPC, or
// the caller's client, would then fail the call with a bare
// RESOURCE_EXHAUSTED after the hooks had counted, logged and cached it as
// an answer.
func WithMaxResponseBytes(n int) Option { return func(f *Function) { f.maxResponseBytes = n } }

// WithGate admits calls through g, shared with other fronts.
func WithGate(g *admit.Gate) Option { return func(f *Function) { f.gate = g } }

// WithMetrics records calls in m.
func WithMetrics(m *hook.Metrics) Option { return func(f *Function) { f.metrics = m } }

// WithCache keeps responses that carry a meta.ttl, by the request's tag, in
// at most maxBytes; forceTTL, when not zero, caches every response for that
// long instead, for functions known to be deterministic.
func WithCache(maxBytes int, forceTTL time.Duration) Option {
	return func(f *Function) {
		f.cache = newResponseCache(maxBytes)
		f.cacheTTL = forceTTL
	}
}

// WithCodec sets the I/O mode the function's container speaks; the default
// is json.
func WithCodec(c codec.Codec) Option { return func(f *Function) { f.codec = c } }

// WithHooks wraps every call in chain instead of the chain the other
// options build (metrics, cache, the call's log line). Calls are
// cached when chain holds a hook.Cache; forceTTL is as in WithCache.
func WithHooks(chain *hook.Chain, forceTTL time.Duration) Option {
	return func(f *Function) { f.hooks, f.cacheTTL = chain, forceTTL }
}

// WithHooksAfterAnswer runs the hooks after each call that ran the function
// (its log line, its metrics) once its answer is handed back, not before;
// the cache's store still comes first (see after). For a server, whose
// callers wait for their answers; Drain waits for the hooks too.
func WithHooksAfterAnswer() Option { return func(f *Function) { f.hooksAfterAnswer = true } }

// NewCache returns the store of RunFunction responses that a hook.Cache in
// a chain given to WithHooks keeps, bounded to maxBytes.
func NewCache(maxBytes int) hook.Store { return newResponseCache(maxBytes) }

// NewFunction returns a Function that runs calls with r.
func NewFunction(r Runner, opts ...Option) *Function {
	f := &Function{runner: r, log: slog.Default(), timeout: DefaultTimeout, maxOutputBytes: DefaultMaxOutputBytes, codec: codec.JSON{}}
	f.stopped, f.stopCalls = context.WithCancel(context.Background())
	for _, o := range opts {
		o(f)
	}
	if f.gate == nil {
		f.gate = admit.New(DefaultMaxConcurrency(), 4*DefaultMaxConcurrency(), f.metrics.Admission)
	}
	if f.hooks == nil {
		var hs []hook.Hook
		if f.metrics != nil {
			hs = append(hs, f.metrics)
		}
		if f.cache != nil {
			hs = append(hs, hook.Cache{Store: f.cache, Metrics: f.metrics})
		}
		hs = append(hs, hook.Log{Logger: f.log})
		f.hooks = hook.NewChain(f.log, hs...)
	}
	f.caches = f.hooks.Caches()
	return f
}

// reasonInvalidOutput is what the log says of output that is not a valid
// response; the details, with the output's first bytes, go to the caller.
const reasonInvalidOutput = "the function's output is not a valid RunFunctionResponse (the Fatal result says why)"

// tracerName names the tracer of the response.parse span.
const tracerName = "github.com/ocifn/ocifn/adaptor"

// Run runs one call and returns the response the caller gets. Errors are
// gRPC status errors about the call itself; everything that goes wrong with
// the function becomes a Fatal result instead.
func (f *Function) Run(ctx context.Context, req *fnv1.RunFunctionRequest) (*fnv1.RunFunctionResponse, error) {
	tag := req.GetMeta().GetTag()
	if !noUnknownFields(ctx) {
		f.checkUnknown(req)
	}
	call := &hook.Call{Front: "crossplane", Method: "RunFunction", Tag: tag, Received: time.Now()}
	if f.caches {
		// Not without a cache (--cache=false): a request's key costs
		// about what its encoding for the function does.
		call.CacheKey = cacheKey(req)
	}
	call.Carrier = incomingCarrier{ctx}
	ctx = f.hooks.Before(ctx, call)
	var later bool // the hooks run after the answer: see admitAndRun
	defer func() { f.after(ctx, call, later) }()
	if hit, ok := call.Cached.(cachedResponse); ok {
		if raw := rawAnswerOf(ctx); raw != nil {
			// The gRPC server sends the bytes; what is returned
			// here goes nowhere.
			raw.head, raw.data = hit.head, hit.data
			call.Outcome = OutcomeOK
			return &fnv1.RunFunctionResponse{}, nil
		}
		rsp, err := hit.decode()
		if err != nil {
			call.Outcome, call.Err = OutcomeError, err
			return nil, status.Errorf(grpccodes.Internal, "cannot decode the cached response: %v", err)
		}
		call.Outcome = OutcomeOK
		return rsp, nil
	}
	call.Cached = nil

	res, err := f.admitAndRun(ctx, req, call, &later)
	call.Outcome, call.Reason, call.Err = res.Outcome, res.Reason, err
	if err != nil {
		call.Outcome = refusalOutcome(err)
		return nil, err
	}
	if call.Outcome == OutcomeOK {
		call.Answer, call.TTL = res.Response, f.cacheTTL
		if call.TTL == 0 {
			call.TTL = res.Response.GetMeta().GetTtl().AsDuration()
		}
	}
	return res.Response, nil
}

// cacheKey is the key of a call in the response cache: the request's tag
// and, when the request carries any, a digest of the fields the tag does
// not pin down. Crossplane tags a step's request once, then calls the
// function again under that tag with the required resources (and schemas)
// it asked for and the context it returned; keyed by the tag alone, those
// calls would get the first call's response and the function never what
// it asked for. It adds meta.capabilities after the tag is made, so a
// Crossplane upgraded while a response is cached sends the same tag with
// other capabilities. And the tag is no secret (it is logged): an answer
// made with one caller's credentials must not answer a request that
// carries other credentials, or none.
func cacheKey(req *fnv1.RunFunctionRequest) string {
	tag := req.GetMeta().GetTag()
	if tag == "" {
		return ""
	}
	// Crossplane v2 declares its capabilities in every request: they go
	// into the key as a few digits, not through the digest, which only
	// the rarer calls with the fields below pay for (500 ns and 6
	// allocations a call, against one allocation).
	caps := req.GetMeta().GetCapabilities()
	varies := len(req.GetRequiredResources()) > 0 || len(req.GetExtraResources()) > 0 || //nolint:staticcheck // Crossplane still fills the deprecated field.
		len(req.GetRequiredSchemas()) > 0 || req.GetContext() != nil || len(req.GetCredentials()) > 0
	if len(caps) == 0 && !varies {
		return tag
	}
	// The tag's length first: one tag's key with its capabilities is
	// then never another tag's with others ("a" with 1 and 2, "a,1" with
	// 2).
	key := make([]byte, 0, 24+len(tag)+4*len(caps)+1+2*sha256.Size)
	key = strconv.AppendInt(key, int64(len(tag)), 10)
	key = append(key, ':')
	key = append(key, tag...)
	for _, c := range caps {
		key = append(key, ',')
		key = strconv.AppendInt(key, int64(c), 10)
	}
	if varies {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&fnv1.RunFunctionRequest{
			RequiredResources: req.GetRequiredResources(),
			ExtraResources:    req.GetExtraResources(), //nolint:staticcheck // as above
			RequiredSchemas:   req.GetRequiredSchemas(),
			Context:           req.GetContext(),
			Credentials:       req.GetCredentials(),
		})
		if err != nil {
			return "" // not cached
		}
		sum := sha256.Sum256(b)
		key = append(key, '/')
		key = hex.AppendEncode(key, sum[:])
	}
	return string(key)
}

// after runs the hooks after a call: the cache's store at once (a call
// that comes as soon as the answer must find it), then the others, at once
// or, if later, in a goroutine of their own that yields before it runs
// them, so that the answer is written first. The handler returns the
// answer; gRPC's writer, which it readies, then writes it on the CPU the
// handler ran on before the hooks run there. On the call's path they took
// about 75 µs between the function's exit and the answer's write at 20
// calls/s (perf trace), where the caches are cold. They measure the call
// up to its answer, not to when they run.
func (f *Function) after(ctx context.Context, call *hook.Call, later bool) {
	call.Answered = time.Now()
	f.hooks.AfterPrompt(ctx, call)
	if !later {
		f.hooks.After(ctx, call)
		return
	}
	// The cache has kept the answer; the other hooks do not read it, and
	// it would stay alive here after the in-flight budget let go of it.
	call.Answer = nil
	go func() {
		defer f.afterHooks.Done()
		runtime.Gosched()
		f.hooks.After(ctx, call)
	}()
}

// Refused runs the hooks for a call that came at received and was refused
// before Run could see it (the in-flight budget was full, or the request
// could not be read), so that it is counted and logged like the refusals
// Run makes: its outcome is rejected for a full budget, error otherwise,
// with err as the reason, and its duration what its caller waited.
func (f *Function) Refused(ctx context.Context, method string, received time.Time, err error) {
	refuse(ctx, f.hooks, method, received, err)
}

// refuse runs chain's hooks for a call that came at received and was
// refused with the gRPC status error err before a Function ran it.
func refuse(ctx context.Context, chain *hook.Chain, method string, received time.Time, err error) {
	call := &hook.Call{Front: "crossplane", Method: method, Received: received, Outcome: refusalOutcome(err), Reason: err.Error(), Err: err}
	// Its span joins the caller's trace, as a call Run sees does.
	call.Carrier = incomingCarrier{ctx}
	chain.After(chain.Before(ctx, call), call)
}

// refusalOutcome is the outcome of a call answered with the gRPC status
// error err instead of a response: rejected when the server was full,
// timeout when a deadline passed, error otherwise (a request too large,
// though gRPC's code for it is RESOURCE_EXHAUSTED too).
func refusalOutcome(err error) Outcome {
	if errors.As(err, new(oversizeError)) {
		return OutcomeError
	}
	switch status.Code(err) {
	case grpccodes.ResourceExhausted:
		return OutcomeRejected
	case grpccodes.DeadlineExceeded:
		return OutcomeTimeout
	}
	return OutcomeError
}

// deadlineSlack is how close to its deadline a caller's cancellation is
// taken for the deadline: see callerGone.
const deadlineSlack = time.Second

// callerGone is the status of a call whose caller's context ended. A gRPC
// client whose deadline fires cancels the stream, as an explicit cancel
// does, and that reaches the server before the server's own copy of the
// deadline fires: the copy counts from the request's arrival, later by the
// time the client took to send it (a new connection's handshake included).
// A cancellation that close to the deadline is the deadline's, so that it
// is counted and logged as a timeout rather than an error.
func callerGone(ctx context.Context) error {
	err := ctx.Err()
	if d, ok := ctx.Deadline(); ok && errors.Is(err, context.Canceled) && time.Until(d) < deadlineSlack {
		err = context.DeadlineExceeded
	}
	st := status.FromContextError(err)
	// A cause of its own (the stop signal of ocifn test or render, say)
	// says more than "context canceled".
	if cause := context.Cause(ctx); cause != nil && cause != ctx.Err() && errors.Is(err, context.Canceled) {
		st = status.New(st.Code(), cause.Error())
	}
	return st.Err()
}

// Drain refuses new calls and those waiting in the queue at once, and
// waits until every admitted call has been answered and its hooks have run.
func (f *Function) Drain() {
	f.gate.Drain()
	f.afterHooks.Wait()
}

// StopCalls stops the calls running, and those admitted that have yet to
// run: each kills its container and answers UNAVAILABLE saying that the
// server's grace period ended before it did (front.ErrShutdown), as the
// HTTP fronts answer such calls 503. Without it, a server stopped past its
// grace period cut their connections, and their callers (Crossplane) read
// a bare "error reading from server: EOF".
func (f *Function) StopCalls() { f.stopCalls() }

// admitAndRun waits for a free slot, unless too many calls already wait.
// With WithHooksAfterAnswer, a call admitted sets later and counts its
// hooks in afterHooks while it holds its slot, so that Drain, which waits
// for the slots first, then waits for the hooks too. The other calls (from
// the cache, refused) run their hooks before they answer.
func (f *Function) admitAndRun(ctx context.Context, req *fnv1.RunFunctionRequest, call *hook.Call, later *bool) (Result, error) {
	leave, err := f.gate.Enter(ctx)
	var full *admit.FullError
	switch {
	case errors.As(err, &full):
		return Result{}, status.Error(grpccodes.ResourceExhausted, err.Error())
	case errors.Is(err, admit.ErrDraining):
		return Result{}, status.Error(grpccodes.Unavailable, err.Error())
	case err != nil && ctx.Err() != nil:
		return Result{}, callerGone(ctx)
	case err != nil:
		return Result{}, status.FromContextError(err).Err()
	}
	defer leave()
	if f.hooksAfterAnswer {
		f.afterHooks.Add(1)
		*later = true
	}
	return f.run(ctx, req, call)
}

func (f *Function) run(ctx context.Context, req *fnv1.RunFunctionRequest, call *hook.Call) (Result, error) {
	in, err := f.codec.Encode(req)
	if err != nil {
		return Result{}, status.Errorf(grpccodes.InvalidArgument, "cannot encode the request for the %s I/O mode: %v", f.codec.Name(), err)
	}
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	defer context.AfterFunc(f.stopped, func() { stop(front.ErrShutdown) })()
	callCtx, cancel := context.WithTimeoutCause(runCtx, f.timeout, front.ErrTimeout)
	defer cancel()

	stdout := &front.Capped{Max: f.maxOutputBytes}
	budget := answerBudgetOf(ctx)
	if budget != nil {
		stdout.Reserve = func(n int) error {
			return budget.take(callCtx, int64(n), func() string {
				return fmt.Sprintf("to hold what the function printed on stdout (%d bytes so far)", len(stdout.Bytes()))
			})
		}
	}
	stderr := hook.NewStderrLog(f.log, hook.StderrLogBytes, hook.StderrTailBytes, "tag", hook.LogTag(req.GetMeta().GetTag()))
	call.Ran = time.Now()
	exit, runErr := f.runner.Run(callCtx, bytes.NewReader(in), stdout, stderr)
	stderr.Flush()
	call.Exit = hook.Exit{Code: exit.Code, Start: exit.Start, Duration: exit.Duration}
	call.StdinBytes, call.StdoutBytes = len(in), len(stdout.Bytes())

	res := Result{Exit: exit}
	// The Fatal result tells the caller everything; the log line's reason
	// never quotes the function's output, which may hold connection
	// details.
	fail := func(o Outcome, message string) (Result, error) {
		res.Outcome, res.Reason = o, message
		res.Response = f.fatal(req, message, stderr.Tail())
		return res, nil
	}
	switch {
	case ctx.Err() != nil:
		// The caller's own deadline passed, or it went away: it gets a
		// status, not a response it can no longer use.
		return res, callerGone(ctx)
	case stdout.Overflow:
		// Before the timeout: output past the cap ends the call at once
		// (the runner kills the container), so a timeout that passed
		// meanwhile did not stop the function.
		return fail(OutcomeFatal, fmt.Sprintf("the function printed more than the limit of %d bytes on stdout", f.maxOutputBytes))
	case runErr != nil && errors.Is(context.Cause(callCtx), front.ErrShutdown):
		// Not the function's fault, whatever step it was at: a status
		// that says the call may run elsewhere, not a Fatal result.
		return res, status.Error(grpccodes.Unavailable, front.ErrShutdown.Error())
	case runErr != nil && errors.Is(context.Cause(callCtx), front.ErrTimeout) && exit.Start == 0:
		// Its container was still being made (a stuck runtime): saying
		// the function ran too long would send its author after the
		// wrong thing.
		return fail(OutcomeTimeout, fmt.Sprintf("the function did not start within the limit of %s: its container was not made in time (%v)", f.timeout, runErr))
	case runErr != nil && errors.Is(context.Cause(callCtx), front.ErrTimeout):
		return fail(OutcomeTimeout, fmt.Sprintf("the function ran longer than the limit of %s and was stopped", f.timeout))
	case stdout.Refused != nil:
		// The server's memory was full, not the function wrong: a status
		// the caller retries, as for a request that does not fit.
		return res, stdout.Refused
	case runErr != nil:
		return fail(OutcomeFatal, fmt.Sprintf("the function could not be run: %v", runErr))
	case exit.RuntimeError != "":
		return fail(OutcomeFatal, fmt.Sprintf("the container runtime could not run the function (exit code %d): %s", exit.Code, exit.RuntimeError))
	case exit.Code != 0 && exit.OOMKilled != "":
		return fail(OutcomeFatal, fmt.Sprintf("the function ran out of memory and exited with code %d: %s", exit.Code, exit.OOMKilled))
	case exit.Code != 0:
		// Some modes' functions still answer when they fail: a KRM
		// function exits 1 when a result is an error and prints its
		// ResourceList, whose results say why.
		var unreadable error // why an answer the function printed cannot be read
		if fd, ok := f.codec.(codec.FailureDecoder); ok && len(stdout.Bytes()) > 0 {
			if err := f.chargeDecoding(ctx, budget, stdout.Bytes()); err != nil {
				return res, err
			}
			rsp, err := fd.DecodeFailure(req, stdout.Bytes())
			if err != nil && codec.Sniff(stdout.Bytes()) == f.codec.Name() {
				// It printed its mode's answer, which cannot be read: why,
				// and the results it quotes, which say why the function
				// failed, are told rather than the exit code alone.
				unreadable = err
			}
			if err == nil {
				complete(req, rsp)
				// The Fatal result first, so that an answer too large
				// only with its desired state and context is sent
				// without them, its results kept (see tooLarge).
				if !hasFatal(rsp) {
					rsp.Results = append(rsp.Results, &fnv1.Result{
						Severity: fnv1.Severity_SEVERITY_FATAL,
						Message:  withStderr(fmt.Sprintf("the function exited with code %d", exit.Code), stderr.Tail()),
					})
				}
				if msg := f.unsendable(rsp, len(stdout.Bytes())); msg != "" {
					return fail(OutcomeFatal, msg)
				}
				res.Outcome, res.Response = OutcomeFatal, rsp
				res.Reason = fmt.Sprintf("the function exited with code %d and printed its answer", exit.Code)
				return res, nil
			}
		}
		msg := fmt.Sprintf("the function exited with code %d", exit.Code)
		reason := msg
		if unreadable != nil {
			msg += ", and what it printed cannot be used: " + unreadable.Error()
			// The decoder's error quotes the output, which the log line
			// never does: it may hold connection details.
			reason += ", and what it printed cannot be used (the Fatal result says why)"
		}
		if hint := codec.Mismatch(f.codec.Name(), stdout.Bytes()); hint != "" {
			// A KRM validator exits 1 with its results: in another mode,
			// the wrong mode is what to fix.
			msg += "; " + hint
			reason += "; " + hint
		}
		r, _ := fail(OutcomeFatal, msg)
		r.Reason = reason
		return r, nil
	}
	if err := f.chargeDecoding(ctx, budget, stdout.Bytes()); err != nil {
		return res, err
	}
	rsp, err := f.decode(ctx, req, stdout.Bytes())
	if err != nil {
		if exit.OOMKilled != "" {
			// A script that prints what a killed command printed
			// (out=$(jq ...); echo "$out") exits 0 with nothing usable:
			// the kill is why, not the output it leaves.
			r, _ := fail(OutcomeFatal, fmt.Sprintf("the function ran out of memory and exited with code 0: %s; what it printed cannot be used: %v", exit.OOMKilled, err))
			r.Reason = fmt.Sprintf("the function ran out of memory and exited with code 0: %s; %s", exit.OOMKilled, reasonInvalidOutput)
			return r, nil
		}
		r, _ := fail(OutcomeFatal, err.Error())
		r.Reason = reasonInvalidOutput
		return r, nil
	}
	complete(req, rsp)
	if msg := f.unsendable(rsp, len(stdout.Bytes())); msg != "" {
		return fail(OutcomeFatal, msg)
	}
	res.Outcome, res.Response = OutcomeOK, rsp
	return res, nil
}

// fatal is the Fatal answer to req, the request's desired state and
// context unchanged beside one Fatal result saying message and the tail
// of stderr, but for an answer that the caller could not be sent with
// them (see WithMaxResponseBytes): a request may be larger than a
// response, and with its desired state of 5 MB the caller got a bare
// RESOURCE_EXHAUSTED from gRPC instead, while the call was logged and
// counted as answered. Without them, it still gets why its function
// failed, and loses nothing: Crossplane stops a pipeline at a Fatal
// result, using neither.
func (f *Function) fatal(req *fnv1.RunFunctionRequest, message string, tail []byte) *fnv1.RunFunctionResponse {
	rsp := fatal(req, withStderr(message, tail))
	if f.maxResponseBytes <= 0 || proto.Size(rsp) <= f.maxResponseBytes {
		return rsp
	}
	left := proto.Size(rsp.GetDesired()) + proto.Size(rsp.GetContext())
	message += fmt.Sprintf("; this answer leaves out the request's desired state and context, %d bytes in protobuf: with them it would take more than the %d bytes a response may have (--max-send-msg-size), and Crossplane reads neither beside a Fatal result", left, f.maxResponseBytes)
	rsp.Desired, rsp.Context = nil, nil
	rsp.Results[0].Message = withStderr(message, tail)
	return rsp
}

// chargeDecoding charges budget what decoding out will take, before it is
// decoded: output of a few megabytes can take hundreds decoded. What YAML
// aliases add is counted by a parse, once the parse is charged.
func (f *Function) chargeDecoding(ctx context.Context, budget *answerBudget, out []byte) error {
	if budget == nil {
		return nil
	}
	why := func() string {
		return fmt.Sprintf("to decode the %d bytes the function printed in the %s I/O mode", len(out), f.codec.Name())
	}
	if err := budget.take(ctx, f.codec.DecodeMemory(out), why); err != nil {
		return err
	}
	if ac, ok := f.codec.(codec.AliasCounter); ok {
		return budget.take(ctx, ac.AliasMemory(out), func() string { return why() + ", its YAML aliases expanded" })
	}
	return nil
}

// unsendable says why rsp, decoded from printed bytes of output, cannot
// reach the caller, or "" when it can: a Fatal result says so, rather than
// the caller's gRPC client failing on what it received.
func (f *Function) unsendable(rsp *fnv1.RunFunctionResponse, printed int) string {
	if msg := tooDeep(rsp); msg != "" {
		return msg
	}
	return f.tooLarge(rsp, printed)
}

// tooLarge says why rsp, decoded from printed bytes of output, cannot be
// sent (see WithMaxResponseBytes), or "" when it can. A response with a
// Fatal result of the function's own that only its desired state and
// context take past the limit (what complete carried over from a large
// request, say) is sent without them, as f.fatal sends ocifn's, rather
// than replaced: the caller then reads why the function failed, and
// Crossplane reads neither beside a Fatal result.
func (f *Function) tooLarge(rsp *fnv1.RunFunctionResponse, printed int) string {
	if f.maxResponseBytes <= 0 {
		return ""
	}
	n := proto.Size(rsp)
	if n <= f.maxResponseBytes {
		return ""
	}
	if first := firstFatal(rsp); first != nil {
		desired, fctx, message, results := rsp.Desired, rsp.Context, first.Message, rsp.Results
		left := proto.Size(desired) + proto.Size(fctx)
		rsp.Desired, rsp.Context = nil, nil
		// Nor does it say that the request's desired state was kept.
		rsp.Results = slices.DeleteFunc(slices.Clone(results), func(r *fnv1.Result) bool {
			return r.GetSeverity() == fnv1.Severity_SEVERITY_WARNING && r.GetMessage() == msgDesiredKept
		})
		first.Message += fmt.Sprintf("; this answer leaves out its desired state and context, %d bytes in protobuf: with them it would take more than the %d bytes a response may have (--max-send-msg-size), and Crossplane reads neither beside a Fatal result", left, f.maxResponseBytes)
		if proto.Size(rsp) <= f.maxResponseBytes {
			return ""
		}
		rsp.Desired, rsp.Context, rsp.Results, first.Message = desired, fctx, results, message
	}
	return fmt.Sprintf("the function's response takes %d bytes in protobuf, more than the %d bytes a response may have (--max-send-msg-size; Crossplane's gRPC client takes at most 4 MiB); it printed %d bytes", n, f.maxResponseBytes, printed)
}

// decode parses the function's output, in a span of its own when tracing.
func (f *Function) decode(ctx context.Context, req *fnv1.RunFunctionRequest, out []byte) (*fnv1.RunFunctionResponse, error) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return f.codec.Decode(req, out)
	}
	_, span := parent.TracerProvider().Tracer(tracerName).Start(ctx, "response.parse")
	defer span.End()
	rsp, err := f.codec.Decode(req, out)
	if err != nil {
		span.SetStatus(codes.Error, "invalid response")
	}
	return rsp, err
}

// incomingCarrier reads W3C trace context headers from the call's gRPC
// metadata, when a hook asks for them. metadata.FromIncomingContext copies
// all of the metadata, lowercasing each key: about 1 KB per call, for
// headers that only tracing reads.
type incomingCarrier struct{ ctx context.Context }

func (c incomingCarrier) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set does nothing: the caller's metadata is not ours to change, and
// extracting a trace context never sets.
func (incomingCarrier) Set(string, string) {}

func (c incomingCarrier) Keys() []string {
	md, _ := metadata.FromIncomingContext(c.ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	return keys
}

// hasFatal says whether a response has a Fatal result.
func hasFatal(rsp *fnv1.RunFunctionResponse) bool { return firstFatal(rsp) != nil }

// firstFatal is a response's first Fatal result, the one Crossplane
// reports, or nil.
func firstFatal(rsp *fnv1.RunFunctionResponse) *fnv1.Result {
	for _, r := range rsp.GetResults() {
		if r.GetSeverity() == fnv1.Severity_SEVERITY_FATAL {
			return r
		}
	}
	return nil
}
