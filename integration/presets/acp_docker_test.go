package presets

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// TestClaudeACPDocker: claude-code-acp 0.16.2 (claude-acp) in one docker
// container shared by its turns, against the fake Messages API: a
// steering message sent while the model call hangs cancels the running
// prompt and runs next on the same live session (steer=interrupt); a
// cancelled turn ends cancelled; with permissions=ask the adapter's
// permission request for a Bash call reaches the caller, whose refusal
// keeps the command from running and ends the call failed.
func TestClaudeACPDocker(t *testing.T) {
	t.Parallel()
	bin := testenv.RequireCLI(t, "claude-acp")
	dockertest.Require(t, dockertest.Debian)
	hung := make(chan struct{}, 4)
	fake := anthropic.New(t, anthropic.Options{Choose: func(r *anthropic.Request) (anthropic.Scenario, bool) {
		// Claude Code sends the prompt after an interrupted one in the
		// same user message: only a request without the steering text
		// hangs.
		if strings.Contains(r.LastUserText, "HANGME") && !strings.Contains(r.LastUserText, "FAKE_ECHO") {
			hung <- struct{}{}
			return anthropic.Hang(), true
		}
		return anthropic.Scenario{}, false
	}})
	image := claudeACPImage(t, filepath.Dir(filepath.Dir(filepath.Dir(bin))))
	p := dockertest.Provider(t, image, func(o *docker.Options) { o.Network = "host" })
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	store := conversation.NewFS(t.TempDir())
	key := "sk-ant-fake-" + randomHex(t, 12)
	run := func(ctx context.Context, turn engine.Turn, mod func(*engine.RunOptions)) (*engine.Result, error, []harness.Event) {
		var mu sync.Mutex
		var evs []harness.Event
		turn.Agent = harness.Agent{Kind: harness.KindCLI, Harness: claude.ACP()}
		turn.Timeout = 10 * time.Minute // the shared machine runs at load 20 to 40
		o := &engine.RunOptions{Lease: l, Store: store, Grace: 10 * time.Second, Secrets: engine.SecretsEnv, Logger: testenv.FailureLog(t, key),
			Environ: []string{"ANTHROPIC_BASE_URL=" + fake.URL(), "ANTHROPIC_API_KEY=" + key},
			OnEvent: func(ev harness.Event) { mu.Lock(); evs = append(evs, ev); mu.Unlock() }}
		if mod != nil {
			mod(o)
		}
		res, err := engine.Run(ctx, turn, o)
		mu.Lock()
		defer mu.Unlock()
		return res, err, evs
	}

	steer := make(chan string, 1)
	go func() { <-hung; steer <- "instead FAKE_ECHO" }()
	res, err, evs := run(context.Background(), engine.Turn{Prompt: "wait HANGME", Options: map[string]string{hacp.OptionSteer: "interrupt"}},
		func(o *engine.RunOptions) { o.Steer = steer })
	if err != nil || !strings.Contains(res.Text, "instead FAKE_ECHO") || res.Steered != 1 || res.Sandbox != "docker" {
		t.Errorf("steered turn: %v %+v; events %s", err, res, eventSummary(evs))
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-hung; cancel() }()
	_, err, evs = run(ctx, engine.Turn{Prompt: "wait HANGME"}, nil)
	if outpost.CodeOf(err) != outpost.Cancelled {
		t.Errorf("cancelled turn: %v; events %s", err, eventSummary(evs))
	}

	var asked []harness.Permission
	res, err, evs = run(context.Background(), engine.Turn{Prompt: "FAKE_TOOL:touch made-by-tool", Options: map[string]string{hacp.OptionPermissions: "ask"}},
		func(o *engine.RunOptions) {
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
	var failed bool
	for _, ev := range evs {
		failed = failed || ev.Type == harness.EventToolResult && ev.Tool.Error
	}
	if err != nil || len(asked) != 1 || asked[0].Tool.Name != "execute" || !failed {
		t.Errorf("refused permission: %v, asked %+v; events %s", err, asked, eventSummary(evs))
	}
	if r, err := l.Exec(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", "test ! -e made-by-tool"}, Dir: l.Workdir()}, 0); err != nil || r.Status.Code != 0 {
		t.Errorf("the refused command ran: %+v %v", r.Status, err)
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
