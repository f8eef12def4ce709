//go:build !race

package openwhisk

// raceEnabled says that the tests run under the race detector, whose
// build allocates what others do not (see TestParseMemoryBounds).
const raceEnabled = false
