package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/harness/kit"
	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/memsandbox"
)

// memProvider is the sandbox provider the harness's own server
// (`outpost-load serve`) registers: the in-memory sandbox
// (sandbox/memsandbox), whose program table has an echo agent that costs
// nothing, so what a load run measures is the server's own work. It is
// registered in this command only, never in the outpost binary: a sandbox
// whose agent is a Go function is for measuring, not for running agents.
const memProvider = "memory-echo"

func registerMemory() {
	driver.Register(memProvider, func(settings map[string]string) (driver.Provider, error) {
		for k := range settings {
			return nil, fmt.Errorf("%s: unknown setting %q (it has none)", memProvider, k)
		}
		return memsandbox.New(&memsandbox.Options{Programs: map[string]memsandbox.Program{echo.Program: memEcho}}), nil
	})
}

// memEcho speaks the echo agent's dialect (harness/echo, the lines its
// preset decodes) for what a load run asks of it: a turn, new or
// continuing a session (--resume ID), its prompt as arguments or, with
// --live, as JSON lines on stdin (`outpost serve` steers through them).
// The session is kept in $HOME/.echo/sessions/ID.jsonl as the echo agent
// keeps it, so the turn's conversation is captured, stored and restored.
// No directive of the echo agent is understood: every prompt is echoed.
func memEcho(ctx context.Context, p *memsandbox.Proc) int {
	args := p.Args
	if len(args) == 0 || args[0] != echo.Subcommand {
		fmt.Fprintln(p.Stderr, "usage: outpost echo-agent [--live] [--model M] [--resume ID] [-- PROMPT]")
		return 2
	}
	var id, model, prompt string
	live := false
	for i := 1; i < len(args); i++ {
		switch args[i] {
		case "--live":
			live = true
		case "--resume", "--model":
			if i+1 < len(args) {
				if args[i] == "--resume" {
					id = args[i+1]
				} else {
					model = args[i+1]
				}
				i++
			}
		case "--":
			prompt = strings.Join(args[i+1:], " ")
			i = len(args)
		}
	}
	dir := memsandbox.Home + "/.echo/sessions"
	if err := p.FS.MkdirAll(dir, 0o700); err != nil {
		return fail(p, err)
	}
	w := bufio.NewWriter(p.Stdout)
	s := &memSession{ctx: ctx, w: w, model: model}
	if id != "" {
		b, err := p.FS.ReadFile(path.Join(dir, id+".jsonl"))
		if err != nil {
			return fail(p, fmt.Errorf("no conversation found with id %s", id))
		}
		s.log = b
	} else {
		id = newSessionID()
		s.record(map[string]string{"role": "meta", "id": id})
	}
	s.id, s.file = id, path.Join(dir, id+".jsonl")
	if !live {
		return s.turn(p, prompt)
	}
	sc := bufio.NewScanner(p.Stdin)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	code := 0
	for sc.Scan() {
		var m struct{ Type, Text string }
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil || m.Type != "user" {
			return fail(p, fmt.Errorf("invalid input line (%d bytes)", len(sc.Bytes())))
		}
		if code = s.turn(p, m.Text); code != 0 || ctx.Err() != nil {
			return code
		}
	}
	return code
}

// memSession is one session of memEcho: its file's lines so far.
type memSession struct {
	ctx          context.Context
	w            *bufio.Writer
	id, model    string
	file         string
	log          []byte
	turns, words int
}

func (s *memSession) record(v any) {
	b, _ := json.Marshal(v)
	s.log = append(append(s.log, b...), '\n')
}

// turn answers one user message: the init, text and done lines, the
// session stored before the done line as the echo agent does.
func (s *memSession) turn(p *memsandbox.Proc, prompt string) int {
	n := strings.Count(string(s.log), `"role":"user"`) + 1
	model := s.model
	if model == "" {
		model = "echo-1"
	}
	if _, v, ok := strings.Cut(prompt, "#slow="); ok {
		// #slow=N: the echo agent's N steps of 50 ms, as one wait (the
		// chaos run's turns are running when a fault strikes).
		v, _, _ = strings.Cut(v, " ")
		steps, _ := strconv.Atoi(v)
		select {
		case <-time.After(time.Duration(steps) * 50 * time.Millisecond):
		case <-s.ctx.Done():
			return fail(p, s.ctx.Err())
		}
	}
	reply := fmt.Sprintf("echo: %s (turn %d)", prompt, n)
	s.record(map[string]string{"role": "user", "text": prompt})
	s.record(map[string]string{"role": "assistant", "text": reply})
	if err := p.FS.WriteFile(s.file, s.log, 0o600); err != nil {
		return fail(p, err)
	}
	in, out := len(strings.Fields(prompt)), len(strings.Fields(reply))
	lines := []any{
		map[string]any{"type": "init", "session": s.id, "model": model, "turn": n},
		map[string]any{"type": "text", "id": "m1", "text": reply},
		map[string]any{"type": "done", "text": reply, "usage": map[string]int{"input": in, "output": out, "cache_read": s.words}},
	}
	s.words += in + out
	for _, l := range lines {
		b, _ := json.Marshal(l)
		s.w.Write(append(b, '\n'))
	}
	if err := s.w.Flush(); err != nil {
		return fail(p, err)
	}
	return 0
}

func fail(p *memsandbox.Proc, err error) int {
	fmt.Fprintln(p.Stderr, "echo:", err)
	return 1
}

// newSessionID is a version 4 UUID, as the echo agent's session ids are.
func newSessionID() string {
	id, _ := kit.NewUUID()
	return id
}
