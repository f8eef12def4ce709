package front

import (
	"errors"
	"strings"
	"testing"
)

// TestCapped: writes collect up to Max bytes and fail past it; with
// Reserve set, each growth of the buffer is asked for first, what was
// asked adds up to the buffer's capacity, which never passes Max, and a
// refusal fails the write, leaves the buffer as it was and is kept in
// Refused.
func TestCapped(t *testing.T) {
	t.Run("max", func(t *testing.T) {
		c := &Capped{Max: 10}
		for _, w := range []string{"abc", "defghij"} {
			if _, err := c.Write([]byte(w)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Write([]byte("k")); err == nil || !c.Overflow {
			t.Fatalf("a write past Max: %v, overflow %v", err, c.Overflow)
		}
		if string(c.Bytes()) != "abcdefghij" || cap(c.buf) > 10 {
			t.Errorf("collected %q in a buffer of %d", c.Bytes(), cap(c.buf))
		}
	})
	t.Run("reserve", func(t *testing.T) {
		var asked, calls int
		c := &Capped{Max: 5000, Reserve: func(n int) error { asked += n; calls++; return nil }}
		for range 45 {
			if _, err := c.Write([]byte(strings.Repeat("x", 100))); err != nil {
				t.Fatal(err)
			}
		}
		if len(c.Bytes()) != 4500 || asked != cap(c.buf) || cap(c.buf) > 5000 || calls > 5 {
			t.Errorf("%d bytes collected; %d asked in %d calls for a buffer of %d", len(c.Bytes()), asked, calls, cap(c.buf))
		}
	})
	t.Run("refused", func(t *testing.T) {
		full := errors.New("full")
		c := &Capped{Max: 1 << 20, Reserve: func(n int) error {
			if n > 1000 {
				return full
			}
			return nil
		}}
		if _, err := c.Write([]byte("first")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(make([]byte, 2000)); !errors.Is(err, full) || !errors.Is(c.Refused, full) || c.Overflow {
			t.Fatalf("a refused growth: %v, refused %v, overflow %v", err, c.Refused, c.Overflow)
		}
		if string(c.Bytes()) != "first" {
			t.Errorf("collected %q after the refusal, want what came before", c.Bytes())
		}
	})
}
