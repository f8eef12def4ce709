package main

import (
	"context"
	"strings"
	"testing"
)

// TestInspectMissingFile: a package file that does not exist is said not
// to, whatever its extension, rather than fetched from Docker Hub.
func TestInspectMissingFile(t *testing.T) {
	for _, what := range []string{"function.xpkg", "function.tgz", "function.tar.gz", "function.tar.zst"} {
		// Relative and lower case: a valid reference too.
		_, err := inspect(context.Background(), "missing/"+what, false)
		if err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("inspect %s: %v, want that it does not exist", what, err)
		}
	}
}
