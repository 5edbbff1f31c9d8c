package owner

// Group is a process group a sandbox started: its id, which is its
// leader's pid, and the leader's start time, which tells the leader from a
// later process that got the same pid.
type Group struct {
	PGID  int    `json:"pgid"`
	Start uint64 `json:"start"` // the leader's, clock ticks after boot
}
