package hook

import (
	"bytes"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestStderrLog(t *testing.T) {
	var logged bytes.Buffer
	s := NewStderrLog(slog.New(slog.NewTextHandler(&logged, nil)), 20, 8, "tag", "t-1")
	_, _ = s.Write([]byte("first\nsecond line that is long\nthird"))
	s.Flush()
	if string(s.Tail()) != "ng\nthird" {
		t.Errorf("tail: got %q, want the last 8 bytes", s.Tail())
	}
	out := logged.String()
	if !strings.Contains(out, "line=first") || !strings.Contains(out, "line=third") || strings.Contains(out, "second") {
		t.Errorf("log:\n%s", out)
	}
	// The line over the budget: 24 bytes and its newline.
	if !strings.Contains(out, "bytes_dropped=25") {
		t.Errorf("want 25 bytes counted as dropped:\n%s", out)
	}
	// Every line, the count of dropped bytes too, carries the attributes.
	if n := strings.Count(out, "tag=t-1 "); n != 3 {
		t.Errorf("want the tag on all 3 lines, got it on %d:\n%s", n, out)
	}
}

// TestStderrLogInPieces: whatever pieces stderr comes in, the same lines
// are logged, whole, and the same bytes counted as dropped; what is held
// of a line stays within the budget.
func TestStderrLogInPieces(t *testing.T) {
	const unterminated = "a last line that never ends and is long"
	for _, tc := range []struct {
		name, text string
		budget     int
		lines      []string
		dropped    int
	}{
		{"within the budget", "one\ntwo\nthree without end", 1 << 10, []string{"one", "two", "three without end"}, 0},
		{"a line across the budget's end", "one\nthe second line is long\nthree\n", 16, []string{"one", "three"}, len("the second line is long\n")},
		{"a line longer than the budget, then room again", "a line much longer than the budget\nok\n", 8, []string{"ok"}, len("a line much longer than the budget\n")},
		{"an unterminated line over the budget", "one\n" + unterminated, 16, []string{"one"}, len(unterminated)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for size := 1; size <= len(tc.text); size++ {
				var out bytes.Buffer
				s := NewStderrLog(slog.New(slog.NewTextHandler(&out, nil)), tc.budget, 64)
				for i := 0; i < len(tc.text); i += size {
					_, _ = s.Write([]byte(tc.text[i:min(i+size, len(tc.text))]))
					if len(s.line) > tc.budget {
						t.Fatalf("pieces of %d: %d bytes of a line held, over the budget %d", size, len(s.line), tc.budget)
					}
				}
				s.Flush()
				lines, dropped := parseStderrLog(t, out.String())
				if !slices.Equal(lines, tc.lines) || dropped != tc.dropped {
					t.Fatalf("pieces of %d: logged %q and %d bytes dropped, want %q and %d:\n%s", size, lines, dropped, tc.lines, tc.dropped, out.String())
				}
			}
		})
	}
}

// TestStderrLogLines: past StderrLogLines lines, lines are counted, not
// logged, however short: each costs a record, not only its bytes.
func TestStderrLogLines(t *testing.T) {
	var out bytes.Buffer
	s := NewStderrLog(slog.New(slog.NewTextHandler(&out, nil)), StderrLogBytes, 64)
	_, _ = s.Write(bytes.Repeat([]byte("\n"), 60000))
	_, _ = s.Write([]byte("x\nlast"))
	s.Flush()
	lines, dropped := parseStderrLog(t, out.String())
	if len(lines) != StderrLogLines {
		t.Errorf("%d lines logged, want %d", len(lines), StderrLogLines)
	}
	if want := 60000 - StderrLogLines + len("x\nlast"); dropped != want {
		t.Errorf("%d bytes counted as dropped, want %d", dropped, want)
	}
	if out.Len() > 4*StderrLogBytes {
		t.Errorf("%d bytes of log from %d bytes of stderr", out.Len(), StderrLogBytes)
	}
}

// parseStderrLog returns the lines a StderrLog logged in slog's text
// format and the bytes it said it dropped.
func parseStderrLog(t *testing.T, out string) (lines []string, dropped int) {
	t.Helper()
	for _, m := range regexp.MustCompile(`line=("(?:[^"\\]|\\.)*"|\S*)`).FindAllStringSubmatch(out, -1) {
		v := m[1]
		if strings.HasPrefix(v, `"`) {
			u, err := strconv.Unquote(v)
			if err != nil {
				t.Fatal(err)
			}
			v = u
		}
		lines = append(lines, v)
	}
	if m := regexp.MustCompile(`bytes_dropped=(\d+)`).FindStringSubmatch(out); m != nil {
		dropped, _ = strconv.Atoi(m[1])
	}
	return lines, dropped
}
