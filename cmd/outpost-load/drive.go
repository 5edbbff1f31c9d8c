package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// turnStat is what the harness saw of one turn.
type turnStat struct {
	id, conversation string
	first, result    time.Duration // from the POST's start
	events           int           // events on the harness's own stream
	results          int           // result lines on it (exactly one is right)
	code             string        // the result's error code, "" for success
	err              error         // the harness could not start or follow it
	retries          int           // 429s before it was admitted
}

// loader runs the conversations of a run.
type loader struct {
	cfg     *config
	fleet   *fleet
	peaks   *peaks
	watched atomic.Int64 // events the extra watchers received
	cut     atomic.Int64 // extra watchers' streams that ended without the result
}

// run runs cfg.conversations conversations at once, each of cfg.turns
// turns in sequence; conversation i is served by replica i mod R.
func (d *loader) run(ctx context.Context) []turnStat {
	out := make([]turnStat, d.cfg.conversations*d.cfg.turns)
	var wg sync.WaitGroup
	for i := range d.cfg.conversations {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := d.fleet.servers[i%len(d.fleet.servers)]
			conv := ""
			for m := range d.cfg.turns {
				st := d.turn(ctx, s, fmt.Sprintf("load c%d t%d", i, m+1), conv)
				out[i*d.cfg.turns+m] = st
				if st.err != nil || st.conversation == "" {
					return // the conversation cannot go on; its later turns count as not run
				}
				conv = st.conversation
			}
		}()
	}
	wg.Wait()
	return out
}

// turn starts one turn, follows it with K streams and measures it.
func (d *loader) turn(ctx context.Context, s *server, prompt, resume string) turnStat {
	var st turnStat
	req := map[string]any{"prompt": prompt}
	if resume != "" {
		req["resume"] = resume
	}
	body, _ := json.Marshal(req)
	d.peaks.turnBegan()
	defer d.peaks.turnEnded()
	t0 := time.Now()
	for {
		code, b, err := post(ctx, s, "/v1/turns", body)
		if err != nil {
			st.err = err
			return st
		}
		if code == http.StatusTooManyRequests {
			st.retries++
			select {
			case <-ctx.Done():
				st.err = ctx.Err()
				return st
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		var r struct{ ID string }
		if code != http.StatusAccepted || json.Unmarshal(b, &r) != nil || r.ID == "" {
			st.err = fmt.Errorf("POST /v1/turns: %d %s", code, b)
			return st
		}
		st.id = r.ID
		break
	}
	var wg sync.WaitGroup
	for range d.cfg.watchers - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, results, _ := follow(ctx, s, st.id, nil)
			d.watched.Add(int64(n))
			if results != 1 {
				d.cut.Add(1)
			}
		}()
	}
	st.events, st.results, st.err = follow(ctx, s, st.id, func(typ string, data []byte) {
		if st.first == 0 {
			st.first = time.Since(t0)
		}
		if typ == "result" {
			st.result = time.Since(t0)
			st.conversation, st.code = resultOf(data)
		}
	})
	wg.Wait()
	return st
}

func post(ctx context.Context, s *server, path string, body []byte) (int, []byte, error) {
	r, err := http.NewRequestWithContext(ctx, "POST", "http://outpost"+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	r.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(r)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, b, err
}

// follow reads a turn's event stream to its end, calling onEvent (when
// not nil) with each event's type and JSON; it returns how many events
// and result lines came.
func follow(ctx context.Context, s *server, id string, onEvent func(typ string, data []byte)) (events, results int, err error) {
	r, err := http.NewRequestWithContext(ctx, "GET", "http://outpost/v1/turns/"+id+"/events", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := s.stream.Do(r)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, 0, fmt.Errorf("GET events of %s: %d %s", id, resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: "))
		if !ok {
			continue
		}
		var e struct{ Type string }
		json.Unmarshal(data, &e)
		events++
		if e.Type == "result" {
			results++
		}
		if onEvent != nil {
			onEvent(e.Type, data)
		}
	}
	if err := sc.Err(); err != nil && !strings.Contains(err.Error(), "closed") {
		return events, results, err
	}
	return events, results, nil
}

// resultOf is a result line's conversation and error code ("" for none).
func resultOf(data []byte) (conv, code string) {
	var r struct {
		Conversation string
		Error        *struct{ Code string }
	}
	json.Unmarshal(data, &r)
	if r.Error != nil {
		code = r.Error.Code
		if code == "" {
			code = "unknown"
		}
	}
	return r.Conversation, code
}
