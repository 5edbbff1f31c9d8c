//go:build race

package bufpool

// Kept reports whether a buffer given back is kept for the next lend: not
// always under the race detector, whose sync.Pool drops some at random
// (tests that count allocations skip then).
const Kept = false
