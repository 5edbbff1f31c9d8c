package presets

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	hacp "github.com/outposthq/outpost/harness/acp"
	"github.com/outposthq/outpost/harness/claude"
	"github.com/outposthq/outpost/harness/codex"
	"github.com/outposthq/outpost/harness/copilot"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// acpDocker is one ACP preset's docker container, shared by its turns
// (a conversation continues on the same container), with the store and
// the variables the turns get (key: the API key, kept out of the logs).
type acpDocker struct {
	t       *testing.T
	h       *harness.Harness
	lease   *sandbox.Lease
	store   *conversation.FS
	key     string
	environ []string
	options map[string]string // every turn's, beside its own
}

// newACPDocker acquires the container of an image (made from the pinned
// CLI's executable) on the host's network, where the fakes listen.
func newACPDocker(t *testing.T, cli string, h *harness.Harness, image func(t *testing.T, bin string) string) *acpDocker {
	t.Helper()
	bin := testenv.RequireCLI(t, cli)
	dockertest.Require(t, dockertest.Debian)
	p := dockertest.Provider(t, image(t, bin), func(o *docker.Options) { o.Network = "host" })
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return &acpDocker{t: t, h: h, lease: l, store: conversation.NewFS(t.TempDir())}
}

// debianImage is the test image with no agent CLI: bootstrap installs
// the pinned one.
func debianImage(*testing.T, string) string { return dockertest.Debian }

// run runs a turn in the container; mod sets its steering or its
// permission answers.
func (d *acpDocker) run(ctx context.Context, turn engine.Turn, mod func(*engine.RunOptions)) *outcome {
	d.t.Helper()
	var mu sync.Mutex
	out := &outcome{}
	turn.Agent = harness.Agent{Kind: harness.KindCLI, Harness: d.h}
	turn.Timeout = 10 * time.Minute // the shared machine runs at load 20 to 40
	turn.Options = maps.Clone(turn.Options)
	if turn.Options == nil {
		turn.Options = map[string]string{}
	}
	maps.Copy(turn.Options, d.options)
	o := &engine.RunOptions{Lease: d.lease, Store: d.store, Grace: 10 * time.Second, Secrets: engine.SecretsEnv, Logger: testenv.FailureLog(d.t, d.key),
		Environ: d.environ, OnEvent: func(ev harness.Event) { mu.Lock(); out.events = append(out.events, ev); mu.Unlock() }}
	if mod != nil {
		mod(o)
	}
	out.res, out.err = engine.Run(ctx, turn, o)
	mu.Lock()
	defer mu.Unlock()
	return out
}

// hangs is a fake's choice: a model call whose last user text has HANGME
// and no FAKE_ marker hangs (a steering message has one: an agent that
// sends it in the same user message as the interrupted prompt is
// answered), and says so on hung.
func hangs(hung chan<- struct{}, lastUser string) bool {
	if strings.Contains(lastUser, "HANGME") && !strings.Contains(lastUser, "FAKE_") {
		hung <- struct{}{}
		return true
	}
	return false
}

// steered runs "wait HANGME" with steer=interrupt and sends message as a
// steering message once the model call hangs; the turn must succeed,
// steered once, in docker.
func (d *acpDocker) steered(hung <-chan struct{}, message string) *outcome {
	d.t.Helper()
	steer := make(chan string, 1)
	go func() { <-hung; steer <- message }()
	o := d.run(context.Background(), engine.Turn{Prompt: "wait HANGME", Options: map[string]string{hacp.OptionSteer: "interrupt"}},
		func(o *engine.RunOptions) { o.Steer = steer })
	if o.err != nil || o.res.Steered != 1 || o.res.Sandbox != "docker" {
		d.t.Errorf("steered turn: %v %+v; events %s", o.err, o.res, eventSummary(o.events))
	}
	return o
}

// cancelled runs "wait HANGME" and cancels it once the model call hangs:
// the turn is cancelled.
func (d *acpDocker) cancelled(hung <-chan struct{}) {
	d.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-hung; cancel() }()
	if o := d.run(ctx, engine.Turn{Prompt: "wait HANGME"}, nil); outpost.CodeOf(o.err) != outpost.Cancelled {
		d.t.Errorf("cancelled turn: %v; events %s", o.err, eventSummary(o.events))
	}
}

// refused runs turn with permissions=ask, refusing each request (its
// reject option): the agent must ask once, for an execute call, which
// ends failed, and the command must not have made file in the workspace.
// How the turn ends is the agent's: the caller checks it.
func (d *acpDocker) refused(turn engine.Turn, file string) *outcome {
	d.t.Helper()
	var asked []harness.Permission
	turn.Options = map[string]string{hacp.OptionPermissions: "ask"}
	o := d.run(context.Background(), turn, func(o *engine.RunOptions) {
		o.Permission = func(_ context.Context, p harness.Permission) (string, error) {
			asked = append(asked, p)
			for _, opt := range p.Options {
				if strings.HasPrefix(opt.Kind, "reject") {
					return opt.ID, nil
				}
			}
			return "", nil
		}
	})
	failed := false
	for _, ev := range o.ofType(harness.EventToolResult) {
		failed = failed || ev.Tool.Error
	}
	if len(asked) != 1 || asked[0].Tool.Name != "execute" || !failed {
		d.t.Errorf("refused permission: %v, asked %+v; events %s", o.err, asked, eventSummary(o.events))
	}
	r, err := d.lease.Exec(d.t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", "test ! -e " + file}, Dir: d.lease.Workdir()}, 0)
	if err != nil || r.Status.Code != 0 {
		d.t.Errorf("the refused command ran: %+v %v", r.Status, err)
	}
	return o
}

// TestClaudeACPDocker: claude-code-acp 0.16.2 (claude-acp) in one docker
// container shared by its turns, against the fake Messages API: a
// steering message sent while the model call hangs cancels the running
// prompt and runs next on the same live session (steer=interrupt); a
// cancelled turn ends cancelled; with permissions=ask the adapter's
// permission request for a Bash call reaches the caller, whose refusal
// keeps the command from running and ends the call failed.
func TestClaudeACPDocker(t *testing.T) {
	t.Parallel()
	d := newACPDocker(t, "claude-acp", claude.ACP(), func(t *testing.T, bin string) string {
		return claudeACPImage(t, filepath.Dir(filepath.Dir(filepath.Dir(bin))))
	})
	hung := make(chan struct{}, 4)
	fake := anthropic.New(t, anthropic.Options{Choose: func(r *anthropic.Request) (anthropic.Scenario, bool) {
		// Claude Code sends the prompt after an interrupted one in the
		// same user message.
		return anthropic.Hang(), hangs(hung, r.LastUserText)
	}})
	d.key = "sk-ant-fake-" + randomHex(t, 12)
	d.environ = []string{"ANTHROPIC_BASE_URL=" + fake.URL(), "ANTHROPIC_API_KEY=" + d.key}
	if o := d.steered(hung, "instead FAKE_ECHO"); o.res != nil && !strings.Contains(o.res.Text, "instead FAKE_ECHO") {
		t.Errorf("steered turn's answer %q", o.res.Text)
	}
	d.cancelled(hung)
	if o := d.refused(engine.Turn{Prompt: "FAKE_TOOL:touch made-by-tool"}, "made-by-tool"); o.err != nil {
		t.Errorf("refused permission: %v", o.err)
	}
}

// claudeACPImage is nodeImage with the installed claude-code-acp package
// (its node_modules, from scripts/install-clis.sh claude-acp) at
// /opt/claude-acp and its command on PATH: bootstrap cannot place the
// adapter (docs/presets/acp-adapters.md). Its name comes from the node
// image and the install, so it is built once.
func claudeACPImage(t *testing.T, install string) string {
	t.Helper()
	base := nodeImage(t)
	fi, err := os.Stat(filepath.Join(install, ".installed"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s %s %d", base, install, fi.ModTime().UnixNano()))
	name := "outpost/claude-acp-test:" + hex.EncodeToString(sum[:6])
	if exec.Command("docker", "image", "inspect", name).Run() == nil {
		return name
	}
	df := "FROM " + base + "\nCOPY node_modules /opt/claude-acp/node_modules\n" +
		"RUN ln -s /opt/claude-acp/node_modules/.bin/claude-code-acp /usr/local/bin/claude-code-acp\n"
	cmd := exec.Command("docker", "build", "-q", "-t", name, "-f", "-", install)
	cmd.Stdin = strings.NewReader(df)
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker build %s: %v\n%s", name, err, out)
	}
	return name
}

// oaiACPFake is the fake OpenAI API of codex-acp's and copilot-acp's
// docker runs: "wait HANGME" hangs (hangs), FAKE_TOUCH calls the shell
// tool with `touch made-by-tool`, the rest is the fake's default.
func oaiACPFake(t *testing.T, hung chan<- struct{}) *openai.Server {
	return openai.Start(t, openai.Config{Choose: func(r *openai.Request) openai.Scenario {
		switch {
		case hangs(hung, r.LastUserText):
			return openai.Hang()
		case strings.Contains(r.LastUserText, "FAKE_TOUCH") && !r.LastItemIsToolOutput():
			return openai.ToolCall("touch made-by-tool")
		}
		return openai.Scenario{}
	}})
}

// sawHistory reports whether the fake's request for the prompt with
// marker also carried the user text earlier (the conversation resumed).
func sawHistory(fake *openai.Server, marker, earlier string) bool {
	for _, r := range fake.Requests() {
		if strings.Contains(r.LastUserText, marker) && slices.ContainsFunc(r.UserTexts, func(s string) bool { return strings.Contains(s, earlier) }) {
			return true
		}
	}
	return false
}

// TestCodexACPDocker: codex-acp 0.16.0 (codex-acp), installed by
// bootstrap into one container of the Debian test image shared by its
// turns, against the fake Responses API: a steering message sent while
// the model call hangs runs a shell call and the answer on the same live
// session; the conversation continues in a second turn (session/resume)
// with the history; a cancelled turn ends cancelled.
func TestCodexACPDocker(t *testing.T) {
	t.Parallel()
	d := newACPDocker(t, "codex-acp", codex.ACP(), debianImage)
	hung := make(chan struct{}, 4)
	fake := oaiACPFake(t, hung)
	d.key = "sk-oai-fake-" + randomHex(t, 12)
	d.environ = []string{"OPENAI_BASE_URL=" + fake.URL(), "OPENAI_API_KEY=" + d.key, "OPENAI_MODEL=" + oaiModel}
	// Codex's bubblewrap cannot run in the container (measured: the
	// command panics "bubblewrap is unavailable"): the container is the
	// sandbox.
	d.options = map[string]string{codex.OptionSandbox: "danger-full-access"}
	first := d.steered(hung, "instead FAKE_TOOL")
	checkACPTool(t, first, "hi")
	if first.res.Usage.Complete || first.res.Usage.InputTokens != 0 {
		t.Errorf("codex-acp reports no usage, the turn's is %+v", first.res.Usage)
	}
	// Refused ("No, and tell Codex what to do differently", its only
	// reject option), Codex aborts the turn: the prompt ends cancelled.
	again := d.refused(engine.Turn{Prompt: "now FAKE_TOUCH", Resume: first.res.Conversation}, "made-by-tool")
	if again.res == nil || again.res.Session != first.res.Session || !sawHistory(fake, "FAKE_TOUCH", "instead FAKE_TOOL") ||
		again.err == nil || len(again.kind("interrupted")) != 1 {
		t.Errorf("resumed turn %v %+v; events %s", again.err, again.res, eventSummary(again.events))
	}
	d.cancelled(hung)
}

// TestCopilotACPDocker: `copilot --acp` 1.0.102 (copilot-acp) in BYOK
// offline mode, installed by bootstrap into one container of the Debian
// test image shared by its turns, against the fake Chat Completions API:
// a steering message sent while the model call hangs runs a shell call
// and the answer on the same live session, with the usage of the
// prompt's response; the conversation continues in a second turn
// (session/load) with the history, where with permissions=ask the
// CLI's request for a shell call reaches the caller, whose refusal keeps
// the command from running; a cancelled turn ends cancelled.
func TestCopilotACPDocker(t *testing.T) {
	t.Parallel()
	d := newACPDocker(t, "copilot", copilot.ACP(), debianImage)
	hung := make(chan struct{}, 4)
	fake := oaiACPFake(t, hung)
	d.key = "sk-oai-fake-" + randomHex(t, 12)
	d.environ = []string{"COPILOT_OFFLINE=true", "COPILOT_PROVIDER_BASE_URL=" + fake.URL(), "COPILOT_PROVIDER_API_KEY=" + d.key, "COPILOT_MODEL=" + oaiModel}
	first := d.steered(hung, "instead FAKE_TOOL")
	checkACPTool(t, first, "hi")
	// Two model calls; the hung one, cancelled, counts nothing.
	u := openai.DefaultUsage
	want := harness.Usage{InputTokens: 2 * int64(u.InputTokens-u.CachedTokens), OutputTokens: 2 * int64(u.OutputTokens), CacheReadTokens: 2 * int64(u.CachedTokens), Complete: true}
	if !strings.HasPrefix(first.res.Text, "Tool output was:") || first.res.Usage != want {
		t.Errorf("result %+v, usage want %+v", first.res, want)
	}
	// Refused, the CLI ends the prompt end_turn with "Info: Operation
	// cancelled by user" as message text, and calls no model.
	again := d.refused(engine.Turn{Prompt: "now FAKE_TOUCH", Resume: first.res.Conversation}, "made-by-tool")
	if again.err != nil || again.res.Session != first.res.Session || !sawHistory(fake, "FAKE_TOUCH", "instead FAKE_TOOL") {
		t.Errorf("resumed turn %v %+v", again.err, again.res)
	}
	d.cancelled(hung)
}
