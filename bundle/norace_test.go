//go:build !race

package bundle

// raceEnabled says that the tests run under the race detector, whose
// build allocates what others do not (see TestReadSmallFile).
const raceEnabled = false
