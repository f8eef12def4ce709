package front

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ocifn/ocifn/hook"
)

// Server is the HTTP handler of a front's port: GET /healthz, /metrics,
// and the front's own routes. Until it is ready, and once it drains,
// /healthz answers 503 so that a platform routes work elsewhere; a call
// that comes before it is ready waits for it (OpenWhisk sends /init as soon
// as the port accepts connections).
type Server struct {
	metrics  http.Handler
	handler  atomic.Pointer[http.Handler]
	ready    chan struct{}
	draining atomic.Bool
	// abandoned is closed when the server stops before it was ready.
	abandoned chan struct{}
	abandon   sync.Once
	// hooks and front, when set, count and log the calls answered before
	// the server was ready (CountRefusals).
	hooks *hook.Chain
	front string
	// tag, when set, tags those calls as the front tags its own
	// (TagRefusals).
	tag func(*http.Request) string
	// end, when set, ends the log of each call refused before the server
	// was ready (EndRefusals); endMu keeps each such line and its end
	// together.
	end   func(*http.Request)
	endMu sync.Mutex
	// waiting counts the calls that wait for the server to be ready.
	waiting prometheus.Gauge
	// form words the answers of those calls, as the front words its
	// errors (AnswerErrorsAs).
	form ErrorForm
}

// NewServer returns a server exposing reg at /metrics, where it adds
// ocifn_calls_waiting_for_image.
func NewServer(reg *prometheus.Registry) *Server {
	waiting := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ocifn_calls_waiting_for_image",
		Help: "Calls that came to an HTTP front before its function image was unpacked, waiting for it.",
	})
	reg.MustRegister(waiting)
	return &Server{metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}), ready: make(chan struct{}), abandoned: make(chan struct{}), waiting: waiting}
}

// Abandon says the server stops before it was ready (a signal, or an
// image that could not be prepared): the calls waiting for it, and those
// that come until the port closes, are answered 503 at once, as calls are
// while the server drains, instead of waiting for a handler that will not
// come and losing their connection without an answer.
func (s *Server) Abandon() { s.abandon.Do(func() { close(s.abandoned) }) }

// CountRefusals has the calls answered before the server was ready (it
// stopped first, or their caller left) go through the calls' hooks, as the
// front's refused calls do: counted by outcome, logged with their status.
func (s *Server) CountRefusals(ch *hook.Chain, front string) { s.hooks, s.front = ch, front }

// TagRefusals has each call answered before the server was ready tagged
// tag(r), as the front tags the calls it runs, so that its log line and
// span carry an id as theirs do. Without it the tag is the request's
// Event-Id header, if any: OpenWhisk's activation id is in the body,
// which such a call's is not read.
func (s *Server) TagRefusals(tag func(*http.Request) string) { s.tag = tag }

// EndRefusals has end run after the log line of each call refused before
// the server was ready, and before its answer: OpenWhisk's front ends an
// activation's logs with its sentinels, which its invoker waits for.
func (s *Server) EndRefusals(end func(*http.Request)) { s.end = end }

// AnswerErrorsAs has the calls answered before the server was ready
// answered in form, as the front answers its own errors; PlainError
// without it.
func (s *Server) AnswerErrorsAs(form ErrorForm) { s.form = form }

// Ready makes h serve the front's routes. It must be called once.
func (s *Server) Ready(h http.Handler) {
	s.handler.Store(&h)
	close(s.ready)
}

// Drain makes /healthz fail while running calls finish.
func (s *Server) Drain() { s.draining.Store(true) }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := s.handler.Load()
	switch r.URL.Path {
	case "/healthz":
		if h == nil || s.draining.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("OK\n"))
		return
	case "/metrics":
		s.metrics.ServeHTTP(w, r)
		return
	}
	if h == nil {
		// The call is timed from now, its wait for the image included
		// (see Received).
		r = r.WithContext(context.WithValue(r.Context(), receivedKey{}, time.Now()))
		s.waiting.Inc()
		select {
		case <-s.ready:
			s.waiting.Dec()
			h = s.handler.Load()
		case <-r.Context().Done():
			s.waiting.Dec()
			// Nobody reads an answer now: logged as a call whose
			// caller left while it waited for a slot is, not as a 503
			// of ocifn's.
			err := fmt.Errorf("the caller went away while the call waited for the function image to be unpacked: %w", r.Context().Err())
			s.refuse(w, r, StatusCallerGone, err.Error(), err)
			return
		case <-s.abandoned:
			s.waiting.Dec()
			s.refuse(w, r, http.StatusServiceUnavailable, "ocifn stopped before the function image was ready: the call did not run", nil)
			return
		}
	}
	(*h).ServeHTTP(w, r)
}

// refuse answers a call that waited for the server to be ready with
// status and msg, through the hooks; err, when set, is the call's error.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, msg string, err error) {
	call := NewCall(s.front, r, refusedTag(s.tag, r))
	ctx := s.hooks.Before(r.Context(), call)
	call.Outcome, call.Reason, call.Err = hook.Error, msg, err
	call.LogAttrs = append(call.LogAttrs, "method", hook.LogTag(r.Method), "path", hook.LogTag(r.URL.Path), "status", status)
	if s.end == nil {
		WriteError(w, s.form, status, msg)
		s.hooks.After(ctx, call)
		return
	}
	s.endMu.Lock()
	s.hooks.After(ctx, call)
	s.end(r)
	s.endMu.Unlock()
	WriteError(w, s.form, status, msg)
}

// refusedTag is the tag of a call refused before the front saw it: tag(r),
// else its Event-Id header.
func refusedTag(tag func(*http.Request) string, r *http.Request) string {
	if tag != nil {
		return tag(r)
	}
	return r.Header.Get("Event-Id")
}

type receivedKey struct{}

// Received is when r came: when the server got it, for a request that
// waited for the front to be ready, else now. A front times its calls
// from it.
func Received(r *http.Request) time.Time {
	if t, ok := r.Context().Value(receivedKey{}).(time.Time); ok {
		return t
	}
	return time.Now()
}

// ErrorForm is how a front words the answer of an error saying msg: its
// Content-Type and body.
type ErrorForm func(msg string) (contentType string, body []byte)

// PlainError is the HTTP front's form of an error: msg as text, as
// net/http's http.Error writes it.
func PlainError(msg string) (string, []byte) {
	return "text/plain; charset=utf-8", []byte(msg + "\n")
}

// JSONError is OpenWhisk's form of an error: {"error": msg}.
func JSONError(msg string) (string, []byte) {
	b, _ := json.Marshal(map[string]string{"error": msg})
	return "application/json", b
}

// WriteError answers with status and msg in form, PlainError when nil.
func WriteError(w http.ResponseWriter, form ErrorForm, status int, msg string) {
	if form == nil {
		form = PlainError
	}
	ct, body := form(msg)
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", ct)
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// WriteJSON answers with status and v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"cannot encode the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// WriteJSONError answers with status and {"error": msg}.
func WriteJSONError(w http.ResponseWriter, status int, msg string) {
	WriteJSON(w, status, map[string]string{"error": msg})
}
