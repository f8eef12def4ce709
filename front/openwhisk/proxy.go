// Package openwhisk is the front of OpenWhisk's action proxy contract, as
// its Docker skeleton implements it for "blackbox" actions: POST /init
// once, then POST /run per activation, each in a fresh container; or the
// single-entrypoint form POST / of OpenWhisk's Knative proxy.
package openwhisk

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ocifn/ocifn/bundle"
	"github.com/ocifn/ocifn/front"
	"github.com/ocifn/ocifn/hook"
)

// Errors OpenWhisk's canonical runtime tests expect, word for word.
const (
	msgReinit      = "Cannot initialize the action more than once."
	msgInitFailed  = "The action failed to generate or locate a binary. See logs for details."
	msgNotDict     = "The action did not return a dictionary or array."
	msgBadArgument = "The action did not receive a dictionary or array as an argument."
	// msgMemoryExhausted is what OpenWhisk says of an action killed for
	// memory (its Messages.memoryExhausted).
	msgMemoryExhausted = "The action exhausted its memory and was aborted."
)

// Proxy serves one action.
type Proxy struct {
	cfg     *front.Config
	apiHost string
	// stdout and stderr are ocifn's own: the activation's logs go there,
	// framed by the sentinel, for OpenWhisk's invoker to collect, under
	// streamsMu.
	stdout, stderr io.Writer

	mu     sync.Mutex
	action *action

	// execLimit is what Linux lets an activation's process be given, in
	// bytes of arguments and environment (ExecLimit).
	execLimit int
}

// streamsMu orders the blocks written on ocifn's stdout and stderr: an
// activation's logs with their sentinels (Proxy), and the sentinels of
// the activations the server refuses before the front sees them
// (EndRefused), which it sets up before there is a Proxy. A sentinel
// written inside another's block would end that activation's logs early,
// or join a last line the action left unended, and the invoker, which
// looks for the sentinel's line, would miss it.
var streamsMu sync.Mutex

// action is what /init fixed for every activation.
type action struct {
	// dir, when the init brought code, is mounted at ActionDir.
	dir string
	// args are the process's arguments before the activation's value; nil
	// runs the image's entrypoint.
	args []string
	env  []string
	// sum is the digest of the init that fixed it (initSum), for POST /,
	// whose callers may send that init again with every activation.
	sum [sha256.Size]byte
}

// initSum is the digest of an init's value, its white space aside.
func initSum(raw json.RawMessage) [sha256.Size]byte {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return sha256.Sum256(raw)
	}
	return sha256.Sum256(b.Bytes())
}

// New returns a proxy running activations with cfg. apiHost is
// __OW_API_HOST, which OpenWhisk sets in the proxy's environment.
func New(cfg *front.Config, apiHost string, stdout, stderr io.Writer) *Proxy {
	// The container inherits ocifn's stack rlimit: the runtime spec sets
	// no RLIMIT_STACK.
	stack := uint64(8 << 20)
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_STACK, &l); err == nil {
		stack = l.Cur
	}
	return &Proxy{cfg: cfg, apiHost: apiHost, stdout: stdout, stderr: stderr, execLimit: ExecLimit(stack)}
}

// Close removes the action's files.
func (p *Proxy) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.action != nil && p.action.dir != "" {
		return os.RemoveAll(p.action.dir)
	}
	return nil
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/init", "/run", "/":
	default:
		front.WriteJSONError(w, http.StatusNotFound, fmt.Sprintf("no route %s: an OpenWhisk action serves POST /init, POST /run and POST /", r.URL.Path))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		front.WriteJSONError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: only POST is served", r.Method, r.URL.Path))
		return
	}
	if r.URL.Path == "/init" {
		// Within the timeout, as an activation's body: a client that
		// sends its headers and stalls would otherwise hold its request,
		// and a shutdown (which waits for every request being served) to
		// the end of its grace period.
		// Its body, and what the init makes of it, are charged to the
		// in-flight budget as an activation's are.
		mem := front.NewMemory(p.cfg.Budget)
		defer mem.Release()
		body, err := front.ReadCharged(w, r, p.cfg.MaxRequestBytes, p.cfg.Timeout, mem, nil)
		if err == nil {
			if merr := mem.Take(r.Context(), initCost(body), func() string {
				return fmt.Sprintf("to read the init's body of %d bytes and install its code", len(body))
			}); merr != nil {
				err = memoryBodyError(w, merr)
			}
		}
		var msg map[string]json.RawMessage
		if err == nil {
			msg, err = parseMessage(r.URL.Path, body)
		}
		if err != nil {
			front.WriteJSONError(w, err.Status, err.Error())
			return
		}
		if unwrapped(msg) {
			// The other way round from POST /'s init: taken as it is,
			// this init would install no code and run the image's stub.
			writeRaw(w, http.StatusBadRequest, errorBody(`the body of /init holds the init's fields in "value", {"value": {"code": ..., "main": ...}}; this one has them at the top level`))
			return
		}
		status, failed := p.init(msg["value"], false)
		writeInit(w, status, failed)
		return
	}
	// An activation is admitted before its body is read (front.Admit).
	// It is timed from here: its wait for a slot and its body are part
	// of what its caller waited for.
	received := front.Received(r)
	adm, refused := p.cfg.Admit(r.Context(), w, r)
	if refused != nil {
		p.refuse(w, r, received, "", refused.Outcome, refused.Status, refused.Err)
		return
	}
	defer adm.Leave()
	if err := adm.Mem.Take(r.Context(), mapCost(adm.Body), func() string {
		return fmt.Sprintf("to read the %d bytes of its body as JSON", len(adm.Body))
	}); err != nil {
		p.refuseMemory(w, r, received, "", err)
		return
	}
	msg, err := parseMessage(r.URL.Path, adm.Body)
	if err != nil {
		p.refuse(w, r, received, "", hook.Error, err.Status, err)
		return
	}
	if r.URL.Path == "/run" {
		p.run(w, r, received, msg, msg, false, adm.Mem)
		return
	}
	p.single(w, r, received, msg, adm.Mem)
}

// memoryBodyError is the error of a body the in-flight budget has no room
// to read (err): 503 with Retry-After when the server is busy, 413 when
// it could never fit; the caller gone meanwhile otherwise.
func memoryBodyError(w http.ResponseWriter, err error) *front.BodyError {
	if _, status, ok := front.MemoryRefusal(w, err); ok {
		return &front.BodyError{Status: status, Msg: err.Error(), Rejected: status == http.StatusServiceUnavailable}
	}
	return &front.BodyError{Status: front.StatusCallerGone, Msg: err.Error()}
}

// refuseMemory refuses an activation the in-flight budget has no room for
// (err): 503 with Retry-After, counted as rejected, when the server is
// busy; 413 when it could never fit; the caller gone while it waited
// otherwise.
func (p *Proxy) refuseMemory(w http.ResponseWriter, r *http.Request, received time.Time, tag string, err error) {
	outcome, status, ok := front.MemoryRefusal(w, err)
	if !ok {
		outcome, status = hook.Error, front.StatusCallerGone
		err = fmt.Errorf("the invoker went away while the activation waited for memory: %w", err)
	}
	p.refuse(w, r, received, tag, outcome, status, err)
}

// newCall is the hook.Call of an activation that arrived at received.
func newCall(r *http.Request, received time.Time, tag string) *hook.Call {
	call := front.NewCall("openwhisk", r, tag)
	call.Received = received
	return call
}

// parseMessage reads the body of a request to path as a JSON object. An
// empty body, or null, is an empty object, as the Docker skeleton takes
// it.
func parseMessage(path string, body []byte) (map[string]json.RawMessage, *front.BodyError) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || string(body) == "null" {
		return map[string]json.RawMessage{}, nil
	}
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(body, &msg); err != nil {
		return nil, &front.BodyError{Status: http.StatusBadRequest, Msg: fmt.Sprintf("the body of %s is not a JSON object: %v", path, err)}
	}
	if msg == nil {
		msg = map[string]json.RawMessage{}
	}
	return msg, nil
}

// init fixes the action: its files, its entrypoint and its environment. It
// returns the status to answer with and, unless it is 200, why.
// withActivation says an activation follows in the same request (POST /):
// its answer, not the init's, ends the logs of a failed init with the
// sentinels, and the init that fixed the action, sent again, is taken as
// done rather than refused. Knative's callers send the init with every
// activation, as OpenWhisk's Knative proxy allows.
func (p *Proxy) init(raw json.RawMessage, withActivation bool) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.action != nil {
		if withActivation && p.action.sum == initSum(raw) {
			return http.StatusOK, nil
		}
		p.writeLogs(nil, []byte(msgReinit+"\n"), false)
		return http.StatusForbidden, errors.New(msgReinit)
	}
	var v InitValue
	if len(bytes.TrimSpace(raw)) > 0 && string(bytes.TrimSpace(raw)) != "null" {
		if err := json.Unmarshal(raw, &v); err != nil {
			return http.StatusBadRequest, fmt.Errorf("the init's value is not an object of name, main, code, binary and env: %v", err)
		}
	}
	env, err := InitEnv(v.Env)
	if err != nil {
		return http.StatusBadRequest, err
	}
	// An environment no process can be given would fail every activation
	// with 413: the init that brings it is refused instead. Each
	// activation's own variables and value are checked as it comes.
	args := p.cfg.Runner.Args()
	if v.hasCode() {
		args = []string{ActionDir + "/" + execName}
	}
	if err := CheckExecSize(args, env, p.execLimit, func(string) string { return "from the init's value.env" }); err != nil {
		return http.StatusRequestEntityTooLarge, err
	}
	a := &action{env: env, sum: initSum(raw)}
	// Without code the image's entrypoint is the action, and it runs as
	// it does before any init: in the image's working directory, which
	// its command may name files relative to, with nothing mounted over
	// the image's own /action.
	if v.hasCode() {
		dir, err := os.MkdirTemp(p.cfg.WorkDir, "action-")
		if err == nil {
			// The container's ids, not root on the host, must read and run it.
			err = os.Chmod(dir, 0o755)
		}
		if err != nil {
			p.cfg.Log.Error("cannot create the action directory", "error", err)
			return http.StatusInternalServerError, errors.New("cannot create the action directory")
		}
		if err := writeAction(dir, &v); err != nil {
			_ = os.RemoveAll(dir)
			p.writeLogs(nil, []byte("init failed: "+err.Error()+"\n"), !withActivation)
			return http.StatusBadGateway, errors.New(msgInitFailed)
		}
		a.dir, a.args = dir, args
	}
	p.action = a
	p.cfg.Log.Info("action initialized", "name", v.Name, "main", v.Main, "code", v.hasCode(), "binary", v.Binary, "env", len(env))
	return http.StatusOK, nil
}

// writeInit answers an init with status: a JSON error when it failed with
// err, else the Docker skeleton's "OK", as the text it is (OpenWhisk
// ignores the body of a successful init, but a caller that reads it by
// its Content-Type must not be told it is JSON).
func writeInit(w http.ResponseWriter, status int, err error) {
	if err != nil {
		writeRaw(w, status, errorBody(err.Error()))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	writeRaw(w, status, []byte("OK"))
}

// run runs one activation. msg holds value; context holds the activation
// context (the same map as msg on /run). web applies the single
// entrypoint's web-action answer. received is when the request arrived.
func (p *Proxy) run(w http.ResponseWriter, r *http.Request, received time.Time, msg, context map[string]json.RawMessage, web bool, mem *front.Memory) {
	tag := EnvValue(context["activation_id"])
	value := bytes.TrimSpace(msg["value"])
	if len(value) == 0 {
		value = []byte("{}")
	}
	if value[0] != '{' && value[0] != '[' {
		p.refuse(w, r, received, tag, hook.Error, http.StatusNotFound, errors.New(msgBadArgument))
		return
	}
	if err := mem.Take(r.Context(), runCost(value, context), func() string {
		return fmt.Sprintf("to make the activation's arguments and environment of its value of %d bytes and its context", len(value))
	}); err != nil {
		p.refuseMemory(w, r, received, tag, err)
		return
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, value); err != nil {
		p.refuse(w, r, received, tag, hook.Error, http.StatusBadRequest, fmt.Errorf("value is not valid JSON: %v", err))
		return
	}
	value = compact.Bytes()

	p.mu.Lock()
	a := p.action
	p.mu.Unlock()
	env, err := ActivationEnv(context, p.apiHost)
	if err != nil {
		p.refuseEnv(w, r, received, tag, err)
		return
	}
	bc := bundle.Call{Env: env}
	base := p.cfg.Runner.Args()
	if a != nil {
		bc.Env = append(append([]string(nil), a.env...), bc.Env...)
		if a.args != nil {
			bc.Cwd = ActionDir
			bc.Mounts = []bundle.Mount{{Source: a.dir, Destination: ActionDir}}
			base = a.args
		}
	}
	bc.Args = Args(base, value)
	// Past the kernel's limits, execve fails with E2BIG in the container,
	// and the activation would look like an action that answered nothing.
	if err := CheckExecSize(bc.Args, bc.Env, p.execLimit, envOrigin(context)); err != nil {
		p.refuseEnv(w, r, received, tag, err)
		return
	}

	call := newCall(r, received, tag)
	ctx := p.cfg.Hooks.Before(r.Context(), call)
	status, body, outLogs, errLogs := p.activate(ctx, w, call, bc, value, deadline(context["deadline"]), web, mem)
	if web && status == http.StatusOK {
		resp, err := ParseWebResponse(body)
		switch {
		case err != nil:
			// The action's answer is not one to send: say which field,
			// rather than send something else than it asked for. The
			// log line names the field alone: the answer quotes the
			// value at fault, which may be a token.
			call.Outcome, call.Reason = hook.Fatal, err.Error()
			var bad *WebError
			if errors.As(err, &bad) {
				call.Reason = bad.Unquoted()
			}
			status, body = http.StatusBadGateway, errorBody(err.Error())
		case resp != nil:
			for k, vs := range resp.Header {
				w.Header()[k] = vs
			}
			status, body = resp.Status, resp.Body
		}
	}
	p.finish(ctx, w, r, call, status, body, outLogs, errLogs)
}

// refuse answers an activation that did not run with status and err, and
// counts and logs it through the hooks as outcome, with the sentinels after
// it as after any activation. tag is its activation id, when known.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, received time.Time, tag string, outcome hook.Outcome, status int, err error) {
	call := newCall(r, received, tag)
	ctx := p.cfg.Hooks.Before(r.Context(), call)
	call.Outcome, call.Reason = outcome, err.Error()
	if outcome == hook.Error {
		call.Err = err
	}
	p.finish(ctx, w, r, call, status, errorBody(err.Error()), nil, nil)
}

// refuseEnv refuses an activation whose context cannot be its process's
// environment: 413 when Linux would not run a process given that much,
// 400 for a key or value no environment can hold. OpenWhisk's invoker
// shows the "error" of any answer but 200 as the activation's error.
func (p *Proxy) refuseEnv(w http.ResponseWriter, r *http.Request, received time.Time, tag string, err error) {
	status := http.StatusBadRequest
	var tooLarge *TooLargeError
	if errors.As(err, &tooLarge) {
		status = http.StatusRequestEntityTooLarge
	}
	p.refuse(w, r, received, tag, hook.Error, status, err)
}

// envOrigin says where a variable of an activation's environment comes
// from, for an error about its size.
func envOrigin(context map[string]json.RawMessage) func(string) string {
	return func(name string) string {
		for k := range context {
			if k != "value" && "__OW_"+strings.ToUpper(k) == name {
				return fmt.Sprintf("from the activation's key %q", k)
			}
		}
		return "from the init's value.env or ocifn's environment"
	}
}

// finish ends an activation: the answer, its logs, the hooks, the
// sentinels.
func (p *Proxy) finish(ctx context.Context, w http.ResponseWriter, r *http.Request, call *hook.Call, status int, body, outLogs, errLogs []byte) {
	call.LogAttrs = append(call.LogAttrs, "method", hook.LogTag(r.Method), "path", hook.LogTag(r.URL.Path), "status", status)
	// The answer is written first, so that the line about the call says
	// whether the invoker took it; what net/http still buffers of it
	// (its last few KiB, or the end of its chunks) goes once the handler
	// returns, after the sentinels, so that the invoker has the whole
	// answer only when the activation's logs are ended, as before.
	jsonByDefault(w.Header(), body)
	// Not flushed: its end goes at the handler's return, still under
	// the deadline.
	err := front.Answer(w, status, body, p.cfg.Timeout, false)
	if err != nil {
		call.Outcome, call.Err = hook.Error, err
	}
	// The activation's logs, then ocifn's line about the call, then the
	// sentinels: OpenWhisk gives everything before a sentinel to the
	// activation it ends, so nothing of this call may come after it.
	// The logs are written as they are, and what ends them after, under
	// the streams' lock, which every sentinel is written under: a copy
	// of them joined to it would take as much memory again, up to
	// --max-output-bytes.
	streamsMu.Lock()
	_, _ = p.stdout.Write(outLogs)
	_, _ = p.stdout.Write(Frame(unended(outLogs)))
	if len(errLogs) > 0 {
		// Ended as a line, as Frame ends stdout's, in the same write:
		// ocifn's own lines, which other calls write without the lock,
		// must not be glued to the action's last one. The newline goes
		// in the buffer's spare room, where it has some, rather than in
		// a copy.
		if nl := unended(errLogs); nl != nil {
			errLogs = append(errLogs, nl...)
		}
		_, _ = p.stderr.Write(errLogs)
	}
	p.cfg.Hooks.After(ctx, call)
	_, _ = p.stderr.Write(Frame(nil))
	streamsMu.Unlock()
}

// unended is the newline that ends logs as a line, if they need one.
func unended(logs []byte) []byte {
	if len(logs) > 0 && logs[len(logs)-1] != '\n' {
		return []byte{'\n'}
	}
	return nil
}

// activate runs the container and turns what it did into the answer.
// It returns the status and body of the answer and the logs the
// activation leaves on stdout and stderr. web says the answer is read as
// a web action's (ParseWebResponse), which is charged to mem here, with
// the function's output.
func (p *Proxy) activate(ctx context.Context, w http.ResponseWriter, call *hook.Call, bc bundle.Call, value []byte, timeout time.Duration, web bool, mem *front.Memory) (status int, body, outLogs, errLogs []byte) {
	out := p.cfg.Exec(ctx, call, bc, value, timeout, mem)
	res := ParseOutput(out.Stdout)
	outLogs, errLogs = res.Logs, out.Stderr
	fail := func(o hook.Outcome, status int, msg string) (int, []byte, []byte, []byte) {
		call.Outcome, call.Reason = o, msg
		return status, errorBody(msg), outLogs, errLogs
	}
	refused := func(err error) (int, []byte, []byte, []byte) {
		outcome, status, msg, ok := front.OutputRefusal(err)
		if !ok {
			call.Err = err
			outcome, status, msg = hook.Error, front.StatusCallerGone, err.Error()
		}
		return fail(outcome, status, msg)
	}
	if out.Refused != nil {
		return refused(out.Refused)
	}
	var copies int64
	if !res.OK && len(res.Result) > 0 {
		copies += int64(len(res.Logs) + len(res.Result) + 1)
	}
	if web && res.OK {
		copies += webCost(res.Result)
	}
	if err := mem.Take(ctx, copies, func() string {
		return fmt.Sprintf("to read the action's answer of %d bytes", len(res.Result))
	}); err != nil {
		return refused(err)
	}
	if !res.OK && len(res.Result) > 0 {
		// The skeleton logs a result that is not one, so its author sees it.
		outLogs = append(append(append([]byte(nil), res.Logs...), res.Result...), '\n')
	}
	switch {
	case out.TimedOut && out.Unstarted != nil:
		// Its container was still being made: the action never ran.
		return fail(hook.Timeout, http.StatusBadGateway, fmt.Sprintf("The action did not start within the limit of %s: its container was not made in time (%v).", out.Timeout.Round(time.Millisecond), out.Unstarted))
	case out.TimedOut:
		return fail(hook.Timeout, http.StatusBadGateway, fmt.Sprintf("The action ran longer than the limit of %s and was stopped.", out.Timeout.Round(time.Millisecond)))
	case out.Overflow != "":
		return fail(hook.Fatal, http.StatusBadGateway, fmt.Sprintf("The action printed more than the limit of %d bytes on %s.", p.cfg.MaxOutputBytes, out.Overflow))
	case out.Shutdown:
		// Not the action's fault: another invoker may run it.
		call.Err = out.Err
		return fail(hook.Error, http.StatusServiceUnavailable, front.ErrShutdown.Error())
	case out.CallerGone:
		// The invoker went away: nobody reads this answer, and the log
		// line says so rather than blame the action's container.
		call.Err = fmt.Errorf("the invoker went away before the action answered: %w", out.Err)
		return fail(hook.Error, front.StatusCallerGone, call.Err.Error())
	case out.Err != nil:
		call.Err = out.Err
		return fail(hook.Error, http.StatusInternalServerError, "Internal error. "+out.Err.Error())
	case out.Exit.OOMKilled != "" && (out.Exit.Code != 0 || !res.OK):
		// Whatever it printed, the kernel ended it: say so, in
		// OpenWhisk's words, rather than blame its answer. An action
		// that exits 0 with no result (out=$(cmd); echo "$out", cmd
		// killed) was ended by the kill too.
		return fail(hook.Fatal, http.StatusBadGateway, fmt.Sprintf("%s (%s)", msgMemoryExhausted, out.Exit.OOMKilled))
	case !res.OK:
		return fail(hook.Fatal, http.StatusBadGateway, msgNotDict)
	}
	call.Outcome = hook.OK
	return http.StatusOK, res.Result, outLogs, errLogs
}

// wrapped says whether an init is an object with a "value" and no "code",
// /init's body given where its value belongs.
func wrapped(init json.RawMessage) bool {
	var fields map[string]json.RawMessage
	if json.Unmarshal(init, &fields) != nil {
		return false
	}
	_, value := fields["value"]
	_, code := fields["code"]
	return value && !code
}

// unwrapped says whether /init's body has an init's fields at its top
// level and no "value": POST /'s init given where /init's body belongs.
func unwrapped(msg map[string]json.RawMessage) bool {
	if _, ok := msg["value"]; ok {
		return false
	}
	for _, k := range []string{"code", "main", "binary"} {
		if _, ok := msg[k]; ok {
			return true
		}
	}
	return false
}

// single serves the single-entrypoint form: {"init": ...} initializes,
// {"activation": ..., "value": ...} runs, both do both; a message with
// neither runs as /run does.
func (p *Proxy) single(w http.ResponseWriter, r *http.Request, received time.Time, msg map[string]json.RawMessage, mem *front.Memory) {
	_, hasInit := msg["init"]
	_, hasActivation := msg["activation"]
	_, hasValue := msg["value"]
	var activation map[string]json.RawMessage
	var activationErr error
	if raw := bytes.TrimSpace(msg["activation"]); hasActivation && hasValue && len(raw) > 0 && string(raw) != "null" {
		if err := mem.Take(r.Context(), mapCost(raw), func() string {
			return fmt.Sprintf("to read its activation of %d bytes as JSON", len(raw))
		}); err != nil {
			p.refuseMemory(w, r, received, "", err)
			return
		}
		if err := json.Unmarshal(raw, &activation); err != nil {
			activationErr = fmt.Errorf("activation is not a JSON object: %v", err)
		}
	}
	if hasInit {
		// /init's body wraps the fields in "value"; here they come as
		// they are. Taken as it is, such an init would install no code
		// and run the image's stub, saying nothing.
		status, err := http.StatusBadRequest, errors.New(`the init of POST / holds the fields of /init's value as they are, {"init": {"code": ..., "main": ...}}; this one wraps them in "value"`)
		if !wrapped(msg["init"]) {
			// Charged as /init's is: what the init makes of its code
			// is not among the copies an activation's body is charged.
			if merr := mem.Take(r.Context(), initCost(msg["init"]), func() string {
				return fmt.Sprintf("to read the init of %d bytes and install its code", len(msg["init"]))
			}); merr != nil {
				if hasActivation && hasValue {
					p.refuseMemory(w, r, received, EnvValue(activation["activation_id"]), merr)
					return
				}
				bad := memoryBodyError(w, merr)
				writeInit(w, bad.Status, bad)
				return
			}
			status, err = p.init(msg["init"], hasActivation && hasValue)
		}
		switch {
		case !(hasActivation && hasValue):
			writeInit(w, status, err)
			return
		case err != nil:
			// The activation cannot run: it is answered with the init's
			// error as an activation that did not run is, with the
			// sentinels after it (the invoker waits for them), and
			// counted and logged, under its activation id when it
			// has one.
			p.refuse(w, r, received, EnvValue(activation["activation_id"]), hook.Error, status, err)
			return
		}
	}
	if !(hasActivation && hasValue) {
		p.run(w, r, received, msg, msg, false, mem)
		return
	}
	if activationErr != nil {
		p.refuse(w, r, received, "", hook.Error, http.StatusBadRequest, activationErr)
		return
	}
	p.run(w, r, received, msg, activation, true, mem)
}

// EndRefused returns what ends the logs of an activation the server
// refused before this front saw it (front.Server.EndRefusals): the
// sentinels on stdout and stderr after a POST /run or POST /, as after
// every activation; an init's answer has none.
func EndRefused(stdout, stderr io.Writer) func(*http.Request) {
	return func(r *http.Request) {
		if r.URL.Path != "/run" && r.URL.Path != "/" {
			return
		}
		streamsMu.Lock()
		defer streamsMu.Unlock()
		_, _ = stdout.Write(Frame(nil))
		_, _ = stderr.Write(Frame(nil))
	}
}

// writeLogs writes an activation's logs on ocifn's stdout and stderr, each
// block in one write so that activations running at once do not mix their
// lines, with the sentinel after them when framed.
func (p *Proxy) writeLogs(stdout, stderr []byte, framed bool) {
	streamsMu.Lock()
	defer streamsMu.Unlock()
	if framed {
		_, _ = p.stdout.Write(Frame(stdout))
		_, _ = p.stderr.Write(Frame(stderr))
		return
	}
	if len(stdout) > 0 {
		_, _ = p.stdout.Write(stdout)
	}
	if len(stderr) > 0 {
		_, _ = p.stderr.Write(stderr)
	}
}

// deadline turns OpenWhisk's deadline (epoch milliseconds) into the time
// left; zero when absent or past parsing.
func deadline(raw json.RawMessage) time.Duration {
	s := EnvValue(raw)
	if s == "" {
		return 0
	}
	var ms float64
	if _, err := fmt.Sscan(s, &ms); err != nil || math.IsNaN(ms) || ms <= 0 {
		return 0
	}
	left := time.Until(time.UnixMilli(int64(ms)))
	if left <= 0 {
		// Already past: the platform gave up; the call still gets our own
		// timeout rather than none at all.
		return 0
	}
	return left
}

func errorBody(msg string) []byte {
	b, _ := json.Marshal(map[string]string{"error": msg})
	return b
}

// writeRaw answers status and body, as JSON unless a Content-Type is set;
// an empty body gets none.
func writeRaw(w http.ResponseWriter, status int, body []byte) {
	jsonByDefault(w.Header(), body)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// jsonByDefault types a body as JSON, OpenWhisk's answers' type, unless a
// web action typed it.
func jsonByDefault(h http.Header, body []byte) {
	if _, set := h["Content-Type"]; !set && len(body) > 0 {
		h.Set("Content-Type", "application/json")
	}
}
