package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"

	"github.com/outposthq/outpost/checkpoint"
	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/codex"
	"github.com/outposthq/outpost/internal/fakeapi/anthropic"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/providers/local"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
)

// Workspaces that travel with the conversation (docs/workspaces.md),
// end to end: turns of the real claude and codex CLIs whose checkpoints
// git itself reads back as the files the agent left; forks at a turn on
// docker, one into a directory of the caller's and two at once into
// "new" workspaces; a conversation made on the local sandbox resumed on
// ssh with its files. Races are in race_test.go.

// requireGit returns the git executable, which the tests use to read the
// checkpoint store as git does (outpost itself needs no git).
func requireGit(t *testing.T) string {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		testenv.Missing(t, "git (to read checkpoints back as git does)", "apt-get install git")
	}
	return git
}

var (
	homeOnce sync.Once
	homeDir  string
	homeErr  error
)

// workspacesHome points OUTPOST_HOME, for the rest of the test process,
// at a private directory (removed by TestMain), where Turn.Workspace
// "new" and races make their workspaces (engine.WorkspacesDir). The
// variable is process-wide and t.Setenv is not for parallel tests, so it
// is set once, from the parallel phase (after every test that sets it
// with t.Setenv has restored it), and only ever to this one value; no
// other test of the package reads OUTPOST_HOME in process, and the
// commands they start are given an OUTPOST_HOME of their own.
func workspacesHome(t *testing.T) string {
	t.Helper()
	homeOnce.Do(func() {
		homeDir, homeErr = os.MkdirTemp("", "outpost-integration-home-")
		if homeErr == nil {
			homeErr = os.Setenv("OUTPOST_HOME", homeDir)
		}
	})
	if homeErr != nil {
		t.Fatal(homeErr)
	}
	if got := os.Getenv("OUTPOST_HOME"); got != homeDir {
		t.Fatalf("OUTPOST_HOME is %q, not the tests' %q: a test changed it while others ran", got, homeDir)
	}
	return filepath.Join(homeDir, "workspaces")
}

// removeWorkspacesHome removes workspacesHome's directory (TestMain).
func removeWorkspacesHome() {
	if homeDir != "" {
		os.RemoveAll(homeDir)
	}
}

// gitRepo is a store's checkpoint repository read by git.
type gitRepo struct {
	t   *testing.T
	git string
	dir string // <store>/checkpoints.git
}

func newGitRepo(t *testing.T, git string, store *conversation.FS) gitRepo {
	return gitRepo{t: t, git: git, dir: filepath.Join(store.Dir(), "checkpoints.git")}
}

// run runs git on the repository with env added (no user or system
// configuration: no global excludes file changes what git adds) and
// returns its standard output, standard error and exit status.
func (r gitRepo) run(env []string, args ...string) (string, string, int) {
	r.t.Helper()
	cmd := exec.Command(r.git, append([]string{"--git-dir", r.dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1", "LC_ALL=C")
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		r.t.Fatalf("git %v: %v", args, err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// must runs git and fails the test unless it exits 0.
func (r gitRepo) must(args ...string) string {
	r.t.Helper()
	out, errb, code := r.run(nil, args...)
	if code != 0 {
		r.t.Fatalf("git %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errb)
	}
	return out
}

// fsck runs `git fsck --strict --no-dangling` over the whole repository:
// every object outpost wrote is well formed and everything the refs
// reach is there.
func (r gitRepo) fsck() {
	r.t.Helper()
	out, errb, code := r.run(nil, "fsck", "--strict", "--no-dangling", "--no-progress")
	if code != 0 {
		r.t.Fatalf("git fsck --strict: exit %d\n%s%s", code, out, errb)
	}
	for _, l := range strings.Split(out+errb, "\n") {
		if l != "" && !strings.HasPrefix(l, "notice: HEAD points to an unborn branch") {
			r.t.Errorf("git fsck --strict says: %s", l)
		}
	}
}

// sameAsDir checks with git that commit's tree is exactly dir's files as
// git adds them: `git add -A` into a temporary index (its new objects in
// a temporary object directory, the store's as an alternate, so the
// store is not written), then `git diff --cached --quiet COMMIT`. The
// top-level .outpost directory is left out on both sides
// (docs/workspaces.md).
func (r gitRepo) sameAsDir(dir, commit string) {
	r.t.Helper()
	scratch := r.t.TempDir()
	objects := filepath.Join(scratch, "objects")
	if err := os.MkdirAll(objects, 0o755); err != nil {
		r.t.Fatal(err)
	}
	env := []string{"GIT_INDEX_FILE=" + filepath.Join(scratch, "index"), "GIT_OBJECT_DIRECTORY=" + objects,
		"GIT_ALTERNATE_OBJECT_DIRECTORIES=" + filepath.Join(r.dir, "objects")}
	wt := []string{"--work-tree", dir}
	if out, errb, code := r.run(env, append(wt, "add", "-A", "--", ".", ":(exclude).outpost")...); code != 0 {
		r.t.Fatalf("git add -A %s: exit %d\n%s%s", dir, code, out, errb)
	}
	if _, _, code := r.run(env, append(wt, "diff", "--cached", "--quiet", commit)...); code != 0 {
		out, errb, _ := r.run(env, append(wt, "diff", "--cached", "--stat", "--summary", commit)...)
		r.t.Errorf("git sees %s differ from checkpoint %s:\n%s%s", dir, commit, out, errb)
	}
}

// nameStatus is `git diff --name-status A B`, one "X\tpath" a line.
func (r gitRepo) nameStatus(a, b string) string {
	r.t.Helper()
	return strings.TrimSpace(r.must("diff", "--no-renames", "--name-status", a, b))
}

// lsTree is `git ls-tree -r COMMIT` as path → "mode type".
func (r gitRepo) lsTree(commit string) map[string]string {
	r.t.Helper()
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.must("ls-tree", "-r", commit)), "\n") {
		meta, path, ok := strings.Cut(l, "\t")
		if !ok {
			continue
		}
		f := strings.Fields(meta)
		out[path] = f[0] + " " + f[1]
	}
	return out
}

// numstat is `git diff --numstat A B` as path → "added deleted".
func (r gitRepo) numstat(a, b string) map[string]string {
	r.t.Helper()
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(r.must("diff", "--no-renames", "--numstat", a, b)), "\n") {
		f := strings.Split(l, "\t")
		if len(f) == 3 {
			out[f[2]] = f[0] + " " + f[1]
		}
	}
	return out
}

// checkRef checks that git names the checkpoint refs/outpost/ID/TURN.
func (r gitRepo) checkRef(id string, turn int, commit string) {
	r.t.Helper()
	ref := fmt.Sprintf("refs/outpost/%s/%d", id, turn)
	if got := strings.TrimSpace(r.must("rev-parse", "--verify", ref)); got != commit {
		r.t.Errorf("%s is %s, want the checkpoint %s", ref, got, commit)
	}
}

// writeFiles makes files under dir: path → content; a content starting
// with "->" makes a symbolic link to the rest; a path ending in "*" is
// made executable (the star dropped).
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, "*") {
			p, mode = strings.TrimSuffix(p, "*"), 0o755
		}
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if target, ok := strings.CutPrefix(c, "->"); ok {
			err = os.Symlink(target, full)
		} else {
			err = os.WriteFile(full, []byte(c), mode)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// wantFile fails unless dir/p holds want ("" and absent: must not exist).
func wantFile(t *testing.T, dir, p, want string, absent bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, p))
	switch {
	case absent && !errors.Is(err, os.ErrNotExist):
		t.Errorf("%s is in %s (%q, %v), want it absent", p, dir, b, err)
	case !absent && (err != nil || string(b) != want):
		t.Errorf("%s in %s: %q (%v), want %q", p, dir, b, err, want)
	}
}

// storedCheckpoints is the conversation's Meta.Checkpoints.
func storedCheckpoints(t *testing.T, store conversation.Store, id string) []conversation.Checkpoint {
	t.Helper()
	m, err := store.Meta(context.Background(), id)
	if err != nil {
		t.Fatalf("meta of %s: %v", id, err)
	}
	return m.Checkpoints
}

// checkDiffTurns compares conversation.DiffTurns of ref (what the turn
// changed) with git's numbers for the same two commits.
func checkDiffTurns(t *testing.T, store conversation.Store, repo gitRepo, ref string, wantFiles int) {
	t.Helper()
	d, err := conversation.DiffTurns(context.Background(), store, ref, "")
	if err != nil {
		t.Fatalf("DiffTurns %s: %v", ref, err)
	}
	ns := repo.numstat(d.From, d.To)
	got := map[string]string{}
	for _, f := range d.Files {
		got[f.Path] = fmt.Sprintf("%d %d", f.Added, f.Deleted)
	}
	if len(d.Files) != wantFiles || fmt.Sprint(got) != fmt.Sprint(ns) {
		t.Errorf("DiffTurns %s: %+v\n  outpost: %v\n  git:     %v", ref, d.Files, got, ns)
	}
}

// The files a real CLI's tool calls make in the checkpoint tests: the
// caller's start (two files kept, two ignored), turn 1 (a nested file,
// an executable, a link, a text; ignored output too), turn 2 (a text
// edited, the executable deleted, a mode change, the link retargeted).
var (
	startFiles = map[string]string{"keep.txt": "kept\n", ".gitignore": "build/\n*.log\n", "build/cache.o": "obj\n", "debug.log": "noise\n"}
	turn1Shell = `mkdir -p src/pkg && printf 'package pkg\n' > src/pkg/pkg.go && printf '#!/bin/sh\necho run\n' > run.sh && chmod +x run.sh && ln -s src/pkg/pkg.go link && printf 'one\ntwo\n' > notes.txt && echo obj > build/out.o && echo noise > agent.log`
	turn2Shell = `printf 'one\nTWO\nthree\n' > notes.txt && rm run.sh && chmod +x keep.txt && ln -sfn keep.txt link && echo more > build/more.o`
	turn1Tree  = map[string]string{".gitignore": "100644 blob", "keep.txt": "100644 blob", "link": "120000 blob", "notes.txt": "100644 blob", "run.sh": "100755 blob", "src/pkg/pkg.go": "100644 blob"}
	turn1Added = "A\tlink\nA\tnotes.txt\nA\trun.sh\nA\tsrc/pkg/pkg.go"
	turn2Diff  = "M\tkeep.txt\nM\tlink\nM\tnotes.txt\nD\trun.sh"
)

// checkTwoTurns checks the checkpoints of two turns that ran turn1Shell
// then turn2Shell in dir, started from startFiles, with git.
func checkTwoTurns(t *testing.T, repo gitRepo, store conversation.Store, id, dir string, first, second *engine.CheckpointResult) {
	t.Helper()
	if first == nil || second == nil {
		t.Fatalf("checkpoints %+v %+v", first, second)
	}
	if first.Turn != 1 || first.Changed != 4 || first.Files != 6 || first.Stored == 0 || first.Base == "" || first.Base == first.Commit {
		t.Errorf("turn 1 checkpoint %+v: want 4 files changed of 6, objects stored", first)
	}
	if second.Turn != 2 || second.Changed != 4 || second.Files != 5 || second.Base != first.Commit {
		t.Errorf("turn 2 checkpoint %+v: want 4 files changed of 5, based on turn 1's %s", second, first.Commit)
	}
	repo.fsck()
	repo.sameAsDir(dir, second.Commit)
	if got := repo.lsTree(first.Commit); fmt.Sprint(got) != fmt.Sprint(turn1Tree) {
		t.Errorf("git ls-tree of turn 1:\n%v\nwant\n%v", got, turn1Tree)
	}
	if got := repo.nameStatus(first.Base, first.Commit); got != turn1Added {
		t.Errorf("git diff of turn 1 against its base:\n%s\nwant\n%s", got, turn1Added)
	}
	if got := repo.nameStatus(first.Commit, second.Commit); got != turn2Diff {
		t.Errorf("git diff of turn 2:\n%s\nwant\n%s", got, turn2Diff)
	}
	if got := strings.TrimSpace(repo.must("rev-parse", second.Commit+"^")); got != first.Commit {
		t.Errorf("turn 2's parent is %s, not turn 1's %s", got, first.Commit)
	}
	// The base of turn 1 is the caller's files: the two kept, none ignored.
	if got := repo.lsTree(first.Base); len(got) != 2 || got["keep.txt"] == "" || got[".gitignore"] == "" {
		t.Errorf("the base of turn 1 holds %v, want keep.txt and .gitignore", got)
	}
	for i, c := range []*engine.CheckpointResult{first, second} {
		repo.checkRef(id, i+1, c.Commit)
	}
	cps := storedCheckpoints(t, store, id)
	if len(cps) != 2 || cps[0].Commit != first.Commit || cps[1].Commit != second.Commit {
		t.Errorf("stored checkpoints %+v", cps)
	}
	checkDiffTurns(t, store, repo, id+"@2", 4)
}

// wantTrailers checks the turn commit's message as git prints it.
func wantTrailers(t *testing.T, repo gitRepo, commit string, want ...string) {
	t.Helper()
	msg := repo.must("log", "-1", "--format=%B", commit)
	for _, w := range want {
		if !strings.Contains(msg, w+"\n") {
			t.Errorf("commit %s lacks %q:\n%s", commit, w, msg)
		}
	}
}

// TestWorkspaceCheckpointClaude: the real Claude Code writes files with
// its Bash tool over two turns; each turn's checkpoint is a commit git
// reads back as exactly the files the workspace holds (modes, a link,
// .gitignore honoured), the store passes `git fsck --strict`, the diffs
// are git's, and a fork at turn 1 into a directory of its own gets turn
// 1's files (git agrees) and turn 1's memory, not turn 2's.
func TestWorkspaceCheckpointClaude(t *testing.T) {
	t.Parallel()
	git := requireGit(t)
	e := newClaudeEnv(t, "local", anthropic.Options{})
	repo := newGitRepo(t, git, e.store)
	writeFiles(t, e.workdir, startFiles)
	bypass := map[string]string{"permission-mode": "bypassPermissions"}

	one := e.run(engine.Turn{Prompt: "FAKE_TOOL:" + turn1Shell, Options: bypass}, turnOpts{})
	e.mustSucceed(one)
	id := one.res.Conversation
	if one.res.Checkpoint == nil {
		t.Fatalf("turn 1 recorded no checkpoint: %+v", one.res)
	}
	repo.sameAsDir(e.workdir, one.res.Checkpoint.Commit)
	two := e.run(engine.Turn{Prompt: "FAKE_TOOL:" + turn2Shell, Resume: id, Options: bypass}, turnOpts{})
	e.mustSucceed(two)
	for i, o := range []*outcome{one, two} {
		if calls := o.ofType(harness.EventToolResult); len(calls) != 1 || calls[0].Tool.Error {
			t.Fatalf("turn %d: the Bash call failed: %+v", i+1, calls)
		}
		if o.res.Checkpoint == nil {
			t.Fatalf("turn %d recorded no checkpoint", i+1)
		}
		if ns := o.kind("checkpoint"); len(ns) != 1 || ns[0].Details["commit"] != o.res.Checkpoint.Commit {
			t.Errorf("turn %d: checkpoint notices %+v", i+1, ns)
		}
	}
	checkTwoTurns(t, repo, e.store, id, e.workdir, one.res.Checkpoint, two.res.Checkpoint)
	wantTrailers(t, repo, two.res.Checkpoint.Commit, "Outpost-Conversation: "+id, "Outpost-Turn: 2", "Outpost-Agent: claude",
		"Outpost-Input-Tokens: "+strconv.FormatInt(two.res.Usage.InputTokens, 10), "Outpost-Checkpoint: turn")

	// A fork at turn 1 into a new directory: turn 1's tree, which git
	// reads as the directory; the model is given turn 1's conversation.
	dir := filepath.Join(t.TempDir(), "fork")
	fork := e.run(engine.Turn{Prompt: "forked FAKE_ECHO", Fork: id + "@1", Workspace: dir, Options: bypass}, turnOpts{})
	e.mustSucceed(fork)
	if fork.res.Workdir != dir || fork.res.Parent != id {
		t.Errorf("fork workdir %q parent %q", fork.res.Workdir, fork.res.Parent)
	}
	fc := fork.res.Checkpoint
	if fc == nil || fc.Turn != 2 || fc.Base != one.res.Checkpoint.Commit || fc.Changed != 0 {
		t.Fatalf("fork checkpoint %+v, want turn 2 on turn 1's %s, nothing changed", fc, one.res.Checkpoint.Commit)
	}
	repo.sameAsDir(dir, fc.Commit)
	repo.sameAsDir(dir, one.res.Checkpoint.Commit)
	wantFile(t, dir, "notes.txt", "one\ntwo\n", false)
	wantFile(t, dir, "build/out.o", "", true) // ignored: not in the checkpoint
	if fi, err := os.Stat(filepath.Join(dir, "run.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("run.sh in the fork: %v %v, want executable", fi, err)
	}
	reqs := e.messages()
	users := strings.Join(reqs[len(reqs)-1].UserTexts(), "\n")
	if !strings.Contains(users, turn1Shell) || strings.Contains(users, turn2Shell) || !strings.Contains(users, "forked FAKE_ECHO") {
		t.Errorf("the fork at turn 1 asked the model with %q: want turn 1's prompt and the fork's, not turn 2's", users)
	}
	wantFile(t, e.workdir, "notes.txt", "one\nTWO\nthree\n", false) // the parent's directory is its own
	repo.fsck()
}

// TestWorkspaceCheckpointCodex: the real Codex writes files with a shell
// command, then edits with its apply_patch tool on resume; git reads
// each checkpoint back as the workspace.
func TestWorkspaceCheckpointCodex(t *testing.T) {
	t.Parallel()
	git := requireGit(t)
	e := newCodexEnv(t, openai.Config{})
	repo := newGitRepo(t, git, e.store)
	writeFiles(t, e.workdir, startFiles)
	opts := map[string]string{codex.OptionSandbox: "workspace-write", codex.OptionRequestMaxRetries: "0", codex.OptionStreamMaxRetries: "0"}

	e.fake.Enqueue(openai.ToolCall(turn1Shell))
	one := e.run(context.Background(), engine.Turn{Prompt: "make the files", Options: opts}, nil, nil)
	if one.err != nil {
		t.Fatal(one.err)
	}
	id := one.res.Conversation
	if one.res.Checkpoint == nil {
		t.Fatalf("turn 1 recorded no checkpoint: %+v", one.res)
	}
	repo.sameAsDir(e.workdir, one.res.Checkpoint.Commit)
	// Turn 2 as a patch (Codex's own file tool) and a command for what a
	// patch cannot do (modes, links).
	e.fake.Enqueue(openai.ApplyPatch("*** Begin Patch\n*** Update File: notes.txt\n@@\n one\n-two\n+TWO\n+three\n*** Delete File: run.sh\n*** End Patch\n"),
		openai.ToolCall(`chmod +x keep.txt && ln -sfn keep.txt link && echo more > build/more.o`))
	two := e.run(context.Background(), engine.Turn{Prompt: "edit them", Resume: id, Options: opts}, nil, nil)
	if two.err != nil {
		t.Fatal(two.err)
	}
	wantFile(t, e.workdir, "notes.txt", "one\nTWO\nthree\n", false)
	checkTwoTurns(t, repo, e.store, id, e.workdir, one.res.Checkpoint, two.res.Checkpoint)
	wantTrailers(t, repo, one.res.Checkpoint.Commit, "Outpost-Turn: 1", "Outpost-Agent: codex", "Outpost-Model: "+codexModel)
}

// TestWorkspaceForksDocker: a conversation of three echo turns on docker;
// a fork at turn 1, on docker, into a directory of the caller's holds
// turn 1's files and not turn 3's, and stores its own checkpoint; two
// forks at turn 2 started at once with Workspace "new" both succeed, in
// two directories, each with its checkpoint in the store, which git
// finds sound after the concurrent writes.
func TestWorkspaceForksDocker(t *testing.T) {
	t.Parallel()
	dockertest.Require(t)
	git := requireGit(t)
	base := workspacesHome(t)
	p := dockerProvider(t, "")
	store := conversation.NewFS(t.TempDir())
	repo := newGitRepo(t, git, store)
	f := &turns{t: t, store: store, workdir: t.TempDir()}

	var id string
	var cps []*engine.CheckpointResult
	for i, prompt := range []string{"#write=a.txt one", "#write=sub/b.txt two", "#append=a.txt #write=c.txt three"} {
		res := f.ok(p, engine.Turn{Prompt: prompt, Resume: id})
		wantTurn(t, res, i+1)
		if res.Sandbox != "docker" || res.Checkpoint == nil || res.Checkpoint.Turn != i+1 || res.Checkpoint.Changed == 0 {
			t.Fatalf("turn %d: %+v checkpoint %+v", i+1, res, res.Checkpoint)
		}
		id = res.Conversation
		cps = append(cps, res.Checkpoint)
	}
	repo.sameAsDir(f.workdir, cps[2].Commit)

	dir := filepath.Join(t.TempDir(), "fork-at-1")
	fork := f.ok(p, engine.Turn{Prompt: "#write=d.txt fork", Fork: id + "@1", Workspace: dir})
	wantTurn(t, fork, 2) // the echo agent continues turn 1's memory
	if fork.Workdir != dir || fork.Parent != id || fork.Sandbox != "docker" {
		t.Errorf("fork %+v", fork)
	}
	wantFile(t, dir, "a.txt", "written by echo\n", false)
	wantFile(t, dir, "d.txt", "written by echo\n", false)
	wantFile(t, dir, "sub/b.txt", "", true)
	wantFile(t, dir, "c.txt", "", true)
	fc := fork.Checkpoint
	if fc == nil || fc.Turn != 2 || fc.Base != cps[0].Commit || fc.Changed != 1 || fc.Files != 2 {
		t.Fatalf("fork checkpoint %+v, want turn 2 on turn 1's %s: d.txt added", fc, cps[0].Commit)
	}
	if got := storedCheckpoints(t, store, fork.Conversation); len(got) != 2 || got[0].Commit != cps[0].Commit || got[1].Commit != fc.Commit {
		t.Errorf("the fork's stored checkpoints %+v", got)
	}
	repo.sameAsDir(dir, fc.Commit)
	repo.checkRef(fork.Conversation, 2, fc.Commit)
	// The parent's directory and conversation are as turn 3 left them.
	wantFile(t, f.workdir, "a.txt", "written by echo\nappended by echo\n", false)
	wantFile(t, f.workdir, "d.txt", "", true)
	if got := storedCheckpoints(t, store, id); len(got) != 3 || got[2].Commit != cps[2].Commit {
		t.Errorf("the parent's checkpoints %+v", got)
	}

	// Two forks at once, each in a "new" workspace.
	results := make([]*engine.Result, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = f.run(p, nil, engine.Turn{Prompt: fmt.Sprintf("#write=fork%d.txt", i), Fork: id + "@2", Workspace: engine.WorkspaceNew})
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("fork %d: %v", i, err)
		}
	}
	if results[0].Workdir == results[1].Workdir {
		t.Fatalf("two forks share %s", results[0].Workdir)
	}
	for i, r := range results {
		if filepath.Dir(r.Workdir) != base || !strings.HasPrefix(filepath.Base(r.Workdir), r.Conversation+"-") {
			t.Errorf("fork %d ran in %s, want a directory of %s named after %s", i, r.Workdir, base, r.Conversation)
		}
		wantFile(t, r.Workdir, "a.txt", "written by echo\n", false)
		wantFile(t, r.Workdir, "sub/b.txt", "written by echo\n", false)
		wantFile(t, r.Workdir, "c.txt", "", true)
		wantFile(t, r.Workdir, fmt.Sprintf("fork%d.txt", i), "written by echo\n", false)
		wantFile(t, r.Workdir, fmt.Sprintf("fork%d.txt", 1-i), "", true)
		c := r.Checkpoint
		if c == nil || c.Turn != 3 || c.Base != cps[1].Commit || c.Changed != 1 {
			t.Fatalf("fork %d checkpoint %+v, want turn 3 on turn 2's %s", i, c, cps[1].Commit)
		}
		if got := storedCheckpoints(t, store, r.Conversation); len(got) != 3 || got[2].Commit != c.Commit {
			t.Errorf("fork %d stored checkpoints %+v", i, got)
		}
		if _, err := checkpoint.ReadCommit(context.Background(), store.Objects(), plumbing.NewHash(c.Commit)); err != nil {
			t.Errorf("fork %d: its checkpoint is not in the store: %v", i, err)
		}
		repo.sameAsDir(r.Workdir, c.Commit)
		repo.checkRef(r.Conversation, 3, c.Commit)
		t.Cleanup(func() { os.RemoveAll(r.Workdir) })
	}
	repo.fsck()
}

// TestWorkspaceResumeOnSSH: a conversation made on the local sandbox is
// resumed on the ssh sandbox with Workspace "new": the agent on the
// remote host finds the files of turn 1 (it appends to one), the new
// checkpoint holds both lines, and the executable and the link made
// the round trip (local → checkpoint → new workspace → ssh → back).
func TestWorkspaceResumeOnSSH(t *testing.T) {
	t.Parallel()
	srv := sshtest.Shared(t)
	git := requireGit(t)
	base := workspacesHome(t)
	s := sshProvider(t, srv)
	lp := local.New(&local.Options{BaseDir: t.TempDir()})
	store := conversation.NewFS(t.TempDir())
	repo := newGitRepo(t, git, store)
	f := &turns{t: t, store: store, workdir: t.TempDir()}
	writeFiles(t, f.workdir, map[string]string{"run.sh*": "#!/bin/sh\necho run\n", "link": "->a.txt", "sub/data.txt": "data\n"})

	first := f.ok(lp, engine.Turn{Prompt: "#write=a.txt"})
	id := first.Conversation
	second := f.ok(s, engine.Turn{Prompt: "#append=a.txt", Resume: id, Workspace: engine.WorkspaceNew})
	t.Cleanup(func() { os.RemoveAll(second.Workdir) })
	wantTurn(t, second, 2)
	if second.Sandbox != "ssh" || second.Conversation != id || filepath.Dir(second.Workdir) != base {
		t.Errorf("resume %+v, want ssh, %s, a workspace of %s", second, id, base)
	}
	c := second.Checkpoint
	if c == nil || c.Turn != 2 || c.Base != first.Checkpoint.Commit || c.Changed != 1 || c.Files != 4 {
		t.Fatalf("checkpoint %+v, want turn 2 on turn 1's %s (the materialised tree is turn 1's), a.txt changed", c, first.Checkpoint.Commit)
	}

	ctx := context.Background()
	objs := store.Objects()
	cm, err := checkpoint.ReadCommit(ctx, objs, plumbing.NewHash(c.Commit))
	if err != nil {
		t.Fatal(err)
	}
	files, err := checkpoint.List(ctx, objs, cm.TreeHash)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, fl := range files {
		data, err := checkpoint.ReadBlob(ctx, objs, fl.Hash)
		if err != nil {
			t.Fatal(err)
		}
		got[fl.Path] = fmt.Sprintf("%o %s", uint32(fl.Mode), data)
	}
	want := map[string]string{
		"a.txt":        fmt.Sprintf("%o written by echo\nappended by echo\n", uint32(filemode.Regular)),
		"link":         fmt.Sprintf("%o a.txt", uint32(filemode.Symlink)),
		"run.sh":       fmt.Sprintf("%o #!/bin/sh\necho run\n", uint32(filemode.Executable)),
		"sub/data.txt": fmt.Sprintf("%o data\n", uint32(filemode.Regular)),
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the ssh turn's checkpoint holds\n%q\nwant\n%q", got, want)
	}
	d, err := conversation.DiffTurns(ctx, store, id, "")
	if err != nil || len(d.Files) != 1 || d.Files[0] != (checkpoint.Change{Path: "a.txt", Action: "modified", Added: 1}) {
		t.Errorf("DiffTurns %s: %+v %v", id, d.Files, err)
	}
	// The caller's directory is as turn 1 left it; the workspace on the
	// host is what the remote turn left (copied back), as git reads it.
	wantFile(t, f.workdir, "a.txt", "written by echo\n", false)
	wantFile(t, second.Workdir, "a.txt", "written by echo\nappended by echo\n", false)
	repo.sameAsDir(second.Workdir, c.Commit)
	repo.fsck()
}
