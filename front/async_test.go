package front

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/ocifn/ocifn/admit"
	"github.com/ocifn/ocifn/front/fronttest"
	"github.com/ocifn/ocifn/hook"
	"github.com/ocifn/ocifn/hook/hooktest"
)

// TestInvocationWriteLeavesNoTemporaryFile: a result that cannot be renamed
// into place fails its write and leaves no temporary file behind.
func TestInvocationWriteLeavesNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	iv, err := OpenInvocations(dir, time.Hour, 1<<20, 1<<20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer iv.Close()
	id := strings.Repeat("ab", 32)
	// A non-empty directory where the result goes: the rename fails.
	if err := os.MkdirAll(filepath.Join(iv.path(id), "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := iv.write(id, record{Running: true, Created: time.Now()}); err == nil {
		t.Fatal("write over a directory succeeded")
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

// TestLogsCarryNoWholeInvocationID: a result that cannot be stored, nor
// its record removed, is logged with the errors of its files, whose paths
// hold the id: shortened there too, as the id alone fetches the result.
func TestLogsCarryNoWholeInvocationID(t *testing.T) {
	dir := t.TempDir()
	// Written by the call's goroutine, read once iv.wg says it ended.
	var logs bytes.Buffer
	iv, err := OpenInvocations(dir, time.Hour, 1<<20, 1<<20, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer iv.Close()
	var id string
	h := iv.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id = r.Context().Value(invocationKey{}).(string)
		// A non-empty directory where the result goes: its rename, and
		// the record's removal, fail.
		_ = os.Remove(iv.path(id))
		if err := os.MkdirAll(filepath.Join(iv.path(id), "x"), 0o700); err != nil {
			t.Error(err)
		}
		_, _ = w.Write([]byte("done"))
	}))
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Prefer", "respond-async")
	h.ServeHTTP(httptest.NewRecorder(), r)
	iv.wg.Wait()
	out := logs.String()
	if !strings.Contains(out, "cannot store the result of an asynchronous invocation") || !strings.Contains(out, "cannot remove the result of an asynchronous invocation") {
		t.Fatalf("the log does not say the result was not stored, nor removed:\n%s", out)
	}
	if strings.Contains(out, id) {
		t.Errorf("the log holds the invocation's whole id, which fetches its result:\n%s", out)
	}
	if !strings.Contains(out, id[:16]+"….json: ") {
		t.Errorf("the log's errors do not name the record by the start of its id:\n%s", out)
	}
}

// TestResultLargerThanTheBound: a result that alone takes more than
// --results-max-bytes is not dropped as soon as it is stored (which a poll
// would read as unknown); the poll gets a 507 that says why.
func TestResultLargerThanTheBound(t *testing.T) {
	iv, err := OpenInvocations(t.TempDir(), time.Hour, 1000, 1<<20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer iv.Close()
	h := iv.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("x", 2000)))
	}))
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
	r.Header.Set("Prefer", "respond-async")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusAccepted {
		t.Fatalf("POST: %d, want 202", w.Code)
	}
	iv.wg.Wait()
	g := httptest.NewRecorder()
	h.ServeHTTP(g, httptest.NewRequest(http.MethodGet, w.Header().Get("Location"), nil))
	if g.Code != http.StatusInsufficientStorage {
		t.Errorf("GET: %d, want 507", g.Code)
	}
	fronttest.Says(t, "GET body", g.Body.String(), "status 200", "2000 bytes", "--results-max-bytes (1000)", "not kept")
}

// TestInvocationErrorsInTheFrontsForm: ocifn's own answers about
// invocations (an id it does not hold, a result not kept, a call cut off)
// are in the form of the front's errors: text by default, as the HTTP
// front's; {"error": ...} with JSONError, as OpenWhisk's.
func TestInvocationErrorsInTheFrontsForm(t *testing.T) {
	for _, tc := range []struct {
		name string
		form ErrorForm
		ct   string
		// msg is the message of an error's body, or why it is none.
		msg func(body string) (string, error)
	}{
		{"plain", nil, "text/plain; charset=utf-8", func(body string) (string, error) {
			if !strings.HasSuffix(body, "\n") || strings.HasPrefix(body, "{") {
				return "", errors.New("not a line of text")
			}
			return strings.TrimSuffix(body, "\n"), nil
		}},
		{"json", JSONError, "application/json", func(body string) (string, error) {
			var e struct{ Error string }
			err := json.Unmarshal([]byte(body), &e)
			return e.Error, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			iv, err := OpenInvocations(dir, time.Hour, 1000, 1<<20, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer iv.Close()
			iv.AnswerErrorsAs(tc.form)
			h := iv.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				_, _ = w.Write([]byte(strings.Repeat("x", 2000)))
			}))
			get := func(path string) *httptest.ResponseRecorder {
				g := httptest.NewRecorder()
				h.ServeHTTP(g, httptest.NewRequest(http.MethodGet, path, nil))
				return g
			}
			check := func(what string, g *httptest.ResponseRecorder, status int, msg string) {
				t.Helper()
				got, err := tc.msg(g.Body.String())
				if g.Code != status || g.Header().Get("Content-Type") != tc.ct || err != nil || !strings.HasPrefix(got, msg) {
					t.Errorf("%s: %d %s %q (%v), want %d %s saying %q", what, g.Code, g.Header().Get("Content-Type"), g.Body.String(), err, status, tc.ct, msg)
				}
			}
			check("an unknown id", get(invocationsPath+strings.Repeat("0", 64)), http.StatusNotFound, msgNoSuchInvocation)

			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
			r.Header.Set("Prefer", "respond-async")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			iv.wg.Wait()
			check("a result not kept", get(w.Header().Get("Location")), http.StatusInsufficientStorage,
				"the invocation finished with status 200 and a body of 2000 bytes, but its result takes ")

			id := strings.Repeat("1", 64)
			if err := iv.write(id, record{Running: true, Server: "gone", Created: time.Now()}); err != nil {
				t.Fatal(err)
			}
			check("a call cut off", get(invocationsPath+id), http.StatusInternalServerError, msgCutOff)
		})
	}
}

// TestAsyncRefusedWhenFull: with every slot and the queue taken, a new
// asynchronous invocation answers 503 at once, and none is stored.
func TestAsyncRefusedWhenFull(t *testing.T) {
	dir := t.TempDir()
	iv, err := OpenInvocations(dir, time.Hour, 1<<20, 1<<20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer iv.Close()
	gate := admit.New(1, 0, nil)
	iv.RefuseWhenFull(gate)
	var logs bytes.Buffer
	reg := prometheus.NewRegistry()
	metrics := hook.NewMetrics(reg)
	iv.CountRefusals(hook.NewChain(slog.New(slog.DiscardHandler), hook.Log{Logger: slog.New(slog.NewTextHandler(&logs, nil))}, metrics), "http")
	leave, err := gate.Enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer leave()
	h := iv.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { t.Error("the call ran") }))
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
	r.Header.Set("Prefer", "respond-async")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || !strings.Contains(w.Body.String(), "--max-concurrency") {
		t.Errorf("POST with the gate full: %d %v %q, want 503 with Retry-After naming the flag", w.Code, w.Header(), w.Body.String())
	}
	iv.wg.Wait()
	if entries := storedIn(dir); len(entries) != 0 {
		t.Errorf("stored: %v, want no invocation", entries)
	}
	// Refused before its call, it is counted and logged as the front's
	// refused calls are.
	hooktest.CheckCalls(t, reg, hook.Rejected, 1)
	if !strings.Contains(logs.String(), "status=503") || !strings.Contains(logs.String(), "async=true") {
		t.Errorf("log: %q, want the refused invocation's line", logs.String())
	}
}

// storedIn lists what an invocations directory stores, but the servers'
// locks.
func storedIn(dir string) []os.DirEntry {
	entries, _ := os.ReadDir(dir)
	return slices.DeleteFunc(entries, func(e os.DirEntry) bool { return e.Name() == serversDir })
}

// TestBoundKeepsTheNewestResults: past --results-max-bytes the oldest
// finished results go first; the index bound works from agrees with the
// disk, and is rebuilt from it by a restart.
func TestBoundKeepsTheNewestResults(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	iv, err := OpenInvocations(dir, time.Hour, 1600, 1<<20, log)
	if err != nil {
		t.Fatal(err)
	}
	defer iv.Close()
	clock := time.Now()
	iv.now = func() time.Time { clock = clock.Add(time.Second); return clock }
	h := iv.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(w, r.Body)
	}))
	var locations []string
	for i := range 6 {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat(string(rune('a'+i)), 300)))
		r.Header.Set("Prefer", "respond-async")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusAccepted {
			t.Fatalf("POST %d: %d, want 202", i, w.Code)
		}
		iv.wg.Wait()
		locations = append(locations, w.Header().Get("Location"))
	}
	var kept []int
	for i, loc := range locations {
		g := httptest.NewRecorder()
		h.ServeHTTP(g, httptest.NewRequest(http.MethodGet, loc, nil))
		switch g.Code {
		case http.StatusOK:
			if g.Body.String() != strings.Repeat(string(rune('a'+i)), 300) {
				t.Errorf("result %d: %q, want its own body", i, g.Body.String())
			}
			kept = append(kept, i)
		case http.StatusNotFound:
		default:
			t.Errorf("result %d: %d", i, g.Code)
		}
	}
	if len(kept) < 2 || kept[len(kept)-1] != 5 || kept[0] != 6-len(kept) {
		t.Errorf("kept results %v, want the newest ones, more than one", kept)
	}
	// Removed before their time, they are said to be, and by what.
	if !strings.Contains(logs.String(), "to keep them within --results-max-bytes") {
		t.Errorf("log: %q, want the removals said", logs.String())
	}
	g := httptest.NewRecorder()
	h.ServeHTTP(g, httptest.NewRequest(http.MethodGet, locations[0], nil))
	if !strings.Contains(g.Body.String(), "--results-max-bytes") {
		t.Errorf("GET of a removed result: %q, want the reason to name --results-max-bytes", g.Body.String())
	}
	onDisk := func() (n int64) {
		for _, e := range storedIn(dir) {
			info, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			n += info.Size()
		}
		return n
	}
	if n := onDisk(); n > 1600 || n != iv.total || len(iv.index) != len(kept) {
		t.Errorf("%d bytes on disk, %d counted in %d entries; want them equal, at most 1600, for %d results", n, iv.total, len(iv.index), len(kept))
	}
	// A restart: the first holds the directory until it is closed.
	iv.Close()
	again, err := OpenInvocations(dir, time.Hour, 1600, 1<<20, log)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if n := onDisk(); again.total != n || len(again.index) != len(kept) {
		t.Errorf("reopened: %d bytes counted in %d entries, want %d in %d", again.total, len(again.index), n, len(kept))
	}
}

// TestAsyncSlowBodyIsRefused: an invocation whose body does not arrive
// within ReadBodiesWithin's time is answered 400 and stored nowhere; it
// was read without a deadline, so a client that stalled held its request,
// and a shutdown, as long as it liked.
func TestAsyncSlowBodyIsRefused(t *testing.T) {
	dir := t.TempDir()
	iv, err := OpenInvocations(dir, time.Hour, 1<<20, 1<<20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer iv.Close()
	iv.ReadBodiesWithin(300 * time.Millisecond)
	var logs bytes.Buffer
	iv.CountRefusals(hook.NewChain(slog.New(slog.DiscardHandler), hook.Log{Logger: slog.New(slog.NewTextHandler(&logs, nil))}), "http")
	srv := httptest.NewServer(iv.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("the call ran") })))
	defer srv.Close()
	code, msg := fronttest.StalledBody(t, srv.Listener.Addr().String(), "Prefer: respond-async\r\n")
	if code != http.StatusBadRequest || !strings.Contains(msg, "did not arrive within the call's timeout of 300ms") {
		t.Errorf("a stalled body: status %d %q, want 400 naming the timeout", code, msg)
	}
	if entries := storedIn(dir); len(entries) != 0 {
		t.Errorf("stored: %v, want no invocation", entries)
	}
	// The refusal is timed from the request's arrival, the body's wait
	// included.
	m := regexp.MustCompile(`duration=(\S+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no duration in the refusal's log line: %q", logs.String())
	}
	if d, err := time.ParseDuration(m[1]); err != nil || d < 300*time.Millisecond {
		t.Errorf("the refusal's duration %s, want at least the 300ms its body was waited for", m[1])
	}
}

// TestAsyncBurstRefusedAtOnce: invocations that come together, more than
// the gate's slots and queue hold, are refused at once past what it holds;
// each checked the gate before any call had entered it, so all were
// accepted, and those past its room found a 503 when polled.
func TestAsyncBurstRefusedAtOnce(t *testing.T) {
	iv, err := OpenInvocations(t.TempDir(), time.Hour, 1<<20, 1<<20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer iv.Close()
	gate := admit.New(1, 1, nil)
	iv.RefuseWhenFull(gate)
	// The calls enter the gate only once every invocation was answered,
	// as when a burst's requests are all answered before their calls'
	// goroutines run.
	burstAnswered := make(chan struct{})
	release := make(chan struct{})
	h := iv.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-burstAnswered
		leave, err := gate.Enter(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer leave()
		<-release
	}))
	var accepted []string
	refused := 0
	for range 5 {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("{}"))
		r.Header.Set("Prefer", "respond-async")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusAccepted:
			accepted = append(accepted, w.Header().Get("Location"))
		case http.StatusServiceUnavailable:
			refused++
		default:
			t.Errorf("POST: %d %q", w.Code, w.Body.String())
		}
	}
	close(burstAnswered)
	close(release)
	iv.wg.Wait()
	if len(accepted) != 2 || refused != 3 {
		t.Errorf("%d accepted, %d refused; want 2 (a slot and a place in the queue) and 3", len(accepted), refused)
	}
	for _, loc := range accepted {
		g := httptest.NewRecorder()
		h.ServeHTTP(g, httptest.NewRequest(http.MethodGet, loc, nil))
		if g.Code != http.StatusOK {
			t.Errorf("an accepted invocation's result: %d %q, want 200", g.Code, g.Body.String())
		}
	}
	// Every place was given back: the slot, and the place in the queue.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	leave, err := gate.Enter(ctx)
	if err != nil {
		t.Fatalf("the gate kept the slot: %v", err)
	}
	defer leave()
	if err := gate.Refuses(); err != nil {
		t.Errorf("the gate kept the place in the queue: %v", err)
	}
}

// TestResultOfALongCallOutlivesItsCall: a result is kept for the TTL from
// when it is stored; counted from its call's start, the result of a call
// that ran longer than the TTL expired as it was stored.
func TestResultOfALongCallOutlivesItsCall(t *testing.T) {
	iv, err := OpenInvocations(t.TempDir(), 10*time.Second, 1<<20, 1<<20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer iv.Close()
	var mu sync.Mutex
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	iv.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); clock = clock.Add(d) }
	h := iv.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		advance(20 * time.Second) // the call runs twice the TTL
		_, _ = w.Write([]byte("done"))
	}))
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Prefer", "respond-async")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	iv.wg.Wait()
	get := func() *httptest.ResponseRecorder {
		g := httptest.NewRecorder()
		h.ServeHTTP(g, httptest.NewRequest(http.MethodGet, w.Header().Get("Location"), nil))
		return g
	}
	if g := get(); g.Code != http.StatusOK || g.Body.String() != "done" {
		t.Errorf("the result as soon as it is stored: %d %q, want 200 done", g.Code, g.Body.String())
	}
	advance(11 * time.Second)
	if g := get(); g.Code != http.StatusNotFound {
		t.Errorf("the result past the TTL: %d, want 404", g.Code)
	}
}

// TestServersShareTheInvocationsDirectory: servers that share a directory
// (a function's replicas on one volume) each answer the others'
// invocations: 202 while one runs on another server, then its result. A
// server opened on it does not take another's running invocation for one
// a restart cut off, nor bound another's results with its own. A server of
// an earlier version, which holds the directory to itself, keeps this one
// out, naming it and --cache-dir.
func TestServersShareTheInvocationsDirectory(t *testing.T) {
	dir := t.TempDir()
	first, err := OpenInvocations(dir, time.Hour, 1<<20, 1<<20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	release := make(chan struct{})
	h := first.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		_, _ = io.Copy(w, r.Body)
	}))
	post := func(body string) string {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		r.Header.Set("Prefer", "respond-async")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusAccepted {
			t.Fatalf("POST: %d, want 202", w.Code)
		}
		return w.Header().Get("Location")
	}
	finished := post("finished")
	release <- struct{}{}
	running := post("running")
	// A server started while the first runs, with room for nothing of its
	// own: the first's results are not its to bound.
	second, err := OpenInvocations(dir, time.Hour, 1, 1<<20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("a second server on the directory: %v", err)
	}
	defer second.Close()
	other := second.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("a poll reached the function") }))
	get := func(loc string) *httptest.ResponseRecorder {
		g := httptest.NewRecorder()
		other.ServeHTTP(g, httptest.NewRequest(http.MethodGet, loc, nil))
		return g
	}
	if g := get(running); g.Code != http.StatusAccepted {
		t.Errorf("the first server's running invocation polled on the second: %d %q, want 202", g.Code, g.Body.String())
	}
	close(release)
	first.wg.Wait()
	second.bound()
	for loc, want := range map[string]string{finished: "finished", running: "running"} {
		if g := get(loc); g.Code != http.StatusOK || g.Body.String() != want {
			t.Errorf("the first server's result polled on the second: %d %q, want 200 %q", g.Code, g.Body.String(), want)
		}
	}
	if len(second.index) != 0 {
		t.Errorf("the second server indexed %d records of the first, a live server", len(second.index))
	}

	// An earlier version took the directory's flock exclusive.
	earlier := t.TempDir()
	f, err := os.Open(earlier)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenInvocations(earlier, time.Hour, 1<<20, 1<<20, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), earlier) || !strings.Contains(err.Error(), "--cache-dir") || !strings.Contains(err.Error(), "earlier version") {
		t.Fatalf("open while an earlier version holds the directory: %v, want it refused naming %s, an earlier version and --cache-dir", err, earlier)
	}
}

// TestGoneServersInvocations: when a server sharing the directory is gone
// (its lock free: killed, say), a poll on another answers its running
// invocation as cut off, and the next server to look adopts its records:
// it marks the running ones cut off, removes its temporary files, and
// bounds its results with its own. A live server's temporary file is left
// alone. Records of an earlier version, which name no server, are adopted
// at startup.
func TestGoneServersInvocations(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	dead, err := OpenInvocations(dir, time.Hour, 1<<20, 1<<20, log)
	if err != nil {
		t.Fatal(err)
	}
	running, finished := strings.Repeat("a1", 32), strings.Repeat("b2", 32)
	if err := dead.write(running, record{Running: true, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := dead.writeResult(finished, record{Created: time.Now(), Status: http.StatusOK, Body: []byte("kept")}); err != nil {
		t.Fatal(err)
	}
	earlier := strings.Repeat("c3", 32)
	if err := os.WriteFile(filepath.Join(dir, earlier+".json"), []byte(`{"running":true,"created":"`+time.Now().Format(time.RFC3339Nano)+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	live, err := OpenInvocations(dir, time.Hour, 1<<20, 1<<20, log)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if len(live.index) != 1 {
		t.Errorf("the live server indexed %d records at startup, want the earlier version's one", len(live.index))
	}
	// The one written by an earlier version, left running, is cut off.
	poll := func(id string) *httptest.ResponseRecorder {
		g := httptest.NewRecorder()
		live.serveResult(g, id)
		return g
	}
	if g := poll(earlier); g.Code != http.StatusInternalServerError || !strings.Contains(g.Body.String(), "the ocifn server running it stopped") {
		t.Errorf("an earlier version's running record: %d %q, want 500 cut off", g.Code, g.Body.String())
	}
	if g := poll(running); g.Code != http.StatusAccepted {
		t.Errorf("a running invocation of a live server: %d, want 202", g.Code)
	}
	deadTemp := filepath.Join(dir, tmpPrefix+dead.server+"-123")
	liveTemp := filepath.Join(dir, tmpPrefix+live.server+"-456")
	for _, p := range []string{deadTemp, liveTemp} {
		if err := os.WriteFile(p, []byte("half a record"), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// The server dies: its process's locks go with it.
	dead.held[dead.server].Close()
	if g := poll(running); g.Code != http.StatusInternalServerError || !strings.Contains(g.Body.String(), "the ocifn server running it stopped") {
		t.Errorf("a running invocation of a gone server: %d %q, want 500 cut off", g.Code, g.Body.String())
	}
	live.swept = time.Time{}
	live.bound()
	if _, err := os.Stat(deadTemp); !os.IsNotExist(err) {
		t.Errorf("the gone server's temporary file: %v, want it removed", err)
	}
	if _, err := os.Stat(liveTemp); err != nil {
		t.Errorf("the live server's temporary file: %v, want it kept", err)
	}
	rec, _, f, err := live.open(running)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if rec.Running || rec.Status != http.StatusInternalServerError {
		t.Errorf("the gone server's running record after adoption: running %v status %d, want it marked cut off", rec.Running, rec.Status)
	}
	if g := poll(finished); g.Code != http.StatusOK || g.Body.String() != "kept" {
		t.Errorf("the gone server's result: %d %q, want 200 kept", g.Code, g.Body.String())
	}
	if len(live.index) != 3 || live.index[finished].server != dead.server {
		t.Errorf("the live server's index after adoption: %v, want the gone server's two records and the earlier one", live.index)
	}

	// Adopted by the live server, the gone one's records are not adopted
	// again by another.
	third, err := OpenInvocations(dir, time.Hour, 1<<20, 1<<20, log)
	if err != nil {
		t.Fatal(err)
	}
	if len(third.index) != 0 {
		t.Errorf("a third server indexed %d records the live server holds", len(third.index))
	}
	third.Close()
	// Once they expire, the gone server's lock file goes.
	live.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	live.swept = time.Time{}
	live.bound()
	if entries, _ := os.ReadDir(filepath.Join(dir, serversDir)); len(entries) != 1 || entries[0].Name() != live.server+".lock" {
		t.Errorf("the servers' locks once the gone server's records expired: %v, want the live server's alone", entries)
	}
}

// TestGoneServerPolledOnTwoAtOnce: the running invocation of a server that
// is gone, polled on two other servers at once, answers 500 cut off on
// both, every time. Each poll looks at the gone server's lock: taken
// exclusive, the look of one server made the other's fail, which then
// took the server for alive and answered 202, after a 500 had been
// answered already (5 of 400 polls with three real servers).
func TestGoneServerPolledOnTwoAtOnce(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	open := func() *Invocations {
		iv, err := OpenInvocations(dir, time.Hour, 1<<20, 1<<20, log)
		if err != nil {
			t.Fatal(err)
		}
		return iv
	}
	dead, first, second := open(), open(), open()
	defer first.Close()
	defer second.Close()
	id := strings.Repeat("d4", 32)
	if err := dead.write(id, record{Running: true, Created: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// The server dies: its process's locks go with it.
	dead.held[dead.server].Close()
	poll := func(iv *Invocations) int {
		g := httptest.NewRecorder()
		iv.serveResult(g, id)
		return g.Code
	}

	// A server looking at the lock at this moment, as the second's poll does.
	f, err := os.OpenFile(first.lockPath(dead.server), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if code := poll(first); code != http.StatusInternalServerError {
		t.Errorf("polled while another server looks at the gone server's lock: %d, want 500", code)
	}
	f.Close()

	codes := make(chan int, 2000)
	var wg sync.WaitGroup
	for range 500 {
		for _, iv := range []*Invocations{first, second} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				codes <- poll(iv)
			}()
		}
	}
	wg.Wait()
	close(codes)
	seen := map[int]int{}
	for c := range codes {
		seen[c]++
	}
	if len(seen) != 1 || seen[http.StatusInternalServerError] == 0 {
		t.Errorf("polled on two servers at once, answered %v, want 500 every time", seen)
	}
}

// discardWriter is an http.ResponseWriter that keeps the status and
// counts the body.
type discardWriter struct {
	header http.Header
	status int
	n      int64
}

func (d *discardWriter) Header() http.Header         { return d.header }
func (d *discardWriter) WriteHeader(status int)      { d.status = status }
func (d *discardWriter) Write(p []byte) (int, error) { d.n += int64(len(p)); return len(p), nil }

// TestResultIsCopiedFromDisk: a poll copies a stored result's body from its
// file to the caller, with no copy of the body in memory, so that many
// polls of a large result take no more memory than one of a small one; and
// the body is stored as it is, not base64 in JSON (a third larger).
func TestResultIsCopiedFromDisk(t *testing.T) {
	const size = 8 << 20
	iv, err := OpenInvocations(t.TempDir(), time.Hour, 64<<20, 1<<20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer iv.Close()
	id := strings.Repeat("cd", 32)
	body := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	if err := iv.writeResult(id, record{Created: time.Now(), Status: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain"}}, Body: body}); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(iv.path(id))
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() > size+1024 {
		t.Errorf("a body of %d bytes takes %d on disk", size, info.Size())
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	w := &discardWriter{header: http.Header{}}
	iv.serveResult(w, id)
	runtime.ReadMemStats(&after)
	if w.status != http.StatusOK || w.n != size || w.header.Get("Content-Type") != "text/plain" {
		t.Fatalf("poll: status %d, %d bytes, header %v", w.status, w.n, w.header)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/8 {
		t.Errorf("a poll of a %d-byte result allocated %d bytes", size, alloc)
	}
	// A record an earlier version stored, its body in the JSON.
	old := strings.Repeat("ef", 32)
	if err := os.WriteFile(iv.path(old), []byte(`{"running":false,"created":"`+time.Now().Format(time.RFC3339Nano)+`","status":201,"body":"aGVsbG8K"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	g := httptest.NewRecorder()
	iv.serveResult(g, old)
	if g.Code != http.StatusCreated || g.Body.String() != "hello\n" {
		t.Errorf("a record of an earlier version: %d %q, want 201 \"hello\\n\"", g.Code, g.Body.String())
	}
}

// TestAsyncBodiesAreCharged: an asynchronous invocation's body is charged
// to --max-inflight-bytes from when it is read, while it waits in the
// queue too, and its call takes it with that charge rather than read a
// copy; one that finds no room within a second is refused 503 with
// Retry-After. Once the results are stored, nothing is charged.
func TestAsyncBodiesAreCharged(t *testing.T) {
	const size = 100 << 10
	budget := admit.NewBudget(1 << 20)
	gate := admit.New(1, 2, nil)
	cfg := &Config{Gate: gate, Budget: budget, Timeout: 5 * time.Second, MaxRequestBytes: 1 << 20}
	release := make(chan struct{})
	h := func() http.Handler {
		iv, err := OpenInvocations(t.TempDir(), time.Hour, 1<<30, 1<<20, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(iv.Close)
		iv.RefuseWhenFull(gate)
		iv.ChargeTo(budget, nil)
		return iv.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			adm, refused := cfg.Admit(r.Context(), w, r)
			if refused != nil {
				http.Error(w, refused.Err.Error(), refused.Status)
				return
			}
			defer adm.Leave()
			<-release
			_, _ = w.Write(adm.Body)
		}))
	}()
	post := func(n int) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat("a", n)))
		r.Header.Set("Prefer", "respond-async")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	var locations []string
	for range 2 {
		w := post(size)
		if w.Code != http.StatusAccepted {
			t.Fatalf("an invocation of %d bytes: %d %s, want 202", size, w.Code, w.Body)
		}
		locations = append(locations, w.Header().Get("Location"))
	}
	// One runs, one waits in the queue: both bodies are held, once each.
	deadline := time.Now().Add(5 * time.Second)
	for budget.Used() != 2*size {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes charged for two invocations of %d bytes, want %d", budget.Used(), size, 2*size)
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	w := post(900 << 10)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("an invocation of 900 KiB beside them: %d Retry-After %q, want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	if took := time.Since(start); took < admit.ReserveWait {
		t.Errorf("refused after %s, want after waiting %s for room", took, admit.ReserveWait)
	}
	fronttest.Says(t, "its answer", w.Body.String(), "--max-inflight-bytes 1048576")
	close(release)
	for _, loc := range locations {
		for {
			g := httptest.NewRecorder()
			h.ServeHTTP(g, httptest.NewRequest(http.MethodGet, loc, nil))
			if g.Code == http.StatusAccepted {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if g.Code != http.StatusOK || g.Body.Len() != size {
				t.Errorf("GET %s: %d with %d bytes, want 200 with the body echoed", loc, g.Code, g.Body.Len())
			}
			break
		}
	}
	deadline = time.Now().Add(5 * time.Second)
	for budget.Used() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if used := budget.Used(); used != 0 {
		t.Errorf("%d bytes still charged once the results are stored", used)
	}
}

// TestUnnamedServerLocksAreRemoved: a server killed between creating its
// lock file and naming it (openServer) leaves a .new-* file that no record
// names, which no server adopts. A server removes those that nobody holds
// locked and that are older than a live server takes to name its own, at
// its start and as it sweeps; one locked, or made a moment ago, stays.
func TestUnnamedServerLocksAreRemoved(t *testing.T) {
	dir := t.TempDir()
	servers := filepath.Join(dir, serversDir)
	if err := os.MkdirAll(servers, 0o700); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * newLockGrace)
	leave := func(name string, at time.Time) string {
		path := filepath.Join(servers, name)
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
		return path
	}
	killed := leave(newPrefix+"1234", old)
	fresh := leave(newPrefix+"5678", time.Now())
	locked := leave(newPrefix+"9abc", old)
	f, err := os.Open(locked)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	iv, err := OpenInvocations(dir, time.Hour, 1<<20, 1<<20, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer iv.Close()
	exists := func(path string) bool { _, err := os.Stat(path); return err == nil }
	if exists(killed) || !exists(fresh) || !exists(locked) {
		t.Errorf("at startup: the killed server's file there %v, a fresh one %v, a locked one %v; want only the killed server's removed", exists(killed), exists(fresh), exists(locked))
	}

	// Left while the server runs: removed at its next sweep.
	killed = leave(newPrefix+"def0", old)
	iv.serversMu.Lock()
	iv.swept = time.Now().Add(-sweepEvery)
	iv.serversMu.Unlock()
	iv.bound()
	if exists(killed) || !exists(fresh) || !exists(locked) {
		t.Errorf("at a sweep: the killed server's file there %v, a fresh one %v, a locked one %v; want only the killed server's removed", exists(killed), exists(fresh), exists(locked))
	}
}

// TestStartupAdoptsServersWithoutLockFiles: records that name a server
// whose lock file is gone (a directory copied without its .servers, say)
// are adopted by the first server to start, in its one pass over the
// directory: the running one cut off, the finished one indexed, and the
// server's temporary file removed, though its name sorts before every
// record's.
func TestStartupAdoptsServersWithoutLockFiles(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	const gone = "0123456789abcdef"
	now := time.Now().Format(time.RFC3339Nano)
	running, finished := strings.Repeat("d4", 32), strings.Repeat("e5", 32)
	files := map[string]string{
		running + ".json":         `{"running":true,"server":"` + gone + `","created":"` + now + `"}` + "\n",
		finished + ".json":        `{"server":"` + gone + `","created":"` + now + `","status":200}` + "\nkept",
		tmpPrefix + gone + "-123": "half a record",
	}
	if err := os.MkdirAll(filepath.Join(dir, serversDir), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	iv, err := OpenInvocations(dir, time.Hour, 1<<20, 1<<20, log)
	if err != nil {
		t.Fatal(err)
	}
	defer iv.Close()
	if _, ok := iv.held[gone]; !ok {
		t.Errorf("the server the records name is not held: %v", iv.held)
	}
	if len(iv.index) != 2 || iv.index[finished].server != gone {
		t.Errorf("the index at startup: %v, want the gone server's two records", iv.index)
	}
	g := httptest.NewRecorder()
	iv.serveResult(g, running)
	if g.Code != http.StatusInternalServerError || !strings.Contains(g.Body.String(), "the ocifn server running it stopped") {
		t.Errorf("the gone server's running record: %d %q, want 500 cut off", g.Code, g.Body.String())
	}
	if _, err := os.Stat(filepath.Join(dir, tmpPrefix+gone+"-123")); !os.IsNotExist(err) {
		t.Errorf("the gone server's temporary file: %v, want it removed", err)
	}
}

// TestStartupLeavesALiveServerToASweep: a server that holds its lock when
// a starting server lists the directory, and goes during that server's
// pass over the records, may have started invocations the listing lacks:
// it is left to a sweep, which lists the directory once it holds the
// lock, rather than adopted in the pass. Adopted there, an invocation it
// started after the listing stayed running on disk, out of every index:
// never cut off, never removed, its server's lock let go once the rest
// expired. (The pass is adopt(true), which OpenInvocations runs, run here
// with a clock that has the other server go in the middle of it.)
func TestStartupLeavesALiveServerToASweep(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	other, err := OpenInvocations(dir, time.Hour, 1<<20, 1<<20, log)
	if err != nil {
		t.Fatal(err)
	}
	iv, err := OpenInvocations(dir, time.Hour, 1<<20, 1<<20, log)
	if err != nil {
		t.Fatal(err)
	}
	defer iv.Close()
	// The other server's result comes last in the listing; first, the
	// running record of a server gone without a lock file, which the
	// pass cuts off as it meets it.
	finished, started := strings.Repeat("f", 64), strings.Repeat("a", 64)
	if err := other.writeResult(finished, record{Created: time.Now(), Status: http.StatusOK, Body: []byte("kept")}); err != nil {
		t.Fatal(err)
	}
	const gone = "0123456789abcdef"
	if err := os.WriteFile(filepath.Join(dir, strings.Repeat("0", 64)+".json"), []byte(`{"running":true,"server":"`+gone+`","created":"`+time.Now().Format(time.RFC3339Nano)+`"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var went sync.Once
	iv.now = func() time.Time {
		// After the listing: the other server starts an invocation, and
		// is killed.
		went.Do(func() {
			if err := other.write(started, record{Running: true, Created: time.Now()}); err != nil {
				t.Error(err)
			}
			other.held[other.server].Close()
		})
		return time.Now()
	}
	iv.adopt(true)
	iv.swept = time.Time{}
	iv.bound()
	rec, _, f, err := iv.open(started)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if rec.Running {
		t.Error("the invocation the gone server started after the listing is still running on disk; want it cut off by the sweep")
	}
	if e, ok := iv.index[started]; !ok || e.server != other.server || iv.index[finished].server != other.server {
		t.Errorf("the index: %v, want the gone server's two records", iv.index)
	}
}
