//go:build race

package harnesstest

// raceEnabled: the race detector slows decoding tenfold; the robustness
// checks, which run on one goroutine, then use a sample of their inputs.
const raceEnabled = true
