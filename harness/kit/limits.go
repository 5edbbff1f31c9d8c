package kit

import (
	"time"
)

const (
	// MaxArgPrompt is the largest prompt a preset passes as one argument;
	// a longer one goes through the CLI's standard input where the CLI
	// reads it there. Linux limits one argument to 128 KiB
	// (MAX_ARG_STRLEN); the margin leaves room for the other arguments'
	// share of the page.
	MaxArgPrompt = 100 << 10

	// Inactivity is the default watchdog of the presets of CLIs that may
	// hang silently (a model stream that stalls after its headers, a
	// refused connection retried forever): a turn whose CLI prints nothing
	// for this long is stopped with code process, details.stalled and
	// details.inactivity (retry notices are no activity; a turn of only
	// retries is an outage after harness.RetryBound). It is above the longest silence of a healthy
	// turn: a shell command of up to 10 minutes, or a long generation that
	// prints nothing until its block is complete. Each preset documents
	// why it holds for its CLI; engine.Turn.Inactivity (`outpost run
	// --inactivity`) changes it per turn.
	Inactivity = 15 * time.Minute
)
