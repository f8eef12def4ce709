package adaptor

import (
	"bytes"
	"errors"
	"log/slog"

	"github.com/ocifn/ocifn/hook"
)

// errOutputLimit stops the copy of a function's stdout past its cap; the
// function then gets EPIPE.
var errOutputLimit = errors.New("stdout limit reached")

// cappedBuffer collects stdout up to max bytes. The buffer is a field, not
// embedded: an embedded bytes.Buffer would lend its ReadFrom and WriteString
// to io.Copy and io.WriteString, which would bypass the cap.
type cappedBuffer struct {
	buf      bytes.Buffer
	max      int
	overflow bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if c.buf.Len()+len(p) > c.max {
		c.overflow = true
		return 0, errOutputLimit
	}
	return c.buf.Write(p)
}

// Bytes returns what was collected.
func (c *cappedBuffer) Bytes() []byte { return c.buf.Bytes() }

// stderrSink logs a function's stderr line by line, up to a budget, and keeps
// its tail to explain failures.
type stderrSink struct {
	log     *slog.Logger
	budget  int
	dropped int
	line    []byte
	tail    []byte
	tailMax int
}

func newStderrSink(l *slog.Logger, budget, tailMax int) *stderrSink {
	return &stderrSink{log: l, budget: budget, tailMax: tailMax}
}

func (s *stderrSink) Write(p []byte) (int, error) {
	s.keepTail(p)
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			// Bound a line that never ends.
			keep := min(len(rest), max(0, s.budget-len(s.line)))
			s.line = append(s.line, rest[:keep]...)
			s.dropped += len(rest) - keep
			break
		}
		s.line = append(s.line, rest[:i]...)
		s.emit()
		rest = rest[i+1:]
	}
	return len(p), nil
}

func (s *stderrSink) keepTail(p []byte) {
	if len(p) >= s.tailMax {
		s.tail = append(s.tail[:0], p[len(p)-s.tailMax:]...)
		return
	}
	if over := len(s.tail) + len(p) - s.tailMax; over > 0 {
		s.tail = append(s.tail[:0], s.tail[over:]...)
	}
	s.tail = append(s.tail, p...)
}

func (s *stderrSink) emit() {
	line := s.line
	s.line = s.line[:0]
	if len(line) > s.budget {
		s.dropped += len(line) + 1
		return
	}
	s.budget -= len(line) + 1
	s.log.Info(hook.StderrMessage, "line", string(line))
}

// Flush logs a last unterminated line and says how much was not logged.
func (s *stderrSink) Flush() {
	if len(s.line) > 0 {
		s.emit()
	}
	if s.dropped > 0 {
		s.log.Warn("function stderr not logged in full", "bytes_dropped", s.dropped)
	}
}

// Tail returns the last bytes the function wrote on stderr.
func (s *stderrSink) Tail() []byte { return s.tail }
