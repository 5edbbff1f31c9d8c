// Package turnstore is where the replicas of an `outpost serve` fleet
// share their turns: each turn's record (state, owner replica, result),
// its events with their sequence numbers (bounded in bytes per turn, like
// the in-memory replay), the steer and cancel commands other replicas
// forward to a turn's owner, and each replica's heartbeat. Store is the
// small driver interface; NewMemory is the in-process implementation and
// the PostgreSQL one is conversation/postgres's Store.Turns. turnstoretest
// holds the conformance suite both pass.
package turnstore

import (
	"context"
	"errors"
	"time"
)

// The states of a turn, as the server reports them.
const (
	StateQueued   = "queued"
	StateRunning  = "running"
	StateFinished = "finished"
)

// The kinds of Command.
const (
	Steer  = "steer"
	Cancel = "cancel"
)

var (
	// ErrNotFound: no such turn (never created, or expired).
	ErrNotFound = errors.New("turnstore: no such turn")
	// ErrFinished: the turn is finished, a command can no longer reach it.
	ErrFinished = errors.New("turnstore: the turn is finished")
)

// Turn is a turn's record.
type Turn struct {
	ID, Owner, Agent, Sandbox, State string
	// Client is who started the turn (outpost serve's peer, "token:NAME"):
	// every replica shows the turn only to it and to operators. Owner is
	// the replica that runs it.
	Client                     string
	Created, Started, Finished time.Time
	// Result is the result line (JSON) once finished.
	Result []byte
	// Last is the sequence number of the last event (0: none yet); First
	// that of the oldest one retained; Dropped the bytes of the events no
	// longer retained.
	Last, First, Dropped int64
}

// Event is one encoded event (or the result line, the last one).
type Event struct {
	Seq  int64
	Data []byte
}

// Command is a steer or cancel a replica forwards to a turn's owner.
type Command struct {
	Turn, Kind, Text string
}

// Store keeps the turns of a fleet. Its methods are safe for concurrent
// use by every replica.
type Store interface {
	// Beat records that replica is alive (registering it on first use).
	Beat(ctx context.Context, replica string) error
	// Leave removes replica's heartbeat: its unfinished turns are lost at
	// the next Reap.
	Leave(ctx context.Context, replica string) error

	// Create records a new turn (First 1, Last 0).
	Create(ctx context.Context, t Turn) error
	// Start marks a queued turn running.
	Start(ctx context.Context, id string, at time.Time) error
	// Append adds events to an unfinished turn (a finished one ignores
	// them), dropping its oldest while their bytes exceed maxBytes (the
	// newest is always kept).
	Append(ctx context.Context, id string, evs []Event, maxBytes int64) error
	// Finish adds the result line as the last event and finishes the
	// turn; false when it was already finished (it is left as it was).
	Finish(ctx context.Context, id string, result Event, at time.Time) (bool, error)

	// Get returns a turn's record, or ErrNotFound.
	Get(ctx context.Context, id string) (Turn, error)
	// Replay returns the record and up to limit retained events after
	// sequence number after, oldest first. The record is read first: when
	// it says finished, the events hold the result line.
	Replay(ctx context.Context, id string, after int64, limit int) (Turn, []Event, error)

	// Send queues a command for the owner of c.Turn: ErrNotFound,
	// ErrFinished.
	Send(ctx context.Context, c Command) error
	// Take removes and returns replica's queued commands, oldest first.
	Take(ctx context.Context, replica string) ([]Command, error)

	// Reap finishes every unfinished turn whose owner has not beaten for
	// longer than silent (or ever), with the result line result returns,
	// and returns their ids.
	Reap(ctx context.Context, silent time.Duration, result func(Turn) []byte) ([]string, error)
	// Abandon finishes the unfinished turns of replica, whatever its
	// heartbeat (a process restarted under its name), like Reap.
	Abandon(ctx context.Context, replica string, result func(Turn) []byte) ([]string, error)
	// Expire removes the turns finished before before, with their events
	// and commands; it returns how many.
	Expire(ctx context.Context, before time.Time) (int, error)

	// Listen calls changed with a turn's id whenever its record or events
	// change, and commands whenever a command is queued for replica,
	// until ctx ends. Notes may be lost or doubled (callers also poll).
	Listen(ctx context.Context, replica string, changed func(turn string), commands func()) error
}

// Replica is one replica of a fleet as the store knows it: its last
// heartbeat (the store's clock), how long ago that was (Age, by the same
// clock), and how many unfinished turns it owns.
type Replica struct {
	ID        string
	Heartbeat time.Time
	Age       time.Duration
	Turns     int
}

// ReplicaLister is implemented by stores that list their replicas (both
// of outpost's): `outpost serve`'s GET /v1/fleet reads it. A separate
// interface so that a Store written elsewhere (a test's wrapper) stays
// one without it.
type ReplicaLister interface {
	// Replicas lists the replicas with a heartbeat, by id, and the owners
	// of unfinished turns that have none (Heartbeat zero: left or never
	// beaten; their turns are lost at the next Reap).
	Replicas(ctx context.Context) ([]Replica, error)
}
