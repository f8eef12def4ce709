package front

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Several servers (the replicas of one function behind a Service) may keep
// their invocations in one directory on a volume they all mount, so that a
// poll that reaches any of them finds the result. Each server holds an
// exclusive flock on a lock file of its own in serversDir for its life; a
// record names the server that wrote it. A server whose lock can be taken
// is gone (killed, restarted, an old pod): its running invocations will
// never finish, and its records have nobody to bound them. The first
// server to take its lock adopts them, and holds that lock while any of
// them is left, so that no other server adopts them too; the invariant is
// that the records naming a server are in the index of whoever holds its
// lock, and that a server's lock file is there while records name it.

// serversDir holds, in an invocations directory, the lock files of the
// servers keeping invocations there.
const serversDir = ".servers"

// earlierLock is the lock file that stands for earlier versions of ocifn,
// whose records name no server: it is made to adopt them.
const earlierLock = "earlier.lock"

// tmpPrefix starts the name of a record being written; the writer's id
// follows, so that a server cleans the temporary files only of servers
// that are gone, not those of a write in progress elsewhere.
const tmpPrefix = ".tmp-"

// newPrefix starts the name of a server's lock file from its creation to
// its lock (openServer), when it takes its server's name.
const newPrefix = ".new-"

// newLockGrace is how old an unlocked lock file still under newPrefix
// must be to be taken for one a server killed before it named it left: a
// live server locks its own a moment after it creates it.
const newLockGrace = time.Minute

// sweepEvery is how often a server looks for servers that went, after a
// call: an idle server has nothing to bound.
const sweepEvery = 10 * time.Second

// errHeld says that a live process holds a server's lock.
var errHeld = errors.New("held by a live server")

// newServerID returns 64 random bits in hex: a server's id, unique among
// those that share a directory.
func newServerID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("cannot generate a server id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func validServer(s string) bool {
	if len(s) != 16 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// lockPath is where the lock of server is; "" is earlier versions'.
func (iv *Invocations) lockPath(server string) string {
	if server == "" {
		return filepath.Join(iv.dir, serversDir, earlierLock)
	}
	return filepath.Join(iv.dir, serversDir, server+".lock")
}

// tempServer reports whether name is a temporary file of a write, and of
// which server's ("" for an earlier version's).
func tempServer(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, tmpPrefix)
	if !ok {
		return "", false
	}
	if s, _, ok := strings.Cut(rest, "-"); ok && validServer(s) {
		return s, true
	}
	return "", true
}

// openServer creates the lock file of a new server and locks it. The file
// is locked before it takes its name: seen unlocked, another server would
// take this one for a server that is gone.
func openServer(dir string) (string, *os.File, error) {
	id, err := newServerID()
	if err != nil {
		return "", nil, err
	}
	f, err := os.CreateTemp(filepath.Join(dir, serversDir), newPrefix)
	if err != nil {
		return "", nil, fmt.Errorf("cannot create this server's lock in the invocations directory: %w", err)
	}
	fail := func(err error) (string, *os.File, error) {
		f.Close()
		_ = os.Remove(f.Name())
		return "", nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fail(fmt.Errorf("cannot lock %s (the invocations directory needs a file system with working flock): %w", f.Name(), err))
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, serversDir, id+".lock")); err != nil {
		return fail(fmt.Errorf("cannot create this server's lock in the invocations directory: %w", err))
	}
	return id, f, nil
}

// take locks the lock file at path, made first when create is set, with
// how (unix.LOCK_EX to adopt, unix.LOCK_SH to look): it returns errHeld
// when a live process holds it, and os.ErrNotExist when there is none.
// The file is opened for writing: NFS emulates flock with POSIX locks,
// whose exclusive kind needs it.
func take(path string, create bool, how int) (*os.File, error) {
	flags := os.O_RDWR
	if create {
		flags |= os.O_CREATE
	}
	for range 5 {
		f, err := os.OpenFile(path, flags, 0o600)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, errHeld
			}
			return nil, fmt.Errorf("cannot lock %s: %w", path, err)
		}
		// The server that adopted it may have removed it between its
		// opening and its lock: a lock on a removed file holds nothing.
		fi, ferr := f.Stat()
		pi, perr := os.Stat(path)
		if ferr == nil && perr == nil && os.SameFile(fi, pi) {
			return f, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("cannot lock %s: it was removed or replaced at every try", path)
}

// gone reports whether the server that wrote a running record is gone,
// so that nothing will finish it.
func (iv *Invocations) gone(server string) bool {
	if server == iv.server {
		return false
	}
	if server != "" && !validServer(server) {
		return true
	}
	// Under the lock: NFS's emulation of flock is per process, so a
	// second lock taken here on a file this server holds would succeed,
	// and its close let go of the lock held.
	iv.serversMu.Lock()
	defer iv.serversMu.Unlock()
	if _, ok := iv.held[server]; ok {
		return true // adopted by this server: it is gone
	}
	// Shared: servers polled at once for the same record each look, and
	// an exclusive look of one would make the other's fail, which would
	// take the server for alive and answer 202 after the first's 500.
	f, err := take(iv.lockPath(server), false, unix.LOCK_SH)
	if err == nil {
		f.Close()
		return true
	}
	return errors.Is(err, os.ErrNotExist)
}

// takeGone takes the locks of the servers that are gone, among those named
// (whose lock files are made if missing) and those with a lock file, and
// returns them.
func (iv *Invocations) takeGone(named map[string]bool) map[string]bool {
	iv.serversMu.Lock()
	defer iv.serversMu.Unlock()
	taken := map[string]bool{}
	for s := range named {
		if iv.takeLocked(s, true) {
			taken[s] = true
		}
	}
	entries, err := os.ReadDir(filepath.Join(iv.dir, serversDir))
	if err != nil {
		iv.log.Warn("cannot read the servers of the invocations directory", "error", err)
		return taken
	}
	for _, e := range entries {
		s, ok := strings.CutSuffix(e.Name(), ".lock")
		switch {
		case e.Name() == earlierLock:
			s = ""
		case !ok || !validServer(s):
			continue // an NFS client's .nfs file of a removed lock, say
		}
		if iv.takeLocked(s, false) {
			taken[s] = true
		}
	}
	return taken
}

// takeLocked takes the lock of server, made first when create is set, if
// it is gone and not held here yet, and reports whether it did. The caller
// holds serversMu.
func (iv *Invocations) takeLocked(server string, create bool) bool {
	if _, ok := iv.held[server]; ok {
		return false
	}
	f, err := take(iv.lockPath(server), create, unix.LOCK_EX)
	if err != nil {
		if !errors.Is(err, errHeld) && !errors.Is(err, os.ErrNotExist) {
			iv.log.Warn("cannot tell whether a server sharing the invocations directory is gone", "server", server, "error", err)
		}
		return false
	}
	iv.held[server] = f
	return true
}

// adopt takes the records of the servers that are gone: it indexes their
// finished results, so that this server bounds them, marks their running
// invocations cut off, and removes their temporary files. At startup it
// also adopts the servers the records name that have no lock file, and
// removes the temporary files of earlier versions. It returns how many
// invocations it cut off. The caller lets go of the servers left without
// records (letGo), once bound has removed what it removes.
func (iv *Invocations) adopt(startup bool) (cut int) {
	iv.removeUnnamed()
	var named map[string]bool
	if startup {
		named = map[string]bool{"": true}
	}
	taken := iv.takeGone(named)
	if len(taken) > 0 || startup {
		cut = iv.indexRecordsOf(taken, startup)
	}
	return cut
}

// removeUnnamed removes the lock files that servers killed between
// their creation and their naming (openServer) left: no record names
// them, so no server adopts them, and they would stay for good.
func (iv *Invocations) removeUnnamed() {
	dir := filepath.Join(iv.dir, serversDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return // takeGone, next, says so
	}
	iv.serversMu.Lock()
	defer iv.serversMu.Unlock()
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), newPrefix) {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < newLockGrace {
			continue
		}
		path := filepath.Join(dir, e.Name())
		f, err := take(path, false, unix.LOCK_EX)
		if err != nil {
			continue // locked by its server, which lives, or gone
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			iv.log.Warn("cannot remove the lock file a server killed as it started left in the invocations directory", "file", path, "error", err)
		}
		f.Close()
	}
}

// indexRecordsOf indexes the records of servers, whose locks this server
// holds, and returns how many running ones it marked cut off. With
// discover, it also takes the lock of each other server a record names
// that has no lock file, and adopts its records too: one pass over the
// directory, which a restart with many results waits for.
func (iv *Invocations) indexRecordsOf(servers map[string]bool, discover bool) (cut int) {
	entries, err := os.ReadDir(iv.dir)
	if err != nil {
		iv.log.Warn("cannot read the invocations directory", "error", err)
		return 0
	}
	// Temporary files are removed at the end, once every server gone is
	// known: one may come before its server's first record.
	var temps []string
	tried := map[string]bool{}
	for _, e := range entries {
		if _, ok := tempServer(e.Name()); ok {
			temps = append(temps, e.Name())
			continue
		}
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !validID(id) {
			continue
		}
		rec, size, err := iv.head(id)
		if err != nil {
			// Unreadable, or not a record of ours: left alone, and not
			// counted.
			continue
		}
		if !servers[rec.Server] {
			if !discover || tried[rec.Server] || !iv.adoptable(rec.Server) {
				continue
			}
			tried[rec.Server] = true
			// One with a lock file held it when takeGone looked: it may
			// have started invocations since the directory was listed,
			// and go before the pass meets it. Those would be left out
			// of the index of the server that then holds its lock, for
			// good; a sweep lists the directory once it has the lock.
			// A server without one is gone, and wrote its last record
			// before.
			if _, err := os.Lstat(iv.lockPath(rec.Server)); !errors.Is(err, os.ErrNotExist) {
				continue
			}
			iv.serversMu.Lock()
			took := iv.takeLocked(rec.Server, true)
			iv.serversMu.Unlock()
			if !took {
				continue
			}
			servers[rec.Server] = true
			// Read again under the lock: the server that held it may have
			// removed or rewritten the record since.
			if rec, size, err = iv.head(id); err != nil || !servers[rec.Server] {
				continue
			}
		}
		if !rec.Running {
			iv.mu.Lock()
			iv.indexLocked(id, stored{size: size, created: rec.Created, server: rec.Server})
			iv.mu.Unlock()
			continue
		}
		if err := iv.write(id, cutOff(rec.Server, iv.now())); err == nil {
			cut++
		}
	}
	for _, name := range temps {
		if s, _ := tempServer(name); servers[s] {
			_ = os.Remove(filepath.Join(iv.dir, name)) // a write cut off
		}
	}
	return cut
}

// adoptable reports whether a record naming server may be another server's
// to adopt: not this one's, and a server's id or an earlier version's "".
func (iv *Invocations) adoptable(server string) bool {
	return server != iv.server && (server == "" || validServer(server))
}

// head reads a record's fields but Body, and its size on disk.
func (iv *Invocations) head(id string) (record, int64, error) {
	rec, _, f, err := iv.open(id)
	if err != nil {
		return record{}, 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return record{}, 0, err
	}
	return rec, info.Size(), nil
}

// cutOff is the record of an invocation whose server went before it
// ended.
func cutOff(server string, at time.Time) record {
	return record{Server: server, Created: at, Status: http.StatusInternalServerError,
		Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, Body: []byte(msgCutOff + "\n"), Message: msgCutOff}
}

// letGo lets go of the locks of the servers adopted whose records are all
// gone, and removes their files: nothing is left to adopt.
func (iv *Invocations) letGo() {
	iv.serversMu.Lock()
	defer iv.serversMu.Unlock()
	iv.letGoLocked(false)
}

// letGoLocked is letGo's work under serversMu; at close, the locks of
// servers whose records are left, this one's included, are let go too,
// for another server to adopt.
func (iv *Invocations) letGoLocked(closing bool) {
	left := map[string]int{}
	iv.mu.Lock()
	for _, e := range iv.index {
		left[e.server]++
	}
	iv.mu.Unlock()
	for s, f := range iv.held {
		if s == iv.server && !closing {
			continue
		}
		if left[s] == 0 {
			// Removed while locked: a server that opened it before
			// finds it gone once it has the lock (take).
			_ = os.Remove(iv.lockPath(s))
		} else if !closing {
			continue
		}
		f.Close()
		delete(iv.held, s)
	}
}

// sweepDue reports whether it is time to look for servers that went.
func (iv *Invocations) sweepDue() bool {
	iv.serversMu.Lock()
	defer iv.serversMu.Unlock()
	if time.Since(iv.swept) < sweepEvery {
		return false
	}
	iv.swept = time.Now()
	return true
}
