package front

import "testing"

// TestMethodLabel: the methods HTTP defines name themselves; any other a
// caller sends is OTHER, so that made-up names add no series.
func TestMethodLabel(t *testing.T) {
	for in, want := range map[string]string{"GET": "GET", "POST": "POST", "PATCH": "PATCH", "OPTIONS": "OPTIONS", "BREW": "OTHER", "get": "OTHER", "M12345": "OTHER", "": "OTHER"} {
		if got := methodLabel(in); got != want {
			t.Errorf("methodLabel(%q) = %q, want %q", in, got, want)
		}
	}
}
