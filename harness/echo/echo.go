// Package echo is the preset of outpost's built-in echo agent: a
// deterministic CLI, run as a real subprocess (the hidden `outpost
// echo-agent` subcommand), that exercises the whole pipeline with no key and
// no network.
//
// Contract (docs/presets/echo.md): the final message contains the prompt
// and "turn N", N being the 1-based count of user turns in the
// conversation; sessions live in $HOME/.echo/sessions/<id>.jsonl; --resume
// and --fork continue them; usage counts words (input = prompt, output =
// reply, cache read = history). Prompt directives simulate the hard cases:
// #quota, #outage, #retry, #crash, #nofinish, #slow[=N], #tool, #big, #hang,
// #badlines, #env NAME, #leak NAME, #retryforever, #args (the arguments it does not know,
// passed through). `echo-agent fork PARENT` forks a conversation with a
// separate command (Fork).
package echo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/kit"
	"github.com/outposthq/outpost/harness/kit/lazyre"
)

// Program is the executable the echo preset runs, as the sandbox sees it.
// The bootstrap step replaces it with the outpost binary (the host binary
// on local sandboxes, a copy inside isolated ones).
const Program = "outpost"

// TokenVariable is the optional credential the echo agent takes: when set
// in the environment or .outpost/.env, it reaches the agent (and is
// redacted from all output). Directives "#env ECHO_API_KEY" and "#leak
// ECHO_API_KEY" show that it arrived and that it cannot leak.
const TokenVariable = "ECHO_API_KEY"

// Harness returns the echo preset.
func Harness() *harness.Harness {
	return &harness.Harness{
		Name:    "echo",
		Request: request,
		Events:  Events,
		Credentials: func(vars harness.Vars) (harness.Plan, error) {
			p := harness.Plan{}
			if v, ok := vars.Lookup(TokenVariable); ok {
				p.Variables = map[string]string{TokenVariable: v}
			}
			return p, nil
		},
		Quota:        Quota,
		QuotaDetails: quotaDetails,
		Unavailable:  Unavailable,
		Bootstrap:    "echo",
		LiveInput: func(in harness.Input) (harness.Live, error) {
			cmd, err := request(in)
			if err != nil {
				return nil, err
			}
			cmd.Args = append([]string{Subcommand, "--live"}, cmd.Args[1:len(cmd.Args)-2]...)
			cmd.KeepStdin = true
			return &live{cmd: cmd, prompt: in.Prompt}, nil
		},
		RequiresFinishedEvent: true,
		Storage: &harness.Storage{
			Roots: []string{".echo/sessions"},
			Match: func(rel, native string) bool { return rel == native+".jsonl" },
		},
		History:    History,
		Capture:    harness.True,
		Resumable:  harness.True,
		Forkable:   harness.True,
		Inactivity: 0,
	}
}

// Fork returns a Fork hook for the echo agent: it runs `PROGRAM
// echo-agent fork PARENT` in the sandbox and returns the id it prints.
// program is the echo agent's executable as the sandbox sees it (the hook
// runs before the turn's own command is bootstrapped). The echo preset
// forks through its request instead; tests that prove the engine's fork
// step set this hook on a copy of the preset.
func Fork(program string) func(ctx context.Context, parent string, run harness.Runner) (string, error) {
	return func(ctx context.Context, parent string, run harness.Runner) (string, error) {
		r, err := run(ctx, harness.Command{Path: program, Args: []string{Subcommand, ForkSubcommand, parent}})
		if err != nil {
			return "", err
		}
		if !r.Status.Success() {
			return "", fmt.Errorf("echo-agent fork exited with %d: %s", r.Status.Code, strings.TrimSpace(string(r.Stderr)))
		}
		return strings.TrimSpace(string(r.Stdout)), nil
	}
}

func request(in harness.Input) (harness.Command, error) {
	if err := (kit.Opening{Preset: "echo"}).Check(in); err != nil {
		return harness.Command{}, err
	}
	if len(in.Options) > 0 {
		return harness.Command{}, fmt.Errorf("echo: unknown option %q (echo takes no options)", slices.Sorted(maps.Keys(in.Options))[0])
	}
	args := []string{Subcommand}
	if in.Model != "" {
		args = append(args, "--model", in.Model)
	}
	if in.Conversation != "" {
		args = append(args, "--resume", in.Conversation)
		if in.Fork {
			args = append(args, "--fork")
		}
	}
	if err := kit.CheckExtraArgs("echo", in.ExtraArgs, checkExtraArg); err != nil {
		return harness.Command{}, err
	}
	args = append(args, in.ExtraArgs...)
	args = append(args, "--", in.Prompt)
	return harness.Command{Path: Program, Args: args}, nil
}

// reserved are the echo agent's flags: outpost sets them from the turn
// (the model, the conversation, live input) or they end the turn (help).
var reserved = kit.Flags{
	"--model":  "use the agent's model",
	"--resume": "use Resume", "--fork": "use Fork",
	"--live": "", "-h": "", "--help": "",
}

// checkExtraArg refuses an extra argument that names a reserved flag, in
// any of the forms the agent's flag parser takes ("-model", "--model=x"),
// and "--", which outpost places before the prompt: whatever follows it is
// the prompt.
func checkExtraArg(a string) error {
	if a == "--" {
		return errors.New(`"--" is placed by outpost before the prompt`)
	}
	if isFlag(a) {
		name, _ := flagName(a)
		if len(name) > 1 {
			name = "-" + name
		}
		if err := reserved.Check("-" + name); err != nil {
			return err
		}
	}
	return reserved.Check(a)
}

var (
	quotaRE       = lazyre.New(`(?i)usage limit reached`)
	resetRE       = lazyre.New(`resets at (\S+)`)
	unavailableRE = lazyre.New(`(?i)service unavailable|overloaded|connection (refused|reset)`)
)

// Quota matches the echo agent's terminal usage-limit text. Its retry
// notice ("rate limited (429), retrying") does not match.
func Quota(text string) bool { return quotaRE.MatchString(text) }

func quotaDetails(text string) map[string]any {
	if m := resetRE.FindStringSubmatch(text); m != nil {
		if t, err := time.Parse(time.RFC3339, strings.TrimRight(m[1], ".")); err == nil {
			return map[string]any{"resets_at": t.UTC().Format(time.RFC3339)}
		}
	}
	return nil
}

// Unavailable matches the echo agent's outage text.
func Unavailable(text string) bool {
	return unavailableRE.MatchString(text) && !strings.Contains(text, "retrying")
}

// Events decodes one line of the echo agent's output. Any input is safe:
// lines that are not its JSON give no events.
func Events(b []byte) []harness.Event {
	var l line
	if err := json.Unmarshal(b, &l); err != nil {
		return nil
	}
	switch l.Type {
	case "init":
		return []harness.Event{{Type: harness.EventSession, Session: l.Session, Details: map[string]any{"model": l.Model, "turn": l.Turn}}}
	case "delta":
		return []harness.Event{{Type: harness.EventMessage, ID: l.ID, Text: l.Text, Delta: true}}
	case "text":
		return []harness.Event{{Type: harness.EventMessage, ID: l.ID, Text: l.Text}}
	case "tool_call":
		return []harness.Event{{Type: harness.EventToolCall, Tool: &harness.Tool{ID: l.ID, Name: l.Name, Input: harness.SafeJSON(l.Input)}}}
	case "tool_result":
		return []harness.Event{{Type: harness.EventToolResult, Tool: &harness.Tool{ID: l.ID, Output: l.Output, Error: l.Error}}}
	case "denied":
		return []harness.Event{{Type: harness.EventFailure, Kind: "permission_denied", Text: l.Text, Tool: &harness.Tool{ID: l.ID, Name: l.Name}}}
	case "retry":
		return []harness.Event{{Type: harness.EventNotice, Kind: "retry", Text: l.Text, Details: map[string]any{"attempt": l.Attempt}}}
	case "steer":
		return []harness.Event{{Type: harness.EventNotice, Kind: "steer", Text: l.Text, Details: map[string]any{"mode": l.Mode}}}
	case "done":
		ev := harness.Event{Type: harness.EventFinished, Text: l.Text, Stop: "end_turn"}
		if l.Usage != nil {
			ev.Usage = &harness.Usage{InputTokens: l.Usage.Input, OutputTokens: l.Usage.Output, CacheReadTokens: l.Usage.CacheRead, Complete: true}
		}
		return []harness.Event{ev}
	}
	return nil
}
