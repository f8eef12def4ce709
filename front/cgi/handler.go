package cgi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"

	"github.com/ocifn/ocifn/bundle"
	"github.com/ocifn/ocifn/front"
	"github.com/ocifn/ocifn/hook"
)

// Handler runs each request as one CGI call.
type Handler struct{ cfg *front.Config }

// New returns the handler of CGI calls run with cfg.
func New(cfg *front.Config) *Handler { return &Handler{cfg: cfg} }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	call := front.NewCall("http", r, Tag(r))
	ctx := h.cfg.Hooks.Before(r.Context(), call)
	status := h.serve(ctx, w, r, call)
	call.LogAttrs = append(call.LogAttrs, "method", hook.LogTag(r.Method), "path", hook.LogTag(r.URL.Path), "status", status)
	h.cfg.Hooks.After(ctx, call)
}

// Tag is the tag of the call r makes: its event id, made now when the
// caller sent none, so that its span carries it from the start, as its
// log line does. The calls the server refuses before this front sees them
// are tagged so too (front.Server.TagRefusals).
func Tag(r *http.Request) string {
	if id := r.Header.Get("Event-Id"); id != "" {
		return id
	}
	return newID()
}

// localAddr is the server's address r came to, or "".
func localAddr(r *http.Request) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		return a.String()
	}
	return ""
}

// serve answers the request and returns the status it answered with.
func (h *Handler) serve(ctx context.Context, w http.ResponseWriter, r *http.Request, call *hook.Call) int {
	fail := func(o hook.Outcome, status int, msg string) int {
		call.Outcome, call.Reason = o, msg
		http.Error(w, msg, status)
		return status
	}
	adm, refused := h.cfg.Admit(ctx, w, r)
	if refused != nil {
		// The gate's errors (draining, the caller gone) are the call's;
		// a bad body is the caller's, said in the reason alone.
		if _, badBody := refused.Err.(*front.BodyError); !badBody && refused.Outcome == hook.Error {
			call.Err = refused.Err
		}
		return fail(refused.Outcome, refused.Status, refused.Err.Error())
	}
	defer adm.Leave()
	body := adm.Body
	env := Env(Request{
		Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Protocol: r.Proto, Header: r.Header,
		ContentLength: len(body), RemoteAddr: r.RemoteAddr, Host: r.Host, LocalAddr: localAddr(r), Now: call.Received, EventID: call.Tag,
	})
	if name, n := TooLong(env); name != "" {
		// The request's, not the function's: its execve would fail.
		status, what := http.StatusRequestHeaderFieldsTooLarge, "a request header"
		switch name {
		case "QUERY_STRING":
			status, what = http.StatusRequestURITooLong, "the query string"
		case "PATH_INFO":
			status, what = http.StatusRequestURITooLong, "the path"
		}
		return fail(hook.Error, status, fmt.Sprintf("%s is too long for the function's environment: %s would be %d bytes, and a program's environment variable holds at most %d", what, name, n, front.MaxArgBytes))
	}
	if name := WithNUL(env); name != "" {
		// Refused, as nginx refuses a %00 in a path, rather than run the
		// function on a request it would see cut short.
		return fail(hook.Error, http.StatusBadRequest, fmt.Sprintf("the request's %s holds a NUL byte (%%00), which a program's environment variable cannot carry: the function would see it cut short there", name))
	}
	if n := HeaderFields(env); n > MaxHeaderFields {
		return fail(hook.Error, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf("the request's headers make %d HTTP_* variables of the program's environment (one per name), more than the %d a function takes", n, MaxHeaderFields))
	}
	out := h.cfg.Exec(ctx, call, bundle.Call{Env: env}, body, 0, adm.Mem)
	stderr := hook.NewStderrLog(h.cfg.Log, hook.StderrLogBytes, hook.StderrTailBytes, "tag", hook.LogTag(call.Tag))
	_, _ = stderr.Write(out.Stderr)
	stderr.Flush()
	tail := stderr.Tail()
	switch {
	case out.TimedOut && out.Unstarted != nil:
		// Its container was still being made (a stuck runtime): saying
		// the function ran too long would send its author after the
		// wrong thing.
		return fail(hook.Timeout, http.StatusRequestTimeout, fmt.Sprintf("the function did not start within the limit of %s: its container was not made in time (%v)", out.Timeout, out.Unstarted))
	case out.TimedOut:
		// Kubeless answers a call past its timeout with 408.
		return fail(hook.Timeout, http.StatusRequestTimeout, fmt.Sprintf("the function ran longer than the limit of %s and was stopped", out.Timeout))
	case out.Overflow != "":
		return fail(hook.Fatal, http.StatusBadGateway, fmt.Sprintf("the function printed more than the limit of %d bytes on %s", h.cfg.MaxOutputBytes, out.Overflow))
	case out.Refused != nil:
		return h.refusedOutput(w, call, out.Refused)
	case out.Shutdown:
		// Not the function's fault: another replica may run it.
		call.Err = out.Err
		return fail(hook.Error, http.StatusServiceUnavailable, front.ErrShutdown.Error())
	case out.CallerGone:
		// Nobody reads this answer; the log line says what happened,
		// not that the function could not be run. 499 is the status
		// proxies (nginx) log a request with whose client closed it.
		call.Err = fmt.Errorf("the caller went away before the function answered: %w", out.Err)
		return fail(hook.Error, front.StatusCallerGone, call.Err.Error())
	case out.Err != nil:
		call.Err = out.Err
		return fail(hook.Error, http.StatusInternalServerError, "the function could not be run: "+out.Err.Error())
	case out.Exit.Code != 0:
		msg := fmt.Sprintf("the function exited with code %d", out.Exit.Code)
		if out.Exit.OOMKilled != "" {
			msg = fmt.Sprintf("the function ran out of memory and exited with code %d: %s", out.Exit.Code, out.Exit.OOMKilled)
		}
		if len(tail) == 0 {
			return fail(hook.Fatal, http.StatusInternalServerError, msg)
		}
		// The caller is answered the end of stderr; the log line is not,
		// as the Crossplane front's is not: stderr is logged line by
		// line, within its bounds, and the tail would repeat it, or log
		// what those bounds kept out.
		status := fail(hook.Fatal, http.StatusInternalServerError, msg+"; the end of its stderr:\n"+string(tail))
		call.Reason = msg
		return status
	}
	rsp, err := ParseOutput(out.Stdout)
	if err != nil {
		// The function's answer, not the caller's request, is wrong: a
		// bad gateway.
		prefix := "the function's output is not a CGI response: "
		if out.Exit.OOMKilled != "" {
			// It exited 0, but printed what a killed command left it
			// (out=$(cmd); echo "$out"): the kill is why.
			prefix = fmt.Sprintf("the function ran out of memory and exited with code 0: %s; its output is not a CGI response: ", out.Exit.OOMKilled)
		}
		status := fail(hook.Fatal, http.StatusBadGateway, prefix+err.Error())
		var bad *HeaderBlockError
		if errors.As(err, &bad) {
			// The caller is shown the output at fault; the log line
			// names the line alone.
			call.Reason = prefix + bad.Unquoted()
		}
		return status
	}
	for k, vs := range rsp.Header {
		if hopByHop[k] {
			continue
		}
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(rsp.Body)))
	if err := front.Answer(w, rsp.Status, rsp.Body, h.cfg.Timeout, true); err != nil {
		call.Outcome, call.Err = hook.Error, err
		return rsp.Status
	}
	call.Outcome = hook.OK
	return rsp.Status
}

// refusedOutput answers a call whose function's output the in-flight
// budget had no room for (err, a *front.MemoryError): see
// front.OutputRefusal.
func (h *Handler) refusedOutput(w http.ResponseWriter, call *hook.Call, err error) int {
	outcome, status, msg, _ := front.OutputRefusal(err)
	call.Outcome, call.Reason = outcome, msg
	http.Error(w, msg, status)
	return status
}

// hopByHop are the header fields of one connection (RFC 9110 section
// 7.6.1), which ocifn's server sets for its own connection to the caller:
// a program may not set them (RFC 3875 section 6.3.4), and one that did
// would break the answer's framing (a Transfer-Encoding of its own beside
// net/http's chunked, which clients refuse) or the connection. They are
// dropped, as a reverse proxy drops them.
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}
