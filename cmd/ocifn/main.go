// Command ocifn makes any OCI container image a Crossplane Composition
// Function.
package main

import (
	"os"

	"github.com/containers/storage/pkg/reexec"
)

func main() {
	// Image layers are unpacked by a re-executed copy of this binary that
	// chroots into the target first; that copy must stop here.
	if reexec.Init() {
		return
	}
	os.Exit(execute())
}
