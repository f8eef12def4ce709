package main

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// showsProgress reports whether long steps may draw progress on f: only on
// a terminal, and never in CI (CI=true), where a log wants whole lines.
func showsProgress(f *os.File) bool {
	if strings.EqualFold(os.Getenv("CI"), "true") {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// statusLine draws one self-overwriting status line on a terminal and
// nothing elsewhere. Updates are throttled; Done ends the line.
type statusLine struct {
	f       *os.File
	on      bool
	mu      sync.Mutex
	last    time.Time
	drawn   bool
	current string
}

func newStatusLine(f *os.File) *statusLine { return &statusLine{f: f, on: showsProgress(f)} }

// step shows what is being done now.
func (s *statusLine) step(msg string) { s.draw(msg, true) }

// bytes shows a transfer's progress, prefixed by what is transferred.
func (s *statusLine) bytes(what string) func(done, total int64) {
	return func(done, total int64) {
		msg := fmt.Sprintf("%s %s", what, humanBytes(done))
		if total > 0 {
			msg = fmt.Sprintf("%s %s / %s (%d%%)", what, humanBytes(done), humanBytes(total), done*100/total)
		}
		s.draw(msg, done == total)
	}
}

func (s *statusLine) draw(msg string, force bool) {
	if !s.on {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !force && time.Since(s.last) < 100*time.Millisecond {
		return
	}
	s.last = time.Now()
	s.current = msg
	s.drawn = true
	fmt.Fprintf(s.f, "\r\033[K%s", msg)
}

// done clears the status line.
func (s *statusLine) done() {
	if !s.on {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drawn {
		fmt.Fprint(s.f, "\r\033[K")
		s.drawn = false
	}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
