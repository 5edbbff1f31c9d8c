package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/internal/plural"
	"github.com/outposthq/outpost/internal/tarsafe"
	"github.com/outposthq/outpost/output"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/snapshot"
)

// Structured answers (docs/output.md): the schema or protocol a turn asks
// for, response repair by resuming the conversation, and the files the
// turn changed. The engine calls these from a few places of a turn:
// prepareAnswer after validation, answerInput before the command is built,
// snapshotBefore before the agent starts, and answer once the turn is
// over, with the lease still held.

// DefaultRepairs is how many repair attempts a turn makes when
// Turn.Repairs is nil.
const DefaultRepairs = 2

// maxRaw bounds details.raw of an output error: the tail of the last final
// text (where the answer is), redacted.
const maxRaw = 32 << 10

// Attempt is one attempt at an answer: the first turn, then each repair.
type Attempt struct {
	Attempt int           `json:"attempt"`
	Usage   harness.Usage `json:"usage"`
	// Errors are why the answer was refused; empty for the accepted one.
	Errors []output.Problem `json:"errors,omitempty"`
}

// answerState is what the engine keeps for a structured answer.
type answerState struct {
	schema   *output.Schema // Turn.Output compiled; nil without one
	protocol bool           // Turn.Protocol == "handoff"
	before   *snapshot.Snapshot
	// inner marks an engine that continues the conversation for its
	// caller's engine (a repair or a steering resume): the outer engine
	// checks the answer and computes the changed files.
	inner bool
}

func (a *answerState) wanted() bool { return a.schema != nil || a.protocol }

// prepareAnswer compiles the turn's schema and checks its answer settings
// before anything is allocated.
func (e *turnRun) prepareAnswer() error {
	t := e.t
	switch t.Protocol {
	case "":
	case output.ProtocolHandoff:
		e.ans.protocol = true
	default:
		return refuse(outpost.Configuration, "unknown protocol %q (known: %s)", t.Protocol, output.ProtocolHandoff)
	}
	if len(t.Output) > 0 {
		if e.ans.protocol {
			return refuse(outpost.Configuration, "a schema and the %s protocol are exclusive (the protocol is a schema of its own)", output.ProtocolHandoff)
		}
		s, err := output.Compile(t.Output)
		if err != nil {
			return outpost.Wrap(outpost.Configuration, "validate", err)
		}
		e.ans.schema = s
		if e.h.NativeSchema {
			// The CLI takes the schema: it must accept this one.
			if _, err := e.request(harness.Input{Prompt: t.Prompt, Model: t.Agent.Model, Options: t.Options, ExtraArgs: t.ExtraArgs,
				Schema: s.JSON(), SchemaFile: "/outpost/schema.json"}); err != nil {
				return err
			}
		}
	}
	if t.Repairs != nil && *t.Repairs < 0 {
		return refuse(outpost.Configuration, "repairs must be 0 or more, not %d", *t.Repairs)
	}
	return nil
}

func (e *turnRun) repairs() int {
	if e.t.Repairs == nil {
		return DefaultRepairs
	}
	return *e.t.Repairs
}

// answerInput adds to a turn's input what its answer needs: the schema for
// a CLI that enforces it (written into the sandbox for CLIs that take a
// file), else the instruction in the prompt.
func (e *turnRun) answerInput(ctx context.Context, lease *sandbox.Lease, in harness.Input) (harness.Input, error) {
	switch {
	case e.ans.inner:
		// A repair's prompt is the repair message; a steering message
		// keeps the native schema.
		if e.ans.schema != nil && e.h.NativeSchema {
			return e.nativeSchema(ctx, lease, in)
		}
	case e.ans.protocol:
		in.Prompt += "\n\n" + output.ProtocolInstruction
	case e.ans.schema != nil && e.h.NativeSchema:
		return e.nativeSchema(ctx, lease, in)
	case e.ans.schema != nil:
		in.Prompt += "\n\n" + output.Instruction(e.ans.schema)
	}
	return in, nil
}

func (e *turnRun) nativeSchema(ctx context.Context, lease *sandbox.Lease, in harness.Input) (harness.Input, error) {
	doc := e.ans.schema.JSON()
	sum := sha256.Sum256(doc)
	name := "schema-" + hex.EncodeToString(sum[:8]) + ".json"
	dir := path.Join(lease.Home(), ".outpost")
	var buf bytes.Buffer
	if err := tarsafe.Write(&buf, []tarsafe.File{{Name: name, Mode: 0o600, Data: doc}}); err != nil {
		return in, outpost.Wrap(outpost.Configuration, "schema", err)
	}
	if err := lease.CopyIn(ctx, dir, &buf); err != nil {
		return in, outpost.Wrap(outpost.Sandbox, "schema", err)
	}
	in.Schema, in.SchemaFile = doc, path.Join(dir, name)
	return in, nil
}

// changedFilesLimit is the snapshot bound, or 0 when the turn asked for
// no changed files.
func (e *turnRun) changedFilesLimit() int {
	switch n := e.t.ChangedFilesLimit; {
	case n < 0:
		return 0
	case n == 0:
		return output.DefaultChangedFilesLimit
	default:
		return n
	}
}

// snapshotBefore describes the workspace before the agent starts, where
// the sandbox can (Lease.SnapshotWorkspace). A failure only costs the changed
// files, with a notice.
func (e *turnRun) snapshotBefore(ctx context.Context, lease *sandbox.Lease) {
	if e.ans.inner || e.ans.before != nil {
		return
	}
	limit := e.changedFilesLimit()
	if limit == 0 {
		return
	}
	s, err := lease.SnapshotWorkspace(ctx, limit)
	if errors.Is(err, errors.ErrUnsupported) {
		return
	}
	if err != nil {
		e.notice("changed_files", "the workspace could not be described; changed files are not reported: "+err.Error(), nil)
		return
	}
	e.ans.before = &s
}

// notice emits an engine notice outside the agent's stream.
func (e *turnRun) notice(kind, text string, details map[string]any) {
	if e.o.OnEvent == nil {
		return
	}
	ev := harness.Event{Type: harness.EventNotice, Kind: kind, Text: text, Details: details, Agent: e.h.Name, Time: time.Now().UTC(), Conversation: e.convID}
	e.red.Event(&ev)
	e.o.OnEvent(ev)
}

// answer runs once the outermost turn is over, with the lease still held:
// it checks the answer against the schema or protocol, repairs it by
// resuming the conversation, computes the changed files and runs the
// caller's check command (check.go).
func (e *turnRun) answer(ctx context.Context, lease *sandbox.Lease, res *Result, err error) (*Result, error) {
	if e.ans.inner || res == nil {
		return res, err
	}
	if err == nil && e.ans.wanted() {
		res, err = e.repairLoop(ctx, lease, res)
	}
	e.changedFiles(ctx, lease, res)
	if err == nil {
		e.runCheck(ctx, lease, res)
	}
	return res, err
}

// check validates one final text. Problems can quote the answer (a
// pattern's mismatch): they are redacted like everything else.
func (e *turnRun) check(text string) (value []byte, outcome *output.Outcome, problems []output.Problem) {
	if e.ans.protocol {
		a := output.CheckProtocol(text)
		value, outcome, problems = a.Value, a.Outcome, a.Problems
	} else {
		a := e.ans.schema.Check(text)
		value, problems = a.Value, a.Problems
	}
	for i := range problems {
		problems[i].Pointer, problems[i].Message = e.red.String(problems[i].Pointer), e.red.String(problems[i].Message)
	}
	return value, outcome, problems
}

func (e *turnRun) repairLoop(ctx context.Context, lease *sandbox.Lease, res *Result) (*Result, error) {
	limit := e.repairs()
	own := res.Usage // this attempt's usage
	var total harness.Usage
	for attempt := 1; ; attempt++ {
		if attempt == 1 {
			total = own
		} else {
			total = total.Add(own)
		}
		res.Usage = total
		value, outcome, problems := e.check(res.Text)
		res.Attempts = append(res.Attempts, Attempt{Attempt: attempt, Usage: own, Errors: problems})
		if len(problems) == 0 {
			if outcome != nil {
				if outcome.Fallback {
					e.notice("protocol_fallback", "the answer held no protocol block; its first paragraph is the result's summary", map[string]any{"attempt": attempt})
				}
				res.Protocol = outcome
			} else {
				res.Output = value
			}
			return res, nil
		}
		why := ""
		switch {
		case limit == 0:
			why = "repair is disabled (repairs: 0)"
		case attempt > limit:
		case !e.h.Resumes():
			why = fmt.Sprintf("agent %s cannot resume its conversations", e.h.Name)
		case e.o.Store == nil:
			why = "no conversation store: the conversation cannot be resumed"
		}
		if why != "" || attempt > limit {
			return res, e.outputErr(res, problems, attempt, why)
		}
		if e.put != nil {
			// The repair resumes the stored conversation: store it now.
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sandbox.ReleaseTimeout)
			perr := e.put(pctx)
			cancel()
			e.put = nil
			if perr = e.afterCapture(res, nil, perr); perr != nil {
				return res, perr
			}
		}
		if res.Conversation == "" {
			return res, e.outputErr(res, problems, attempt, "the conversation was not captured, so it cannot be resumed")
		}
		e.notice("repair", fmt.Sprintf("the answer was refused (%s); asking again, attempt %d of %d", plural.N(len(problems), "problem"), attempt+1, limit+1),
			map[string]any{"attempt": attempt + 1, "errors": problems})
		msg := output.ProtocolRepairMessage(problems)
		if !e.ans.protocol {
			msg = output.RepairMessage(e.ans.schema, problems)
		}
		next, err := e.continueWith(ctx, lease, res, msg)
		if next == nil {
			return res, err
		}
		own = next.Usage
		next.Attempts, next.Steered = res.Attempts, next.Steered+res.Steered
		if res.Parent != "" {
			next.Parent = res.Parent
		}
		res = next
		if err != nil {
			res.Usage = total.Add(own)
			res.Attempts = append(res.Attempts, Attempt{Attempt: attempt + 1, Usage: own})
			return res, err
		}
	}
}

// continueWith resumes the turn's conversation with msg in the same lease,
// as an inner turn, and returns its own result (its own usage).
func (e *turnRun) continueWith(ctx context.Context, lease *sandbox.Lease, prev *Result, msg string) (*Result, error) {
	t := e.t
	t.Prompt, t.Resume, t.Fork, t.Timeout = msg, prev.Conversation, "", 0
	o := *e.o
	o.Lease = lease
	next := &turnRun{t: t, o: &o, red: e.red, hold: e.hold, outerKl: &e.kl}
	next.ans.inner = true
	res, err := next.run(ctx)
	if e.hold == nil {
		// The repair took the conversation's hold: this turn's Run
		// releases it at its end.
		e.hold = next.hold
	}
	if err != nil && ctx.Err() != nil {
		if c := outpost.CodeOf(err); c != outpost.Cancelled && c != outpost.Timeout {
			err = ctxError(ctx, "repair", err)
		}
	}
	return res, err
}

// outputErr is the output error of a refused answer.
func (e *turnRun) outputErr(res *Result, problems []output.Problem, attempts int, why string) error {
	what := "the answer does not match the schema"
	if e.ans.protocol {
		what = "the answer does not follow the " + output.ProtocolHandoff + " protocol"
	}
	msg := fmt.Sprintf("%s after %d attempts", what, attempts)
	if attempts == 1 {
		msg = what
	}
	if why != "" {
		msg += "; no repair: " + why
	}
	if len(problems) > 0 {
		msg += ": " + problems[0].String()
	}
	raw := e.red.String(res.Text)
	if len(raw) > maxRaw {
		cut := len(raw) - maxRaw
		for cut < len(raw) && raw[cut]&0xC0 == 0x80 {
			cut++
		}
		raw = "…" + raw[cut:]
	}
	err := &outpost.Error{Code: outpost.Output, Op: "output", Agent: e.h.Name, Msg: msg}
	err.Detail("errors", problems).Detail("attempts", attempts).Detail("raw", strings.ToValidUTF8(raw, "\uFFFD"))
	if why != "" {
		err.Detail("repair", why)
	}
	usages := make([]harness.Usage, 0, len(res.Attempts))
	for _, a := range res.Attempts {
		usages = append(usages, a.Usage)
	}
	err.Detail("usage_attempts", usages)
	return err
}

// changedFiles compares the workspace with its snapshot from before the
// agent started.
func (e *turnRun) changedFiles(ctx context.Context, lease *sandbox.Lease, res *Result) {
	if e.ans.before == nil || res == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), sandbox.ReleaseTimeout)
	after, err := lease.SnapshotWorkspace(sctx, e.changedFilesLimit())
	cancel()
	if err != nil {
		e.notice("changed_files", "the workspace could not be described after the turn; changed files are not reported: "+err.Error(), nil)
		return
	}
	res.ChangedFiles = e.dropOwnFiles(lease, output.Diff(*e.ans.before, after))
	if res.Protocol != nil && res.Protocol.Kind == output.KindResult {
		res.Protocol.ChangedFiles = res.ChangedFiles.Paths()
	}
}
