package integration

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/internal/pgtest"
)

// storeWorld is one test's outpost home and store, shared by the outpost
// processes the test starts, as machines of a fleet share a store.
type storeWorld struct {
	t     *testing.T
	kind  string // "fs" or "postgres"
	spec  string // OUTPOST_STORE
	home  string // OUTPOST_HOME (spool)
	dir   string // working directory of the turns
	extra []string
}

// eachStore runs f with the filesystem store and with a PostgreSQL store
// on the package's real server.
func eachStore(t *testing.T, f func(t *testing.T, w *storeWorld)) {
	for _, kind := range []string{"fs", "postgres"} {
		t.Run(kind, func(t *testing.T) { f(t, newStoreWorld(t, kind)) })
	}
}

func newStoreWorld(t *testing.T, kind string) *storeWorld {
	w := &storeWorld{t: t, kind: kind, home: t.TempDir(), dir: t.TempDir()}
	switch kind {
	case "fs":
		w.spec = filepath.Join(t.TempDir(), "store")
	case "postgres":
		w.spec = pgtest.NewDB(t)
	}
	return w
}

// result is the last line of `outpost run --json`.
type result struct {
	Type         string `json:"type"`
	Conversation string `json:"conversation"`
	Text         string `json:"text"`
	ExitCode     int    `json:"exit_code"`
	Error        *struct {
		Code    outpost.Code   `json:"code"`
		Message string         `json:"message"`
		Details map[string]any `json:"details"`
	} `json:"error"`
}

type ran struct {
	code           int
	stdout, stderr string
	res            result
	events         []map[string]any
}

var turnRE = regexp.MustCompile(`\(turn (\d+)\)`)

// turn is the echo agent's turn number in the answer, 0 when none.
func (r ran) turn() int {
	m := turnRE.FindStringSubmatch(r.res.Text)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func (r ran) busy() bool {
	return r.res.Error != nil && r.res.Error.Code == outpost.Conversation && r.res.Error.Details["busy"] == true
}

func (w *storeWorld) cmd(args ...string) *exec.Cmd {
	cmd := exec.Command(outpostBinary(w.t), args...)
	cmd.Dir = w.dir
	cmd.Env = append(os.Environ(), "OUTPOST_HOME="+w.home, "OUTPOST_STORE="+w.spec)
	cmd.Env = append(cmd.Env, w.extra...)
	return cmd
}

// outpost runs the built binary against the world's store.
func (w *storeWorld) outpost(args ...string) ran {
	w.t.Helper()
	cmd := w.cmd(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		w.t.Fatal(err)
	}
	r := ran{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var ev map[string]any
		if json.Unmarshal([]byte(line), &ev) == nil {
			if ev["type"] == "result" {
				json.Unmarshal([]byte(line), &r.res)
			} else {
				r.events = append(r.events, ev)
			}
		}
	}
	return r
}

// run runs one echo turn with --json.
func (w *storeWorld) run(args ...string) ran {
	w.t.Helper()
	return w.outpost(append([]string{"run", "--json"}, args...)...)
}

func (w *storeWorld) mustRun(args ...string) ran {
	w.t.Helper()
	r := w.run(args...)
	if r.code != 0 {
		w.t.Fatalf("outpost run %q: exit %d\n%s\n%s", args, r.code, r.stdout, r.stderr)
	}
	return r
}

// concurrently runs n outpost turns at once.
func (w *storeWorld) concurrently(n int, args func(i int) []string) []ran {
	out := make([]ran, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = w.run(args(i)...)
		}()
	}
	wg.Wait()
	return out
}

// TestConcurrentResumes: six outpost processes resume one conversation at
// once. Each either runs, with a turn number no other reports, or fails
// busy; with --wait all six run in turn; the next resume counts every
// successful turn.
func TestConcurrentResumes(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, w *storeWorld) {
		id := w.mustRun("first").res.Conversation
		succeeded := 1
		seen := map[int]bool{1: true}
		check := func(rs []ran, wait bool) {
			t.Helper()
			busy := 0
			for i, r := range rs {
				switch {
				case r.code == 0:
					n := r.turn()
					if n == 0 || seen[n] {
						t.Errorf("resume %d reports turn %d, already reported (or none): %s", i, n, r.res.Text)
					}
					seen[n] = true
					succeeded++
				case r.busy() && !wait:
					busy++
					if r.code != outpost.ExitBusy {
						t.Errorf("busy resume exit %d, want %d", r.code, outpost.ExitBusy)
					}
					h, _ := r.res.Error.Details["holder"].(map[string]any)
					if h["pid"] == nil || h["host"] == nil || r.res.Error.Details["since"] == nil {
						t.Errorf("busy without its holder: %v", r.res.Error.Details)
					}
				default:
					t.Errorf("resume %d: exit %d: %s\n%s", i, r.code, r.stdout, r.stderr)
				}
			}
			t.Logf("%d ran, %d busy", len(rs)-busy, busy)
		}
		check(w.concurrently(6, func(i int) []string { return []string{"--resume", id, fmt.Sprintf("#slow=5 racer %d", i)} }), false)
		waited := w.concurrently(6, func(i int) []string {
			return []string{"--resume", id, "--wait", "5m", fmt.Sprintf("#slow=2 waiter %d", i)}
		})
		check(waited, true)
		waits := 0
		for _, r := range waited {
			for _, ev := range r.events {
				if ev["type"] == "notice" && ev["kind"] == "waiting" {
					waits++
				}
			}
		}
		t.Logf("%d of the waiting resumes were told they wait", waits)
		next := w.mustRun("--resume", id, "after the races")
		if next.turn() != succeeded+1 {
			t.Errorf("next resume is turn %d; %d turns succeeded before it", next.turn(), succeeded)
		}
		show := w.outpost("conversations", "show", "--json", id)
		var m struct{ Turns, Revision int }
		json.Unmarshal([]byte(show.stdout), &m)
		if m.Turns != succeeded+1 || m.Revision != succeeded+1 {
			t.Errorf("stored turns %d revision %d, want %d", m.Turns, m.Revision, succeeded+1)
		}
	})
}

// TestBusyIsImmediateAndNamesTheHolder: while a turn holds a conversation,
// a resume fails at once with busy naming the holder's pid; a fork of the
// busy conversation runs from its last stored revision.
func TestBusyIsImmediateAndNamesTheHolder(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, w *storeWorld) {
		id := w.mustRun("first").res.Conversation
		holder, wait := w.hold(id)
		defer wait()
		r := w.run("--resume", id, "second")
		if !r.busy() || r.code != outpost.ExitBusy {
			t.Fatalf("resume of a held conversation: exit %d %s", r.code, r.stdout)
		}
		h, _ := r.res.Error.Details["holder"].(map[string]any)
		if pid, _ := h["pid"].(float64); int(pid) != holder.Process.Pid {
			t.Errorf("holder %v, want pid %d", h, holder.Process.Pid)
		}
		fork := w.mustRun("--fork", id, "forked while busy")
		if fork.turn() != 2 || fork.res.Conversation == id {
			t.Errorf("fork of a busy conversation: %s", fork.res.Text)
		}
		holder.Process.Signal(syscall.SIGINT)
	})
}

// hold starts a long resume of id and returns once it holds id (its first
// event is out). wait reaps it.
func (w *storeWorld) hold(id string) (*exec.Cmd, func()) {
	w.t.Helper()
	cmd := w.cmd("run", "--json", "--resume", id, "#slow=100000 holding")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		w.t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		w.t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() {
		cmd.Wait()
		w.t.Fatalf("the holder printed nothing: %s", stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	return cmd, func() { cmd.Process.Kill(); cmd.Wait() }
}

// TestKilledHolder: kill -9 of the outpost process holding a conversation;
// a resume then proceeds within the documented bound (docs/stores.md:
// at once for the filesystem store, at most 11 s for PostgreSQL).
func TestKilledHolder(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, w *storeWorld) {
		id := w.mustRun("first").res.Conversation
		holder, wait := w.hold(id)
		if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		wait()
		bound := map[string]string{"fs": "1s", "postgres": "11s"}[w.kind]
		r := w.mustRun("--resume", id, "--wait", bound, "after the kill")
		if r.turn() != 2 {
			t.Errorf("resume after the kill: %s (the killed turn stored nothing)", r.res.Text)
		}
	})
}

// TestConcurrentNewConversations: twelve new conversations at once.
func TestConcurrentNewConversations(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, w *storeWorld) {
		rs := w.concurrently(12, func(i int) []string { return []string{fmt.Sprintf("new %d", i)} })
		ids := map[string]bool{}
		for i, r := range rs {
			if r.code != 0 || r.turn() != 1 {
				t.Errorf("new conversation %d: exit %d: %s\n%s", i, r.code, r.stdout, r.stderr)
			}
			ids[r.res.Conversation] = true
		}
		ls := w.outpost("conversations", "ls", "--json")
		if n := strings.Count(ls.stdout, "\n"); n != 12 || len(ids) != 12 {
			t.Errorf("%d conversations listed, %d distinct ids; want 12", n, len(ids))
		}
	})
}

// TestExportImportAcrossStores: a conversation goes from the filesystem
// store to PostgreSQL and back with export and import, and resumes in
// each; ls, show, rm work on both.
func TestExportImportAcrossStores(t *testing.T) {
	t.Parallel()
	fsw := newStoreWorld(t, "fs")
	pgw := newStoreWorld(t, "postgres")
	pgw.dir, pgw.home = fsw.dir, fsw.home
	id := fsw.mustRun("on the filesystem").res.Conversation
	file := filepath.Join(t.TempDir(), "conv.outpost")
	if r := fsw.outpost("conversations", "export", "-o", file, id); r.code != 0 {
		t.Fatalf("export: %s", r.stderr)
	}
	if r := pgw.outpost("conversations", "import", file); r.code != 0 || !strings.Contains(r.stdout, id) {
		t.Fatalf("import into postgres: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := pgw.outpost("conversations", "import", file); r.code != 7 {
		t.Errorf("second import: exit %d, want 7 (exists)", r.code)
	}
	if r := pgw.mustRun("--resume", id[:8], "in postgres"); r.turn() != 2 {
		t.Errorf("resume in postgres: %s", r.res.Text)
	}
	ls := pgw.outpost("conversations", "ls")
	if !strings.Contains(ls.stdout, id) || !strings.Contains(ls.stdout, "REV") {
		t.Errorf("ls on postgres: %s", ls.stdout)
	}
	if r := pgw.outpost("conversations", "show", id); !strings.Contains(r.stdout, "revision") {
		t.Errorf("show on postgres: %s", r.stdout)
	}
	if r := pgw.outpost("conversations", "export", "-o", file, id); r.code != 0 {
		t.Fatalf("export from postgres: %s", r.stderr)
	}
	if r := fsw.outpost("conversations", "import", "--replace", file); r.code != 0 {
		t.Fatalf("import back: %s", r.stderr)
	}
	if r := fsw.mustRun("--resume", id, "back home"); r.turn() != 3 {
		t.Errorf("resume back on the filesystem: %s", r.res.Text)
	}
	if r := pgw.outpost("conversations", "rm", id); r.code != 0 {
		t.Errorf("rm on postgres: %s", r.stderr)
	}
	if r := pgw.outpost("conversations", "show", id); r.code != 7 {
		t.Errorf("show after rm: exit %d", r.code)
	}
}

// TestKeyValueConnectionString: a key=value PostgreSQL connection string
// in OUTPOST_STORE opens the PostgreSQL store (it used to be taken for a
// directory, created with the password in its name): the turn is stored
// in the database, and no file or directory holding '=' or the password
// appears.
func TestKeyValueConnectionString(t *testing.T) {
	t.Parallel()
	w := newStoreWorld(t, "postgres")
	u, err := url.Parse(w.spec)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	const password = "kv-secret-8d1f"
	w.spec = fmt.Sprintf("host=%s port=%s dbname=%s user=postgres sslmode=disable password=%s",
		q.Get("host"), q.Get("port"), strings.TrimPrefix(u.Path, "/"), password)
	id := w.mustRun("over key=value").res.Conversation

	byURL := *w
	byURL.spec = u.String()
	if ls := byURL.outpost("conversations", "ls"); !strings.Contains(ls.stdout, id) {
		t.Errorf("the turn stored through the key=value string is not in the database:\n%s%s", ls.stdout, ls.stderr)
	}
	for _, root := range []string{w.dir, w.home} {
		filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
			if strings.Contains(p, "=") || strings.Contains(p, password) {
				t.Errorf("created %s", p)
			}
			return err
		})
	}
}

// TestNoSecretInStoredConversation: the echo agent prints its key into its
// answer, so into its session file; outpost masks it, byte for byte,
// before storing, so no stored byte and no export holds it, and the
// conversation still resumes.
func TestNoSecretInStoredConversation(t *testing.T) {
	t.Parallel()
	eachStore(t, func(t *testing.T, w *storeWorld) {
		key := "sk-echo-" + randomHex(t, 12)
		w.extra = []string{"ECHO_API_KEY=" + key}
		r := w.mustRun("#leak ECHO_API_KEY")
		id := r.res.Conversation
		if strings.Contains(r.stdout+r.stderr, key) {
			t.Fatal("the key shows in the output")
		}
		r2 := w.mustRun("--resume", id, "still there?")
		if r2.turn() != 2 {
			t.Errorf("resume after masking: %s", r2.res.Text)
		}
		file := filepath.Join(t.TempDir(), "export")
		if x := w.outpost("conversations", "export", "-o", file, id); x.code != 0 {
			t.Fatal(x.stderr)
		}
		exported, _ := os.ReadFile(file)
		zr, err := gzip.NewReader(bytes.NewReader(exported))
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := io.ReadAll(zr)
		if !bytes.Contains(plain, []byte("ECHO_API_KEY=****")) {
			t.Errorf("the export does not hold the masked answer")
		}
		stored := w.storedBytes()
		for what, b := range map[string][]byte{"export": plain, "store": stored} {
			if bytes.Contains(b, []byte(key)) {
				t.Errorf("the key is in the %s", what)
			}
		}
		if len(stored) == 0 {
			t.Error("read nothing from the store")
		}
	})
}

// storedBytes returns every byte the store holds.
func (w *storeWorld) storedBytes() []byte {
	w.t.Helper()
	var all []byte
	switch w.kind {
	case "fs":
		filepath.Walk(w.spec, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				b, _ := os.ReadFile(p)
				all = append(all, b...)
			}
			return nil
		})
	case "postgres":
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, w.spec)
		if err != nil {
			w.t.Fatal(err)
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, `SELECT convert_to(meta::text, 'UTF8') FROM outpost_conversations UNION ALL SELECT data FROM outpost_parts
			UNION ALL SELECT convert_to(path, 'UTF8') FROM outpost_files UNION ALL SELECT convert_to(h::text, 'UTF8') FROM outpost_holds h`)
		if err != nil {
			w.t.Fatal(err)
		}
		for rows.Next() {
			var b []byte
			rows.Scan(&b)
			all = append(all, b...)
		}
		if err := rows.Err(); err != nil {
			w.t.Fatal(err)
		}
	}
	return all
}

// TestSpoolOnOutage stops the real PostgreSQL server in the middle of a
// turn: outpost retries, spools the conversation, fails with
// details.spooled; once the server is back, the next outpost pushes the
// spool and the turn is in the conversation.
func TestSpoolOnOutage(t *testing.T) {
	w := newStoreWorld(t, "postgres")
	srv := pgtest.Shared(t)
	id := w.mustRun("first").res.Conversation
	cmd := w.cmd("run", "--json", "--resume", id, "#slow=60 during the outage")
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	var lines []string
	stopped := false
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if !stopped {
			stopped = true
			if err := srv.Stop("immediate"); err != nil {
				t.Fatal(err)
			}
		}
	}
	cmd.Wait()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	var res result
	json.Unmarshal([]byte(lines[len(lines)-1]), &res)
	if cmd.ProcessState.ExitCode() != 7 || res.Error == nil || res.Error.Code != outpost.Conversation {
		t.Fatalf("turn during the outage: exit %d, %s\n%s", cmd.ProcessState.ExitCode(), lines[len(lines)-1], stderr.String())
	}
	spooled, _ := res.Error.Details["spooled"].(string)
	if _, err := os.Stat(spooled); err != nil {
		t.Fatalf("details.spooled %q: %v", spooled, err)
	}
	if !strings.HasPrefix(spooled, w.home) {
		t.Errorf("spooled outside the outpost home: %s", spooled)
	}
	sync := w.outpost("conversations", "sync")
	if sync.code != 0 || !strings.Contains(sync.stdout, "stored spooled turn of "+id) {
		t.Fatalf("sync: exit %d\n%s\n%s", sync.code, sync.stdout, sync.stderr)
	}
	if _, err := os.Stat(spooled); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the spool file is still there: %v", err)
	}
	if r := w.outpost("conversations", "sync"); !strings.Contains(r.stdout, "nothing spooled") {
		t.Errorf("second sync: %s", r.stdout)
	}
	if r := w.mustRun("--resume", id, "after the outage"); r.turn() != 3 {
		t.Errorf("resume after the outage: %s (the spooled turn is turn 2)", r.res.Text)
	}
	// The spool is also pushed by whatever opens the store next.
	id2 := w.mustRun("second conversation").res.Conversation
	cmd = w.cmd("run", "--json", "--resume", id2, "#slow=60 another outage")
	stdout, _ = cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc = bufio.NewScanner(stdout)
	if sc.Scan() {
		srv.Stop("immediate")
	}
	io.Copy(io.Discard, stdout)
	cmd.Wait()
	srv.Start()
	if code := cmd.ProcessState.ExitCode(); code != 7 {
		t.Fatalf("second outage: exit %d", code)
	}
	ls := w.outpost("conversations", "ls", "--json")
	if !strings.Contains(ls.stderr, "stored spooled turn of "+id2) {
		t.Errorf("ls did not push the spool first: %s", ls.stderr)
	}
	var turns []int
	for _, line := range strings.Split(strings.TrimSpace(ls.stdout), "\n") {
		var m struct{ Turns int }
		json.Unmarshal([]byte(line), &m)
		turns = append(turns, m.Turns)
	}
	slices.Sort(turns)
	if !slices.Equal(turns, []int{2, 3}) {
		t.Errorf("turns after the pushes: %v, want [2 3]", turns)
	}
}
