package hook

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

func TestStderrLog(t *testing.T) {
	var logged bytes.Buffer
	s := NewStderrLog(slog.New(slog.NewTextHandler(&logged, nil)), 20, 8)
	_, _ = s.Write([]byte("first\nsecond line that is long\nthird"))
	s.Flush()
	if string(s.Tail()) != "ng\nthird" {
		t.Errorf("tail: got %q, want the last 8 bytes", s.Tail())
	}
	out := logged.String()
	if !strings.Contains(out, "line=first") || !strings.Contains(out, "line=third") || strings.Contains(out, "second line") {
		t.Errorf("log:\n%s", out)
	}
	if !strings.Contains(out, "bytes_dropped=25") {
		t.Errorf("the line over the budget (24 bytes and its newline) must be counted as dropped:\n%s", out)
	}
}

// TestStderrLogInPieces: stderr streamed in pieces is logged as the same
// lines as when written at once.
func TestStderrLogInPieces(t *testing.T) {
	const text = "one\ntwo\nthree without end"
	var whole, pieces bytes.Buffer
	w := NewStderrLog(slog.New(slog.NewTextHandler(&whole, &slog.HandlerOptions{ReplaceAttr: dropTime})), 1<<10, 64)
	_, _ = w.Write([]byte(text))
	w.Flush()
	p := NewStderrLog(slog.New(slog.NewTextHandler(&pieces, &slog.HandlerOptions{ReplaceAttr: dropTime})), 1<<10, 64)
	for i := 0; i < len(text); i += 3 {
		_, _ = p.Write([]byte(text[i:min(i+3, len(text))]))
	}
	p.Flush()
	if whole.String() != pieces.String() {
		t.Errorf("at once:\n%s\nin pieces:\n%s", whole.String(), pieces.String())
	}
	if string(p.Tail()) != text {
		t.Errorf("tail %q, want %q", p.Tail(), text)
	}
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}
