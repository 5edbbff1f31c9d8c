package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outposthq/outpost/cmd/outpost/cli"
)

// chaosFault is one fault struck, and what the clients saw after it.
type chaosFault struct {
	Name  string    `json:"name"`
	At    time.Time `json:"at"`
	Took  float64   `json:"took_seconds"` // the fault itself (a restart command)
	Error string    `json:"error,omitempty"`
	// Recovery: from the fault's start to the first success of a turn
	// accepted after it (for docker, a docker turn's); kill: to the
	// last result of the killed replica's turns (ended by another).
	Recovery float64        `json:"recovery_seconds"`
	Codes    map[string]int `json:"codes,omitempty"` // results of the turns accepted until the next fault, by code
}

// chaosReport is a chaos run's figures.
type chaosReport struct {
	Date          string            `json:"date"`
	LoadAverage   string            `json:"load_average"`
	Replicas      int               `json:"replicas"`
	Conversations int               `json:"conversations"`
	Seconds       float64           `json:"seconds"`
	Faults        []chaosFault      `json:"faults"`
	Turns         int               `json:"turns"`      // accepted
	Results       int               `json:"results"`    // with exactly one result
	Codes         map[string]int    `json:"codes"`      // results by code ("ok" for success)
	Messages      map[string]string `json:"messages"`   // an error message of each sandbox and code
	Refused       map[string]int    `json:"refused"`    // POST refusals by code, retried
	Lost          int               `json:"lost"`       // accepted, no result
	Duplicated    int               `json:"duplicated"` // results or events twice, or in the store twice
	Reconnects    int               `json:"reconnects"`
	CutStreams    int64             `json:"cut_streams"`
	StoredTurns   int               `json:"stored_turns"`
	StoredConvs   int               `json:"stored_conversations"`
	ClientConvs   int               `json:"client_conversations"`
	Orphans       int               `json:"orphans"` // docker containers outpost gc would remove (-1: not checked)
	Violations    []string          `json:"violations,omitempty"`
}

// check fills the counts and holds the run to its invariants.
func (r *chaosReport) check(ctx context.Context, c *chaosConfig, cl *chaosClient) error {
	r.Codes, r.Messages, r.Refused, r.CutStreams, r.Orphans = map[string]int{}, map[string]string{}, cl.refused, cl.cuts.Load(), -1
	convs := map[string][]*chaosTurn{}
	for _, t := range cl.turns {
		r.Turns++
		r.Reconnects += t.Reconnects
		switch {
		case t.Results == 0:
			r.Lost++
			r.violate("turn %s (on %s): no result", t.ID, t.Replica)
		case t.Results > 1:
			r.Duplicated++
			r.violate("turn %s: %d results, or an event again", t.ID, t.Results)
		default:
			r.Results++
		}
		r.Codes[or(t.Code, "ok")]++
		if t.Code != "" {
			r.Messages[t.Sandbox+" "+t.Code] = t.Message
		}
		if t.Conversation != "" {
			convs[t.Conversation] = append(convs[t.Conversation], t)
		}
	}
	r.ClientConvs = len(convs)
	r.checkOrder(convs)
	r.recovery(cl)
	if err := r.checkStore(ctx, c.store, cl); err != nil {
		return err
	}
	if c.dockerEvery > 0 {
		r.gc()
	}
	return nil
}

func (r *chaosReport) violate(format string, args ...any) {
	if len(r.Violations) < 50 {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// checkOrder: in each conversation, in the order its client ran them,
// every successful turn is the echo agent's turn 1 + the turns before it
// that stored (succeeded, or were spooled), so none was lost or applied
// twice.
func (r *chaosReport) checkOrder(convs map[string][]*chaosTurn) {
	for conv, turns := range convs {
		stored := 0
		for _, t := range turns {
			if t.Code == "" && t.Number != stored+1 {
				r.violate("conversation %s: turn %s is its turn %d, want %d", conv, t.ID, t.Number, stored+1)
			}
			if t.Code == "" || strings.HasSuffix(t.Code, "/spooled") {
				stored++
			}
		}
	}
}

// recovery fills each fault's recovery time and the codes of the turns
// accepted during its phase.
func (r *chaosReport) recovery(cl *chaosClient) {
	for i := range r.Faults {
		f := &r.Faults[i]
		next := time.Now()
		if i+1 < len(r.Faults) {
			next = r.Faults[i+1].At
		}
		f.Codes = map[string]int{}
		first := time.Time{}
		for _, t := range cl.turns {
			if f.Name == "kill" && t.Replica == cl.fleet.servers[0].name && t.Accepted.Before(f.At) && t.Ended.After(f.At) {
				first = maxTime(first, t.Ended)
			}
			if t.Accepted.Before(f.At) || !t.Accepted.Before(next) {
				continue
			}
			f.Codes[or(t.Code, "ok")]++
			if f.Name != "kill" && t.Code == "" && (f.Name != "docker" || t.Sandbox == "docker") && (first.IsZero() || t.Ended.Before(first)) {
				first = t.Ended
			}
		}
		if !first.IsZero() {
			f.Recovery = first.Sub(f.At).Seconds()
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// checkStore: the turn store holds every accepted turn once, finished,
// with the result its client saw, and only the clients' conversations.
func (r *chaosReport) checkStore(ctx context.Context, url string, cl *chaosClient) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	seen := map[string]*chaosTurn{}
	for _, t := range cl.turns {
		seen[t.ID] = t
	}
	rows, err := conn.Query(ctx, `SELECT id, state, coalesce(result, ''::bytea) FROM outpost_turns`)
	if err != nil {
		return err
	}
	var ids []string
	for rows.Next() {
		var id, state string
		var result []byte
		if err := rows.Scan(&id, &state, &result); err != nil {
			return err
		}
		ids = append(ids, id)
		t := seen[id]
		if t == nil {
			continue // the warm-up's
		}
		if code := codeOf([]byte(`{"error":` + errorJSON(result) + `}`)); state != "finished" || code != t.Code {
			r.violate("turn %s in the store: %s, code %q; its client saw %q", id, state, code, t.Code)
		}
		delete(seen, id)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for id := range seen {
		r.violate("turn %s is not in the store", id)
	}
	slices.Sort(ids)
	r.StoredTurns = len(ids)
	if n := len(slices.Compact(ids)); n != len(ids) {
		r.Duplicated += len(ids) - n
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM outpost_conversations`).Scan(&r.StoredConvs); err != nil {
		return err
	}
	if r.StoredConvs > r.ClientConvs+len(cl.fleet.servers) { // the warm-up's, one a replica
		r.violate("the store holds %d conversations, the clients know %d", r.StoredConvs, r.ClientConvs)
	}
	return nil
}

var orphans = regexp.MustCompile(`remove (\d+) orphan`)

// gc counts what `outpost gc --sandbox docker --dry-run` would remove.
func (r *chaosReport) gc() {
	var out bytes.Buffer
	code := cli.Run(context.Background(), []string{"gc", "--sandbox", "docker", "--dry-run"}, nil, &out, &out)
	m := orphans.FindStringSubmatch(out.String())
	if code != 0 || m == nil {
		r.violate("outpost gc --dry-run: exit %d: %s", code, strings.TrimSpace(out.String()))
		return
	}
	r.Orphans, _ = strconv.Atoi(m[1])
	if r.Orphans != 0 {
		r.violate("outpost gc would remove %d containers: %s", r.Orphans, strings.TrimSpace(out.String()))
	}
}

// write prints the report (and its JSON with --json).
func (r *chaosReport) write(c *chaosConfig, w io.Writer) error {
	if c.jsonOut != "" {
		b, _ := json.MarshalIndent(r, "", "  ")
		if c.jsonOut == "-" {
			_, err := w.Write(append(b, '\n'))
			return err
		}
		if err := os.WriteFile(c.jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "chaos run %s (load average %s): %d replicas, %d conversations, %.0f s\n", r.Date, r.LoadAverage, r.Replicas, r.Conversations, r.Seconds)
	fmt.Fprintf(w, "turns accepted %d, one result each %d, lost %d, duplicated %d; results by code %v; refusals retried %v\n",
		r.Turns, r.Results, r.Lost, r.Duplicated, sorted(r.Codes), sorted(r.Refused))
	fmt.Fprintf(w, "streams cut %d, reconnects %d; store: %d turns, %d conversations (clients: %d); orphans %d\n",
		r.CutStreams, r.Reconnects, r.StoredTurns, r.StoredConvs, r.ClientConvs, r.Orphans)
	for _, f := range r.Faults {
		fmt.Fprintf(w, "  %-8s took %5.1f s, recovered %5.1f s after; results of the turns accepted until the next: %v %s\n", f.Name, f.Took, f.Recovery, sorted(f.Codes), f.Error)
	}
	for k, m := range r.Messages {
		fmt.Fprintf(w, "  %s: %s\n", k, m)
	}
	for _, v := range r.Violations {
		fmt.Fprintln(w, "  VIOLATION:", v)
	}
	return nil
}

func sorted(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s=%d", k, m[k])
	}
	return "{" + b.String() + "}"
}
