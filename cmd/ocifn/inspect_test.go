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

// TestInspectTarballOfSeveralImages: a tarball of several images is
// refused saying to give inspect a file of one, not to choose one by name
// or digest, which no flag of inspect does.
func TestInspectTarballOfSeveralImages(t *testing.T) {
	tar := tarballOfImages(t, "function-a:v1", "function-b:v1")
	_, err := inspect(context.Background(), tar, false)
	if err == nil || !strings.Contains(err.Error(), "ocifn inspect describes one package and cannot choose: give it a file of one") {
		t.Errorf("inspect of a tarball of two images: %v, want it refused saying to give it a file of one", err)
	}
}
