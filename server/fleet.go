package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/turnstore"
)

// A fleet (docs/serve.md): with Options.Turns, every turn's record and
// events are also written to the shared turn store as they happen, in
// batches, by fleetWriters writer goroutines, each turn's by the same
// one (so in order). Any replica answers for
// any turn: a turn this process does not hold is read from the store, its
// stream replayed from there and followed through the store's notes with
// a bounded poll; steer and cancel go to the owner through the store.
// Every replica beats every Heartbeat and ends the turns of replicas
// silent for lostAfter heartbeats (code sandbox, details.replica_lost).

// lostAfter is how many heartbeat intervals of silence lose a replica.
const lostAfter = 3

// lostSlack is how far past its stored place the result of a turn of a
// lost replica is streamed (fleet.since): farther than the lost owner
// can have streamed live ahead of its writes (its queues hold 1,024
// writes, merged 256 at a time).
const lostSlack = 1 << 20

// replayBatch bounds the events one read of the store returns.
const replayBatch = 256

// fleetWriters is how many writes of the turn store a replica has in
// flight at once, each on its own turns. One writer made every turn of a
// replica wait for every other's writes, one commit after the other: on
// PostgreSQL (fsync on, 2 shared cores) a replica of 20 running turns
// answered their first event after 3.5 s and ran 5 turns a second
// (docs/benchmarks.md, "Scale"). The PostgreSQL store's pool has 8
// connections: half for these writes, the others for reads and beats.
const fleetWriters = 4

type fleet struct {
	s       *Server
	st      turnstore.Store
	replica string
	beat    time.Duration

	mu      sync.RWMutex // closed, and sends on ops
	closed  bool
	ops     [fleetWriters]chan fleetOp // by writerOf the turn
	written sync.WaitGroup             // the writers

	ctx   context.Context // the heartbeat and listen loops
	stop  context.CancelFunc
	loops sync.WaitGroup

	subMu sync.Mutex
	subs  map[string]map[chan struct{}]struct{}

	// unwritten are the results the store did not take in three tries
	// (an outage): each heartbeat that reaches the store writes them.
	// Dropped, they left their turns running in the store for good, and
	// a client following one through another replica never had its
	// result (the chaos run, docs/scale.md).
	unwrittenMu sync.Mutex
	unwritten   []fleetOp
}

// fleetOp is one write of the store: a turn created, started, its
// events, or its result.
type fleetOp struct {
	id     string
	create *turnstore.Turn
	start  time.Time
	events []turnstore.Event
	result *turnstore.Event
	at     time.Time
	max    int64
	done   chan error
}

// newFleet registers the replica (its first heartbeat) and starts its
// writer, heartbeat and listener.
func newFleet(s *Server) (*fleet, error) {
	f := &fleet{s: s, st: s.o.Turns, replica: s.o.Replica, beat: s.o.Heartbeat, subs: map[string]map[chan struct{}]struct{}{}}
	for i := range f.ops {
		f.ops[i] = make(chan fleetOp, 1024/fleetWriters)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A replica of this name that ran before is gone: its unfinished
	// turns end now, before this one beats under the same name.
	_, err := f.st.Abandon(ctx, f.replica, s.lostResult)
	if err == nil {
		err = f.st.Beat(ctx, f.replica)
	}
	if err != nil {
		return nil, outpost.Wrap(outpost.Configuration, "serve", err)
	}
	f.ctx, f.stop = context.WithCancel(context.Background())
	for _, ops := range f.ops {
		f.written.Add(1)
		go f.write(ops)
	}
	f.loops.Add(2)
	go f.heartbeat()
	go func() {
		defer f.loops.Done()
		_ = f.st.Listen(f.ctx, f.replica, f.changed, func() { f.commands(f.ctx) })
	}()
	return f, nil
}

// defaultReplica is the host name with a random suffix: a restarted
// process is another replica.
func defaultReplica() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// send queues a write; false once the fleet is closed.
func (f *fleet) send(op fleetOp) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return false
	}
	f.ops[writerOf(op.id)] <- op
	return true
}

// writerOf is the writer of a turn's writes (FNV-1a of its id).
func writerOf(id string) int {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return int(h % fleetWriters)
}

// create queues a new turn's record; the channel returned gets the
// outcome once it is written.
func (f *fleet) create(t *turn) chan error {
	done := make(chan error, 1)
	rec := turnstore.Turn{ID: t.id, Owner: f.replica, Client: t.owner, Agent: t.agent, Sandbox: t.sandbox, State: turnstore.StateQueued, Created: t.created}
	if !f.send(fleetOp{id: t.id, create: &rec, done: done}) {
		done <- errShutdown
	}
	return done
}

func (f *fleet) started(t *turn, at time.Time) { f.send(fleetOp{id: t.id, start: at}) }

func (f *fleet) event(t *turn, seq int64, b []byte) {
	if b != nil {
		f.send(fleetOp{id: t.id, events: []turnstore.Event{{Seq: seq, Data: b}}, max: t.maxBytes})
	}
}

// finished queues a turn's result and waits until it is written, or for
// wait at most.
func (f *fleet) finished(t *turn, seq int64, b []byte, at time.Time, wait time.Duration) {
	done := make(chan error, 1)
	if !f.send(fleetOp{id: t.id, result: &turnstore.Event{Seq: seq, Data: b}, at: at, done: done}) {
		return
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
	}
}

// resultWait bounds how long a result waits for the turn store before
// its clients get it.
const resultWait = 2 * time.Second

// write applies one writer's queued writes in order, each run of events
// of one turn in one Append.
func (f *fleet) write(ops chan fleetOp) {
	defer f.written.Done()
	for op := range ops {
		batch := []fleetOp{op}
	drain:
		for len(batch) < replayBatch {
			select {
			case o, ok := <-ops:
				if !ok {
					break drain
				}
				batch = append(batch, o)
			default:
				break drain
			}
		}
		for _, o := range mergeEvents(batch) {
			f.apply(o)
		}
	}
}

// mergeEvents joins the event writes of each turn in a batch into one,
// keeping each turn's order: events after a turn's other write (its
// start, its result) are not moved before it.
func mergeEvents(batch []fleetOp) []fleetOp {
	var out []fleetOp
	open := map[string]int{} // turn → its events op in out still open to more
	for _, o := range batch {
		if o.events == nil {
			delete(open, o.id)
			out = append(out, o)
			continue
		}
		if i, ok := open[o.id]; ok {
			out[i].events = append(out[i].events, o.events...)
			continue
		}
		open[o.id] = len(out)
		out = append(out, o)
	}
	return out
}

// apply writes one op, trying three times.
func (f *fleet) apply(o fleetOp) {
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		switch {
		case o.create != nil:
			err = f.st.Create(ctx, *o.create)
		case !o.start.IsZero():
			err = f.st.Start(ctx, o.id, o.start)
		case o.result != nil:
			_, err = f.st.Finish(ctx, o.id, *o.result, o.at)
		default:
			err = f.st.Append(ctx, o.id, o.events, o.max)
		}
		cancel()
		if err == nil || o.create != nil || errors.Is(err, turnstore.ErrNotFound) {
			break
		}
		time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
	}
	if err != nil {
		f.s.log.Warn(f.s.o.Name+": writing a turn to the turn store", "turn", o.id, "err", err.Error())
		if o.result != nil && !errors.Is(err, turnstore.ErrNotFound) {
			f.unwrittenMu.Lock()
			f.unwritten = append(f.unwritten, o)
			f.unwrittenMu.Unlock()
		}
	}
	if o.done != nil {
		o.done <- err
	}
}

// heartbeat beats, reaps the turns of lost replicas, expires old turns
// and takes commands (in case a note was missed), every interval. It
// reaps only once it has beaten lostAfter+1 times in a row: after the
// database was out of reach for everyone, every live replica has beaten
// again by then, and only the lost ones are still silent.
func (f *fleet) heartbeat() {
	defer f.loops.Done()
	tick := time.NewTicker(f.beat)
	defer tick.Stop()
	beats := 1 // the beat of newFleet
	for {
		select {
		case <-f.ctx.Done():
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(f.ctx, f.beat*lostAfter)
		if err := f.st.Beat(ctx, f.replica); err != nil {
			f.s.log.Warn(f.s.o.Name+": heartbeat", "err", err.Error())
			beats = 0
		} else {
			beats++
		}
		if beats > 0 {
			f.writeUnwritten(ctx)
		}
		if beats > lostAfter {
			f.reap(ctx)
		}
		if _, err := f.st.Expire(ctx, time.Now().Add(-f.s.o.Retention)); err != nil {
			f.s.log.Warn(f.s.o.Name+": expiring turns", "err", err.Error())
		}
		f.commands(ctx)
		cancel()
	}
}

// writeUnwritten writes the results the writers could not, in order,
// keeping those the store still refuses.
func (f *fleet) writeUnwritten(ctx context.Context) {
	f.unwrittenMu.Lock()
	ops := f.unwritten
	f.unwritten = nil
	f.unwrittenMu.Unlock()
	var left []fleetOp
	for _, o := range ops {
		if _, err := f.st.Finish(ctx, o.id, *o.result, o.at); err != nil && !errors.Is(err, turnstore.ErrNotFound) {
			left = append(left, o)
		}
	}
	if len(ops) > 0 {
		f.s.log.Info(f.s.o.Name+": results written after the turn store failed", "written", len(ops)-len(left), "left", len(left))
	}
	f.unwrittenMu.Lock()
	f.unwritten = append(left, f.unwritten...)
	f.unwrittenMu.Unlock()
}

// reap ends the turns of the replicas silent for lostAfter heartbeats.
func (f *fleet) reap(ctx context.Context) {
	ids, err := f.st.Reap(ctx, f.beat*lostAfter, f.s.lostResult)
	if err != nil {
		f.s.log.Warn(f.s.o.Name+": reaping lost turns", "err", err.Error())
	}
	for _, id := range ids {
		f.s.log.Warn(f.s.o.Name+": turn of a lost replica ended", "turn", id)
	}
}

// commands applies the steer and cancel commands other replicas sent to
// this one's turns.
func (f *fleet) commands(ctx context.Context) {
	cs, err := f.st.Take(ctx, f.replica)
	if err != nil {
		f.s.log.Warn(f.s.o.Name+": taking commands", "err", err.Error())
		return
	}
	for _, c := range cs {
		f.s.mu.Lock()
		t := f.s.turns[c.Turn]
		f.s.mu.Unlock()
		if t == nil || t.isFinished() {
			continue
		}
		switch c.Kind {
		case turnstore.Cancel:
			t.cancel(errClientCancel)
		case turnstore.Steer:
			select {
			case t.steer <- c.Text:
			default:
				f.s.log.Warn(f.s.o.Name+": a forwarded message was dropped: the turn's queue is full", "turn", c.Turn)
			}
		}
	}
}

// subscribe returns a channel that gets a value when turn id changes.
func (f *fleet) subscribe(id string) (chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	f.subMu.Lock()
	defer f.subMu.Unlock()
	if f.subs[id] == nil {
		f.subs[id] = map[chan struct{}]struct{}{}
	}
	f.subs[id][ch] = struct{}{}
	return ch, func() {
		f.subMu.Lock()
		defer f.subMu.Unlock()
		delete(f.subs[id], ch)
		if len(f.subs[id]) == 0 {
			delete(f.subs, id)
		}
	}
}

func (f *fleet) changed(id string) {
	f.subMu.Lock()
	defer f.subMu.Unlock()
	for ch := range f.subs[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// close writes what is queued and leaves the fleet: this replica's
// unfinished turns, if any, are lost at the next reap of another.
func (f *fleet) close(ctx context.Context) error {
	f.mu.Lock()
	if !f.closed {
		f.closed = true
		for _, ops := range f.ops {
			close(ops)
		}
	}
	f.mu.Unlock()
	written := make(chan struct{})
	go func() { f.written.Wait(); close(written) }()
	var err error
	select {
	case <-written:
	case <-ctx.Done():
		err = ctx.Err()
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	f.writeUnwritten(lctx)
	err = errors.Join(err, f.st.Leave(lctx, f.replica))
	f.stop()
	f.loops.Wait()
	return err
}

// since is what the store holds of a turn after sequence number after.
func (f *fleet) since(ctx context.Context, id string, after int64, wake <-chan struct{}) (replay, error) {
	rec, evs, err := f.st.Replay(ctx, id, after, replayBatch)
	if err != nil {
		return replay{}, err
	}
	r := replay{finished: rec.State == turnstore.StateFinished, notify: wake, dropped: rec.Dropped}
	if r.finished && reaped(rec.Result) {
		// The result a reaper wrote comes at lostSlack past its stored
		// place, to every client: one that saw more of the turn live than
		// its lost owner wrote had after at or past that place, and a
		// replay from there never had it (the chaos run followed such a
		// turn 200 times in CI). A reconnect after it finds nothing more.
		if n := len(evs); n > 0 && evs[n-1].Seq == rec.Last {
			evs = evs[:n-1]
		}
		if len(evs) == 0 {
			if after < rec.Last+lostSlack {
				r.seq, r.entries = rec.Last+lostSlack, [][]byte{rec.Result}
			}
			return r, nil
		}
	}
	if len(evs) > 0 && evs[0].Seq > after+1 {
		r.missed, after = evs[0].Seq-1-after, evs[0].Seq-1
	}
	r.seq = after + 1
	for _, e := range evs {
		r.entries = append(r.entries, e.Data)
	}
	return r, nil
}

// lostResult is the result line of a turn whose replica was lost.
func (s *Server) lostResult(t turnstore.Turn) []byte {
	err := outpost.New(outpost.Sandbox, "serve", "the replica running the turn was lost (no heartbeat for "+(s.o.Heartbeat*lostAfter).String()+")").Detail("replica_lost", t.Owner)
	b, _ := encodeLine(engine.NewResultLine(&engine.Result{Agent: t.Agent, Sandbox: t.Sandbox}, err))
	return b
}

// reaped tells a result lostResult wrote.
func reaped(result []byte) bool {
	if !bytes.Contains(result, []byte(`"replica_lost"`)) {
		return false
	}
	var line struct {
		Error struct {
			Details struct {
				ReplicaLost string `json:"replica_lost"`
			}
		}
	}
	return json.Unmarshal(result, &line) == nil && line.Error.Details.ReplicaLost != ""
}

// remoteStatus is a stored turn's status.
func remoteStatus(rec turnstore.Turn) TurnStatus {
	st := TurnStatus{ID: rec.ID, State: rec.State, Agent: rec.Agent, Sandbox: rec.Sandbox, Created: rec.Created.UTC(), Events: rec.Last}
	if !rec.Started.IsZero() {
		ts := rec.Started.UTC()
		st.Started = &ts
	}
	if !rec.Finished.IsZero() {
		ts := rec.Finished.UTC()
		st.Finished = &ts
	}
	if rec.Result != nil {
		var line engine.ResultLine
		if json.Unmarshal(rec.Result, &line) == nil {
			st.Result = &line
		}
	}
	return st
}

// storeError is the answer when the turn store fails.
func storeError(err error) *apiError {
	e := fail(outpost.Refused, ReasonStore, "the turn store is unavailable: "+err.Error())
	e.retryAfter = 1
	return e
}

// remoteTurn reads a turn this replica does not hold from the store.
func (s *Server) remoteTurn(r *http.Request, id string) (turnstore.Turn, error) {
	rec, err := s.fleet.st.Get(r.Context(), id)
	switch {
	case errors.Is(err, turnstore.ErrNotFound), err == nil && !principalOf(r.Context()).sees(rec.Client):
		return rec, fail(outpost.Configuration, ReasonNotFound, "no turn "+id+" (unknown, or finished more than the retention ago)")
	case err != nil:
		return rec, storeError(err)
	}
	return rec, nil
}

func (s *Server) getRemote(w http.ResponseWriter, r *http.Request, rec turnstore.Turn) {
	writeJSON(w, http.StatusOK, remoteStatus(rec))
}

func (s *Server) eventsRemote(w http.ResponseWriter, r *http.Request, rec turnstore.Turn) {
	wake, unsubscribe := s.fleet.subscribe(rec.ID)
	defer unsubscribe()
	poll := time.NewTicker(s.fleet.beat) // the bound when a note is lost
	defer poll.Stop()
	s.stream(w, r, nil, rec.Agent, poll.C, func(after int64) (replay, error) {
		return s.fleet.since(r.Context(), rec.ID, after, wake)
	})
}

// sendRemote forwards a command to the turn's owner; false when the
// turn is finished.
func (s *Server) sendRemote(r *http.Request, c turnstore.Command) (bool, error) {
	err := s.fleet.st.Send(r.Context(), c)
	switch {
	case errors.Is(err, turnstore.ErrFinished):
		return false, nil
	case errors.Is(err, turnstore.ErrNotFound):
		return false, fail(outpost.Configuration, ReasonNotFound, "no turn "+c.Turn)
	case err != nil:
		return false, storeError(err)
	}
	return true, nil
}

func (s *Server) steerRemote(w http.ResponseWriter, r *http.Request, rec turnstore.Turn) {
	text, ok := s.steerText(w, r)
	if !ok {
		return
	}
	sent := false
	if rec.State != turnstore.StateFinished {
		var err error
		if sent, err = s.sendRemote(r, turnstore.Command{Turn: rec.ID, Kind: turnstore.Steer, Text: text}); err != nil {
			writeErr(w, err)
			return
		}
	}
	if !sent {
		writeErr(w, fail(outpost.Refused, ReasonConflict, "the turn is finished: start a new one with resume"))
		return
	}
	writeJSON(w, http.StatusAccepted, SteerResponse{Accepted: true})
}

func (s *Server) cancelRemote(w http.ResponseWriter, r *http.Request, rec turnstore.Turn) {
	if rec.State != turnstore.StateFinished {
		sent, err := s.sendRemote(r, turnstore.Command{Turn: rec.ID, Kind: turnstore.Cancel})
		if err != nil {
			writeErr(w, err)
			return
		}
		if sent {
			writeJSON(w, http.StatusAccepted, remoteStatus(rec))
			return
		}
	}
	rec, err := s.remoteTurn(r, rec.ID)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, remoteStatus(rec))
}
