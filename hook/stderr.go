package hook

import (
	"bytes"
	"log/slog"
)

// Bounds of what every front keeps of a call's stderr.
const (
	// StderrLogBytes bounds how much of one call's stderr is logged.
	StderrLogBytes = 64 << 10
	// StderrLogLines bounds how many lines of one call's stderr are
	// logged: each is a record of its own, whose time, level, message and
	// tag (a Crossplane tag is 64 hex digits) take about 150 bytes, so
	// 64 KiB of empty lines were 65,536 records, 5 MB of log, from one
	// call.
	StderrLogLines = 1024
	// StderrTailBytes is how much of the end of stderr an answer about a
	// failed call quotes.
	StderrTailBytes = 2048
)

// StderrLog logs a function's stderr line by line, each with
// StderrMessage, up to a budget of bytes, and keeps its tail to explain a
// failure. It is an io.Writer, so a front can stream the stderr of a call
// that runs or write what it collected at once, with the same lines
// logged either way; Flush ends it.
//
// A line is logged whole or not at all: one that would take the budget
// past its end (its newline counted) is dropped and counted, and so is
// every line after the budget, or StderrLogLines, is spent. What is held
// of a line never exceeds the budget, however long the line.
type StderrLog struct {
	log *slog.Logger
	// attrs are added to every line, through a logger made at the first
	// (logger): most calls write nothing on stderr, and slog's With
	// formats its attributes at once.
	attrs  []any
	with   *slog.Logger
	budget int
	// linesLeft is how many more lines may be logged.
	linesLeft int
	// line is the current line so far, while it fits the budget; over
	// says it does not, and its bytes are being counted in dropped.
	line    []byte
	over    bool
	dropped int
	tail    []byte
	tailMax int
}

// NewStderrLog returns a StderrLog that logs to l, with attrs, at most
// budget bytes of whole lines (newlines included), StderrLogLines lines
// at most, and keeps the last tailMax bytes.
func NewStderrLog(l *slog.Logger, budget, tailMax int, attrs ...any) *StderrLog {
	return &StderrLog{log: l, attrs: attrs, budget: budget, linesLeft: StderrLogLines, tailMax: tailMax}
}

// logger is l with the attributes, made once.
func (s *StderrLog) logger() *slog.Logger {
	if s.with == nil {
		s.with = s.log.With(s.attrs...)
	}
	return s.with
}

func (s *StderrLog) Write(p []byte) (int, error) {
	s.keepTail(p)
	rest := p
	for len(rest) > 0 {
		part, end := rest, false
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			part, end = rest[:i], true
		}
		s.add(part)
		if !end {
			break
		}
		s.endLine()
		rest = rest[len(part)+1:]
	}
	return len(p), nil
}

// add takes the next bytes of the current line.
func (s *StderrLog) add(part []byte) {
	if !s.over && (s.linesLeft == 0 || len(s.line)+len(part)+1 > s.budget) {
		// The line cannot be logged whole: count it instead.
		s.over = true
		s.dropped += len(s.line)
		s.line = s.line[:0]
	}
	if s.over {
		s.dropped += len(part)
		return
	}
	s.line = append(s.line, part...)
}

// endLine logs the current line, or counts its newline with the rest of
// it if it was dropped.
func (s *StderrLog) endLine() {
	if s.over {
		s.dropped++
		s.over = false
		return
	}
	s.budget -= len(s.line) + 1
	s.linesLeft--
	s.logger().Info(StderrMessage, "line", string(s.line))
	s.line = s.line[:0]
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

// Flush logs a last line that has no newline, if it fits, and says how
// much was not logged.
func (s *StderrLog) Flush() {
	switch {
	case s.over:
		s.over = false // its bytes are counted; it had no newline
	case len(s.line) > 0:
		s.endLine()
	}
	if s.dropped > 0 {
		s.logger().Warn("function stderr not logged in full", "bytes_dropped", s.dropped)
	}
}

// Tail returns the last bytes the function wrote on stderr.
func (s *StderrLog) Tail() []byte { return s.tail }
