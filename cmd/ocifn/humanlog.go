package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/ocifn/ocifn/hook"
)

// humanHandler is the log handler of the author commands (test, render): a
// function's stderr as plain indented lines, ocifn's own messages as short
// "ocifn: ..." lines without timestamps, and only warnings and errors of
// those unless verbose.
type humanHandler struct {
	mu      *sync.Mutex
	w       io.Writer
	verbose bool
	attrs   []slog.Attr
	// label, shared by the handler's copies, names what runs now (the
	// pipeline step); it starts the function's stderr lines.
	label *string
}

func newHumanLogger(w io.Writer, verbose bool) *slog.Logger {
	return slog.New(&humanHandler{mu: &sync.Mutex{}, w: w, verbose: verbose, label: new(string)})
}

// setLogLabel sets the label of a logger made by newHumanLogger.
func setLogLabel(l *slog.Logger, label string) {
	if h, ok := l.Handler().(*humanHandler); ok {
		h.mu.Lock()
		*h.label = label
		h.mu.Unlock()
	}
}

func (h *humanHandler) Enabled(_ context.Context, l slog.Level) bool {
	return h.verbose || l >= slog.LevelInfo
}

func (h *humanHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	switch {
	case r.Message == hook.StderrMessage:
		h.mu.Lock()
		label := *h.label
		h.mu.Unlock()
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "line" {
				b.WriteString("  ")
				if label != "" {
					b.WriteString(label)
					b.WriteByte(' ')
				}
				b.WriteString("| ")
				b.WriteString(a.Value.String())
				return false
			}
			return true
		})
	case r.Level < slog.LevelWarn && !h.verbose:
		return nil
	default:
		b.WriteString("ocifn: ")
		switch {
		case r.Level >= slog.LevelError:
			b.WriteString("error: ")
		case r.Level >= slog.LevelWarn:
			b.WriteString("warning: ")
		}
		b.WriteString(r.Message)
		write := func(a slog.Attr) bool {
			// Tags are long hashes; they identify nothing to a person
			// running one call.
			if a.Key != "tag" || h.verbose {
				fmt.Fprintf(&b, " %s=%s", a.Key, quoteIfNeeded(a.Value.String()))
			}
			return true
		}
		for _, a := range h.attrs {
			write(a)
		}
		r.Attrs(write)
	}
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *humanHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), as...)
	return &c
}

func (h *humanHandler) WithGroup(string) slog.Handler { return h }

func quoteIfNeeded(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\n\"=") {
		return fmt.Sprintf("%q", s)
	}
	return s
}
