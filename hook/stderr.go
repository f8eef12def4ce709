package hook

import (
	"bytes"
	"log/slog"
)

// Bounds of what every front keeps of a call's stderr.
const (
	// StderrLogBytes bounds how much of one call's stderr is logged.
	StderrLogBytes = 64 << 10
	// StderrTailBytes is how much of the end of stderr an answer about a
	// failed call quotes.
	StderrTailBytes = 2048
)

// StderrLog logs a function's stderr line by line, each with
// StderrMessage, up to a budget of bytes, and keeps its tail to explain a
// failure. It is an io.Writer, so a front can stream the stderr of a call
// that runs or write what it collected at once; Flush ends it.
type StderrLog struct {
	log     *slog.Logger
	budget  int
	dropped int
	line    []byte
	tail    []byte
	tailMax int
}

// NewStderrLog returns a StderrLog that logs to l at most budget bytes
// (whole lines only) and keeps the last tailMax bytes.
func NewStderrLog(l *slog.Logger, budget, tailMax int) *StderrLog {
	return &StderrLog{log: l, budget: budget, tailMax: tailMax}
}

func (s *StderrLog) Write(p []byte) (int, error) {
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

func (s *StderrLog) keepTail(p []byte) {
	if len(p) >= s.tailMax {
		s.tail = append(s.tail[:0], p[len(p)-s.tailMax:]...)
		return
	}
	if over := len(s.tail) + len(p) - s.tailMax; over > 0 {
		s.tail = append(s.tail[:0], s.tail[over:]...)
	}
	s.tail = append(s.tail, p...)
}

func (s *StderrLog) emit() {
	line := s.line
	s.line = s.line[:0]
	if len(line) > s.budget {
		s.dropped += len(line) + 1
		return
	}
	s.budget -= len(line) + 1
	s.log.Info(StderrMessage, "line", string(line))
}

// Flush logs a last unterminated line and says how much was not logged.
func (s *StderrLog) Flush() {
	if len(s.line) > 0 {
		s.emit()
	}
	if s.dropped > 0 {
		s.log.Warn("function stderr not logged in full", "bytes_dropped", s.dropped)
	}
}

// Tail returns the last bytes the function wrote on stderr.
func (s *StderrLog) Tail() []byte { return s.tail }
