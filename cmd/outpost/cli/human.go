package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/output"
)

var (
	osLookupEnv = os.LookupEnv
	osOpen      = os.Open
)

// humanWriter shows a turn to a person: the assistant's text streams on
// stdout; tools, notices and the summary go to stderr, so stdout can be
// piped as the answer alone. A structured answer goes to answer (stdout).
type humanWriter struct {
	mu       sync.Mutex
	out, err io.Writer
	answer   io.Writer
	streamed map[string]bool // message ids shown through deltas
	midLine  bool
	bar      *progressBar // bootstrap progress (cmd/outpost/cli/bootstrap.go)
	steer    string       // the text of the last steering notice shown
}

func newHumanWriter(out, err io.Writer) *humanWriter {
	return &humanWriter{out: out, err: err, answer: out, streamed: map[string]bool{}, bar: newProgressBar(err, true)}
}

func (h *humanWriter) endLine() {
	if h.midLine {
		fmt.Fprintln(h.out)
		h.midLine = false
	}
}

func (h *humanWriter) event(ev harness.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch ev.Type {
	case harness.EventSession:
		fmt.Fprintf(h.err, "· %s session %s\n", ev.Agent, ev.Session)
	case harness.EventMessage:
		if ev.Delta {
			h.streamed[ev.ID] = true
			fmt.Fprint(h.out, ev.Text)
			h.midLine = !strings.HasSuffix(ev.Text, "\n")
			return
		}
		if ev.ID != "" && h.streamed[ev.ID] {
			h.endLine()
			return
		}
		h.endLine()
		fmt.Fprintln(h.out, strings.TrimRight(ev.Text, "\n"))
	case harness.EventReasoning:
		h.endLine()
		fmt.Fprintf(h.err, "· thinking: %s\n", clip(ev.Text, 300))
	case harness.EventToolCall:
		h.endLine()
		name, input := "", ""
		if ev.Tool != nil {
			name, input = ev.Tool.Name, string(ev.Tool.Input)
		}
		fmt.Fprintf(h.err, "→ %s %s\n", name, clip(input, 200))
	case harness.EventToolResult:
		h.endLine()
		out, mark := "", "←"
		if ev.Tool != nil {
			out = ev.Tool.Output
			if ev.Tool.Error {
				mark = "← error:"
			}
		}
		fmt.Fprintf(h.err, "%s %s\n", mark, clip(out, 200))
	case harness.EventNotice:
		h.endLine()
		if h.bar.event(ev) {
			return
		}
		if ev.Kind == "steer" {
			// outpost says a message was delivered; an agent that
			// acknowledges it in the same words says it again.
			if ev.Text == h.steer {
				return
			}
			h.steer = ev.Text
		}
		fmt.Fprintf(h.err, "· %s: %s\n", orDefault(ev.Kind, "notice"), clip(ev.Text, 300))
	case harness.EventFailure:
		h.endLine()
		fmt.Fprintf(h.err, "✗ %s\n", clip(ev.Text, 500))
	case harness.EventFinished, harness.EventUsage:
	}
}

func (h *humanWriter) result(res *engine.Result, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.endLine()
	if err != nil {
		var oe *outpost.Error
		if errors.As(err, &oe) {
			fmt.Fprintf(h.err, "outpost: %s\n", oe.Error())
			for _, k := range oe.DetailKeys() {
				if k == "stderr" {
					continue
				}
				fmt.Fprintf(h.err, "  %s: %s\n", k, detailText(oe.Details[k]))
			}
		} else {
			fmt.Fprintf(h.err, "outpost: %v\n", err)
		}
	}
	// The structured answer goes to stdout, indented, after the stream;
	// what changed to stderr.
	var answer []byte
	if len(res.Output) > 0 {
		answer = res.Output
	} else if res.Protocol != nil {
		answer, _ = json.Marshal(res.Protocol)
	}
	if len(answer) > 0 {
		var buf bytes.Buffer
		if json.Indent(&buf, answer, "", "  ") == nil {
			fmt.Fprintf(h.answer, "%s\n", buf.Bytes())
		}
	}
	if c := res.ChangedFiles; c != nil && len(c.Files) > 0 {
		for _, f := range c.Files {
			fmt.Fprintf(h.err, "· %s %s\n", f.Operation, f.Path)
		}
		if !c.Complete {
			fmt.Fprintf(h.err, "· (the workspace is larger than the snapshot bound: more files may have changed)\n")
		}
	}
	if turnRan(res) {
		parts := []string{}
		if res.Conversation != "" {
			parts = append(parts, "conversation "+res.Conversation)
		}
		if res.Parent != "" {
			parts = append(parts, "forked from "+res.Parent)
		}
		parts = append(parts, "tokens "+usageText(res.Usage))
		if res.Secrets != "" {
			parts = append(parts, "secrets "+res.Secrets, "egress "+res.Egress)
		}
		fmt.Fprintf(h.err, "· %s\n", strings.Join(parts, " · "))
		if cp := res.Checkpoint; cp != nil {
			fmt.Fprintf(h.err, "· checkpoint %s (turn %d, %d file(s) changed of %d; outpost diff %s@%d)\n", cp.Commit[:12], cp.Turn, cp.Changed, cp.Files, res.Conversation, cp.Turn)
		}
	}
	if res.Workdir != "" {
		fmt.Fprintf(h.err, "· workspace %s\n", res.Workdir)
	}
	// A stored conversation can be continued, whether the turn failed,
	// was cancelled or succeeded.
	if res.Conversation != "" {
		fmt.Fprintf(h.err, "· continue with: outpost run --resume %s PROMPT\n", res.Conversation)
	}
}

// turnRan reports whether the agent's turn ran (an error before it, of
// the command line, the store or the sandbox, leaves nothing to sum up):
// it exited, named its session, used tokens, or a conversation was stored.
func turnRan(res *engine.Result) bool {
	return res.Exit != nil || res.Session != "" || res.Conversation != "" || res.Usage != (harness.Usage{}) || res.Metered != nil
}

func (h *humanWriter) reportsErrors() bool { return true }

func clip(s string, n int) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "\n", " ⏎ ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// usageText is token usage for a person: "in 23, out 29", the cache
// counts when there are any, and "(incomplete)" when the agent did not
// report all of it.
func usageText(u harness.Usage) string {
	s := fmt.Sprintf("in %d, out %d", u.InputTokens, u.OutputTokens)
	if u.CacheReadTokens > 0 || u.CacheWriteTokens > 0 {
		s += fmt.Sprintf(", cache read %d, write %d", u.CacheReadTokens, u.CacheWriteTokens)
	}
	if !u.Complete {
		s += " (incomplete)"
	}
	return s
}

// detailText is an error detail's value for a person: usage as the
// summary line shows it, problems one after the other, other structured
// values as JSON (never a Go struct).
func detailText(v any) string {
	switch v := v.(type) {
	case harness.Usage:
		return usageText(v)
	case []harness.Usage:
		parts := make([]string, len(v))
		for i, u := range v {
			parts[i] = fmt.Sprintf("attempt %d: %s", i+1, usageText(u))
		}
		return strings.Join(parts, "; ")
	case []output.Problem:
		parts := make([]string, len(v))
		for i, p := range v {
			parts[i] = p.String()
		}
		return strings.Join(parts, "; ")
	case string, bool, int, int64, float64, error, fmt.Stringer:
		return fmt.Sprint(v)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
