package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outposthq/outpost/internal/storeops"
	"github.com/outposthq/outpost/turnstore"
)

// The LISTEN/NOTIFY channels of the turn store: the payload is a turn id
// (a change) or a replica id (a command for it).
const (
	turnsChannel    = "outpost_turns"
	commandsChannel = "outpost_turn_commands"
)

// Turns is the store's turnstore.Store: the turns of an `outpost serve`
// fleet, in the same database as the conversations (migration 0002),
// with changes announced by NOTIFY.
func (s *Store) Turns() turnstore.Store { return turns{s} }

type turns struct{ s *Store }

var _ turnstore.Store = turns{}

func (ts turns) tx(ctx context.Context, op string, f func(pgx.Tx) error) error {
	if err := pgx.BeginFunc(ctx, ts.s.pool, f); err != nil {
		return fmt.Errorf("turnstore: %s: %w", op, err)
	}
	return nil
}

func (ts turns) exec(ctx context.Context, op, sql string, args ...any) error {
	if _, err := ts.s.pool.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("turnstore: %s: %w", op, err)
	}
	return nil
}

func notify(ctx context.Context, tx pgx.Tx, channel, payload string) error {
	_, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, payload)
	return err
}

// Beat implements turnstore.Store, with the database's clock.
func (ts turns) Beat(ctx context.Context, replica string) error {
	storeops.Count("postgres-turns", "beat")
	return ts.exec(ctx, "beat", `INSERT INTO outpost_replicas (id, heartbeat) VALUES ($1, now())
		ON CONFLICT (id) DO UPDATE SET heartbeat = now()`, replica)
}

// Leave implements turnstore.Store.
func (ts turns) Leave(ctx context.Context, replica string) error {
	storeops.Count("postgres-turns", "leave")
	return ts.exec(ctx, "leave", `DELETE FROM outpost_replicas WHERE id = $1`, replica)
}

// Create implements turnstore.Store.
func (ts turns) Create(ctx context.Context, t turnstore.Turn) error {
	storeops.Count("postgres-turns", "create")
	// One statement, one round trip (a transaction of its own): the row
	// and the note, sent at its commit.
	return ts.exec(ctx, "create", `WITH i AS (INSERT INTO outpost_turns (id, owner, agent, sandbox, state, created, started, client)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id)
		SELECT pg_notify($9, id) FROM i`, t.ID, t.Owner, t.Agent, t.Sandbox, t.State, t.Created, nullTime(t.Started), t.Client, turnsChannel)
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Start implements turnstore.Store.
func (ts turns) Start(ctx context.Context, id string, at time.Time) error {
	storeops.Count("postgres-turns", "start")
	// One statement, one round trip, as Create; the note goes whether or
	// not the turn was still queued, as before.
	return ts.exec(ctx, "start", `WITH u AS (UPDATE outpost_turns SET state = 'running', started = $2 WHERE id = $1 AND state = 'queued')
		SELECT pg_notify($3, $1)`, id, at, turnsChannel)
}

// lockLive locks an unfinished turn's row and returns its last sequence
// number; ok is false when the turn is finished or unknown.
func lockLive(ctx context.Context, tx pgx.Tx, id string) (last int64, ok bool, err error) {
	var state string
	err = tx.QueryRow(ctx, `SELECT state, last FROM outpost_turns WHERE id = $1 FOR UPDATE`, id).Scan(&state, &last)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return last, err == nil && state != turnstore.StateFinished, err
}

// Append implements turnstore.Store: the events in one statement, then
// the oldest beyond maxBytes dropped (a window over the retained ones).
func (ts turns) Append(ctx context.Context, id string, evs []turnstore.Event, maxBytes int64) error {
	storeops.Count("postgres-turns", "append")
	return ts.tx(ctx, "append", func(tx pgx.Tx) error {
		last, ok, err := lockLive(ctx, tx, id)
		if !ok || err != nil {
			return err
		}
		var seqs []int64
		var data [][]byte
		var size int64
		for _, e := range evs {
			if e.Seq > last {
				seqs, data, size, last = append(seqs, e.Seq), append(data, e.Data), size+int64(len(e.Data)), e.Seq
			}
		}
		if len(seqs) == 0 {
			return nil
		}
		// The events, the turn's row and the note in one statement (one
		// round trip; the note is sent at the commit, as before).
		var bytes int64
		if err := tx.QueryRow(ctx, `WITH i AS (INSERT INTO outpost_turn_events (turn, seq, data)
				SELECT $1, s, d FROM unnest($2::bigint[], $3::bytea[]) AS u(s, d)),
			u AS (UPDATE outpost_turns SET last = $4, bytes = bytes + $5 WHERE id = $1 RETURNING bytes)
			SELECT bytes, pg_notify($6, $1) FROM u`, id, seqs, data, last, size, turnsChannel).Scan(&bytes, nil); err != nil {
			return err
		}
		if bytes > maxBytes {
			return trim(ctx, tx, id, maxBytes)
		}
		return nil
	})
}

// trim drops a turn's oldest events while their bytes exceed maxBytes,
// keeping the newest.
func trim(ctx context.Context, tx pgx.Tx, id string, maxBytes int64) error {
	_, err := tx.Exec(ctx, `WITH c AS (
			SELECT seq, sum(length(data)) OVER (ORDER BY seq DESC) AS tail, max(seq) OVER () AS newest
			FROM outpost_turn_events WHERE turn = $1
		), d AS (
			DELETE FROM outpost_turn_events e USING c
			WHERE e.turn = $1 AND e.seq = c.seq AND c.tail > $2 AND c.seq < c.newest
			RETURNING e.seq, length(e.data) AS n
		), t AS (SELECT max(seq) AS upto, sum(n) AS n FROM d)
		UPDATE outpost_turns SET first = t.upto + 1, bytes = bytes - t.n, dropped = dropped + t.n
		FROM t WHERE id = $1 AND t.upto IS NOT NULL AND bytes > $2`, id, maxBytes)
	return err
}

// Finish implements turnstore.Store.
func (ts turns) Finish(ctx context.Context, id string, result turnstore.Event, at time.Time) (bool, error) {
	storeops.Count("postgres-turns", "finish")
	done := false
	err := ts.tx(ctx, "finish", func(tx pgx.Tx) error {
		var state string
		err := tx.QueryRow(ctx, `SELECT state FROM outpost_turns WHERE id = $1 FOR UPDATE`, id).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) {
			return turnstore.ErrNotFound
		}
		if err != nil || state == turnstore.StateFinished {
			return err
		}
		done = true
		return finish(ctx, tx, id, result, at)
	})
	return done, err
}

// finish writes a locked, unfinished turn's result line.
// One statement, one round trip: the result line, the row, the note
// (sent at the commit).
func finish(ctx context.Context, tx pgx.Tx, id string, result turnstore.Event, at time.Time) error {
	_, err := tx.Exec(ctx, `WITH e AS (INSERT INTO outpost_turn_events (turn, seq, data) VALUES ($1, $4, $3::bytea) ON CONFLICT DO NOTHING),
		u AS (UPDATE outpost_turns SET state = 'finished', finished = $2, result = $3::bytea, last = greatest(last, $4),
			bytes = bytes + length($3::bytea) WHERE id = $1)
		SELECT pg_notify($5, $1)`, id, at, result.Data, result.Seq, turnsChannel)
	return err
}

const turnColumns = `id, owner, agent, sandbox, state, created, started, finished, result, last, first, dropped, client`

func scanTurn(row pgx.Row) (turnstore.Turn, error) {
	var t turnstore.Turn
	var started, finished *time.Time
	err := row.Scan(&t.ID, &t.Owner, &t.Agent, &t.Sandbox, &t.State, &t.Created, &started, &finished, &t.Result, &t.Last, &t.First, &t.Dropped, &t.Client)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, turnstore.ErrNotFound
	}
	if started != nil {
		t.Started = *started
	}
	if finished != nil {
		t.Finished = *finished
	}
	return t, err
}

// Get implements turnstore.Store.
func (ts turns) Get(ctx context.Context, id string) (turnstore.Turn, error) {
	storeops.Count("postgres-turns", "get")
	t, err := scanTurn(ts.s.pool.QueryRow(ctx, `SELECT `+turnColumns+` FROM outpost_turns WHERE id = $1`, id))
	if err != nil && !errors.Is(err, turnstore.ErrNotFound) {
		err = fmt.Errorf("turnstore: get: %w", err)
	}
	return t, err
}

// Replay implements turnstore.Store: the record, then (a later snapshot)
// the events.
func (ts turns) Replay(ctx context.Context, id string, after int64, limit int) (turnstore.Turn, []turnstore.Event, error) {
	storeops.Count("postgres-turns", "replay")
	t, err := ts.Get(ctx, id)
	if err != nil {
		return t, nil, err
	}
	rows, err := ts.s.pool.Query(ctx, `SELECT seq, data FROM outpost_turn_events WHERE turn = $1 AND seq > $2 ORDER BY seq LIMIT $3`, id, after, limit)
	if err != nil {
		return t, nil, fmt.Errorf("turnstore: replay: %w", err)
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (turnstore.Event, error) {
		var e turnstore.Event
		return e, r.Scan(&e.Seq, &e.Data)
	})
	if err != nil {
		return t, nil, fmt.Errorf("turnstore: replay: %w", err)
	}
	return t, evs, nil
}

// Send implements turnstore.Store.
func (ts turns) Send(ctx context.Context, c turnstore.Command) error {
	storeops.Count("postgres-turns", "send")
	return ts.tx(ctx, "send", func(tx pgx.Tx) error {
		var owner, state string
		err := tx.QueryRow(ctx, `SELECT owner, state FROM outpost_turns WHERE id = $1 FOR SHARE`, c.Turn).Scan(&owner, &state)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return turnstore.ErrNotFound
		case err != nil:
			return err
		case state == turnstore.StateFinished:
			return turnstore.ErrFinished
		}
		if _, err := tx.Exec(ctx, `INSERT INTO outpost_turn_commands (owner, turn, kind, text) VALUES ($1, $2, $3, $4)`, owner, c.Turn, c.Kind, c.Text); err != nil {
			return err
		}
		return notify(ctx, tx, commandsChannel, owner)
	})
}

// Take implements turnstore.Store.
func (ts turns) Take(ctx context.Context, replica string) ([]turnstore.Command, error) {
	storeops.Count("postgres-turns", "take")
	rows, err := ts.s.pool.Query(ctx, `WITH d AS (DELETE FROM outpost_turn_commands WHERE owner = $1 RETURNING id, turn, kind, text)
		SELECT turn, kind, text FROM d ORDER BY id`, replica)
	if err != nil {
		return nil, fmt.Errorf("turnstore: take: %w", err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (turnstore.Command, error) {
		var c turnstore.Command
		return c, r.Scan(&c.Turn, &c.Kind, &c.Text)
	})
	if err != nil {
		return nil, fmt.Errorf("turnstore: take: %w", err)
	}
	return cs, nil
}

// Reap implements turnstore.Store: the lost turns are locked (skipping
// those an owner is finishing), finished in one transaction, and the
// replicas silent for ten times as long forgotten.
func (ts turns) Reap(ctx context.Context, silent time.Duration, result func(turnstore.Turn) []byte) ([]string, error) {
	storeops.Count("postgres-turns", "reap")
	return ts.end(ctx, "reap", result, `NOT EXISTS (SELECT 1 FROM outpost_replicas r
		WHERE r.id = t.owner AND r.heartbeat > now() - make_interval(secs => $1))`, silent.Seconds(),
		`DELETE FROM outpost_replicas WHERE heartbeat < now() - make_interval(secs => $1)`, 10*silent.Seconds())
}

// Abandon implements turnstore.Store.
func (ts turns) Abandon(ctx context.Context, replica string, result func(turnstore.Turn) []byte) ([]string, error) {
	storeops.Count("postgres-turns", "abandon")
	return ts.end(ctx, "abandon", result, `t.owner = $1`, replica, "", nil)
}

// end finishes, in one transaction, the unfinished turns where lost
// (with its argument) holds, and runs after (with its own) if given.
func (ts turns) end(ctx context.Context, op string, result func(turnstore.Turn) []byte, lost string, arg any, after string, afterArg any) ([]string, error) {
	var ids []string
	err := ts.tx(ctx, op, func(tx pgx.Tx) error {
		ids = nil
		rows, err := tx.Query(ctx, `SELECT `+turnColumns+` FROM outpost_turns t WHERE state <> 'finished' AND `+lost+`
			ORDER BY id FOR UPDATE SKIP LOCKED`, arg)
		if err != nil {
			return err
		}
		ended, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (turnstore.Turn, error) { return scanTurn(r) })
		if err != nil {
			return err
		}
		for _, t := range ended {
			if err := finish(ctx, tx, t.ID, turnstore.Event{Seq: t.Last + 1, Data: result(t)}, time.Now().UTC()); err != nil {
				return err
			}
			ids = append(ids, t.ID)
		}
		if after != "" {
			_, err = tx.Exec(ctx, after, afterArg)
		}
		return err
	})
	return ids, err
}

// Expire implements turnstore.Store.
func (ts turns) Expire(ctx context.Context, before time.Time) (int, error) {
	storeops.Count("postgres-turns", "expire")
	tag, err := ts.s.pool.Exec(ctx, `DELETE FROM outpost_turns WHERE state = 'finished' AND finished < $1`, before)
	if err != nil {
		return 0, fmt.Errorf("turnstore: expire: %w", err)
	}
	if err := ts.exec(ctx, "expire", `DELETE FROM outpost_turn_commands c USING outpost_turns t WHERE c.turn = t.id AND t.state = 'finished'`); err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), nil
}

// Listen implements turnstore.Store on a connection of its own (taken
// out of the pool), reconnecting after a second when it breaks.
func (ts turns) Listen(ctx context.Context, replica string, changed func(string), commands func()) error {
	storeops.Count("postgres-turns", "listen")
	for {
		err := ts.listen(ctx, replica, changed, commands)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
		_ = err // the callers poll meanwhile
	}
}

func (ts turns) listen(ctx context.Context, replica string, changed func(string), commands func()) error {
	pc, err := ts.s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	conn := pc.Hijack()
	defer conn.Close(context.WithoutCancel(ctx))
	for _, ch := range []string{turnsChannel, commandsChannel} {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return err
		}
	}
	commands() // what was queued before this connection listened
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		switch {
		case n.Channel == turnsChannel:
			changed(n.Payload)
		case n.Channel == commandsChannel && n.Payload == replica:
			commands()
		}
	}
}

var _ turnstore.ReplicaLister = turns{}

// Replicas implements turnstore.ReplicaLister: the heartbeats and their
// age by the database's clock, and the unfinished turns of each owner.
func (ts turns) Replicas(ctx context.Context) ([]turnstore.Replica, error) {
	storeops.Count("postgres-turns", "replicas")
	rows, err := ts.s.pool.Query(ctx, `WITH owners AS (
			SELECT owner AS id, count(*) AS n FROM outpost_turns WHERE state <> 'finished' GROUP BY owner)
		SELECT coalesce(r.id, o.id), r.heartbeat, coalesce(extract(epoch FROM now() - r.heartbeat), 0)::float8, coalesce(o.n, 0)
		FROM outpost_replicas r FULL JOIN owners o ON o.id = r.id ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("turnstore: replicas: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (turnstore.Replica, error) {
		var rep turnstore.Replica
		var beat *time.Time
		var age float64
		err := r.Scan(&rep.ID, &beat, &age, &rep.Turns)
		if beat != nil {
			rep.Heartbeat = beat.UTC()
		}
		rep.Age = time.Duration(age * float64(time.Second))
		return rep, err
	})
	if err != nil {
		return nil, fmt.Errorf("turnstore: replicas: %w", err)
	}
	return out, nil
}
