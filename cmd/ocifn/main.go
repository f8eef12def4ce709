// Command ocifn makes any OCI container image a Crossplane Composition
// Function.
package main

import (
	"os"
	"os/signal"

	"github.com/containers/storage/pkg/reexec"
	"golang.org/x/sys/unix"
)

// stopSignals interrupt a command, which then removes what it made (its
// containers, the unpacked image, scratch files) before it exits. SIGHUP,
// which a closed terminal sends to what it started, is one: its default
// action would end ocifn on the spot and leave all of that behind, the
// containers of calls still running. Unless it was ignored when ocifn
// started (nohup): asking for it would undo that.
var stopSignals = func() []os.Signal {
	s := []os.Signal{unix.SIGTERM, unix.SIGINT}
	if !signal.Ignored(unix.SIGHUP) {
		s = append(s, unix.SIGHUP)
	}
	return s
}()

func main() {
	// Image layers are unpacked by a re-executed copy of this binary that
	// chroots into the target first; that copy must stop here.
	if reexec.Init() {
		return
	}
	os.Exit(execute())
}
