package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// chaosTurn is what the chaos run's client saw of one accepted turn.
type chaosTurn struct {
	ID           string    `json:"id"`
	Conversation string    `json:"conversation,omitempty"`
	Sandbox      string    `json:"sandbox"`
	Replica      string    `json:"replica"` // where it was started
	Accepted     time.Time `json:"accepted"`
	Ended        time.Time `json:"ended"`
	Results      int       `json:"results"`
	Code         string    `json:"code,omitempty"` // code/reason of its result, "" for success
	Number       int       `json:"number"`         // the echo agent's "(turn N)"
	Reconnects   int       `json:"reconnects"`
	Message      string    `json:"message,omitempty"` // its error's message
	last         int64
}

// chaosClient is a user's client through the faults: it starts turns on
// its replica (the next live one when that one is gone), retrying the
// refusals that say to retry, and follows each turn to its one result
// through any live replica, resuming a broken stream with Last-Event-ID.
type chaosClient struct {
	fleet   *fleet
	mu      sync.Mutex
	dead    map[string]bool // replicas killed
	turns   []*chaosTurn
	refused map[string]int // POST refusals by code/reason
	cut     atomic.Int64   // streams to cut after their first event (the watcher fault)
	cuts    atomic.Int64   // streams cut
}

func (c *chaosClient) live(prefer int) *server {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.fleet.servers)
	for i := range n {
		if s := c.fleet.servers[(prefer+i)%n]; !c.dead[s.name] {
			return s
		}
	}
	return nil
}

// start posts a turn until it is accepted or ctx ends.
func (c *chaosClient) start(ctx context.Context, prefer int, req map[string]any) *chaosTurn {
	body, _ := json.Marshal(req)
	for ctx.Err() == nil {
		s := c.live(prefer)
		code, b, err := post(ctx, s, "/v1/turns", body)
		if err == nil && code == http.StatusAccepted {
			var r struct{ ID string }
			json.Unmarshal(b, &r)
			conv, _ := req["resume"].(string)
			sb, _ := req["sandbox"].(string)
			t := &chaosTurn{ID: r.ID, Conversation: conv, Sandbox: sb, Replica: s.name, Accepted: time.Now()}
			c.mu.Lock()
			c.turns = append(c.turns, t)
			c.mu.Unlock()
			return t
		}
		what := "connection"
		if err == nil {
			what = codeOf(b)
		}
		c.mu.Lock()
		c.refused[what]++
		c.mu.Unlock()
		if err == nil && code != http.StatusServiceUnavailable && code != http.StatusTooManyRequests {
			return nil // not to be retried: counted
		}
		prefer++
		sleep(ctx, 100*time.Millisecond)
	}
	return nil
}

// follow reads t's stream to its result, across reconnects.
func (c *chaosClient) follow(ctx context.Context, prefer int, t *chaosTurn) {
	for attempt := 0; t.Results == 0 && ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			t.Reconnects++
			sleep(ctx, 50*time.Millisecond)
		}
		s := c.live(prefer + attempt)
		cut := c.cut.Add(-1) >= 0
		if !cut {
			c.cut.Add(1)
		}
		c.stream(ctx, s, t, cut)
	}
}

// stream reads one connection of t's stream; cut ends it after its first
// event, as a watcher whose connection is cut.
func (c *chaosClient) stream(ctx context.Context, s *server, t *chaosTurn, cut bool) {
	r, _ := http.NewRequestWithContext(ctx, "GET", "http://outpost/v1/turns/"+t.ID+"/events", nil)
	if t.last > 0 {
		r.Header.Set("Last-Event-ID", strconv.FormatInt(t.last, 10))
	}
	resp, err := s.stream.Do(r)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if id, ok := bytes.CutPrefix(line, []byte("id: ")); ok {
			seq, _ := strconv.ParseInt(string(id), 10, 64)
			if seq <= t.last {
				t.Results += 1000 // an event again or a step back: counted as duplicated
			}
			t.last = seq
			continue
		}
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			continue
		}
		var e struct{ Type, Text string }
		json.Unmarshal(data, &e)
		if e.Type == "result" {
			t.Results++
			t.Ended = time.Now()
			conv, _ := resultOf(data)
			if conv != "" {
				t.Conversation = conv
			}
			t.Code = codeOf([]byte(`{"error":` + errorJSON(data) + `}`))
			var m struct{ Error struct{ Message string } }
			json.Unmarshal(data, &m)
			t.Message = m.Error.Message
			if m := turnNumber.FindStringSubmatch(e.Text); m != nil {
				t.Number, _ = strconv.Atoi(m[1])
			}
			return
		}
		if cut {
			c.cuts.Add(1)
			return
		}
	}
}

var turnNumber = regexp.MustCompile(`\(turn (\d+)\)`)

// errorJSON is a result line's error object ("null" for none).
func errorJSON(data []byte) string {
	var r struct{ Error json.RawMessage }
	json.Unmarshal(data, &r)
	if len(r.Error) == 0 {
		return "null"
	}
	return string(r.Error)
}

// codeOf is an API error's code/reason: the reason the server gives, else
// replica_lost or spooled when the details say so, else the code alone.
func codeOf(b []byte) string {
	var e struct {
		Error *struct {
			Code    string
			Details map[string]any
		}
	}
	if json.Unmarshal(b, &e) != nil || e.Error == nil {
		return ""
	}
	d := e.Error.Details
	for _, k := range []string{"reason", "replica_lost", "spooled"} {
		if v, ok := d[k]; ok {
			if k == "reason" {
				return e.Error.Code + "/" + strings.TrimSpace(fmt.Sprint(v))
			}
			return e.Error.Code + "/" + k
		}
	}
	return e.Error.Code
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
