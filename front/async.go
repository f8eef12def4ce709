package front

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ocifn/ocifn/admit"
	"github.com/ocifn/ocifn/hook"
)

// invocationsPath prefixes the URL of an asynchronous invocation's result.
const invocationsPath = "/invocations/"

// msgCutOff is the answer of a call that a restart of ocifn cut off.
// The server may have restarted, or, where servers share the directory,
// been another replica, killed or replaced with its pod: "a restart"
// alone told the caller of a killed replica what did not happen.
const msgCutOff = "the call was cut off before it ended: the ocifn server running it stopped (restarted, killed, or its pod replaced); run it again"

// msgNoSuchInvocation is the answer of a poll for an id that is not stored.
// A replica polled for another's id answers it too: it says so, as the
// likeliest cause where a function runs with several.
const msgNoSuchInvocation = "no such invocation: unknown, or its result was removed (older than --result-ttl, or among the oldest when the results took more than --results-max-bytes); " +
	"an id is found only on the server that accepted it, unless the servers share their --cache-dir's invocations directory"

// Invocations runs requests that ask for it (RFC 7240 Prefer:
// respond-async) in the background and keeps their responses on disk, by an
// unguessable id, for a time and within a size.
type Invocations struct {
	dir      string
	ttl      time.Duration
	maxBytes int64
	maxBody  int64
	// bodyTimeout, when set, is how long a body may take to arrive
	// (ReadBodiesWithin).
	bodyTimeout time.Duration
	log         *slog.Logger
	now         func() time.Time
	// gate, when set, refuses new invocations the calls' gate would
	// refuse (RefuseWhenFull).
	gate *admit.Gate
	// budget, when set, is charged each invocation's body, from when it
	// is read until its result is stored, and copies what its front
	// makes of it, with it (ChargeTo).
	budget *admit.Budget
	copies func(n int64) int64
	// hooks and front, when set, count and log the invocations refused
	// before their call (CountRefusals).
	hooks *hook.Chain
	front string
	// tag, when set, tags those calls as the front tags its own
	// (TagRefusals).
	tag func(*http.Request) string
	// end, when set, ends the log of each refused invocation
	// (EndRefusals); endMu keeps each such line and its end together.
	end   func(*http.Request)
	endMu sync.Mutex
	// form words ocifn's own answers, as the front words its errors
	// (AnswerErrorsAs).
	form ErrorForm

	// mu orders writes and the size bound's removals, and guards index
	// and total.
	mu sync.Mutex
	// index holds what bound needs of every stored record, so that a
	// finished call does not make it read every result again.
	index map[string]stored
	total int64
	// ctx ends the calls still running at Close.
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	// lock shares dir with other servers of this version (see
	// lockInvocations) until Close.
	lock     *os.File
	closeDir sync.Once

	// server is this server's id, which its records carry (servers.go).
	server string
	// serversMu guards held and swept, and orders the lock files' checks.
	serversMu sync.Mutex
	// held holds the locks of this server and of the servers gone whose
	// records it adopted.
	held map[string]*os.File
	// swept is when this server last looked for servers that went.
	swept time.Time
}

// stored is what the index knows of a record on disk.
type stored struct {
	size    int64
	created time.Time
	running bool
	// server is the server the record names.
	server string
}

// record is one invocation on disk: its fields but Body as a line of
// JSON, then the body's bytes as they are. A poll copies the body from the
// file to the caller instead of decoding it: a body may be as large as
// --max-output-bytes, and nothing bounds how many polls read at once.
// Records that earlier versions wrote hold the body in the JSON (base64),
// and are still read.
type record struct {
	Running bool `json:"running"`
	// Server is the id of the server that wrote the record, or adopted
	// it; empty in earlier versions' records.
	Server string `json:"server,omitempty"`
	// Created is when the invocation started, and once it is over when
	// its result was stored: the TTL counts from it.
	Created time.Time   `json:"created"`
	Status  int         `json:"status,omitempty"`
	Header  http.Header `json:"header,omitempty"`
	Body    []byte      `json:"body,omitempty"`
	// Message, when set, is ocifn's own answer (the call cut off, its
	// result not kept), answered in the front's form of an error rather
	// than as Header and Body, which hold it as text for earlier
	// versions.
	Message string `json:"message,omitempty"`
}

// OpenInvocations keeps invocations in dir, which other servers may share.
// Invocations left running by servers that are gone (a previous run of
// this one, say) are marked failed: nothing will finish them.
func OpenInvocations(dir string, ttl time.Duration, maxBytes, maxBody int64, log *slog.Logger) (*Invocations, error) {
	if err := os.MkdirAll(filepath.Join(dir, serversDir), 0o700); err != nil {
		return nil, fmt.Errorf("cannot create the invocations directory %s: %w", dir, err)
	}
	lock, err := lockInvocations(dir)
	if err != nil {
		return nil, err
	}
	server, own, err := openServer(dir)
	if err != nil {
		lock.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	iv := &Invocations{dir: dir, ttl: ttl, maxBytes: maxBytes, maxBody: maxBody, log: log, now: time.Now, ctx: ctx, cancel: cancel,
		index: map[string]stored{}, lock: lock, server: server, held: map[string]*os.File{server: own}, swept: time.Now()}
	if failed := iv.adopt(true); failed > 0 {
		log.Warn("asynchronous invocations cut off by the stop of the server running them are reported failed", "invocations", failed)
	}
	iv.bound()
	iv.letGo()
	return iv, nil
}

// RefuseWhenFull makes new invocations answer 503 at once when g would
// refuse their call (every slot and the queue taken, or shutdown begun),
// instead of 202 and a 503 to find when polled.
func (iv *Invocations) RefuseWhenFull(g *admit.Gate) { iv.gate = g }

// ChargeTo charges the invocations' bodies, their calls and their answers
// to b (--max-inflight-bytes), as the calls of the front are: a body
// from when it is read, while it waits in the queue, and an answer until
// it is stored. copies, when not nil, is what the front makes of a body
// of n bytes at least, charged with it (Config.Copies).
func (iv *Invocations) ChargeTo(b *admit.Budget, copies func(n int64) int64) {
	iv.budget, iv.copies = b, copies
}

// ReadBodiesWithin makes a new invocation's body arrive whole within d, as
// a call's must (Config.Admit), or answers 400: a client that sends its
// headers and stalls would otherwise hold its request, and a shutdown
// (which waits for every request being served) up to the end of its grace
// period.
func (iv *Invocations) ReadBodiesWithin(d time.Duration) { iv.bodyTimeout = d }

// CountRefusals has the invocations refused before their call starts
// (the gate full or draining, a bad body) go through the calls' hooks as
// the front's refused calls do: counted by outcome, logged with their
// status.
func (iv *Invocations) CountRefusals(ch *hook.Chain, front string) { iv.hooks, iv.front = ch, front }

// TagRefusals has each invocation refused before its call tagged tag(r),
// as Server.TagRefusals.
func (iv *Invocations) TagRefusals(tag func(*http.Request) string) { iv.tag = tag }

// EndRefusals has end run after the log line of each invocation refused
// before its call, and before its answer, as Server.EndRefusals.
func (iv *Invocations) EndRefusals(end func(*http.Request)) { iv.end = end }

// refuse answers an invocation refused before its call with status and
// err's message, through the hooks.
func (iv *Invocations) refuse(w http.ResponseWriter, r *http.Request, received time.Time, o hook.Outcome, status int, err error) {
	call := NewCall(iv.front, r, refusedTag(iv.tag, r))
	// Timed from the request's arrival: a body that failed after
	// seconds of reading took that long, not the microseconds since.
	call.Received = received
	ctx := iv.hooks.Before(r.Context(), call)
	call.Outcome, call.Reason = o, err.Error()
	call.LogAttrs = append(call.LogAttrs, "method", hook.LogTag(r.Method), "path", hook.LogTag(r.URL.Path), "status", status, "async", true)
	if iv.end == nil {
		WriteError(w, iv.form, status, err.Error())
		iv.hooks.After(ctx, call)
		return
	}
	iv.endMu.Lock()
	iv.hooks.After(ctx, call)
	iv.end(r)
	iv.endMu.Unlock()
	WriteError(w, iv.form, status, err.Error())
}

// AnswerErrorsAs has the invocations' errors, those refused before their
// call and ocifn's own answers to a poll, answered in form, as the front
// answers its own errors; PlainError without it.
func (iv *Invocations) AnswerErrorsAs(form ErrorForm) { iv.form = form }

// Close stops the calls still running (they are recorded as failed, as
// stopped by the shutdown) and waits for them.
func (iv *Invocations) Close() {
	iv.cancel(ErrShutdown)
	iv.wg.Wait()
	iv.closeDir.Do(func() {
		iv.serversMu.Lock()
		iv.letGoLocked(true)
		iv.serversMu.Unlock()
		iv.lock.Close()
	})
}

// lockWait is how long lockInvocations waits for another process to let
// go of the directory.
const lockWait = 2 * time.Second

// lockInvocations takes a shared flock of dir, which earlier versions of
// ocifn took exclusive: they mark every running record failed when they
// open the directory, and bound every result, so that one of them and a
// server of this version cannot share it. The lock is let go when the
// process ends however it ends. (On NFS, a directory's flock is local to
// its host: there it keeps out only servers on the same host.)
func lockInvocations(dir string) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot open the invocations directory %s: %w", dir, err)
	}
	// A server killed a moment ago may still be dying (the child ocifn
	// re-executed dies after its parent): it is given lockWait to go.
	err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
	for deadline := time.Now().Add(lockWait); errors.Is(err, unix.EWOULDBLOCK) && time.Now().Before(deadline); {
		time.Sleep(lockWait / 40)
		err = unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
	}
	if err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("an ocifn serve of an earlier version, which keeps its invocations directory to itself, keeps its asynchronous invocations in %s: stop it, or give this server another --cache-dir", dir)
		}
		return nil, fmt.Errorf("cannot lock the invocations directory %s: %w", dir, err)
	}
	return f, nil
}

// Wait waits for the calls running now, up to ctx's end.
func (iv *Invocations) Wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { iv.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// Wrap serves GET /invocations/{id} and runs requests that prefer
// respond-async in the background; the rest go to next.
func (iv *Invocations) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := strings.CutPrefix(r.URL.Path, invocationsPath); ok && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			iv.serveResult(w, id)
			return
		}
		if !prefersAsync(r.Header) {
			next.ServeHTTP(w, r)
			return
		}
		iv.start(w, r, next)
	})
}

// invocationKey holds, in the context of an asynchronous invocation's
// call, the invocation's id.
type invocationKey struct{}

// prefersAsync reports whether a Prefer header asks for respond-async.
func prefersAsync(h http.Header) bool {
	for _, v := range h.Values("Prefer") {
		for _, p := range strings.Split(v, ",") {
			token, _, _ := strings.Cut(p, ";")
			token, _, _ = strings.Cut(token, "=")
			if strings.EqualFold(strings.TrimSpace(token), "respond-async") {
				return true
			}
		}
	}
	return false
}

func (iv *Invocations) start(w http.ResponseWriter, r *http.Request, next http.Handler) {
	received := Received(r)
	// Refused now rather than accepted to fail: the caller would learn
	// it only when it polls.
	if iv.gate != nil {
		if err := iv.gate.Refuses(); err != nil {
			outcome, status := refusal(w, err)
			iv.refuse(w, r, received, outcome, status, err)
			return
		}
	}
	// The body is charged to the in-flight budget as it is read, and its
	// call, output included, to the same share: an invocation waiting in
	// the queue holds its body, and the answer is kept until it is
	// stored.
	mem := NewMemory(iv.budget)
	body, bad := ReadCharged(w, r, iv.maxBody, iv.bodyTimeout, mem, iv.copies)
	if bad != nil {
		mem.Release()
		outcome := hook.Error
		if bad.Rejected {
			outcome = hook.Rejected
		}
		iv.refuse(w, r, received, outcome, bad.Status, bad)
		return
	}
	// The check above is a hint, which invocations that come together
	// all pass: each takes its place in the gate before it is accepted,
	// and its call enters with it, so that one the gate has no room for
	// is refused now, not accepted to fail.
	var place *admit.Reservation
	if iv.gate != nil {
		var err error
		if place, err = iv.gate.Reserve(); err != nil {
			mem.Release()
			outcome, status := refusal(w, err)
			iv.refuse(w, r, received, outcome, status, err)
			return
		}
	}
	created := iv.now()
	id, err := newInvocationID()
	if err == nil {
		err = iv.write(id, record{Running: true, Created: created})
	}
	if err != nil {
		place.Release()
		mem.Release()
		err = logged(err, id)
		iv.log.Error("cannot start an asynchronous invocation", "error", err)
		// Refused as when the gate is full: counted and logged as a
		// call, not only as ocifn's error.
		iv.refuse(w, r, received, hook.Error, http.StatusInternalServerError, fmt.Errorf("cannot store the invocation: %w", err))
		return
	}
	// The call outlives the request that started it. Its log line and
	// span carry the invocation's id, by which its caller knows it, and
	// it is timed from the request's arrival, as a synchronous call is:
	// its body, and its wait for the image, are part of what it took.
	// Its front takes the body read here, with its charge, rather than
	// read a copy of it (Admit).
	// Its own context: a running call that needs the memory its body
	// holds while it waits for a slot ends its wait (pending.yield).
	ctx, cancel := context.WithCancelCause(iv.ctx)
	ctx = context.WithValue(admit.WithReservation(ctx, place), invocationKey{}, id)
	pend := &pending{body: body, mem: mem, cancel: cancel}
	ctx = context.WithValue(ctx, pendingKey{}, pend)
	if a := r.Context().Value(http.LocalAddrContextKey); a != nil {
		// The address the request came to, which its front may tell
		// its function (a CGI program's SERVER_NAME).
		ctx = context.WithValue(ctx, http.LocalAddrContextKey, a)
	}
	r2 := r.Clone(context.WithValue(ctx, receivedKey{}, received))
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	r2.Header.Del("Prefer")
	iv.wg.Add(1)
	go func() {
		defer iv.wg.Done()
		defer cancel(nil)
		// In case the call never entered the gate.
		defer place.Release()
		// In case it never reached its wait (Admit).
		defer pend.start()
		// The body, the call's copies and output, and the answer kept
		// below until it is stored.
		defer mem.Release()
		rec := &recorder{header: http.Header{}, mem: mem}
		next.ServeHTTP(rec, r2)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		// A result is kept for the TTL from when it is stored, not from
		// its call's start: a call that ran longer than the TTL had its
		// result expire as it was stored, and nobody could ever read it.
		if err := iv.writeResult(id, record{Created: iv.now(), Status: rec.status, Header: rec.header, Body: rec.body.Bytes()}); err != nil {
			iv.log.Error("cannot store the result of an asynchronous invocation", "invocation", hook.InvocationRef(id), "status", rec.status, "body_bytes", rec.body.Len(), "error", logged(err, id))
			iv.storeFailure(id, rec.status, rec.body.Len(), err)
		}
		iv.bound()
	}()
	w.Header().Set("Location", invocationsPath+id)
	w.Header().Set("Preference-Applied", "respond-async")
	w.WriteHeader(http.StatusAccepted)
}

func (iv *Invocations) serveResult(w http.ResponseWriter, id string) {
	rec, body, f, err := iv.open(id)
	if err == nil {
		// Removed or replaced meanwhile, the file stays readable.
		defer f.Close()
	}
	if err == nil && !rec.Running && iv.ttl > 0 && iv.now().Sub(rec.Created) >= iv.ttl {
		iv.remove(id)
		err = os.ErrNotExist
	}
	if err != nil {
		WriteError(w, iv.form, http.StatusNotFound, msgNoSuchInvocation)
		return
	}
	if rec.Running && iv.gone(rec.Server) {
		// Until a server adopts the record and marks it so.
		rec = cutOff(rec.Server, rec.Created)
		body = bytes.NewReader(rec.Body)
	}
	if rec.Running {
		w.Header().Set("Location", invocationsPath+id)
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusAccepted)
		return
	}
	if rec.Message != "" {
		WriteError(w, iv.form, rec.Status, rec.Message)
		return
	}
	for k, vs := range rec.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(rec.Status)
	_, _ = io.Copy(w, body)
}

// writeResult stores a finished invocation's record, or, when it alone
// would take more than --results-max-bytes (so that bound would remove it
// as soon as it is stored, and a poll would find nothing), a small record
// in its place that says so: the caller learns that its result was not
// kept, and why, instead of "unknown". The record is encoded once.
func (iv *Invocations) writeResult(id string, rec record) error {
	rec.Server = iv.server
	line, err := rec.line()
	if err != nil {
		return err
	}
	if n := len(line) + len(rec.Body); int64(n) > iv.maxBytes {
		iv.log.Warn("the result of an asynchronous invocation is larger than --results-max-bytes and was not kept", "invocation", hook.InvocationRef(id), "status", rec.Status, "body_bytes", len(rec.Body), "stored_bytes", n, "results_max_bytes", iv.maxBytes)
		rec = notKept(rec.Created, http.StatusInsufficientStorage, rec.Status, len(rec.Body),
			fmt.Sprintf("its result takes %d bytes stored, more than --results-max-bytes (%d): it was not kept", n, iv.maxBytes))
		rec.Server = iv.server
		if line, err = rec.line(); err != nil {
			return err
		}
	}
	return iv.writeBytes(id, line, rec.Body, stored{created: rec.Created, server: rec.Server})
}

// storeFailure replaces the record of an invocation whose result could not
// be stored (err: a full disk, say) with a small one that says so. Left as
// it was, the record would say the call still runs, and be polled, 202
// after 202, for ever: a running record never expires. If even that cannot
// be written, the record goes, and its id answers 404.
func (iv *Invocations) storeFailure(id string, status, bodyBytes int, err error) {
	failed := notKept(iv.now(), http.StatusInternalServerError, status, bodyBytes, fmt.Sprintf("its result could not be stored: %v", err))
	if werr := iv.write(id, failed); werr != nil {
		iv.log.Error("cannot store that the result of an asynchronous invocation was lost; its id is removed", "invocation", hook.InvocationRef(id), "error", logged(werr, id))
		iv.remove(id)
	}
}

// notKept is the record, answered with code, that stands for a finished
// invocation's result (its status and body size) that was not kept, and
// says why.
func notKept(created time.Time, code, status, bodyBytes int, why string) record {
	msg := fmt.Sprintf("the invocation finished with status %d and a body of %d bytes, but %s", status, bodyBytes, why)
	return record{
		Created: created,
		Status:  code,
		Header:  http.Header{"Content-Type": {"text/plain; charset=utf-8"}},
		Body:    []byte(msg + "\n"),
		Message: msg,
	}
}

// logged is err, about the record of invocation id, as a log carries
// it: the id, which the paths of file errors hold whole (rename
// .../.tmp-… .../{id}.json: …), shortened to hook.InvocationRef, as the
// line's own invocation attribute is, since the id alone fetches the
// result.
func logged(err error, id string) error {
	if err == nil || id == "" {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), id, hook.InvocationRef(id)))
}

func (iv *Invocations) path(id string) string { return filepath.Join(iv.dir, id+".json") }

// open opens a record: it returns its fields but Body, and its body to
// read from f, which the caller closes.
func (iv *Invocations) open(id string) (rec record, body io.Reader, f *os.File, err error) {
	if !validID(id) {
		return record{}, nil, nil, os.ErrNotExist
	}
	if f, err = os.Open(iv.path(id)); err != nil {
		return record{}, nil, nil, err
	}
	r := bufio.NewReader(f)
	line, err := r.ReadBytes('\n')
	if err == nil || err == io.EOF {
		err = json.Unmarshal(line, &rec)
	}
	if err != nil {
		f.Close()
		return record{}, nil, nil, fmt.Errorf("invocation %s: %w", id, err)
	}
	body = r
	if rec.Body != nil { // an earlier version's record
		body = bytes.NewReader(rec.Body)
	}
	return rec, body, f, nil
}

// line is the first line of rec on disk: its fields but Body.
func (rec record) line() ([]byte, error) {
	rec.Body = nil
	b, err := json.Marshal(rec)
	return append(b, '\n'), err
}

// write stores a record whole or not at all: a crash must not leave half
// a result. A record that names no server is this one's.
func (iv *Invocations) write(id string, rec record) error {
	if rec.Server == "" {
		rec.Server = iv.server
	}
	line, err := rec.line()
	if err != nil {
		return err
	}
	return iv.writeBytes(id, line, rec.Body, stored{created: rec.Created, running: rec.Running, server: rec.Server})
}

// writeBytes stores a record's line and body as write does, and indexes
// it as s, with its size.
func (iv *Invocations) writeBytes(id string, line, body []byte, s stored) error {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	tmp, err := os.CreateTemp(iv.dir, tmpPrefix+iv.server+"-")
	if err != nil {
		return err
	}
	_, err = tmp.Write(line)
	if err == nil {
		_, err = tmp.Write(body)
	}
	if err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), iv.path(id)); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	s.size = int64(len(line) + len(body))
	iv.indexLocked(id, s)
	return nil
}

// indexLocked records what is stored under id, in place of what was, and
// keeps the total in step.
func (iv *Invocations) indexLocked(id string, s stored) {
	iv.total += s.size - iv.index[id].size
	iv.index[id] = s
}

// remove deletes a record and its entry in the index.
func (iv *Invocations) remove(id string) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	iv.removeLocked(id)
}

func (iv *Invocations) removeLocked(id string) {
	if err := os.Remove(iv.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		// Still there: still counted.
		iv.log.Warn("cannot remove the result of an asynchronous invocation", "invocation", hook.InvocationRef(id), "error", logged(err, id))
		return
	}
	iv.total -= iv.index[id].size
	delete(iv.index, id)
}

// bound removes expired results, then the oldest finished ones while the
// results take more than maxBytes. It works from the index: the records
// themselves are not read. From time to time it first adopts the records
// of servers that went.
func (iv *Invocations) bound() {
	swept := iv.sweepDue()
	if swept {
		if failed := iv.adopt(false); failed > 0 {
			iv.log.Warn("asynchronous invocations cut off by the end of the server that ran them are reported failed", "invocations", failed)
		}
	}
	if removed := iv.boundLocked(); removed > 0 {
		// Before their time: a caller polling for them gets 404.
		iv.log.Warn("removed the oldest results of asynchronous invocations before --result-ttl, to keep them within --results-max-bytes", "results", removed, "results_max_bytes", iv.maxBytes)
	}
	if swept {
		iv.letGo()
	}
}

// boundLocked is bound's work under iv.mu; it returns how many results it
// removed for the size bound.
func (iv *Invocations) boundLocked() (removed int) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	if iv.ttl > 0 {
		now := iv.now()
		for id, e := range iv.index {
			if !e.running && now.Sub(e.created) >= iv.ttl {
				iv.removeLocked(id)
			}
		}
	}
	if iv.total <= iv.maxBytes {
		return 0
	}
	finished := make([]string, 0, len(iv.index))
	for id, e := range iv.index {
		if !e.running {
			finished = append(finished, id)
		}
	}
	sort.Slice(finished, func(i, j int) bool { return iv.index[finished[i]].created.Before(iv.index[finished[j]].created) })
	for _, id := range finished {
		if iv.total <= iv.maxBytes {
			break
		}
		iv.removeLocked(id)
		removed++
	}
	return removed
}

// newInvocationID returns 256 random bits in hex: unguessable.
func newInvocationID() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("cannot generate an invocation id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func validID(id string) bool {
	if len(id) != 64 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}

// pendingKey holds, in the context of an asynchronous invocation's call,
// its body as read and charged (*pending).
type pendingKey struct{}

// pending is an asynchronous invocation's body, read before its call, and
// the share of the in-flight budget that holds it and its call.
type pending struct {
	body []byte
	mem  *Memory
	// cancel ends the invocation's wait for a slot when it yields.
	cancel context.CancelCauseFunc
	// state is pendingWaiting, then pendingStarted or pendingYielded.
	state atomic.Int32
}

const (
	pendingWaiting int32 = iota
	pendingStarted
	pendingYielded
)

// wait offers the invocation's memory, while it waits for a slot, to the
// running calls that need it (admit.Budget.Yielding).
func (p *pending) wait() {
	if b := p.mem.b; b != nil {
		b.Yielding(p.mem.age, p.yield)
	}
}

// start says the invocation's call starts, or that its wait ended
// otherwise; it returns false when the invocation yielded first, so
// that its call must not run.
func (p *pending) start() bool {
	if b := p.mem.b; b != nil {
		b.Withdraw(p.mem.age)
	}
	return p.state.CompareAndSwap(pendingWaiting, pendingStarted) || p.state.Load() == pendingStarted
}

// yield gives up the invocation, unless its call has started: its body's
// memory at once, and its place in the gate as its wait ends (Admit). It
// has not run, so nothing of it has acted.
func (p *pending) yield() bool {
	if !p.state.CompareAndSwap(pendingWaiting, pendingYielded) {
		return false
	}
	p.mem.Release()
	p.cancel(errYielded)
	return true
}

// errYielded ends the wait of an invocation that yielded.
var errYielded = errors.New("the invocation yielded its memory to running calls")

// yieldedError is the answer stored for an invocation that yielded.
func (p *pending) yieldedError() error {
	return fmt.Errorf("the invocation did not run: calls running needed the memory its body of %d bytes held while it waited in the queue (--max-inflight-bytes %d); it is safe to send it again",
		len(p.body), p.mem.b.Limit())
}

// recorder keeps a response in memory, charged to mem as its buffer grows.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	mem    *Memory
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	// Forced, not waited for: the call has run, and its answer is all
	// that is left of it.
	before := r.body.Cap()
	n, err := r.body.Write(p)
	r.mem.Force(int64(r.body.Cap() - before))
	return n, err
}
